//! Command-line grammar of `atoll` (clap derive) and the value parsers that
//! reject bad input before anything is started: sizes, mount paths, server
//! counts. Everything here is pure; `config.rs` turns the parsed options into
//! an `atoll_server::InstanceConfig`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Examples:
  atoll run -- make -j8                      build inside a private instance
  atoll run --servers 4 --stats -- sh -c 'mkdir /atoll/d && ls /atoll'
  atoll run --import ./src:/atoll/src --cwd /atoll/src -- make -j8
  atoll run --split --servers 1 -- ./bench.sh   servers on dedicated cores
  id=$(atoll boot --servers 2) && atoll exec --id \"$id\" -- ls /atoll && atoll stop --id \"$id\"
  atoll bench --help                         Hare's evaluation workloads

Environment:
  ATOLL_LOG       log filter, e.g. `debug` or `atoll_server=trace` (stderr)
  ATOLL_PRELOAD   path of libatoll_preload.so (default: next to `atoll`)";

const RUN_AFTER_HELP: &str = "\
The command sees the instance's file system at the mount path (default
/atoll); everything else is the host's. When the command exits, the instance
is torn down and its contents are gone: use --export to keep results.
atoll exits with the command's status (128+N if it died of signal N).

Examples:
  atoll run -- sh -c 'echo hi > /atoll/f && cat /atoll/f'
  atoll run --import ~/proj:/atoll/proj --export /atoll/proj/out:./out \\
            --cwd /atoll/proj -- make -j8
  atoll run --servers 2 --without dir-cache --stats-json s.json -- ./workload
  atoll run --memory 256M --distribute all -- ./many-files.sh";

const BOOT_AFTER_HELP: &str = "\
Prints the instance id on stdout once the instance accepts connections.
The instance runs until `atoll stop` (or SIGTERM to its pid).

Example:
  id=$(atoll boot --servers 2 --memory 256M)
  atoll exec --id \"$id\" -- sh -c 'date > /atoll/now'
  atoll status --id \"$id\"
  atoll stop --id \"$id\"";

const EXEC_AFTER_HELP: &str = "\
The command becomes a client of the instance: it and its descendants see
the instance's file system at its mount path. atoll exits with the
command's status.

Examples:
  atoll exec -- sh -c 'ls -l /atoll'           the only running instance
  atoll exec --id 3fa2 --cwd /atoll/src -- make -j2";

/// atoll: run unmodified programs over a message-passing file system.
///
/// Programs started by atoll share one in-memory file system, mounted
/// virtually at /atoll, served by file servers over shared-memory message
/// rings (the Hare design). Nothing is mounted on the host: the client
/// library is preloaded into each program.
#[derive(Parser, Debug)]
#[command(name = "atoll", version, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command inside a private instance, then tear it down.
    #[command(after_help = RUN_AFTER_HELP)]
    Run(Box<RunArgs>),
    /// Start a detached instance and print its id.
    #[command(after_help = BOOT_AFTER_HELP)]
    Boot(BootArgs),
    /// Run a command inside a running (booted) instance.
    #[command(after_help = EXEC_AFTER_HELP)]
    Exec(ExecArgs),
    /// Join hosts into one image: the first runs the servers, the others proxies.
    #[command(after_help = NODE_AFTER_HELP)]
    Node(NodeArgs),
    /// Show servers, clients, open descriptions, blocks and operation counts.
    Status(StatusArgs),
    /// Stop a running instance and wait until it is gone.
    Stop(SelectArgs),
    /// Inject a fault into a running instance: kill or stall a file server.
    #[command(after_help = CHAOS_AFTER_HELP)]
    Chaos(ChaosArgs),
    /// Change how many processes run a running instance's file servers.
    #[command(after_help = SCALE_AFTER_HELP)]
    Scale(ScaleArgs),
    /// List the running instances of this user.
    List(ListArgs),
    /// Run the benchmark suite (see `atoll bench --help`).
    #[command(disable_help_flag = true)]
    Bench(PassThrough),
    /// Read message traces written by `atoll run --trace`.
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Watch an instance live: servers, client processes, rings, blocks.
    Top(TopArgs),
    /// Write the manual pages (atoll.1, atoll-SUB.1) into a directory.
    Man(ManArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the system calls atoll looks at, with what a program gets from
    /// each (Markdown: docs/SYSCALLS.md).
    Syscalls,
    /// Internal: one benchmark worker process.
    #[command(hide = true, disable_help_flag = true)]
    BenchWorker(PassThrough),
}

/// Options describing an instance (shared by `run` and `boot`).
#[derive(Args, Debug, Clone)]
pub struct InstanceArgs {
    /// Number of file server processes, or `auto` to follow the load
    /// (`atoll scale` changes it later) [default: half the usable cores,
    /// at least one; `atoll status` says what was chosen and why]
    #[arg(long, value_name = "N|auto", value_parser = parse_server_count)]
    pub servers: Option<ServerCount>,
    /// The instance has this many file servers from boot, which move
    /// between the processes running, and `atoll scale` may reach no
    /// more [default: --servers (or the usable cores with --servers auto),
    /// and servers join when `atoll scale` asks for more processes]
    #[arg(long, value_name = "M", value_parser = parse_servers)]
    pub max_servers: Option<usize>,
    /// Where the instance's file system appears to programs; absolute, and
    /// must not exist on the host
    #[arg(long, value_name = "PATH", default_value = "/atoll", value_parser = parse_mount)]
    pub mount: String,
    /// Size of the shared buffer cache (e.g. 64M, 1G, 512MiB, or bytes)
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_memory)]
    pub memory: u64,
    /// Most inodes (files, directories, symlinks, FIFOs, sockets) the
    /// instance holds; past it creating one fails with ENOSPC, as tmpfs's
    /// nr_inodes [default: one per 8 KiB of --memory]
    #[arg(long, value_name = "N", value_parser = parse_inodes)]
    pub inodes: Option<u64>,
    /// How servers and clients wait for messages [default: adaptive, block
    /// on one usable core or when the load average fills the CPUs, spin
    /// with --split]
    #[arg(long, value_enum, value_name = "MODE")]
    pub poll: Option<PollArg>,
    /// Pin servers to dedicated cores (the last N) and programs to the rest
    #[arg(long)]
    pub split: bool,
    /// The kind of memory between programs and servers: coherent (shared
    /// mappings of the buffer cache), incoherent (private copies written
    /// back on close, fsync, exec and exit) or copy (no shared memory:
    /// every byte of data travels in messages) [default: $ATOLL_ISLAND,
    /// else coherent]
    #[arg(long, value_enum, value_name = "KIND")]
    pub island: Option<IslandArg>,
    /// The same as --island incoherent
    #[arg(long, conflicts_with = "island")]
    pub incoherent: bool,
    /// Switch a technique off, for ablation studies (repeatable)
    #[arg(long, value_enum, value_name = "TECHNIQUE")]
    pub without: Vec<Technique>,
    /// Distribute directories created under PATH (relative to the mount, or
    /// `all`) over all servers (repeatable)
    #[arg(long, value_name = "all|PATH")]
    pub distribute: Vec<String>,
    /// Swap a directory between centralized and distributed while it is in
    /// use, by how hot it is (Hare §6.1.2); `setfattr -n
    /// user.atoll.distributed -v 1|0 DIR` swaps one by hand either way
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = ["on", "off"])]
    pub adaptive_dirs: String,
    /// How the fleet of file servers (`/fs/server`) picks the member that
    /// holds a new pipe or notification queue (fos §3.3): `hashed` (by
    /// process), `round-robin`, `closest` (same socket), `shortest-queue`
    /// (least busy)
    #[arg(long, value_name = "POLICY", default_value = "hashed",
          value_parser = ["hashed", "round-robin", "closest", "shortest-queue"])]
    pub fleet_policy: String,
    /// What programs do with a `syscall` instruction that traps through
    /// Syscall User Dispatch: `rewrite` it, the first time, into a call of
    /// atoll's entry (no signal afterwards) where the site allows, or
    /// `trap` every time
    #[arg(long, value_name = "rewrite|trap", default_value = "rewrite",
          value_parser = ["rewrite", "trap"])]
    pub syscall_sites: String,
    /// Root directory for instance runtime directories [default:
    /// $XDG_RUNTIME_DIR/atoll or /tmp/atoll-$UID]
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub instance: InstanceArgs,
    /// Working directory of the command: a path under the mount, or a host
    /// directory
    #[arg(long, value_name = "PATH")]
    pub cwd: Option<PathBuf>,
    /// Copy a host tree into the instance before the command runs (`cp -a`);
    /// DEST defaults to the mount root + basename of SRC (repeatable)
    #[arg(long, value_name = "SRC[:DEST]")]
    pub import: Vec<String>,
    /// Copy a tree out of the instance after the command ran (repeatable)
    #[arg(long, value_name = "SRC:DEST")]
    pub export: Vec<String>,
    /// On exit, print per-server operation counts and latencies to stderr
    #[arg(long)]
    pub stats: bool,
    /// On exit, write the same statistics as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,
    /// Record every message the servers serve and write a Chrome trace
    /// (Perfetto, chrome://tracing) to FILE on exit; see `atoll trace`
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// What `pipe(2)` creates: `atoll` pipes (rings in the buffer cache,
    /// shared across cores) or `host` pipes. FIFOs in the mount are
    /// always atoll's. Default: `$ATOLL_PIPES`, else atoll
    #[arg(long, value_name = "atoll|host", value_parser = ["atoll", "host"])]
    pub pipes: Option<String>,
    /// Where `execve` runs programs: `local` (where the caller runs) or on
    /// a core the policy picks (`random`, `round-robin`, `least-loaded`)
    #[arg(long, value_name = "POLICY", default_value = "round-robin", value_parser = PLACEMENTS)]
    pub placement: String,
    /// How a program gets to another core: `place` moves the process there
    /// and execs in place (pid, parent and tracer stay); `spawn` has that
    /// core's scheduling server start it, the caller staying behind as its
    /// proxy
    #[arg(long, value_name = "HOW", default_value = "place", value_parser = EXEC_VIAS)]
    pub exec_via: String,
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Values of `--placement` (see `atoll_sched::placement`).
pub const PLACEMENTS: [&str; 4] = ["local", "random", "round-robin", "least-loaded"];
/// Values of `--exec-via` (see `atoll_sched::ExecVia`).
pub const EXEC_VIAS: [&str; 2] = ["place", "spawn"];

const NODE_AFTER_HELP: &str = "\
Run one `atoll node` on every host, with the same --peers. The node of the
first host boots the instance (a copy island: programs map no memory of the
servers); every other node offers its programs the same boot socket and
carries their messages to the first node over TCP. `atoll exec
--runtime-dir DIR` on a host runs a program in the image through that
host's node. A node prints its id on one line once it serves.

File servers: by default every node but the first also serves one file
server of the one fleet (--servers-here 1): a program's new files and
directories live on its own node's server (creation affinity across
hosts), so their data never crosses the network, while names in a
distributed directory spread over every node's servers by their hash.
A node's files die with it (calls on them fail with EIO). With
--servers-here 0 every file server runs on the first node.

Peers: --peers, else under Slurm the job's hosts (SLURM_JOB_NODELIST, one
node per host: srun --ntasks-per-node=1 atoll node).

Rank: --rank, else OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID or
SLURM_NODEID (checked against the matching size), else the first peer
whose address is one of this host's.

  srun -N3 --ntasks-per-node=1 atoll node
  mpirun -np 3 --host a,b,c atoll node --peers a,b,c
  pdsh -w a,b,c atoll node --peers a,b,c";

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// The hosts of the image, first one first: host[:port],… (port 7207
    /// when left out) [default: the job's hosts under Slurm]
    #[arg(long, value_name = "HOSTS")]
    pub peers: Option<String>,
    /// Address the first node accepts the others at [default: its entry in
    /// --peers]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Which of --peers this host is (0 = the first) [default: from the
    /// launcher's environment, else from this host's addresses]
    #[arg(long, value_name = "N")]
    pub rank: Option<usize>,
    /// File servers each node but the first runs as members of the one
    /// fleet (given to the first node; the others follow it): a
    /// program's new files and directories stay on its node's members
    /// (creation affinity across hosts); 0 puts every file server on the
    /// first node, whose programs' files are then the only ones that
    /// never cross the network
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub servers_here: u32,
    /// The instance the first node boots (the others take its shape)
    #[command(flatten)]
    pub instance: InstanceArgs,
}

#[derive(Args, Debug)]
pub struct BootArgs {
    #[command(flatten)]
    pub instance: InstanceArgs,
}

/// Which instance a command talks to.
#[derive(Args, Debug, Clone)]
pub struct SelectArgs {
    /// Instance id (or a unique prefix); optional when exactly one runs
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Root directory for instance runtime directories
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Working directory of the command: a path under the mount, or a host
    /// directory
    #[arg(long, value_name = "PATH")]
    pub cwd: Option<PathBuf>,
    /// Where `execve` runs programs (as for `atoll run`)
    #[arg(long, value_name = "POLICY", default_value = "round-robin", value_parser = PLACEMENTS)]
    pub placement: String,
    /// How a program gets to another core (as for `atoll run`)
    #[arg(long, value_name = "HOW", default_value = "place", value_parser = EXEC_VIAS)]
    pub exec_via: String,
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Print the status as JSON
    #[arg(long)]
    pub json: bool,
}

const CHAOS_AFTER_HELP: &str = "\
A killed server dies at once, as a crash would: every call that needs it
fails with EIO (never hangs), every other call goes on, and `atoll status`
shows it down. A stalled server serves nothing for the given time, then
goes on; its clients wait. A corrupt ring is dropped by its server: that
channel's client gets EIO there, everyone else goes on. `--kill sched:N`
sends SIGKILL to the scheduling server process of core N; its watchdog
starts a new one on the same core (programs it had started with `--exec-via
spawn` die with it). Examples:
  atoll chaos --id ID --kill server:1
  atoll chaos --id ID --kill sched:0
  atoll chaos --id ID --stall server:0 --for 2s
  atoll chaos --id ID --corrupt-ring server:0";

const SCALE_AFTER_HELP: &str = "\
An instance starts with a set of file servers (--servers, or --max-servers);
each runs in one of the host processes, one per core. `atoll scale` starts
or stops hosts and moves servers between them while programs run: a server
that moves stops between two requests and is rebuilt from its journal in
its new host, so programs only see a pause. Asked for more hosts than
there are servers, new servers join (unless --max-servers capped the set):
they take new files and directories, never existing ones, and stay
members when the hosts go again. `auto` lets the instance add a host when
one is busy and remove one when all are idle. Examples:
  id=$(atoll boot --servers 1)
  atoll scale --id \"$id\" --servers 4
  atoll scale --id \"$id\" --servers auto";

#[derive(Args, Debug)]
pub struct ScaleArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Host processes to run the file servers in (1 up to the instance's
    /// number of file servers), or
    /// `auto` to follow the load
    #[arg(long, value_name = "N|auto", value_parser = parse_server_count)]
    pub servers: ServerCount,
}

#[derive(Args, Debug)]
#[group(id = "fault", required = true, multiple = false)]
pub struct ChaosArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Kill file server N (`server:N`) or the scheduling server of core N
    /// (`sched:N`)
    #[arg(long, value_name = "server:N|sched:N", value_parser = parse_kill_target, group = "fault")]
    pub kill: Option<KillTarget>,
    /// Stall file server N (`server:N`) for the time given by --for
    #[arg(long, value_name = "server:N", value_parser = parse_server_target, group = "fault", requires = "stall_for")]
    pub stall: Option<u32>,
    /// How long a stall lasts: a number with ms or s (e.g. 500ms, 2s)
    #[arg(long = "for", id = "stall_for", value_name = "TIME", value_parser = parse_millis)]
    pub stall_for: Option<u64>,
    /// Scribble on the request ring of file server N's newest channel
    /// (`server:N`), as a hostile client could
    #[arg(long, value_name = "server:N", value_parser = parse_server_target, group = "fault")]
    pub corrupt_ring: Option<u32>,
}

/// What `atoll chaos --kill` kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillTarget {
    /// File server N.
    Server(u32),
    /// The scheduling server of core N.
    Sched(u32),
}

/// `server:N` or `sched:N`.
fn parse_kill_target(s: &str) -> Result<KillTarget, String> {
    if let Some(n) = s.strip_prefix("sched:") {
        return n
            .parse()
            .map(KillTarget::Sched)
            .map_err(|_| format!("'{n}' in '{s}' is not a core number"));
    }
    parse_server_target(s)
        .map(KillTarget::Server)
        .map_err(|_| format!("'{s}' is not server:N or sched:N"))
}

/// `server:N` → N.
fn parse_server_target(s: &str) -> Result<u32, String> {
    let n = s
        .strip_prefix("server:")
        .ok_or_else(|| format!("'{s}' is not server:N"))?;
    n.parse()
        .map_err(|_| format!("'{n}' in '{s}' is not a server number"))
}

/// `500ms`, `2s`, `1.5s` → milliseconds.
fn parse_millis(s: &str) -> Result<u64, String> {
    let bad = || format!("invalid time '{s}' (use e.g. 500ms or 2s)");
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return Err(bad());
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !(v.is_finite() && v > 0.0 && v * scale < 86_400_000.0) {
        return Err(bad());
    }
    Ok((v * scale).round().max(1.0) as u64)
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Root directory for instance runtime directories
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// Print the list as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Seconds between samples (rates are over this interval)
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_interval)]
    pub interval: f64,
    /// Take one interval's sample, print it and exit (no terminal needed)
    #[arg(long)]
    pub once: bool,
    /// With --once: print the sample as JSON
    #[arg(long, requires = "once")]
    pub json: bool,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.05..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a number of seconds between 0.05 and 3600"
        )),
    }
}

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Print per-operation counts and latency histograms of a trace.
    Summarize {
        /// A trace written by `atoll run --trace FILE`
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

/// Where `atoll man` writes.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing); install them
    /// under PREFIX/share/man/man1
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Which shell `atoll completions` writes for.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// Arguments handed unparsed to another component.
#[derive(Args, Debug)]
pub struct PassThrough {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

/// `--island`: the kind of memory an instance's programs share with its
/// servers (Cosh §3).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IslandArg {
    /// Shared, coherent memory: the direct path
    Coherent,
    /// Emulated incoherent memory: private copies, write-back at flushes
    Incoherent,
    /// No shared memory: data is copied through messages
    Copy,
}

/// Environment variable giving the island when `--island` is not given.
pub const ENV_ISLAND: &str = "ATOLL_ISLAND";

impl IslandArg {
    fn island(self) -> atoll_proto::boot::Island {
        use atoll_proto::boot::Island;
        match self {
            IslandArg::Coherent => Island::Coherent,
            IslandArg::Incoherent => Island::Incoherent,
            IslandArg::Copy => Island::Copy,
        }
    }

    /// The island an instance gets: `--island`, else `--incoherent` (an
    /// alias of `--island incoherent`), else `$ATOLL_ISLAND`, else
    /// coherent. `env` is the value of `$ATOLL_ISLAND`.
    pub fn resolve(
        arg: Option<IslandArg>,
        incoherent: bool,
        env: Option<&str>,
    ) -> Result<atoll_proto::boot::Island, String> {
        if let Some(a) = arg {
            return Ok(a.island());
        }
        if incoherent {
            return Ok(atoll_proto::boot::Island::Incoherent);
        }
        match env.filter(|v| !v.is_empty()) {
            None => Ok(atoll_proto::boot::Island::Coherent),
            Some(v) => IslandArg::from_str(v, true)
                .map(IslandArg::island)
                .map_err(|_| format!("{ENV_ISLAND}={v}: expected coherent, incoherent or copy")),
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollArg {
    /// Busy-poll: lowest latency, needs dedicated cores
    Spin,
    /// Sleep at once: for timeshared cores
    Block,
    /// Spin briefly, then sleep
    Adaptive,
}

/// Techniques of Hare §5.4 that can be switched off one by one.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Technique {
    /// Directory distribution (Hare §3.4)
    DirDistribution,
    /// Client directory lookup cache (Hare §3.7.1)
    DirCache,
    /// Parallel directory broadcast (Hare §3.7.3)
    Broadcast,
    /// Direct access to the shared buffer cache (Hare §3.3)
    DirectCache,
    /// Message coalescing (Hare §3.7.4)
    Coalescing,
    /// Creation affinity (Hare §3.7.5) and the spreading of new directories
    /// over servers: without it every new inode lives where its entry is
    Affinity,
    /// Hybrid file-descriptor tracking (Hare §3.5.1)
    HybridFd,
    /// Server journals, from which a server that dies is rebuilt (fos §3.5)
    Recovery,
    /// File servers as processes of their own, restarted by a watchdog
    /// (fos §3.5); without it they are threads of the instance process
    Processes,
    /// Copies of the data a program on another host read, kept with
    /// close-to-open consistency (fos §3.2); without it every read crosses
    RemoteCopies,
    /// Copies of remote data kept by a node's proxy for all the programs
    /// of that node, with the same close-to-open consistency, and its
    /// read-ahead of sequential readers; without it a second program's
    /// read crosses the network again, as does each 32 KiB of a first
    NodeCopies,
    /// File sizes published by their servers in shared memory, read by
    /// `lseek(SEEK_END)` without a message; without it every such call
    /// asks the file's server
    SizeBoard,
    /// Reads of blocks a client learnt from an earlier `Read` reply, made
    /// without a message while the file's server publishes the same data
    /// version (Hare §3.3); without it every read asks the file's server
    ReadLease,
    /// Direct links between nodes that are not the first (`atoll node`,
    /// given to the first node); without them a program's calls to
    /// another node's file servers go through the first node
    DirectLinks,
    /// Lookups that found no entry, kept by clients and invalidated by
    /// the name's server before a reply that makes the name exist;
    /// without it every lookup of a missing name asks its server
    NegativeLookups,
    /// System-call sites rewritten by one program, remembered by the
    /// instance and rewritten in each new program image at start; without
    /// it each image traps once at every site before rewriting it
    RememberedSites,
    /// The first node's pump, once a yield while it polls for a remote
    /// call's reply cost a time slice (a busy core), lets its watcher
    /// sleep on the reply instead for a while (`atoll node`, given to the
    /// first node); without it the pump polls, yielding, in every case
    ReplyHandoff,
    /// `fchmod`, `fchown` and `futimens` of a regular file that cannot
    /// fail, posted to the file's server with a ticket and the call's
    /// time instead of waiting for its answer; without it each waits
    PostedAttrs,
}

/// Parse a size: plain bytes, or a number with a binary unit suffix
/// (`K`, `M`, `G`, `T`, optionally followed by `iB` or `B`; case-insensitive).
///
/// `"64M"` → 67108864, `"512MiB"` → 536870912, `"4096"` → 4096.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "invalid size '{s}': expected e.g. 64M, 1G, 512MiB or bytes"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size '{s}': number too large"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "invalid size '{s}': unknown unit (use K, M, G, T, e.g. 64M or 512MiB)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size '{s}': too large"))
}

/// Smallest buffer cache accepted: 1 MiB (256 blocks).
pub const MIN_MEMORY: u64 = 1 << 20;

/// `--inodes`: at least 2 (the root directory is one of them).
fn parse_inodes(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("--inodes {s}: not a number"))?;
    if n < 2 {
        return Err("--inodes must be at least 2".into());
    }
    Ok(n)
}

/// `--memory`: a size of at least [`MIN_MEMORY`] that fits in physical RAM.
fn parse_memory(s: &str) -> Result<u64, String> {
    let bytes = parse_size(s)?;
    check_memory(bytes, physical_memory())
}

fn check_memory(bytes: u64, ram: u64) -> Result<u64, String> {
    if bytes < MIN_MEMORY {
        return Err(format!(
            "buffer cache of {bytes} bytes is too small (minimum 1MiB)"
        ));
    }
    if bytes > ram {
        return Err(format!(
            "buffer cache of {} does not fit in physical memory ({})",
            human_bytes(bytes),
            human_bytes(ram)
        ));
    }
    Ok(bytes)
}

/// Total physical memory in bytes.
pub fn physical_memory() -> u64 {
    let info = rustix::system::sysinfo();
    (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
}

/// `--servers`: 1 ..= `atoll_proto::MAX_SERVERS`.
/// `--servers`: a count, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerCount {
    Fixed(usize),
    Auto,
}

pub(crate) fn parse_server_count(s: &str) -> Result<ServerCount, String> {
    if s.trim() == "auto" {
        return Ok(ServerCount::Auto);
    }
    parse_servers(s)
        .map(ServerCount::Fixed)
        .map_err(|e| format!("{e} (or auto)"))
}

fn parse_servers(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid server count '{s}'"))?;
    if n == 0 || n > atoll_proto::MAX_SERVERS {
        return Err(format!(
            "server count must be between 1 and {}",
            atoll_proto::MAX_SERVERS
        ));
    }
    Ok(n)
}

/// `--mount`: absolute, not `/`, no `.`/`..` components, and absent on the
/// host (programs must never confuse an atoll path with a host path).
/// Trailing slashes are dropped: `/atoll/` → `/atoll`.
fn parse_mount(s: &str) -> Result<String, String> {
    let m = normalize_mount(s)?;
    if std::fs::symlink_metadata(&m).is_ok() {
        return Err(format!(
            "mount path {m} exists on the host; choose a path that does not exist"
        ));
    }
    Ok(m)
}

fn normalize_mount(s: &str) -> Result<String, String> {
    if !s.starts_with('/') {
        return Err(format!("mount path '{s}' must be absolute"));
    }
    let parts: Vec<&str> = s.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return Err("mount path must not be /".into());
    }
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(format!("mount path '{s}' must not contain . or .."));
    }
    Ok(format!("/{}", parts.join("/")))
}

/// `1073741824` → `1GiB`, `1536` → `1.5KiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || v.fract() == 0.0 {
        format!("{v:.0}{}", UNITS[i])
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_bytes_and_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GB"), Ok(2 << 30));
        assert_eq!(parse_size("3k"), Ok(3 << 10));
    }

    #[test]
    fn sizes_reject_garbage() {
        for bad in [
            "",
            "M",
            "12X",
            "1.5G",
            "-1",
            "99999999999999999999",
            "20000000T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn memory_must_be_at_least_one_mib_and_fit_in_ram() {
        assert!(check_memory(MIN_MEMORY - 1, 1 << 30).is_err());
        assert_eq!(check_memory(MIN_MEMORY, 1 << 30), Ok(MIN_MEMORY));
        assert!(check_memory(2 << 30, 1 << 30).is_err());
    }

    #[test]
    fn mount_must_be_absolute_and_not_root() {
        assert_eq!(normalize_mount("/atoll/"), Ok("/atoll".to_string()));
        assert_eq!(normalize_mount("//a//b"), Ok("/a/b".to_string()));
        assert!(normalize_mount("atoll").is_err());
        assert!(normalize_mount("/").is_err());
        assert!(normalize_mount("///").is_err());
        assert!(normalize_mount("/a/../b").is_err());
    }

    #[test]
    fn mount_must_not_exist_on_host() {
        assert!(parse_mount("/tmp").is_err());
        assert!(parse_mount("/atoll-surely-absent-0f9a").is_ok());
    }

    #[test]
    fn servers_are_bounded() {
        assert!(parse_servers("0").is_err());
        assert_eq!(parse_servers("3"), Ok(3));
        assert!(parse_servers("65").is_err());
        assert!(parse_servers("x").is_err());
        assert_eq!(parse_server_count("auto"), Ok(ServerCount::Auto));
        assert_eq!(parse_server_count("2"), Ok(ServerCount::Fixed(2)));
        assert!(parse_server_count("0").is_err());
    }

    #[test]
    fn human_bytes_is_compact() {
        assert_eq!(human_bytes(1 << 30), "1GiB");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(100), "100B");
    }

    #[test]
    fn run_accepts_command_with_or_without_double_dash() {
        let c = Cli::try_parse_from(["atoll", "run", "--servers", "2", "--", "ls", "-l"]).unwrap();
        let Command::Run(r) = c.command else { panic!() };
        assert_eq!(r.command, ["ls", "-l"]);
        assert_eq!(r.instance.servers, Some(ServerCount::Fixed(2)));
        let c = Cli::try_parse_from(["atoll", "run", "make", "-j8"]).unwrap();
        let Command::Run(r) = c.command else { panic!() };
        assert_eq!(r.command, ["make", "-j8"]);
    }

    #[test]
    fn unknown_options_before_the_command_are_errors() {
        assert!(Cli::try_parse_from(["atoll", "run", "--bogus", "--", "true"]).is_err());
        assert!(Cli::try_parse_from(["atoll", "run", "--bogus", "true"]).is_err());
        let c = Cli::try_parse_from(["atoll", "run", "--", "--weird-name"]).unwrap();
        let Command::Run(r) = c.command else { panic!() };
        assert_eq!(r.command, ["--weird-name"]);
    }

    #[test]
    fn run_requires_a_command() {
        assert!(Cli::try_parse_from(["atoll", "run"]).is_err());
        assert!(Cli::try_parse_from(["atoll", "run", "--"]).is_err());
    }

    #[test]
    fn without_accepts_every_technique() {
        let c = Cli::try_parse_from([
            "atoll",
            "boot",
            "--without",
            "dir-distribution",
            "--without",
            "hybrid-fd",
        ])
        .unwrap();
        let Command::Boot(b) = c.command else {
            panic!()
        };
        assert_eq!(
            b.instance.without,
            [Technique::DirDistribution, Technique::HybridFd]
        );
        assert!(Cli::try_parse_from(["atoll", "boot", "--without", "magic"]).is_err());
    }

    #[test]
    fn bench_passes_everything_through() {
        let c = Cli::try_parse_from(["atoll", "bench", "--help", "-x", "y"]).unwrap();
        let Command::Bench(p) = c.command else {
            panic!()
        };
        assert_eq!(p.args, ["--help", "-x", "y"]);
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
