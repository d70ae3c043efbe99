//! Hosts on one machine: network namespaces joined by a bridge, with one
//! `atoll node` in each (fos §4.2 tested without a cluster), and
//! `atoll bench --hosts N`, which measures the image across them.
//!
//! ```text
//!   ns atoll-<tag>-0  10.231.0.1 ─veth─┐
//!   ns atoll-<tag>-1  10.231.0.2 ─veth─┼─ bridge in ns atoll-<tag>-hub
//!   ns atoll-<tag>-2  10.231.0.3 ─veth─┘
//! ```
//!
//! Every interface is created inside its namespace, so nothing of the
//! machine's own network is touched, and the addresses are private to the
//! namespaces (traffic never leaves the machine). [`Cluster`]'s `Drop`
//! stops the nodes and deletes the namespaces, also when a test panics.
//! Needs root and `ip` (iproute2).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The port the first node listens at.
pub const PORT: u16 = 7207;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `n` namespaces on a bridge, each with an `atoll node` once started.
pub struct Cluster {
    tag: String,
    namespaces: Vec<String>,
    hub: String,
    nodes: Vec<Option<Child>>,
    /// Runtime root of each node (`atoll exec --runtime-dir`).
    pub dirs: Vec<PathBuf>,
    /// What each node wrote on stderr.
    pub logs: Vec<PathBuf>,
    scratch: PathBuf,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Cluster {
    /// Make `n` namespaces; `Err` says why they cannot be made (not root,
    /// no `ip`), which callers report as a skip.
    pub fn new(n: usize) -> Result<Cluster, String> {
        let tag = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let scratch = std::env::temp_dir().join(format!("atoll-hosts-{tag}"));
        std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
        let mut c = Cluster {
            hub: format!("atoll-{tag}-hub"),
            namespaces: Vec::new(),
            nodes: Vec::new(),
            dirs: Vec::new(),
            logs: Vec::new(),
            scratch,
            tag,
        };
        ip(&["netns", "add", &c.hub])?;
        ip(&["-n", &c.hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &c.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &c.hub, "link", "set", "br0", "up"])?;
        for k in 0..n {
            let ns = format!("atoll-{}-{k}", c.tag);
            ip(&["netns", "add", &ns])?;
            c.namespaces.push(ns.clone());
            let (here, there) = (format!("h{k}"), format!("p{k}"));
            ip(&[
                "link", "add", &here, "netns", &ns, "type", "veth", "peer", "name", &there,
                "netns", &c.hub,
            ])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", addr(k)),
                "dev",
                &here,
            ])?;
            ip(&["-n", &ns, "link", "set", &here, "up"])?;
            ip(&["-n", &c.hub, "link", "set", &there, "master", "br0"])?;
            ip(&["-n", &c.hub, "link", "set", &there, "up"])?;
            c.dirs.push(c.scratch.join(format!("run{k}")));
            c.logs.push(c.scratch.join(format!("node{k}.log")));
            c.nodes.push(None);
        }
        Ok(c)
    }

    pub fn namespace(&self, k: usize) -> &str {
        &self.namespaces[k]
    }

    /// `--peers` of this cluster.
    pub fn peers(&self) -> String {
        (0..self.namespaces.len())
            .map(|k| format!("{}:{PORT}", addr(k)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Start `atoll node` in every namespace (the first with `head_opts`)
    /// and wait until each printed its id.
    pub fn start_nodes(&mut self, atoll: &Path, head_opts: &[&str]) -> Result<(), String> {
        for k in 0..self.namespaces.len() {
            self.spawn_node(atoll, k, head_opts)?;
        }
        for k in 0..self.namespaces.len() {
            self.await_node(k)?;
        }
        Ok(())
    }

    /// Start node `k` again (after [`Cluster::kill`]), as a host that
    /// rebooted rejoins: it reaches the first node and serves once it
    /// printed its id.
    pub fn restart_node(&mut self, atoll: &Path, k: usize) -> Result<(), String> {
        self.kill(k);
        // A node killed at once leaves its runtime directory behind.
        let _ = std::fs::remove_dir_all(&self.dirs[k]);
        std::fs::create_dir_all(&self.dirs[k]).map_err(|e| e.to_string())?;
        self.spawn_node(atoll, k, &[])?;
        self.await_node(k)
    }

    fn spawn_node(&mut self, atoll: &Path, k: usize, head_opts: &[&str]) -> Result<(), String> {
        let peers = self.peers();
        let log = std::fs::File::create(&self.logs[k]).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespaces[k]])
            .arg(atoll)
            .args(["node", "--peers", &peers, "--runtime-dir"])
            .arg(&self.dirs[k])
            .env_remove("ATOLL_SOCKET")
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        if k == 0 {
            cmd.args(head_opts);
        }
        let child = cmd.spawn().map_err(|e| format!("start node {k}: {e}"))?;
        self.nodes[k] = Some(child);
        Ok(())
    }

    /// Wait until node `k` printed its id (it serves).
    fn await_node(&mut self, k: usize) -> Result<(), String> {
        let out = self.nodes[k].as_mut().and_then(|c| c.stdout.take());
        let mut line = String::new();
        if let Some(out) = out {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if line.trim().is_empty() {
            let log = std::fs::read_to_string(&self.logs[k]).unwrap_or_default();
            return Err(format!("node {k} did not start: {log}"));
        }
        Ok(())
    }

    /// `atoll exec` of `bash -c script` through node `k`, run inside its
    /// namespace, with `$ROOT` the mount.
    pub fn exec(&self, atoll: &Path, k: usize, script: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespaces[k]])
            .arg(atoll)
            .args(["exec", "--runtime-dir"])
            .arg(&self.dirs[k])
            .args(["--", "bash", "-c", script])
            .env("ROOT", "/atoll")
            .env("LC_ALL", "C")
            .env("TZ", "UTC")
            .env_remove("ATOLL_SOCKET")
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null());
        cmd
    }

    /// The boot socket of node `k` (its runtime root holds one instance).
    pub fn socket(&self, k: usize) -> Option<PathBuf> {
        std::fs::read_dir(&self.dirs[k])
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("boot.sock"))
            .find(|p| p.exists())
    }

    /// The process id of node `k`, while it runs (`ip netns exec` runs
    /// the node in its own process).
    pub fn node_pid(&self, k: usize) -> Option<u32> {
        self.nodes[k].as_ref().map(Child::id)
    }

    /// Kill node `k` at once (SIGKILL), as a host that crashes.
    pub fn kill(&mut self, k: usize) {
        if let Some(mut c) = self.nodes[k].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait up to `limit` for node `k` to exit by itself; its status.
    pub fn wait_node(&mut self, k: usize, limit: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        let c = self.nodes[k].as_mut()?;
        while t.elapsed() < limit {
            if let Ok(Some(status)) = c.try_wait() {
                self.nodes[k] = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Stop node `k` (SIGTERM) and wait up to 10 s, then kill it.
    fn stop(&mut self, k: usize) {
        let Some(mut c) = self.nodes[k].take() else {
            return;
        };
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Edges first, so the first node stops last.
        for k in (0..self.nodes.len()).rev() {
            self.stop(k);
        }
        for ns in self.namespaces.iter().chain([&self.hub]) {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Address of host `k`.
pub fn addr(k: usize) -> String {
    format!("10.231.0.{}", k + 1)
}

/// Move the calling thread into namespace `ns` (only this thread).
pub fn enter(ns: &str) -> std::io::Result<()> {
    let f = std::fs::File::open(Path::new("/var/run/netns").join(ns))?;
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?;
    Ok(())
}

/// What `atoll bench --hosts N` reports (JSON `hosts`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct HostsResults {
    pub hosts: usize,
    /// File servers on each node but the first (`--servers-here`).
    pub servers_here: u32,
    /// A null request (`SetGroups` with no groups) from the last host to a
    /// file server on the first, through both proxies: mean round trip.
    pub remote_rtt_ns: f64,
    /// The same null request on the first host, straight to its instance
    /// (no proxy, no network): what the proxies add is the difference.
    pub local_rtt_ns: f64,
    /// 64 bytes there and back over a plain TCP connection between the
    /// same two namespaces, same run.
    pub tcp_echo_ns: f64,
    pub rtt_ratio: f64,
    /// `dd` of a file through the last host's node, MiB/s.
    pub remote_write_mib_s: f64,
    pub remote_read_mib_s: f64,
    /// The first 16 MiB of that file read again by the process that has
    /// just read them: its copies answer (client `rcache.rs`), MiB/s.
    pub remote_reread_mib_s: f64,
    /// The same 16 MiB read by a *second* program on that host, which
    /// holds no copies of its own: the node's proxy answers from the
    /// chunks it relayed to the earlier programs (`node/copies.rs`), MiB/s.
    pub node_reread_mib_s: f64,
    /// One-way TCP stream between the same namespaces, MiB/s.
    pub tcp_mib_s: f64,
    /// Files created per second in one distributed directory by a program
    /// on the first host alone, and by one program on every host at once
    /// (the directory, made by the first host, spreads over every member:
    /// the first host's alone with `--servers-here 0`).
    pub creates_one_host_per_s: f64,
    /// The same creates from the last host alone: with file servers on
    /// every node, the names on another node's member cross to it (over
    /// the direct link between the two nodes, or through the first node
    /// without it).
    pub creates_last_host_per_s: f64,
    pub creates_all_hosts_per_s: f64,
    /// One `fork` + `execve` + exit + `wait` of `/bin/true` from a shell
    /// on the first host, the program on that host, mean µs.
    pub local_spawn_us: f64,
    /// The same with the program placed on the last host
    /// (`ATOLL_NODE_PLACEMENT=rank:N`): the exec becomes the remote-spawn
    /// proxy, which has the last node start it and relays its end.
    pub remote_spawn_us: f64,
    /// The same remote spawn with three atoll descriptors inherited
    /// (`3<` a file, `4>>` another, `5<` a directory): the node makes the
    /// program's session first and the proxy shares the descriptions
    /// with it (`Session`, `Shared`) before it starts.
    pub remote_spawn_fds_us: f64,
    pub notes: Vec<String>,
}

/// Mean round trip of 64-byte TCP echoes from namespace `from` to `to`.
pub fn tcp_echo_ns(from: &str, to: &str, to_addr: &str, iters: u32) -> std::io::Result<f64> {
    let (to, to_addr2) = (to.to_string(), format!("{to_addr}:{}", PORT + 1));
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        enter(&to)?;
        let l = std::net::TcpListener::bind(&to_addr2)?;
        let _ = tx.send(());
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 64];
        while s.read_exact(&mut b).is_ok() {
            s.write_all(&b)?;
        }
        Ok(())
    });
    let _ = rx.recv_timeout(Duration::from_secs(5));
    let from = from.to_string();
    let addr = format!("{to_addr}:{}", PORT + 1);
    let mean = std::thread::spawn(move || -> std::io::Result<f64> {
        enter(&from)?;
        let mut s = std::net::TcpStream::connect(&addr)?;
        s.set_nodelay(true)?;
        let mut b = [7u8; 64];
        for _ in 0..iters / 10 {
            s.write_all(&b)?;
            s.read_exact(&mut b)?;
        }
        let t = Instant::now();
        for _ in 0..iters {
            s.write_all(&b)?;
            s.read_exact(&mut b)?;
        }
        Ok(t.elapsed().as_nanos() as f64 / iters as f64)
    })
    .join()
    .map_err(|_| std::io::Error::other("echo client panicked"))??;
    let _ = server.join();
    Ok(mean)
}

/// MiB/s of a one-way TCP stream of `mib` MiB from namespace `from` to `to`.
pub fn tcp_stream_mib_s(from: &str, to: &str, to_addr: &str, mib: usize) -> std::io::Result<f64> {
    let (to, a) = (to.to_string(), format!("{to_addr}:{}", PORT + 2));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = std::thread::spawn(move || -> std::io::Result<()> {
        enter(&to)?;
        let l = std::net::TcpListener::bind(&a)?;
        let _ = tx.send(());
        let (mut s, _) = l.accept()?;
        let mut b = vec![0u8; 1 << 20];
        while s.read(&mut b)? > 0 {}
        s.write_all(b"k")?;
        Ok(())
    });
    let _ = rx.recv_timeout(Duration::from_secs(5));
    let (from, addr) = (from.to_string(), format!("{to_addr}:{}", PORT + 2));
    let rate = std::thread::spawn(move || -> std::io::Result<f64> {
        enter(&from)?;
        let mut s = std::net::TcpStream::connect(&addr)?;
        let b = vec![1u8; 1 << 20];
        let t = Instant::now();
        for _ in 0..mib {
            s.write_all(&b)?;
        }
        s.shutdown(std::net::Shutdown::Write)?;
        let mut k = [0u8; 1];
        s.read_exact(&mut k)?;
        Ok(mib as f64 / t.elapsed().as_secs_f64())
    })
    .join()
    .map_err(|_| std::io::Error::other("stream client panicked"))??;
    let _ = sink.join();
    Ok(rate)
}

/// Seconds `dd` reported for its copy (`… bytes … copied, S s, …`).
pub fn dd_seconds(stderr: &str) -> Option<f64> {
    let line = stderr.lines().find(|l| l.contains("copied,"))?;
    let (_, after) = line.split_once("copied,")?;
    after.split_whitespace().next()?.parse().ok()
}

/// Mean round trip of a null request (`SetGroups` of an empty list, which
/// a server answers `Ok` at once) to server 0 of the instance behind the
/// boot socket `socket`: attach as a copy-island client by hand, then
/// `iters` calls on lane 0. Through a node this crosses both proxies.
pub fn null_rtt_ns(socket: &Path, iters: u32) -> Result<f64, String> {
    use atoll_msg::{ClientChannel, Control};
    use atoll_proto::boot::{BootReply, BootRequest, PollMode};
    use atoll_proto::{Cred, ReplyFrame, Request, RequestFrame};
    use std::io::{IoSlice, IoSliceMut};
    use std::mem::MaybeUninit;
    use std::os::fd::OwnedFd;

    let e = |e: &dyn std::fmt::Display| e.to_string();
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|x| e(&x))?;
    let addr = rustix::net::SocketAddrUnix::new(socket).map_err(|x| e(&x))?;
    rustix::net::connect(&sock, &addr).map_err(|x| e(&x))?;
    let req = postcard::to_allocvec(&BootRequest::Attach {
        pid: std::process::id(),
    })
    .map_err(|x| e(&x))?;
    let mut none: [MaybeUninit<u8>; 0] = [];
    let mut anc = rustix::net::SendAncillaryBuffer::new(&mut none);
    rustix::net::sendmsg(
        &sock,
        &[IoSlice::new(&req)],
        &mut anc,
        rustix::net::SendFlags::empty(),
    )
    .map_err(|x| e(&x))?;
    let mut buf = vec![0u8; atoll_proto::boot::MAX_BOOT_PACKET];
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(80))];
    let mut ranc = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        &sock,
        &mut [IoSliceMut::new(&mut buf)],
        &mut ranc,
        rustix::net::RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|x| e(&x))?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in ranc.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    let reply: BootReply = postcard::from_bytes(&buf[..got.bytes]).map_err(|x| e(&x))?;
    let BootReply::Attached { info, .. } = reply else {
        return Err(format!("attach answered {reply:?}"));
    };
    let skip = usize::from(info.island.maps_cache());
    let control = Control::map(fds[skip].as_fd()).map_err(|x| e(&x))?;
    let chan = ClientChannel::map(fds[skip + 1].as_fd()).map_err(|x| e(&x))?;
    let mut frame_buf = vec![0u8; 1024];
    let mut call = |id: u64| -> Result<(), String> {
        let frame = RequestFrame {
            id,
            cred: Cred::default(),
            pid: 0,
            req: Request::SetGroups {
                set: 0,
                groups: vec![],
            },
            vouched: std::borrow::Cow::Borrowed(&[]),
        };
        let bytes = atoll_proto::encode(&frame, &mut frame_buf).map_err(|x| e(&x))?;
        chan.send(bytes, control.doorbell(0)).map_err(|x| e(&x))?;
        let back = chan
            .recv(PollMode::Adaptive, |b| {
                atoll_proto::decode::<ReplyFrame<'_>>(b).map(|f| f.id)
            })
            .map_err(|x| e(&x))?
            .map_err(|x| e(&x))?;
        if back != id {
            return Err(format!("reply {back} to request {id}"));
        }
        Ok(())
    };
    for id in 1..=u64::from(iters / 10).max(1) {
        call(id)?;
    }
    let t = Instant::now();
    for id in 0..u64::from(iters) {
        call(1_000_000 + id)?;
    }
    Ok(t.elapsed().as_nanos() as f64 / f64::from(iters))
}

/// Best of [`TRIALS`] runs of `f` (noise on a shared machine only ever
/// slows a run down; see `rpc`).
fn best(mut f: impl FnMut() -> Result<f64, String>) -> Result<f64, String> {
    let mut best = f64::INFINITY;
    for _ in 0..TRIALS {
        best = best.min(f()?);
    }
    Ok(best)
}

/// Files created per second in `$ROOT/spread` (a distributed directory)
/// by one program on each of `hosts` at once, `files` each, every name
/// new (`tag` keeps runs apart); wall time from the first start to the
/// last end.
fn creates_per_s(
    c: &Cluster,
    atoll: &Path,
    hosts: &[usize],
    files: usize,
    tag: &str,
) -> anyhow::Result<f64> {
    let t0 = std::time::Instant::now();
    let children = hosts
        .iter()
        .map(|&k| {
            let script =
                format!("cd $ROOT/spread && for i in $(seq {files}); do : > {tag}-h{k}-$i; done");
            c.exec(atoll, k, &script)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    for child in children {
        let out = child.wait_with_output()?;
        anyhow::ensure!(
            out.status.success(),
            "creates: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((hosts.len() * files) as f64 / t0.elapsed().as_secs_f64())
}

/// `mib` MiB of `$ROOT/big` read twice by one process on host `k`, 1 MiB
/// at a time: the second pass's rate.
fn reread_mib_s(c: &Cluster, atoll: &Path, k: usize, mib: usize) -> anyhow::Result<f64> {
    let script = format!(
        "python3 -c 'import os, time\n\
         fd = os.open(\"/atoll/big\", os.O_RDONLY)\n\
         def once():\n    for i in range({mib}): os.pread(fd, 1 << 20, i << 20)\n\
         once(); t = time.perf_counter(); once(); print({mib} / (time.perf_counter() - t))'"
    );
    let out = c.exec(atoll, k, &script).output()?;
    anyhow::ensure!(
        out.status.success(),
        "reading again: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("reading again said: {text}"))
}

/// MiB/s of a new program on host `k` reading the first `mib` MiB of
/// `/atoll/big` once (what earlier programs there read): its own copies
/// are empty, so each chunk comes from the node or crosses.
fn node_reread_mib_s(c: &Cluster, atoll: &Path, k: usize, mib: usize) -> anyhow::Result<f64> {
    let script = format!(
        "python3 -c 'import os, time\n\
         fd = os.open(\"/atoll/big\", os.O_RDONLY)\n\
         t = time.perf_counter()\n\
         for i in range({mib}): os.pread(fd, 1 << 20, i << 20)\n\
         print({mib} / (time.perf_counter() - t))'"
    );
    let out = c.exec(atoll, k, &script).output()?;
    anyhow::ensure!(
        out.status.success(),
        "a second program reading: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("a second program reading said: {text}"))
}

/// Mean µs per `/bin/true` run `n` times in a loop by a shell on host 0,
/// each exec placed by `policy` (`ATOLL_NODE_PLACEMENT`); best of 3.
fn spawn_us(
    c: &Cluster,
    atoll: &Path,
    n: usize,
    policy: &str,
    redirs: &str,
) -> anyhow::Result<f64> {
    let script = format!(
        "export ATOLL_NODE_PLACEMENT={policy}; s=$EPOCHREALTIME; \
         for ((i = 0; i < {n}; i++)); do /bin/true {redirs}; done; echo $s $EPOCHREALTIME"
    );
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let out = c.exec(atoll, 0, &script).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(
            out.status.success(),
            "spawns: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t: Vec<f64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        anyhow::ensure!(t.len() == 2, "spawns said: {text}");
        best = best.min((t[1] - t[0]) * 1e6 / n as f64);
    }
    Ok(best)
}

/// Trials of each latency figure.
const TRIALS: usize = 5;

/// `atoll bench --hosts N`: boot N hosts, measure between the last host
/// and the first (the servers' host), print a table, write JSON `hosts`.
pub fn main(
    n: usize,
    quick: bool,
    without: &[String],
    servers_here: u32,
    json: Option<&Path>,
) -> anyhow::Result<()> {
    anyhow::ensure!(n >= 2, "--hosts needs at least 2 hosts");
    let atoll = std::env::current_exe()?;
    let mut c = Cluster::new(n).map_err(|e| {
        anyhow::anyhow!("cannot make network namespaces (root and `ip` needed): {e}")
    })?;
    let mut opts = vec!["--servers", "2", "--memory", "512M"];
    for w in without {
        opts.extend(["--without", w.as_str()]);
    }
    // Always given: `0` must reach a node whose default is 1.
    let here = servers_here.to_string();
    opts.extend(["--servers-here", here.as_str()]);
    c.start_nodes(&atoll, &opts)
        .map_err(|e| anyhow::anyhow!(e))?;
    let last = n - 1;
    let (iters, mib) = if quick { (2_000, 16) } else { (20_000, 128) };
    let socket = c
        .socket(last)
        .ok_or_else(|| anyhow::anyhow!("node {last} has no boot socket"))?;
    let (far, near) = (c.namespace(last).to_string(), c.namespace(0).to_string());
    let mut r = HostsResults {
        hosts: n,
        servers_here,
        ..HostsResults::default()
    };
    r.remote_rtt_ns = best(|| null_rtt_ns(&socket, iters)).map_err(|e| anyhow::anyhow!(e))?;
    let head_socket = c
        .socket(0)
        .ok_or_else(|| anyhow::anyhow!("node 0 has no boot socket"))?;
    r.local_rtt_ns = best(|| null_rtt_ns(&head_socket, iters)).map_err(|e| anyhow::anyhow!(e))?;
    r.tcp_echo_ns = best(|| tcp_echo_ns(&far, &near, &addr(0), iters).map_err(|e| e.to_string()))
        .map_err(|e| anyhow::anyhow!(e))?;
    r.rtt_ratio = r.remote_rtt_ns / r.tcp_echo_ns;
    let dd = |script: String| -> anyhow::Result<f64> {
        let out = c.exec(&atoll, last, &script).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = dd_seconds(&text).ok_or_else(|| anyhow::anyhow!("dd said: {text}"))?;
        Ok(mib as f64 / s)
    };
    r.remote_write_mib_s = dd(format!(
        "dd if=/dev/zero of=$ROOT/big bs=1M count={mib} 2>&1"
    ))?;
    r.remote_read_mib_s = dd("dd if=$ROOT/big of=/dev/null bs=1M 2>&1".to_string())?;
    r.remote_reread_mib_s = reread_mib_s(&c, &atoll, last, mib.min(16))?;
    r.node_reread_mib_s = node_reread_mib_s(&c, &atoll, last, mib.min(16))?;
    r.tcp_mib_s = tcp_stream_mib_s(&far, &near, &addr(0), mib)?;
    let files = if quick { 500 } else { 5_000 };
    let spread = c
        .exec(
            &atoll,
            0,
            "mkdir $ROOT/spread && setfattr -n user.atoll.distributed -v 1 $ROOT/spread",
        )
        .output()?;
    anyhow::ensure!(
        spread.status.success(),
        "a distributed directory: {}",
        String::from_utf8_lossy(&spread.stderr)
    );
    r.creates_one_host_per_s = creates_per_s(&c, &atoll, &[0], files, "one")?;
    r.creates_last_host_per_s = creates_per_s(&c, &atoll, &[last], files, "last")?;
    r.creates_all_hosts_per_s =
        creates_per_s(&c, &atoll, &(0..n).collect::<Vec<_>>(), files, "all")?;
    let spawns = if quick { 20 } else { 200 };
    r.local_spawn_us = spawn_us(&c, &atoll, spawns, "local", "")?;
    r.remote_spawn_us = spawn_us(&c, &atoll, spawns, &format!("rank:{last}"), "")?;
    let made = c.exec(&atoll, 0, "echo in > $ROOT/spawn-in").output()?;
    anyhow::ensure!(made.status.success(), "spawn-in: {made:?}");
    r.remote_spawn_fds_us = spawn_us(
        &c,
        &atoll,
        spawns,
        &format!("rank:{last}"),
        "3<$ROOT/spawn-in 4>>$ROOT/spawn-out 5<$ROOT",
    )?;
    if !without.is_empty() {
        r.notes.push(format!("without {}", without.join(",")));
    }
    r.notes.push(format!(
        "host {last} to host 0 through both proxies; {iters} round trips per trial, best of {TRIALS}; {mib} MiB streams"
    ));
    r.notes.push(format!(
        "spawns: {spawns} runs of /bin/true from a shell on host 0, best of 3; remote: placed on host {last}; fds: with 3<file 4>>file 5<dir"
    ));
    println!(
        "atoll across {n} hosts (network namespaces on one machine), {} file servers on each \
         other node",
        r.servers_here
    );
    println!(
        "  null round trip, remote server   {:>10.1} µs",
        r.remote_rtt_ns / 1e3
    );
    println!(
        "  null round trip, local server    {:>10.1} µs",
        r.local_rtt_ns / 1e3
    );
    println!(
        "  TCP echo, same namespaces        {:>10.1} µs",
        r.tcp_echo_ns / 1e3
    );
    println!("  ratio (target ≤ 1.1)             {:>10.2}", r.rtt_ratio);
    println!(
        "  remote write                     {:>10.0} MiB/s",
        r.remote_write_mib_s
    );
    println!(
        "  remote read                      {:>10.0} MiB/s",
        r.remote_read_mib_s
    );
    println!(
        "  remote read again, same process  {:>10.0} MiB/s",
        r.remote_reread_mib_s
    );
    println!(
        "  read again, another process      {:>10.0} MiB/s",
        r.node_reread_mib_s
    );
    println!(
        "  raw TCP stream                   {:>10.0} MiB/s",
        r.tcp_mib_s
    );
    println!(
        "  creates, one dir, host 0 alone   {:>10.0} /s",
        r.creates_one_host_per_s
    );
    println!(
        "  creates, one dir, host {last} alone   {:>10.0} /s",
        r.creates_last_host_per_s
    );
    println!(
        "  creates, one dir, all {n} hosts    {:>10.0} /s",
        r.creates_all_hosts_per_s
    );
    println!(
        "  spawn, program on host 0         {:>10.0} µs",
        r.local_spawn_us
    );
    println!(
        "  spawn, program on host {last}         {:>10.0} µs",
        r.remote_spawn_us
    );
    println!(
        "  the same, 3 atoll fds inherited  {:>10.0} µs",
        r.remote_spawn_fds_us
    );
    drop(c);
    if let Some(p) = json {
        crate::write_results_json(p, "hosts", &r)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dd_seconds_are_read_from_its_summary_line() {
        let s = "64+0 records in\n64+0 records out\n67108864 bytes (67 MB, 64 MiB) copied, 0.25 s, 268 MB/s\n";
        assert_eq!(dd_seconds(s), Some(0.25));
        assert_eq!(dd_seconds("nothing"), None);
    }
}
