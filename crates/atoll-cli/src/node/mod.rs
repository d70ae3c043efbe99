//! `atoll node`: one image across hosts, first step (fos §3.2, §4.2).
//!
//! Every host runs one `atoll node --peers h0,h1,…`. The node of rank 0
//! (the first host) boots the instance — the file servers — as a copy
//! island and runs the *head proxy* (`head.rs`); every other node runs an
//! *edge proxy* (`edge.rs`) that offers its programs the same boot socket
//! and channels and carries every lane's messages to the head over a
//! [`atoll_transport::Transport`] (TCP today). Nothing in a server or a
//! client changes: to both, a remote program is an ordinary copy-island
//! client. Files: `wire.rs` (the proxies' messages), `seqpacket.rs` (boot
//! packets with descriptors), `rank.rs` (who is who); remote spawn (an
//! `execve` placed on another host): `spawn.rs` (the node that runs the
//! program), `remote.rs` (the proxy that stays with the caller).

mod calltime;
mod copies;
mod edge;
mod head;
mod inherit;
mod memberhost;
mod members;
mod peers;
mod rank;
mod remote;
mod seqpacket;
mod spawn;
mod watch;
mod window;
mod wire;
mod yielder;

pub use remote::main as remote_spawn;
pub use watch::{main as remote_watch, SUBCOMMAND as REMOTE_WATCH};

use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use atoll_proto::boot::Island;
use atoll_server::Instance;
use atoll_transport::{Link, TcpTransport, Transport};

use crate::args::NodeArgs;
use crate::config::{self, UsageError};
use crate::registry::{self, InstanceRecord};
use crate::signals::Terminator;

/// How long an edge keeps trying to reach the first node at start.
const JOIN_LIMIT: Duration = Duration::from_secs(30);

pub fn node(args: NodeArgs) -> Result<i32> {
    let env = |k: &str| std::env::var(k).ok();
    let peers = match &args.peers {
        Some(list) => rank::parse_peers(list),
        None => rank::peers_from_slurm(&env),
    }
    .map_err(UsageError)?;
    let me = match args.rank {
        Some(r) => r,
        None => rank::from_launcher(&env, peers.len())
            .map_err(UsageError)?
            .or_else(|| rank::from_addresses(&peers))
            .ok_or_else(|| {
                UsageError(
                    "cannot tell which of --peers this host is: pass --rank, or run under \
                     Slurm, Open MPI or MPICH"
                        .into(),
                )
            })?,
    };
    if me >= peers.len() {
        return Err(UsageError(format!("rank {me} but only {} peers", peers.len())).into());
    }
    let term = Terminator::install().context("cannot set up signal handling")?;
    if me == 0 {
        run_head(&args, &peers, term)
    } else {
        run_edge(&args, &peers, me, term)
    }
}

fn run_head(args: &NodeArgs, peers: &[String], term: Terminator) -> Result<i32> {
    let mut plan = config::plan(&args.instance)?;
    match plan.config.island {
        Island::Copy => {}
        _ if args.instance.island.is_none() && !args.instance.incoherent => {}
        _ => return Err(UsageError("a node's instance is a copy island".into()).into()),
    }
    plan.config.island = Island::Copy;
    // The other nodes' edges mirror a control block of the boot members
    // (`edge::Edge::start`): no server may join, or their processes could
    // not reach it.
    plan.config.room = plan.config.servers;
    // Members the other nodes serve (`members.rs`), after this node's.
    let per_node = args.servers_here as usize;
    let stubs = (per_node > 0 && peers.len() > 1)
        .then(|| members::Stubs::new(plan.config.servers, peers.len(), per_node));
    if plan.config.servers + (peers.len() - 1) * per_node > atoll_proto::MAX_SERVERS {
        return Err(UsageError(format!(
            "{} servers here and {per_node} on each of {} other nodes are more than {} \
             (--servers-here 0 keeps every file server here)",
            plan.config.servers,
            peers.len() - 1,
            atoll_proto::MAX_SERVERS
        ))
        .into());
    }
    config::ensure_runtime_root(&plan.config.runtime_root)?;
    let listen = args.listen.clone().unwrap_or_else(|| peers[0].clone());
    let net = TcpTransport::new()?;
    let listener = net
        .listen(&listen)
        .with_context(|| format!("cannot listen at {listen}"))?;
    let sched_exe = plan.config.server_exe.clone();
    let shape = plan.clone();
    head::REPLY_HANDOFF.store(!plan.config.without.reply_handoff, Ordering::Relaxed);
    let remotes = stubs.as_ref().map_or(Vec::new(), |s| s.remote_members());
    let instance =
        Instance::boot_spanning(plan.config, remotes).context("cannot boot the instance")?;
    if let Some(s) = &stubs {
        s.start(members::control_of(&instance)?)?;
    }
    InstanceRecord::for_self(&instance, "node", &[])
        .with_shape(&shape)
        .write()?;
    let scheds =
        crate::run::start_scheds(&instance, plan.app_cores.as_deref(), sched_exe.as_deref());
    let stop = Arc::new(AtomicBool::new(false));
    let info = instance.info();
    let (socket, servers, id, mount) = (
        instance.socket_path().to_path_buf(),
        info.servers,
        instance.id().to_string(),
        info.mount.clone(),
    );
    let runtime_dir = socket.parent().map(Path::to_path_buf).unwrap_or_default();
    let spawner = offer_spawn(&runtime_dir, 0, peers, &socket, &mount);
    let s = stop.clone();
    let hello = wire::NodeMsg::Hello {
        servers,
        id,
        mount,
        per_node: match stubs {
            Some(_) => per_node as u32,
            None => 0,
        },
    };
    let server = std::thread::Builder::new()
        .name("node-head".into())
        .spawn(move || head::serve(listener, socket, hello, spawner, stubs, s))?;
    let signalled = term.stop_instance_on_signal(instance.socket_path().to_path_buf());
    ready(instance.id());
    if !signalled {
        instance.wait_for_stop_request();
    }
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    let _ = std::fs::remove_file(runtime_dir.join(atoll_sched::nodes::NODE_FILE));
    drop(scheds);
    instance.shutdown();
    Ok(0)
}

fn run_edge(args: &NodeArgs, peers: &[String], me: usize, term: Terminator) -> Result<i32> {
    let net = Arc::new(TcpTransport::new()?);
    let link = join(&net, &peers[0])?;
    let hello = link
        .recv(Some(JOIN_LIMIT))?
        .ok_or_else(|| anyhow!("the first node said nothing"))?;
    let wire::NodeMsg::Hello {
        servers,
        id,
        mount,
        per_node,
    } = wire::decode(&hello)?
    else {
        bail!("the first node did not start with Hello");
    };
    // This node's members of the fleet, if the first node asked for them.
    let node_members: Vec<u32> = match per_node {
        0 => Vec::new(),
        n => members::members_of(me, servers as usize, peers.len(), n as usize)
            .into_iter()
            .map(|i| i as u32)
            .collect(),
    };
    let id = format!("{id}-n{me}");
    let root = config::runtime_root(&args.instance.runtime_dir);
    config::ensure_runtime_root(&root)?;
    let dir = root.join(&id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let _cleanup = RemoveOnDrop(dir.clone());
    let socket = dir.join(atoll_server::BOOT_SOCKET);
    let listener = listen_unix(&socket)?;
    let edge = edge::Edge::start(link, servers as usize, node_members.clone())?;
    let served = serve_members(
        args,
        peers,
        me,
        servers as usize,
        &node_members,
        &edge,
        &net,
    )?;
    if let Some(host) = &served {
        let _ = edge.locals.set(host.clone());
    }
    // Direct links to the other nodes' members (`peers.rs`).
    if per_node > 0 && peers.len() > 2 {
        let e = edge.clone();
        let gone = Arc::new(move || e.gone.load(Ordering::Relaxed));
        let shape = (servers as usize, per_node as usize);
        let direct = peers::Peers::start(me, peers, shape, net.clone(), gone)?;
        let _ = edge.peers.set(direct);
    }
    // This host's own scheduling servers (Hare §3.6.1): an `exec` of one of
    // its programs is placed on its cores, as on the first node. They live
    // beside the boot socket, where clients look for them, and run as
    // processes of their own (fos §3.5) unless `--without processes`.
    let cores = config::usable_cores();
    let started = if args
        .instance
        .without
        .contains(&crate::args::Technique::Processes)
    {
        atoll_sched::Scheds::start(&dir, &cores)
    } else {
        atoll_sched::Scheds::start_processes(&dir, &cores, &config::server_exe())
    };
    let scheds = match started {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("no scheduling servers, every exec stays local: {e}");
            None
        }
    };
    let record = InstanceRecord {
        id: id.clone(),
        pid: std::process::id(),
        start_time: registry::start_time(std::process::id()).unwrap_or(0),
        kind: "node".into(),
        socket: socket.clone(),
        runtime_dir: dir.clone(),
        mount,
        servers,
        cache_bytes: 0,
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command: vec![],
        poll: String::new(),
        servers_why: String::new(),
        poll_why: String::new(),
    };
    record.write()?;
    let e = edge.clone();
    std::thread::Builder::new()
        .name("node-accept".into())
        .spawn(move || e.accept(listener))?;
    // Programs other hosts place here, and other nodes' direct links to
    // this node's members, arrive at this host's peer address.
    let spawner = offer_spawn(&dir, me, peers, &socket, &record.mount);
    if spawner.is_some() || served.is_some() {
        match net.listen(&peers[me]) {
            Ok(l) => {
                let e = edge.clone();
                let takes = spawn::Takes {
                    spawner,
                    members: served.clone(),
                    peers: spawn::peer_addresses(peers),
                };
                std::thread::Builder::new()
                    .name("node-spawn-accept".into())
                    .spawn(move || spawn::accept(l, takes, &e.gone))?;
            }
            Err(e) => tracing::warn!(
                "no remote spawn or direct links here: cannot listen at {}: {e}",
                peers[me]
            ),
        }
    }
    if term.stop_instance_on_signal(socket) {
        edge.end(None);
    }
    ready(&id);
    while !edge.gone.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(scheds);
    drop(served);
    let lost = edge.lost.lock().unwrap_or_else(|e| e.into_inner()).take();
    match lost {
        Some(why) => bail!("lost the first node: {why}"),
        None => Ok(0),
    }
}

/// Start this node's members (`--servers-here` at the first node; Hello
/// says how many) and the second link that carries their traffic.
fn serve_members(
    args: &NodeArgs,
    peers: &[String],
    me: usize,
    members: usize,
    mine: &[u32],
    edge: &edge::Edge,
    net: &TcpTransport,
) -> Result<Option<Arc<memberhost::MemberHost>>> {
    if mine.is_empty() {
        return Ok(None);
    }
    let plan = config::plan(&args.instance)?;
    // The edge's control block: its programs ring the members' doorbells
    // there, and the members wait on them.
    let lone = mine
        .iter()
        .map(|&i| {
            atoll_server::remote::LoneMember::start(
                i as usize,
                members,
                plan.config.memory,
                plan.config.poll,
                Some(edge.control_fd()),
            )
        })
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot start this node's file servers")?;
    let link = join(net, &peers[0])?;
    wire::send(&*link, 0, &wire::NodeMsg::ServeMembers { rank: me as u32 })?;
    tracing::info!("node {me} serves members {mine:?}");
    Ok(Some(memberhost::MemberHost::start(link, lone)?))
}

/// Offer remote spawn: what programs started here for other hosts need,
/// and the node file that lets this host's clients send theirs away
/// (`atoll_sched::nodes`). `None` (a warning) without the client library.
fn offer_spawn(
    dir: &Path,
    rank: usize,
    peers: &[String],
    socket: &Path,
    mount: &str,
) -> Option<Arc<spawn::SpawnHost>> {
    let found = crate::launch::find_preload().and_then(|p| Ok((p, std::env::current_exe()?)));
    let (preload, atoll) = match found {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("no remote spawn: {e}");
            return None;
        }
    };
    let file = atoll_sched::nodes::NodeFile {
        rank,
        atoll,
        peers: peers.to_vec(),
    };
    if let Err(e) = std::fs::write(dir.join(atoll_sched::nodes::NODE_FILE), file.encode()) {
        tracing::warn!("no remote spawn from here: {e}");
    }
    Some(Arc::new(spawn::SpawnHost {
        socket: socket.to_path_buf(),
        mount: mount.to_string(),
        preload,
        peers: spawn::peer_addresses(peers),
        watches: Default::default(),
    }))
}

/// Connect to the first node, retrying while it is still starting.
fn join(net: &TcpTransport, head: &str) -> Result<Arc<dyn Link>> {
    let t = Instant::now();
    loop {
        match net.connect(head) {
            Ok(l) => return Ok(Arc::from(l)),
            Err(e) if t.elapsed() > JOIN_LIMIT => {
                return Err(e).with_context(|| format!("cannot reach the first node {head}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn listen_unix(path: &Path) -> Result<std::os::fd::OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let s = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&s, &SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&s, 128)?;
    Ok(s)
}

/// The node is up: its id on stdout, one line (what scripts wait for).
fn ready(id: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{id}");
    let _ = out.flush();
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
