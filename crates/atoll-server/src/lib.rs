//! atoll's file servers and instance runtime.
//!
//! Layers (bottom to top):
//! * [`store`] / `sys`: byte access to the shared buffer cache (a memfd of
//!   4 KiB blocks, lent to servers by one block pool);
//! * [`fs`]: [`fs::FileServer`], one server's state and the POSIX semantics
//!   of every request in `atoll-proto` (pure logic, no I/O);
//! * [`server`]: the per-server loop: polls its channels (from
//!   `atoll-msg`), decodes frames, calls the file server, replies;
//! * [`process`]: each server as a process of its own (the default of
//!   `atoll`), and the watchdog that starts a successor when one dies;
//! * `boot`: the boot thread serving `<runtime>/boot.sock` (sessions,
//!   lanes, fork, status, stop — `atoll_proto::boot`);
//! * this module: [`Instance`], which creates the runtime directory, the
//!   buffer cache, the control block, the block pool, the journals, the
//!   server threads or processes, and tears them down.
//!
//! Relies on `atoll-msg` (rings, doorbells, shared regions) and
//! `atoll-proto` (messages). Called by `atoll-cli` (`atoll run`/`boot`).
//!
//! Blocks are not split among servers: each claims batches from one pool
//! (`atoll_msg::BlockPool`, the root) and gives its excess back after
//! requests (`fs::blocks`), so `ENOSPC` comes only when the instance's
//! memory is all in use.

pub mod autoscale;
pub mod boot;
pub mod fs;
pub mod health;
pub mod hosts;
pub mod journal;
pub mod process;
pub mod process_counters;
pub mod remote;
pub mod server;
mod shadows;
pub mod snapshot;
pub mod store;
mod sys;
pub mod trace;
pub mod watchdog;
pub mod wedge;

#[cfg(test)]
mod recovery_tests;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use atoll_msg::{Control, SharedRegion};
use atoll_proto::boot::{InstanceInfo, PollMode, Without};
use atoll_proto::topology::Topology;
use atoll_proto::{Cred, ServerStats, BLOCK_SIZE, MAX_SERVERS};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use boot::{BootParams, ServerLink, Servers, StopFlag};

/// The boot socket's name in an instance's runtime directory.
pub const BOOT_SOCKET: &str = "boot.sock";

use fs::FsConfig;
use server::{Admin, ServerParams};
pub use shadows::remove_runtime_dir;

/// Everything needed to boot an instance.
#[derive(Clone, Debug)]
pub struct InstanceConfig {
    /// Number of file servers (default: one per core): fixed for the
    /// instance's life (`--max-servers`; `hosts`).
    pub servers: usize,
    /// Host processes the servers run in at boot (`--servers`; `hosts`);
    /// `atoll scale` changes it, up to `servers`. Ignored for server
    /// threads. 0: one per server.
    pub hosts: usize,
    /// `--servers auto`: the host count follows the load (`autoscale`).
    pub auto_scale: bool,
    /// The most servers the instance may ever have (`--max-servers`): 0,
    /// as many as `atoll_proto::MAX_SERVERS` where servers can join a
    /// running instance (`room_for`).
    pub room: usize,
    /// Buffer cache size in bytes (rounded down to whole blocks).
    pub memory: u64,
    /// Absolute mount path (must not exist on the host).
    pub mount: String,
    pub poll: PollMode,
    /// Pin servers to their own cores (the last `servers` cores) and spin.
    pub split: bool,
    /// Cores servers are pinned to, one per server (empty: no pinning).
    pub server_cores: Vec<usize>,
    /// The kind of memory between clients and servers (`--island`).
    pub island: atoll_proto::boot::Island,
    pub without: Without,
    pub distribute: Vec<String>,
    /// Directories change mode (centralized ↔ distributed) when hot or
    /// cool (`--adaptive-dirs on`, Hare §6.1.2; `fs::adapt`).
    pub adaptive_dirs: bool,
    /// How clients pick the file server for objects that may live on any
    /// (`--fleet-policy`; fos §3.3, `atoll_names`).
    pub fs_policy: atoll_names::Policy,
    /// Inode limit (`--inodes`); `None`: one per 8 KiB of `memory`, as
    /// tmpfs (`fs::limits`).
    pub inodes: Option<u64>,
    /// What clients do with trapped system-call sites (`--syscall-sites`).
    pub syscall_sites: atoll_proto::boot::SyscallSites,
    /// Parent directory for runtime directories (default `$XDG_RUNTIME_DIR/atoll`
    /// or `/tmp/atoll-$UID`).
    pub runtime_root: PathBuf,
    /// Run each file server as a process of its own, started from this
    /// executable with [`process::SUBCOMMAND`] (the default of `atoll`;
    /// `--without processes` says `None`);
    /// `None`: servers are threads of the instance process. A traced
    /// instance (`boot_with(…, true)`) always uses threads.
    pub server_exe: Option<PathBuf>,
}

/// A running instance: servers, boot thread, runtime directory.
///
/// Life cycle: `boot` → clients attach over `socket_path()` → `Stop` from a
/// client (seen by `wait_for_stop_request`) or the owner decides →
/// `shutdown` (also done, best effort, on drop).
pub struct Instance {
    id: String,
    runtime_dir: PathBuf,
    socket_path: PathBuf,
    info: InstanceInfo,
    servers: Arc<Servers>,
    server_threads: Vec<JoinHandle<std::io::Result<ServerStats>>>,
    /// With server processes: the watchdog (`process::Watchdog`).
    watchdog: Option<JoinHandle<Vec<Option<ServerStats>>>>,
    watch_quit: Arc<AtomicBool>,
    boot_thread: Option<JoinHandle<std::io::Result<()>>>,
    /// The control block, for proxies standing for remote members
    /// (`control_fd`).
    control_fd: OwnedFd,
    wake: OwnedFd,
    quit: Arc<AtomicBool>,
    stop: Arc<StopFlag>,
    down: bool,
    trace: Option<Arc<trace::Sink>>,
}

/// Room for each server's journal (`journal`): as much as the buffer
/// cache holds, shared among the servers, and at least 64 MiB each. The
/// memfd is sparse: only what is written costs memory.
/// `ATOLL_JOURNAL_BYTES` overrides it (tests of a full journal).
fn journal_bytes(cache_bytes: u64, servers: usize) -> usize {
    if let Some(b) = std::env::var("ATOLL_JOURNAL_BYTES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return b;
    }
    ((cache_bytes / servers.max(1) as u64) as usize).max(64 << 20)
}

fn invalid(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.to_string())
}

impl Instance {
    pub fn boot(config: InstanceConfig) -> std::io::Result<Instance> {
        Self::boot_with(config, false)
    }

    /// Boot, recording a message trace when `trace` is set (see
    /// [`trace`]; the recorded events are in [`Instance::trace`] once the
    /// instance is shut down).
    pub fn boot_with(config: InstanceConfig, trace: bool) -> std::io::Result<Instance> {
        Self::boot_members(config, trace, Vec::new())
    }

    /// Boot with members `config.servers..` served on other nodes
    /// (`remote`, `atoll node --servers-here`): one each of `remotes`, in
    /// order. Its own servers are threads then (a watchdog of processes
    /// would deal the remote members to hosts it cannot start), and no
    /// member joins later (the other nodes' proxies mirror the count).
    pub fn boot_spanning(
        mut config: InstanceConfig,
        remotes: Vec<Arc<dyn remote::RemoteMember>>,
    ) -> std::io::Result<Instance> {
        if !remotes.is_empty() {
            config.server_exe = None;
            config.room = config.servers + remotes.len();
        }
        Self::boot_members(config, false, remotes)
    }

    fn boot_members(
        config: InstanceConfig,
        trace: bool,
        remotes: Vec<Arc<dyn remote::RemoteMember>>,
    ) -> std::io::Result<Instance> {
        let trace_sink = trace.then(|| Arc::new(trace::Sink::new()));
        let local = config.servers;
        // Every member, here and on other nodes: the width and placement
        // hash of the one namespace.
        let n = local + remotes.len();
        let spanning = !remotes.is_empty();
        if local == 0 || n > MAX_SERVERS {
            return Err(invalid("servers must be between 1 and 64"));
        }
        let blocks = config.memory / BLOCK_SIZE as u64;
        if blocks < n as u64 || blocks >= u32::MAX as u64 {
            return Err(invalid("memory must hold at least one block per server"));
        }
        if !config.server_cores.is_empty() && config.server_cores.len() != local {
            return Err(invalid("server_cores must name one core per server"));
        }
        let mut rnd = [0u8; 4];
        sys::random_bytes(&mut rnd)?;
        let id: String = rnd.iter().map(|b| format!("{b:02x}")).collect();

        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&config.runtime_root)?;
        let runtime_dir = config.runtime_root.join(&id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&runtime_dir)?;
        shadows::prepare(&runtime_dir, &id);
        let cleanup = |e: std::io::Error| {
            shadows::remove_runtime_dir(&runtime_dir);
            e
        };

        let cache_bytes = blocks * BLOCK_SIZE as u64;
        let (cache_fd, region) =
            SharedRegion::create("atoll-cache", cache_bytes as usize).map_err(cleanup)?;
        drop(region); // each server maps its own view
        let server_exe = config.server_exe.clone().filter(|_| !trace);
        let room = room_for(&config, server_exe.is_some()).max(n);
        // Each slot past the boot members costs the control block about
        // 900 bytes and the pool's records `blocks / 8` bytes of a sparse
        // memfd, made only as a member uses them.
        let (control_fd, control) = Control::create_with_room(n, room).map_err(cleanup)?;
        // The core each server would be pinned to, for the room: a server
        // that joins takes the core its index wraps to (`hosts`).
        let cores: Vec<Option<usize>> = (0..room)
            .map(|i| match config.server_cores.is_empty() {
                true => None,
                false => Some(config.server_cores[i % config.server_cores.len()]),
            })
            .collect();
        let limits = match config.inodes {
            Some(i) => fs::Limits::with_inodes(cache_bytes, i),
            None => fs::Limits::for_memory(cache_bytes),
        }
        .for_servers(n);
        limits.install(&control);

        let info = InstanceInfo {
            id: id.clone(),
            mount: config.mount.clone(),
            servers: n as u32,
            cache_bytes,
            poll: config.poll,
            island: config.island,
            without: config.without,
            distribute: config.distribute.clone(),
            fs_policy: config.fs_policy,
            syscall_sites: config.syscall_sites,
            remote: false,
            // A program of this node places its new files on this node's
            // members once others serve elsewhere.
            node_members: match spanning {
                true => (0..local as u32).collect(),
                false => Vec::new(),
            },
            // Creation affinity (Hare §3.7.5) needs each server's socket.
            // For the room: a member that joins has a domain too.
            topology: Topology::from_sysfs(&Topology::sysfs_root(), &cores),
        };
        let owner = Cred::of(
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let poll = if config.split {
            PollMode::Spin
        } else {
            config.poll
        };
        // One pool for all servers, every block in its root until a server
        // claims it (`fs::blocks`, K42 §4.1.2).
        let (pool_fd, pool) =
            atoll_msg::BlockPool::create_with_room(0, blocks as u32, n, room).map_err(cleanup)?;
        let pool = Arc::new(pool);
        let links: Vec<_> = (0..room).map(|_| std::sync::OnceLock::new()).collect();
        let mut server_threads = Vec::with_capacity(n);
        let health = Arc::new(health::Health::new(&cores, n));
        let journal_bytes = journal_bytes(cache_bytes, n);
        let ctx = ServerMaker {
            config: config.clone(),
            blocks: blocks as u32,
            owner,
            poll,
            limits,
            pool: pool.clone(),
            pool_fd,
            cache_fd: cache_fd.try_clone().map_err(cleanup)?,
            control_fd: control_fd.try_clone().map_err(cleanup)?,
            health: health.clone(),
            trace: trace_sink.clone(),
            server_exe: server_exe.clone(),
            journal_bytes,
            cores: cores.clone(),
        };
        for (i, slot) in links.iter().enumerate().take(local) {
            let (link, thread) = ctx.start(i, n).map_err(cleanup)?;
            let _ = slot.set(link);
            server_threads.extend(thread);
        }
        for (slot, r) in links.iter().skip(local).zip(remotes) {
            let _ = slot.set(ServerLink::Remote(r));
        }
        let (scale_tx, scale_rx) = mpsc::channel();
        let servers = Arc::new(Servers {
            links,
            control,
            health,
            scaler: std::sync::Mutex::new(server_exe.is_some().then_some(scale_tx)),
        });
        let watch_quit = Arc::new(AtomicBool::new(false));
        let watchdog = match &server_exe {
            None => None,
            Some(exe) => {
                let plan = watchdog::HostPlan {
                    exe: exe.clone(),
                    cores: cores.clone(),
                    initial: match (config.auto_scale, config.hosts) {
                        (true, _) => 1,
                        (false, 0) => n,
                        (false, h) => h.min(n),
                    },
                    auto: config.auto_scale,
                    spinning: poll == PollMode::Spin,
                };
                let dog = watchdog::Watchdog::new(
                    servers.clone(),
                    pool.clone(),
                    watch_quit.clone(),
                    plan,
                    scale_rx,
                )
                .joining_with(Box::new(ctx));
                Some(start_watchdog(dog).map_err(cleanup)?)
            }
        };

        let socket_path = runtime_dir.join(BOOT_SOCKET);
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let addr = SocketAddrUnix::new(&socket_path)?;
        rustix::net::bind(&listener, &addr)?;
        rustix::net::listen(&listener, 128)?;
        let wake = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
        let quit = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(StopFlag::default());
        let control_dup = control_fd.try_clone()?;
        let params = BootParams {
            listener,
            wake: wake.try_clone()?,
            servers: servers.clone(),
            cache_fd,
            control_fd,
            info: info.clone(),
            stop: stop.clone(),
            quit: quit.clone(),
            trace: trace_sink.clone(),
            helper: runtime_dir.join(atoll_proto::boot::EXE_LINK),
        };
        let boot_thread = std::thread::Builder::new()
            .name("atoll-boot".into())
            .spawn(move || boot::run(params))?;

        let mut inst = Instance {
            id,
            runtime_dir,
            socket_path,
            info,
            servers,
            server_threads,
            watchdog,
            watch_quit,
            boot_thread: Some(boot_thread),
            control_fd: control_dup,
            wake,
            quit,
            stop,
            down: false,
            trace: trace_sink,
        };
        if let Err(e) = inst.write_instance_json() {
            inst.stop_threads();
            shadows::remove_runtime_dir(&inst.runtime_dir);
            inst.down = true;
            return Err(e);
        }
        Ok(inst)
    }

    /// `<runtime>/instance.json`, read by `atoll status`/`stop`.
    fn write_instance_json(&self) -> std::io::Result<()> {
        let doc = serde_json::json!({
            "id": self.id,
            "pid": std::process::id(),
            "mount": self.info.mount,
            "servers": self.info.servers,
            "socket": self.socket_path,
        });
        let tmp = self.runtime_dir.join("instance.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&doc)?)?;
        std::fs::rename(&tmp, self.runtime_dir.join("instance.json"))
    }

    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }
    /// A descriptor of the control block (doorbells, member count), for
    /// a proxy that waits on a remote member's doorbell as its server
    /// would (`remote`).
    pub fn control_fd(&self) -> std::io::Result<OwnedFd> {
        self.control_fd.try_clone()
    }
    pub fn info(&self) -> &InstanceInfo {
        &self.info
    }
    /// Block until a client sent `BootRequest::Stop`.
    pub fn wait_for_stop_request(&self) {
        self.stop.wait();
    }
    /// The message trace being recorded (`boot_with(…, true)`); complete
    /// once the instance is shut down.
    pub fn trace(&self) -> Option<Arc<trace::Sink>> {
        self.trace.clone()
    }

    pub fn stats(&self) -> Vec<ServerStats> {
        self.servers.stats()
    }

    /// Run the file servers in `hosts` host processes (`None`:
    /// automatically); see `atoll scale` and [`hosts`]. Returns the hosts
    /// running and how many servers moved.
    pub fn scale(&self, hosts: Option<usize>) -> Result<(usize, usize), String> {
        self.servers.scale(hosts)
    }

    /// Each file server's health: state, host, pid, core, moves.
    pub fn health(&self) -> Vec<atoll_proto::boot::ServerHealth> {
        self.servers.health_with_generations()
    }
    /// Stop servers, remove the runtime directory, release memory.
    pub fn shutdown(mut self) -> Vec<ServerStats> {
        let stats = self.stop_threads();
        shadows::remove_runtime_dir(&self.runtime_dir);
        self.down = true;
        stats
    }

    fn stop_threads(&mut self) -> Vec<ServerStats> {
        self.quit.store(true, Ordering::Release);
        let _ = rustix::io::write(self.wake.as_fd(), &1u64.to_ne_bytes());
        if let Some(h) = self.boot_thread.take() {
            let _ = h.join();
        }
        // No successor may start once the instance stops; the watchdog
        // stops the server processes and hands back their statistics.
        self.watch_quit.store(true, Ordering::Release);
        if let Some(h) = self.watchdog.take() {
            let stats = h.join().unwrap_or_default();
            return (0..self.servers.len())
                .map(|i| {
                    stats.get(i).cloned().flatten().unwrap_or(ServerStats {
                        server: i as u32,
                        ..ServerStats::default()
                    })
                })
                .collect();
        }
        for i in 0..self.servers.len() {
            self.servers.post(i, Admin::Shutdown);
        }
        self.server_threads
            .drain(..)
            .enumerate()
            .map(|(i, h)| match h.join() {
                Ok(Ok(s)) => s,
                _ => ServerStats {
                    server: i as u32,
                    ..ServerStats::default()
                },
            })
            .collect()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if !self.down {
            self.stop_threads();
            shadows::remove_runtime_dir(&self.runtime_dir);
        }
    }
}

/// How many servers an instance may ever have (its room): `--max-servers`
/// when given; otherwise `atoll_proto::MAX_SERVERS` when servers are
/// processes the watchdog can start more of (Hare §6.1.1, `watchdog`
/// joins them), and the boot count for server threads, which do not
/// scale, and with `--split`, whose cores are reserved at boot.
fn room_for(config: &InstanceConfig, processes: bool) -> usize {
    match config.room {
        0 if processes && !config.split => MAX_SERVERS,
        0 => config.servers,
        r => r.clamp(config.servers, MAX_SERVERS),
    }
}

/// What every file server of an instance is made from (`Instance::boot`),
/// kept by the watchdog to make the servers that join later.
pub struct ServerMaker {
    config: InstanceConfig,
    blocks: u32,
    owner: Cred,
    poll: PollMode,
    limits: fs::Limits,
    pool: Arc<atoll_msg::BlockPool>,
    pool_fd: OwnedFd,
    cache_fd: OwnedFd,
    control_fd: OwnedFd,
    health: Arc<health::Health>,
    trace: Option<Arc<trace::Sink>>,
    server_exe: Option<PathBuf>,
    journal_bytes: usize,
    /// The core of each server slot (the room).
    cores: Vec<Option<usize>>,
}

type ServerThread = JoinHandle<std::io::Result<ServerStats>>;

impl ServerMaker {
    /// Server `i`, one of `members`: its journal, then a process (started
    /// later by the watchdog) or a thread (started now). A server that
    /// joins gets its journal here, when it joins, as one made at boot.
    pub fn start(
        &self,
        i: usize,
        members: usize,
    ) -> std::io::Result<(ServerLink, Option<ServerThread>)> {
        let config = &self.config;
        let (journal_fd, journal) = match config.without.recovery {
            true => (None, None),
            false => {
                let (fd, j) = journal::Journal::create(self.journal_bytes)?;
                (Some(fd), Some(Arc::new(j)))
            }
        };
        if let Some(j) = &journal {
            self.health.set_journal(i, j.clone());
        }
        let pin = self.cores.get(i).copied().flatten();
        let fs = FsConfig {
            index: i,
            nservers: members,
            first_block: 0,
            nblocks: self.blocks,
            root_owner: self.owner,
            core: pin.map_or(-1, |c| c as i32),
            track_lookups: !config.without.dir_cache,
            track_absent: !config.without.dir_cache && !config.without.negative_lookups,
            limits: self.limits,
        };
        if let Some(exe) = &self.server_exe {
            let recipe = process::Recipe {
                exe: exe.clone(),
                fs,
                poll: self.poll,
                adaptive: config.adaptive_dirs,
                cache_fd: self.cache_fd.try_clone()?,
                control_fd: self.control_fd.try_clone()?,
                pool_fd: self.pool_fd.try_clone()?,
                journal_fd,
            };
            let server = process::ServerProcess::new(recipe)?;
            return Ok((ServerLink::Process(Arc::new(server)), None));
        }
        let (tx, rx) = mpsc::channel();
        let params = ServerParams {
            fs,
            poll: self.poll,
            pin,
            cache_fd: self.cache_fd.try_clone()?,
            control_fd: self.control_fd.try_clone()?,
            pool: self.pool.clone(),
            trace: self.trace.clone(),
            adaptive: config.adaptive_dirs,
            health: self.health.clone(),
            journal,
            process: false,
            resume: false,
            adopted: Vec::new(),
            ended: Vec::new(),
        };
        let h = std::thread::Builder::new()
            .name(format!("atoll-fs{i}"))
            .spawn(move || server::run(params, server::Inbox::Thread(rx)))?;
        Ok((ServerLink::Thread(tx), Some(h)))
    }
}

/// Start the watchdog thread, which starts the server hosts and restarts
/// those that die (`watchdog`); returns once all servers are serving.
fn start_watchdog(
    mut dog: watchdog::Watchdog,
) -> std::io::Result<JoinHandle<Vec<Option<ServerStats>>>> {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::Builder::new()
        .name("atoll-watchdog".into())
        .spawn(move || {
            let started = dog.start_all();
            let ok = started.is_ok();
            if !ok {
                dog.stop_all();
            }
            let _ = tx.send(started);
            if !ok {
                return Vec::new();
            }
            dog.watch();
            dog.stop_all()
        })?;
    match rx.recv() {
        Ok(Ok(())) => Ok(h),
        Ok(Err(e)) => {
            let _ = h.join();
            Err(std::io::Error::other(format!("file server processes: {e}")))
        }
        Err(_) => Err(std::io::Error::other("the watchdog died")),
    }
}
