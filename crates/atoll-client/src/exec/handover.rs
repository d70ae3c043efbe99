//! What an exec hands to the new image: the cwd, the descriptor table,
//! the locks and counters (`ATOLL_STATE`), and the session itself, its own
//! or a child's (`passes_own_session`), with the instance's descriptors so
//! that the new image joins without waiting (`BootRequest::Reattached`);
//! and, in the new image, putting it back (`restore`).

use super::*;

/// What an exec hands to the new image.
pub(super) struct HandOver {
    /// The session socket, left open across the exec (`ENV_SESSION_FD`);
    /// `None` when no session could be made for the new image.
    pub(super) socket: Option<Inherited>,
    /// `ATOLL_STATE`.
    pub(super) state: String,
    /// The instance's descriptors left open for the new image
    /// (`State::attached`).
    pub(super) carried: Vec<Inherited>,
    /// The memfd the new image's loader writes its stderr to (`caught`).
    pub(super) catch: Option<super::caught::Catch>,
    /// The new image's session.
    pub(super) session: Option<SessionId>,
}

impl HandOver {
    /// Hand over `session` on `socket` with `st`, and with it the
    /// instance's descriptors, so that the new image joins without a round
    /// trip to the boot thread (`BootRequest::Reattached`). Without them
    /// (no descriptor left, an error) it asks `Reattach` as before.
    fn new(
        c: &Client,
        socket: Inherited,
        session: SessionId,
        mut st: State,
        catch: Option<super::caught::Catch>,
    ) -> HandOver {
        let mut carried = Vec::new();
        st.attached = carry_instance(c, session, &mut carried);
        HandOver {
            socket: Some(socket),
            state: st.encode(),
            carried,
            catch,
            session: Some(session),
        }
    }
}

/// What an image hands over of its instance besides the descriptors
/// themselves: the files its control block and buffer cache descriptors
/// refer to (device, inode), and `InstanceInfo` encoded. None of it
/// changes in an image (the descriptors are made once, at attach), so it
/// is read once: by the parent before its first fork ([`prime`]), so that
/// its forked children, most of which exec at once, find it in the memory
/// they inherit instead of two `fstat`s and the encoding each.
struct Carried {
    control: (i32, u64, u64),
    cache: Option<(i32, u64, u64)>,
    info: Vec<u8>,
}

static CARRIED: std::sync::OnceLock<Option<Carried>> = std::sync::OnceLock::new();

fn carried(c: &Client) -> Option<&'static Carried> {
    CARRIED
        .get_or_init(|| {
            let id = |fd: i32| sys::fstat_id(fd).ok().map(|(dev, ino, _)| (fd, dev, ino));
            let control = id(c.control_fd.load(Ordering::Relaxed))?;
            let cache = match c.info.island.maps_cache() {
                true => Some(id(c.cache_fd.load(Ordering::Relaxed))?),
                false => None,
            };
            Some(Carried {
                control,
                cache,
                info: postcard::to_allocvec(&c.info).ok()?,
            })
        })
        .as_ref()
}

/// Before a fork: read what [`carry_instance`] needs, once per image.
pub fn prime(c: &Client) {
    let _ = carried(c);
}

/// The buffer cache's and control block's descriptors, left open for the
/// new image in `kept`, and what the new image needs besides them.
fn carry_instance(c: &Client, session: SessionId, kept: &mut Vec<Inherited>) -> Option<Attached> {
    let known = carried(c)?;
    let mut inheritable = |(fd, dev, ino): (i32, u64, u64)| -> Option<CarriedFd> {
        let fd = Inherited::of(fd)?;
        let carried = CarriedFd {
            fd: fd.as_raw_fd(),
            dev,
            ino,
        };
        kept.push(fd);
        Some(carried)
    };
    let control = inheritable(known.control)?;
    let cache = match known.cache {
        Some(k) => Some(inheritable(k)?),
        None => None,
    };
    Some(Attached {
        session: session.0,
        cache,
        control,
        info: known.info.clone(),
        umask: Some(c.umask.load(Ordering::Relaxed)),
    })
}

/// Create the child session, share the surviving descriptions with it and
/// serialise the state. Degrades to "no fds" if the instance refuses.
/// May the new image run in this image's session as it is, instead of a
/// child session made for it (`Fork`)? Only when the session holds
/// nothing the new image must not inherit, which is what a forked child
/// that only execs a host program has: no lane (it asked no server
/// anything), no description (none open: no fd, mapping or copied mapping
/// refers to one), no record or `flock` lock, no running atoll program
/// (the text mark of `Exec`). And only for `execve` run here or on another
/// core in place: `posix_spawn` keeps its session for the caller, a remote
/// exec leaves the caller behind as the program's proxy with its own.
/// Saves the `Fork` round trip with the boot thread and the end of the
/// old session at exec (`SessionClosed` to every server).
pub(super) fn passes_own_session(
    c: &Client,
    lane: &LazyLane,
    spawn: bool,
    text: Option<InodeId>,
) -> bool {
    !spawn
        && text.is_none()
        && lane.taken().is_none()
        && c.has_no_lane()
        && placement::exec_via() == placement::ExecVia::Place
        && SELF_EXE.get().is_none()
        && !c.posix_locks.load(Ordering::Relaxed)
        && !c.any_locks.load(Ordering::Relaxed)
        && holds_only_cwd(c)
        && crate::mapping::is_empty()
        && crate::copymap::is_empty()
}

/// Is the cwd's description (`ns::cwd::hold_dir`), which the new image
/// keeps, the only one the process holds? The session's reference to it
/// goes on with the session.
fn holds_only_cwd(c: &Client) -> bool {
    let live = fdtable::live_descs();
    match live.as_slice() {
        [] => true,
        [d] => cwd_desc(c) == Some(*d),
        _ => false,
    }
}

/// The description the cwd holds, if any.
fn cwd_desc(c: &Client) -> Option<DescId> {
    c.cwd().and_then(|w| w.hold.get()).map(|r| r.desc())
}

/// The hand-over when the new image keeps this session
/// ([`passes_own_session`]): the session socket survives exec, and the
/// new image `Reattach`es on it (its lanes are made then). A failed exec
/// drops the copy; the session stays this image's.
pub(super) fn hand_over_own_session(c: &Client, exe: Option<Vec<u8>>) -> Result<HandOver> {
    // Blocks this image still holds copies of go back first, as in
    // `hand_over` (no server is asked).
    crate::incoherent::write_back(c);
    let st = State {
        cwd: c.cwd().map(|w| (w.path.clone(), Some(w.ino.0))),
        fds: Vec::new(),
        exe,
        locks: false,
        counters: crate::counters::unreported(),
        attached: None,
        cwd_desc: cwd_desc(c).map(|d| d.0),
        ..State::default()
    };
    let socket = Inherited::of(c.socket_raw()).ok_or(Error::Errno(libc::EBADF))?;
    Ok(HandOver::new(c, socket, c.session().id, st, None))
}

pub(super) fn hand_over(
    c: &Client,
    lane: &LazyLane,
    exe: Option<Vec<u8>>,
    text: Option<InodeId>,
    spawn: bool,
) -> Result<HandOver> {
    // The new image finds the offsets on the servers (Hare §3.5.1).
    crate::hybrid::share_all(c, lane);
    crate::incoherent::write_back(c);
    crate::copymap::sync_all(c);
    let mut st = State {
        cwd: c.cwd().map(|w| (w.path.clone(), Some(w.ino.0))),
        fds: Vec::new(),
        exe,
        locks: false,
        counters: Vec::new(),
        attached: None,
        ..State::default()
    };
    // The new image's loader writes fd 2 before its client starts: the
    // boot thread hears of it with the `Fork` (`caught`).
    let pid = if spawn { 0 } else { std::process::id() };
    let catch = super::caught::prepare(c, pid);
    let post = catch.as_ref().map(|k| k.post());
    let (child, sock) = match c.fork_session(post) {
        Ok(x) => x,
        Err(_) => {
            return Ok(HandOver {
                socket: None,
                state: st.encode(),
                carried: Vec::new(),
                catch: None,
                session: None,
            })
        }
    };
    // `Exec` and `PassLocks` to the new session are idempotent (a mark
    // set once, locks moved once), so each goes again when its server dies
    // on it (`forkshare::again`).
    if let Some(ino) = text {
        // The new image runs `ino`: no one may write it meanwhile, and it
        // may not start while someone does (ETXTBSY, server `fs/text.rs`).
        let lane = lane.get()?;
        let exec = || Request::Exec { ino, to: child };
        crate::forkshare::again(|| lane.call_ok(c, ino.owner(), exec()))?;
    }
    if c.posix_locks.load(core::sync::atomic::Ordering::Relaxed) {
        // Record locks outlive execve (the process stays); the new image
        // runs in `child`, so they go to it before this session ends.
        let lane = lane.get()?;
        for server in 0..c.members() {
            let pass = || Request::PassLocks { to: child };
            let _ = crate::forkshare::again(|| lane.call_ok(c, server, pass()));
        }
        st.locks = true;
    }
    // Each reference goes again if its server dies on it (`forkshare`).
    let mut given = crate::forkshare::Ledger::new(child);
    // The descriptors that stay open across the exec, then one `Share` of
    // each of their descriptions and of the cwd's (Linux's exec keeps
    // `fs->pwd`), all in flight at once (`Ledger::share_many`).
    let mut staying = Vec::new();
    let mut wanted: Vec<DescId> = Vec::new();
    for fd in fdtable::fds() {
        let fdflags = sys::fcntl_int(fd, libc::F_GETFD, 0);
        if fdflags < 0 || fdflags & libc::FD_CLOEXEC as i64 != 0 {
            continue;
        }
        let Some(d) = fdtable::get(fd as i64) else {
            continue;
        };
        let Ok((dev, pino, _)) = sys::fstat_id(fd) else {
            continue;
        };
        if !wanted.contains(&d.desc()) {
            wanted.push(d.desc());
        }
        staying.push((fd, d, (dev, pino)));
    }
    let cwd = cwd_desc(c);
    if let Some(desc) = cwd.filter(|desc| !wanted.contains(desc)) {
        wanted.push(desc);
    }
    let shared: Vec<DescId> = match lane.get() {
        Ok(lane) if !wanted.is_empty() => {
            let given_each = given.share_many(c, lane, &wanted);
            wanted
                .iter()
                .zip(given_each)
                .filter_map(|(&desc, ok)| ok.then_some(desc))
                .collect()
        }
        _ => Vec::new(),
    };
    for (fd, d, placeholder) in staying {
        let desc = d.desc();
        if !shared.contains(&desc) {
            continue;
        }
        st.fds.push(FdState {
            fd,
            desc: desc.0,
            ino: d.ino().0,
            flags: d.flags(),
            ftype: fdtable::ftype_code(d.ftype()),
            cookie: d.cookie().load(core::sync::atomic::Ordering::Relaxed),
            placeholder,
            path: d.path().map(<[u8]>::to_vec),
        });
    }
    // The cwd's reference goes once for the session, also when a
    // descriptor shares it (`fchdir`).
    st.cwd_desc = cwd.filter(|desc| shared.contains(desc)).map(|desc| desc.0);
    // dnotify registrations of the descriptions that go on: their queues
    // go to the new session too (the kernel keeps the registrations).
    for n in crate::dnotify::carry(&shared) {
        let Ok(lane) = lane.get() else { continue };
        if given.share(c, lane, DescId(n.queue)).is_ok() {
            st.dnotify.push(n);
        }
    }
    // What the process knows of its queues beyond the servers: the
    // watches `IN_UNMOUNT` names, a fanotify group's flags and marks.
    let queues: Vec<u64> = st.fds.iter().map(|f| f.ino).collect();
    st.watches = crate::inotify::unmount::carry(&queues);
    st.groups = crate::fanotify::carry(&queues);
    // What this image counted goes to the servers with a lane it holds
    // anyway, else to the new image (a lane just for it would cost a
    // `NewLane` in every forked child that execs). A spawning image goes
    // on and reports its own as it exits: handed to each child too, the
    // same events were counted once more per spawn, and each child's exit
    // cost a report of its own.
    match lane.taken() {
        Some(lane) => crate::counters::report(c, lane),
        None if spawn => {}
        None => st.counters = crate::counters::unreported(),
    }
    let catch = catch.and_then(|k| k.named_in(&mut st));
    // The child's socket must survive exec: no CLOEXEC, high number.
    let raw = sock.into_raw_fd();
    let n = sys::fcntl_int(raw, libc::F_DUPFD, session::PRIVATE_FD_MIN as i64);
    let keep = if n >= 0 {
        sys::close(raw);
        n as i32
    } else {
        sys::fcntl_int(raw, libc::F_SETFD, 0);
        raw
    };
    // SAFETY: `keep` is a descriptor we own (just created).
    let owned = unsafe { OwnedFd::from_raw_fd(keep) };
    Ok(HandOver::new(c, Inherited::made(owned), child, st, catch))
}

/// In a new image: restore the cwd and the descriptor table from
/// `ATOLL_STATE` (only fds that are still our placeholders survive; the
/// other descriptions are closed at the server).
pub fn restore(c: &Client, text: &str, with_session: bool) {
    let Some(st) = State::decode(text) else {
        return;
    };
    if let Some(e) = &st.exe {
        let _ = SELF_EXE.set(e.clone());
    }
    crate::counters::carry(&st.counters);
    if st.locks {
        c.posix_locks
            .store(true, core::sync::atomic::Ordering::Relaxed);
        c.any_locks
            .store(true, core::sync::atomic::Ordering::Relaxed);
        c.lock_marks.mark_all();
    }
    // Taken only when something below asks a server: the new image has no
    // lane yet (`Reattach`), and most images a shell starts need none.
    let lane = LazyLane::new(c);
    let cwd = st.cwd.as_ref().and_then(|(path, ino)| match ino {
        Some(i) => Some(Cwd {
            ino: InodeId(*i),
            path: path.clone(),
            hold: fdtable::Held::new(None),
        }),
        None => {
            // The first image of a run (`atoll run --cwd`) finds its cwd,
            // and takes its reference, itself.
            let l = lane.get().ok()?;
            let mut w = Walker::start(c, l, libc::AT_FDCWD as i64, path).ok()??;
            let NodeStep::Node {
                ino,
                ftype: FileType::Directory,
                ..
            } = w.node(true).ok()?
            else {
                return None;
            };
            let hold = crate::ns::hold_dir(c, l, ino, 0).unwrap_or(fdtable::Held::new(None));
            Some(Cwd {
                ino,
                path: w.canon.as_bytes().to_vec(),
                hold,
            })
        }
    });
    if !with_session {
        if cwd.is_some() {
            c.set_cwd(cwd);
        }
        return;
    }
    let mut descs: Vec<(u64, Option<fdtable::DescRef>)> = Vec::new();
    let mut alive_inodes: Vec<u64> = Vec::new();
    let mut caught = Vec::new();
    for f in &st.fds {
        let id = sys::fstat_id(f.fd).map(|(d, i, _)| (d, i));
        let is_catch = id.is_ok_and(|id| super::caught::is_catch(&st, f.fd, id));
        let alive = (f.fd as usize) < fdtable::MAX_FDS
            && !c.is_private_fd(f.fd)
            && (id == Ok(f.placeholder) || is_catch);
        let pos = match descs.iter().position(|(d, _)| *d == f.desc) {
            Some(p) => p,
            None => {
                descs.push((f.desc, None));
                descs.len() - 1
            }
        };
        if !alive {
            continue;
        }
        alive_inodes.push(f.ino);
        let r = match &descs[pos].1 {
            Some(r) => r.clone_ref(),
            None => {
                let Some(r) = fdtable::alloc(DescInfo {
                    desc: DescId(f.desc),
                    ino: InodeId(f.ino),
                    flags: f.flags,
                    ftype: fdtable::ftype_from_code(f.ftype),
                    cookie: f.cookie,
                    path: f.path.clone(),
                }) else {
                    continue;
                };
                descs[pos].1 = Some(r.clone_ref());
                r
            }
        };
        drop(fdtable::install(f.fd, r));
        if is_catch {
            caught.push(f.fd);
        }
    }
    // What the loader wrote comes before anything the program writes.
    for fd in caught {
        super::caught::drain(c, &lane, fd);
    }
    let kept = |q: &u64| alive_inodes.contains(q);
    let watches: Vec<_> = st
        .watches
        .iter()
        .filter(|w| kept(&w.queue))
        .cloned()
        .collect();
    crate::inotify::unmount::restore(&watches);
    let groups: Vec<_> = st
        .groups
        .iter()
        .filter(|g| kept(&g.queue))
        .cloned()
        .collect();
    crate::fanotify::restore(&groups);
    // A dnotify registration goes on with its description; a queue whose
    // description did not survive is closed like it.
    for n in &st.dnotify {
        if descs.iter().any(|(d, r)| *d == n.desc && r.is_some()) {
            crate::dnotify::restore(n);
        } else if let Ok(l) = lane.get() {
            let desc = DescId(n.queue);
            let _ = l.call_ok(c, desc.server(), Request::Close { desc });
        }
    }
    // The cwd's reference, shared with a descriptor's or its own.
    if let Some(mut w) = cwd {
        if let Some(d) = st.cwd_desc {
            w.hold = fdtable::Held::new(cwd_ref(&mut descs, d, w.ino));
        }
        c.set_cwd(Some(w));
    }
    // Descriptions with no surviving fd: release the share at the server.
    for (d, r) in descs {
        if r.is_none() {
            let desc = DescId(d);
            if let Ok(l) = lane.get() {
                let _ = l.call_ok(c, desc.server(), Request::Close { desc });
            }
        }
    }
}

/// The new image's reference to the cwd's description `d` (of directory
/// `ino`): a descriptor's that survived (`fchdir`), or a slot of its own.
/// Taken out of `descs` so that it is not closed as one no descriptor
/// kept.
fn cwd_ref(
    descs: &mut Vec<(u64, Option<fdtable::DescRef>)>,
    d: u64,
    ino: InodeId,
) -> Option<fdtable::DescRef> {
    let r = match descs.iter().find(|(x, _)| *x == d) {
        Some((_, Some(r))) => Some(r.clone_ref()),
        _ => fdtable::alloc(DescInfo {
            desc: DescId(d),
            ino,
            flags: crate::ns::CWD_FLAGS,
            ftype: FileType::Directory,
            cookie: 0,
            path: None,
        }),
    };
    if r.is_some() {
        descs.retain(|(x, r)| *x != d || r.is_some());
    }
    r
}
