//! Bootstrap protocol: how a process joins an instance and obtains its
//! channels (the "CONNECT/DISCONNECT" of Hare Table 4.2).
//!
//! Transport: a `SOCK_SEQPACKET` Unix socket at `<runtime dir>/boot.sock`
//! (the runtime directory is private, mode 0700). Each packet carries one
//! postcard-encoded [`BootRequest`] or [`BootReply`]; file descriptors ride
//! along with `SCM_RIGHTS` in the order the reply documents.
//!
//! Life cycle of a session (one per process, surviving `execve`):
//!
//! ```text
//!  connect ──Attach──▶ session S, lane 0        (first atoll call of a process)
//!     │  ──NewLane──▶ lane k                     (another thread needs channels)
//!     │  ──Fork─────▶ child session C + socket   (before fork; parent shares
//!     │                                           its descriptions with C;
//!     │                                           C's lanes come at its first
//!     │                                           call, by NewLane or Reattach)
//!     │  ──Reattach─▶ fresh lanes for S           (new program image after exec;
//!     │                                           the old image's lanes retire)
//!  close(socket) ─▶ servers drop everything S held (process exit or kill)
//! ```
//!
//! The connection *is* the session: when the last copy of its socket is
//! closed (the process exited or was killed at any instant) the boot thread
//! tells every server to release what the session held, so nothing leaks.

use serde::{Deserialize, Serialize};

use crate::SessionId;

/// Environment variable naming the boot socket of the instance a process
/// belongs to. Its presence is what makes a process an atoll client.
pub const ENV_SOCKET: &str = "ATOLL_SOCKET";
/// Environment variable carrying the number of the inherited session socket
/// across `execve` (the socket is kept open without `O_CLOEXEC`).
pub const ENV_SESSION_FD: &str = "ATOLL_SESSION_FD";
/// Environment variable carrying the client state across `execve`
/// (descriptor table and cwd), written by the client library itself.
pub const ENV_STATE: &str = "ATOLL_STATE";
/// The hidden `atoll` subcommand that runs a program unable to load the
/// client library (a statically linked image) behind relays of the atoll
/// descriptors it inherits: `atoll __foreign FDS PATH ARGV…`.
pub const FOREIGN: &str = "__foreign";
/// Environment variable a static program's relay gives it: a directory
/// where, at each `execve`, the relay leaves the cwd it tracks for the
/// process (a file named by its pid; empty: the kernel's cwd), which the
/// client library of the new image starts in.
pub const ENV_FOREIGN_CWD: &str = "ATOLL_FOREIGN_CWD";
/// Beside that file, for a program stored in the mount (run from a
/// memfd): the file named by the pid and this suffix holds the program's
/// path in the mount, what the new image's `/proc/self/exe` names.
pub const FOREIGN_EXE_SUFFIX: &str = ".exe";
/// Link to the `atoll` executable in an instance's runtime directory (what
/// a client runs for [`FOREIGN`]).
pub const EXE_LINK: &str = "atoll";
/// The subcommand that copies what a dead image's loader wrote
/// (`BootRequest::Caught`).
pub const LOADER_DRAIN: &str = "__loader-drain";

/// How a waiting side waits for a message (Popcorn ch. 5, fos §3.2).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum PollMode {
    /// Busy-poll forever: the lowest latency, for dedicated cores (split).
    Spin,
    /// Sleep on a futex immediately: for timeshared cores.
    Block,
    /// Spin briefly, then sleep.
    #[default]
    Adaptive,
}

/// The kind of memory between an instance's clients and its servers
/// (Cosh §3: an *island* is a set of domains with one kind of memory
/// between them). `atoll run --island KIND`.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Island {
    /// Coherent shared memory: clients map the buffer cache and copy
    /// file data and pipe bytes themselves (Cosh *share*).
    #[default]
    Coherent,
    /// Shared but incoherent memory, emulated: clients read and write
    /// private copies of blocks and write them back at the protocol's
    /// flush points (Hare §3.3.1; `--incoherent`).
    Incoherent,
    /// No shared memory at all: clients never map the buffer cache; every
    /// byte of file and pipe data travels inside messages and the server
    /// copies it between the frame and its blocks (Cosh *copy*).
    Copy,
}

impl Island {
    /// The name `--island` takes and `atoll status` shows.
    pub fn name(self) -> &'static str {
        match self {
            Island::Coherent => "coherent",
            Island::Incoherent => "incoherent",
            Island::Copy => "copy",
        }
    }

    /// Do clients of this island map the buffer cache?
    pub fn maps_cache(self) -> bool {
        self != Island::Copy
    }
}

/// What clients do with a `syscall` instruction that traps through
/// Syscall User Dispatch (`atoll run --syscall-sites`).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum SyscallSites {
    /// Rewrite the site, the first time it traps, to call atoll directly
    /// (when its number is a constant set just before it; others trap).
    #[default]
    Rewrite,
    /// Every such call traps (a signal each time).
    Trap,
}

impl SyscallSites {
    /// The name `--syscall-sites` takes and `atoll status` shows.
    pub fn name(self) -> &'static str {
        match self {
            SyscallSites::Rewrite => "rewrite",
            SyscallSites::Trap => "trap",
        }
    }

    /// Why the mode is what it is, for `atoll status`.
    pub fn why(self) -> &'static str {
        match self {
            SyscallSites::Rewrite => {
                "sites `mov $nr,%eax; syscall` jump to per-site stubs mapped near the code \
                 (no page 0 needed); other sites, and programs run with \
                 ATOLL_SYSCALL_REWRITE=off, trap"
            }
            SyscallSites::Trap => "--syscall-sites trap: every trapped call raises SIGSYS",
        }
    }
}

/// Techniques that can be switched off for ablation (Hare §5.4).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Without {
    pub dir_distribution: bool,
    pub dir_cache: bool,
    pub broadcast: bool,
    pub direct_cache: bool,
    pub coalescing: bool,
    pub affinity: bool,
    pub hybrid_fd: bool,
    /// Servers keep no journal, so one that dies stays down (fos §3.5).
    #[serde(default)]
    pub recovery: bool,
    /// File servers are threads of the instance process, not processes
    /// of their own (`atoll_server::process`).
    #[serde(default)]
    pub processes: bool,
    /// Programs on other hosts than the servers keep no copies of the
    /// data they read (client `rcache.rs`): every read crosses.
    #[serde(default)]
    pub remote_copies: bool,
    /// The proxy of each node keeps no copies shared by that node's
    /// programs (`atoll node`'s edge, `node/copies.rs`): a read a program's
    /// own copies miss always crosses.
    #[serde(default)]
    pub node_copies: bool,
    /// Servers publish no file sizes in the control block's size board
    /// (`atoll_msg::sizes`): every `lseek(SEEK_END)` asks the owner.
    #[serde(default)]
    pub size_board: bool,
    /// Clients read no file data without a message: every `read` of a
    /// regular file is a `Read` round trip, also of blocks it learnt
    /// before (client `lease.rs`, `atoll_msg::lease`).
    #[serde(default)]
    pub read_lease: bool,
    /// Nodes that are not the first make no direct links to each other's
    /// file servers (`atoll node`, `node/peers.rs`): a program's calls to
    /// another node's members go through the first node.
    #[serde(default)]
    pub direct_links: bool,
    /// Clients keep no negative lookup answers (`ENOENT`) and servers
    /// record none (client `dcache.rs`): every lookup of a missing name
    /// asks its server. Implied by `dir_cache`.
    #[serde(default)]
    pub negative_lookups: bool,
    /// Clients record no rewritten system-call sites in the instance's
    /// table of remembered sites, and a new program image rewrites none
    /// of them at start: every site traps once per image before it is
    /// rewritten (preload `rewrite/remember.rs`).
    #[serde(default)]
    pub remembered_sites: bool,
    /// The first node's pump always polls for a remote call's reply,
    /// yielding, even once its yields cost a time slice (`atoll node`,
    /// `node/head.rs`): it never hands the wait to its watcher.
    #[serde(default)]
    pub reply_handoff: bool,
    /// Clients wait for the owner's answer to every `fchmod`, `fchown`
    /// and `futimens` instead of posting the ones that cannot fail
    /// (`Request::SetAttrPosted`, client `meta.rs`).
    #[serde(default)]
    pub posted_attrs: bool,
}

/// What every client learns when it attaches.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct InstanceInfo {
    /// Short id of the instance (name of its runtime directory).
    pub id: String,
    /// Absolute mount path, e.g. `/atoll`.
    pub mount: String,
    /// File servers at boot. More may join while the instance runs: the
    /// members now are `atoll_msg::Control::members`.
    pub servers: u32,
    /// Bytes in the shared buffer cache (a multiple of the block size).
    pub cache_bytes: u64,
    pub poll: PollMode,
    /// The kind of memory clients share with the servers (`--island`).
    pub island: Island,
    pub without: Without,
    /// Directories created under these paths (relative to the mount, `""`
    /// = everything) are distributed.
    pub distribute: Vec<String>,
    /// CPU and server locality domains for creation affinity (Hare
    /// §3.7.5), read from `/sys` at boot.
    #[serde(default)]
    pub topology: crate::topology::Topology,
    /// How the fleet of file servers (`/fs/server`) picks a member for an
    /// object that may live on any: pipes, notification queues.
    #[serde(default)]
    pub fs_policy: atoll_names::Policy,
    /// Whether clients rewrite trapped system-call sites.
    #[serde(default)]
    pub syscall_sites: SyscallSites,
    /// The client attached through a node's proxy, on another host than
    /// the file servers: it keeps copies of the data it reads, with
    /// close-to-open consistency (client `rcache.rs`). Set by the proxy.
    #[serde(default)]
    pub remote: bool,
    /// The members served on the client's own node, in an instance whose
    /// members are spread over nodes (`atoll node --servers-here`): new
    /// files and plain directories go there (creation affinity across
    /// hosts). Empty: every member is near.
    #[serde(default)]
    pub node_members: Vec<u32>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub enum BootRequest {
    /// First packet on a new connection: create a session for process `pid`.
    /// Reply fds: `[buffer cache memfd, control memfd, channel 0 … channel N-1]`
    /// for the N members at that moment;
    /// in a `copy` island the buffer cache memfd is left out (the client
    /// never maps it): `[control memfd, channel 0 … channel N-1]`.
    Attach { pid: u32 },
    /// First packet on an inherited connection after `execve`: same session;
    /// lanes handed out before are retired, and the new image gets none
    /// (`Attached::lane` is `None`): it asks `NewLane` at its first call, so
    /// an image that never asks a server anything (a shell's `/bin/true`)
    /// costs no channels.
    /// Reply fds: as `Attach` without the channels.
    Reattach { pid: u32 },
    /// Another lane (one channel per member) for another thread.
    /// Reply fds: `[channel 0 … channel N-1]` (the members now; a member
    /// that joins later gets its channel with `Channel`).
    NewLane,
    /// Create a child session for a process about to be forked. The parent
    /// then sends `Request::Share` for each description it holds.
    /// Reply fds: `[child's session socket]`. The child has no lane yet:
    /// it asks `NewLane` at its first call, or `Reattach` at its `execve`,
    /// so a fork that only execs (a shell running a command) costs no
    /// channels, and neither does an exec (whose new image's session is
    /// made with `Fork`).
    Fork,
    /// Instance status (for `atoll status`). Any connection may ask.
    Status,
    /// Shut the instance down (for `atoll stop`).
    Stop,
    /// A forked child names its process on the connection it inherited
    /// (`Fork` was asked before the pid existed), so `atoll top` can show
    /// it. No reply.
    ChildPid { pid: u32 },
    /// Inject a fault (`atoll chaos`). Reply: `Done` or `Error`.
    Chaos(ChaosAction),
    /// Run the file servers in this many host processes (`atoll scale`);
    /// `None`: let the instance choose as the load changes (`auto`).
    /// Reply: `Scaled` or `Error`.
    Scale { hosts: Option<u32> },
    /// A process without a lane reports its client counters as it exits,
    /// for server 0 (`Request::ClientCounters`), instead of asking a lane
    /// for them. No reply.
    Counters(crate::ClientCounters),
    /// `Attach` without a lane: what a starting program's client sends.
    /// It asks `NewLane` at its first call, as a new image does after
    /// `Reattach`, so a program that never asks a server anything (a
    /// build's `/bin/true`, `test`, `echo`) costs no channels, and its end
    /// wakes no server. Reply: `Attached` with `lane: None`; fds as
    /// `Reattach`.
    AttachLazily { pid: u32 },
    /// A channel of lane `lane` (one this session was given) to file
    /// server `server`, a member that joined after the lane was made
    /// (Hare §6.1.1): a lane asks at its first request to the member, so
    /// lanes of processes that never reach it cost nothing. Refused for a
    /// server that is not a member yet, so a lane never sends to one that
    /// is not ready. Reply: `Lane { lane }`; fds: `[channel]`.
    Channel { lane: u32, server: u32 },
    /// `Reattach` whose reply the new image does not need: the exec handed
    /// it the buffer cache's and control block's descriptors and the
    /// session's id and instance information along with the socket
    /// (`ENV_STATE`), so it goes on without waiting for the boot thread.
    /// The boot thread retires the old image's lanes and learns the pid,
    /// as for `Reattach`. No reply.
    Reattached { pid: u32 },
    /// The caller's `wait` reaped child `pid`, which a signal killed
    /// (`SIGKILL`, a crash): its session socket closed before the `wait`
    /// returned (Linux closes a dying process's files before it tells the
    /// parent), but this thread may not have read that yet. The thread
    /// ends now every session of `pid` (or `session`, the one the caller
    /// forked it with) whose socket is closed, as if it had read the close.
    /// Reply: `Sessions` with every such session the servers were told
    /// about (also ones ended a moment before), whose ends the caller then
    /// awaits (`Request::SessionEnded`).
    Reaped {
        pid: u32,
        session: Option<SessionId>,
    },
    /// Sent by an image about to `execve` just ahead of the `Fork` that
    /// makes the new image's session (one wake-up of the boot thread for
    /// both), for that session: the new image's dynamic loader writes its
    /// stderr (`error while loading shared libraries`, `LD_DEBUG`) into the
    /// memfds attached (`SCM_RIGHTS`), which stand at `fds` in the new
    /// image, before any client can serve an atoll descriptor there
    /// (client `exec/caught.rs`). The new image's client copies them
    /// into their atoll descriptions as it starts (its `Reattach` or
    /// `Reattached` tells the thread so, which then drops its copies);
    /// if the session's connection closes before, with something written, the
    /// thread starts `atoll __loader-drain` (the runtime directory's
    /// [`EXE_LINK`]) on the session with `env` and the memfds at `fds`, a
    /// client that copies them the same way, and ends the session when
    /// that one exits. `pid`: the image's (a parent's `Reaped` names it).
    /// No reply.
    Caught {
        pid: u32,
        fds: Vec<i32>,
        env: Vec<String>,
    },
}

impl BootRequest {
    /// Does the boot thread answer this request? `ChildPid`, `Counters`
    /// and `Reattached` are posts: a relay that waited for their answer
    /// would wait for ever.
    pub fn is_answered(&self) -> bool {
        !matches!(
            self,
            BootRequest::ChildPid { .. }
                | BootRequest::Counters(_)
                | BootRequest::Reattached { .. }
                | BootRequest::Caught { .. }
        )
    }
}

/// A fault `atoll chaos` injects into a running instance, for tests of
/// fault containment (fos §3.5: plan for failure).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChaosAction {
    /// File server `server` dies at once, without any cleanup of its own,
    /// as a crashed server would.
    Kill { server: u32 },
    /// File server `server` serves nothing for `millis` milliseconds, as a
    /// wedged server would, then goes on.
    Stall { server: u32, millis: u64 },
    /// The request ring of the newest channel of file server `server` is
    /// scribbled on, as a hostile client could: the server drops that
    /// channel (its client's calls there fail with `EIO`) and goes on.
    CorruptRing { server: u32 },
}

/// How a file server is doing, for `atoll status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerHealth {
    pub server: u32,
    /// `up`, `stalled` (serving nothing on purpose, `atoll chaos`) or
    /// `down` (died; its clients' calls fail with `EIO`).
    pub state: String,
    /// Core the server is pinned to (-1: none).
    pub core: i32,
    /// Thread id of the server in the instance process (its process id
    /// when servers are processes).
    pub tid: u32,
    /// Process id of the server (0: a thread of the instance process).
    #[serde(default)]
    pub pid: u32,
    /// Milliseconds since the server started.
    pub uptime_ms: u64,
    /// Times the server was rebuilt from its journal.
    pub restarts: u32,
    /// Why it is down, when it is; why it was last rebuilt, when it is up.
    #[serde(default)]
    pub reason: String,
    /// Microseconds the last rebuild took (replaying the journal).
    #[serde(default)]
    pub recovery_us: u64,
    /// Records and bytes in the server's journal (its newest snapshot and
    /// the records after it).
    #[serde(default)]
    pub journal_records: u64,
    #[serde(default)]
    pub journal_bytes: u64,
    /// Snapshots of its state taken since boot, the newest one's bytes,
    /// and microseconds the newest one took (`atoll_server::snapshot`).
    #[serde(default)]
    pub snapshots: u64,
    #[serde(default)]
    pub snapshot_bytes: u64,
    #[serde(default)]
    pub snapshot_us: u64,
    /// How its snapshots are taken: "forked" (a child process encodes
    /// them while it serves; `snapshot_us` is then its pause, the fork
    /// and the copy of the records appended meanwhile) or "inline" (it
    /// encodes them itself); empty before the first.
    #[serde(default)]
    pub snapshot_mode: String,
    /// Microseconds the newest snapshot's encoding took.
    #[serde(default)]
    pub snapshot_encode_us: u64,
    /// Can it be rebuilt if it dies? (A journal, not full.)
    #[serde(default)]
    pub recoverable: bool,
    /// The host process it runs in (`atoll scale`; 0 for server threads).
    #[serde(default)]
    pub host: u32,
    /// It joined while the instance ran (Hare §6.1.1), not at boot.
    #[serde(default)]
    pub joined: bool,
    /// Times it moved to another host.
    #[serde(default)]
    pub moves: u32,
    /// Which incarnation serves `/fs/server/<server>` (fos §3.3): one
    /// more for every start, rebuild, successor process and move; clients
    /// re-bind the name when it changes (0: never started).
    #[serde(default)]
    pub generation: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub enum BootReply {
    Attached {
        session: SessionId,
        /// Lane 0 for `Attach`; `None` for `Reattach` (no channels sent).
        lane: Option<u32>,
        info: InstanceInfo,
    },
    Lane {
        lane: u32,
    },
    Forked {
        child: SessionId,
    },
    /// Boxed: far larger than the other replies (postcard encodes it the
    /// same way).
    Status(Box<InstanceStatus>),
    Stopping,
    /// A request without an answer of its own was carried out (`Chaos`).
    Done,
    Error(String),
    /// The servers run in `hosts` hosts now; `moved` of them changed host.
    Scaled {
        hosts: u32,
        moved: u32,
    },
    /// The sessions a `Reaped` named.
    Sessions(Vec<SessionId>),
}

/// Snapshot for `atoll status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct InstanceStatus {
    pub id: String,
    pub mount: String,
    pub pid: u32,
    pub clients: u64,
    pub lanes: u64,
    /// Lanes made since the instance started (`Attach`, `Reattach` and
    /// `NewLane` each make one): what process starts cost in channels.
    #[serde(default)]
    pub lanes_made: u64,
    /// New program images that joined the session an exec handed them
    /// without waiting for the boot thread (`Reattached`), since start.
    #[serde(default)]
    pub images_handed_over: u64,
    pub servers: Vec<crate::ServerStats>,
    /// Instance-wide bounded metadata: `(resource, used, limit)` (inodes,
    /// names, open descriptions, locks, xattr bytes).
    #[serde(default)]
    pub limits: Vec<(String, u64, u64)>,
    /// How servers and clients wait (`--poll`).
    #[serde(default)]
    pub poll: String,
    /// Live sessions and the pid of the process each belongs to (0 when
    /// not known yet).
    #[serde(default)]
    pub sessions: Vec<(u64, u32)>,
    /// Names of the servers' hot and swapped directories and of their
    /// ancestors, as far as the servers know them, so that `atoll top` and
    /// `atoll status` can show paths.
    #[serde(default)]
    pub dir_names: Vec<crate::DirName>,
    /// Each file server's state: up, stalled or down, core, uptime.
    #[serde(default)]
    pub health: Vec<ServerHealth>,
    /// The kind of memory the clients share with the servers (`--island`:
    /// `coherent`, `incoherent` or `copy`).
    #[serde(default)]
    pub island: String,
    /// The file-server fleet's policy (`InstanceInfo::fs_policy`).
    #[serde(default)]
    pub fs_policy: atoll_names::Policy,
    /// What clients do with trapped system-call sites (`rewrite` or
    /// `trap`, `--syscall-sites`) and why.
    #[serde(default)]
    pub syscall_sites: String,
    #[serde(default)]
    pub syscall_sites_why: String,
    /// How the file servers are hosted (`atoll scale`).
    #[serde(default)]
    pub scaling: Scaling,
    /// Named counters of what runs in the instance's process beside the
    /// servers (`node.*`: the head proxy of `atoll node`).
    #[serde(default)]
    pub process_counters: Vec<(String, u64)>,
}

/// How many host processes run the file servers, and who decides.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Scaling {
    /// File servers that are members now (servers `0..members`): the
    /// boot count, and more as servers join (`atoll scale` past it).
    #[serde(default)]
    pub members: u32,
    /// Members that joined while the instance ran (not at boot).
    #[serde(default)]
    pub joined: Vec<u32>,
    /// The most members there may be (`atoll_proto::MAX_SERVERS`, or the
    /// boot count where servers cannot join: threads, `--split`).
    #[serde(default)]
    pub room: u32,
    /// Host processes running now (0: servers are threads of the instance).
    pub hosts: u32,
    /// The most hosts there can be: one per server (`--max-servers`), at
    /// most one per usable core.
    pub max_hosts: u32,
    /// `--servers auto`: the instance changes the count with the load.
    pub auto: bool,
    /// Times the count changed.
    pub changes: u64,
}

/// Largest bootstrap packet.
pub const MAX_BOOT_PACKET: usize = 64 * 1024;
