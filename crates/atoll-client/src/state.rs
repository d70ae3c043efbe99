//! Client state carried across `execve` in `ATOLL_STATE`: the atoll cwd and
//! the descriptor table, as compact text (the new image parses it before
//! the program's `main`).
//!
//! ```text
//! v1;c:<hex path>[:<hex ino>][;d:<desc>];f:<fd>:<desc>:<ino>:<flags>:<type>:<cookie>:<dev>:<pino>[:<hex path>];…[;k:<n>:<n>…]
//! ```
//! `k` carries client counters the old image counted but did not report
//! (it had no lane, and took none just for them; `counters`).
//! `a:<session>:<cache fd>:<dev>:<ino>:<control fd>:<dev>:<ino>:<hex info>`
//! hands the new image its session without a round trip to the boot thread
//! (`Attached`; the cache's three fields are empty in a copy island, which
//! maps no cache).
//! `w:<queue>:<wd>:<dir>` is a watch of a notification queue whose
//! descriptor survives (what `IN_UNMOUNT` names when the instance goes);
//! `n:<desc>:<queue>:<queue ino>:<dev>:<ino>:<hex path>` a dnotify
//! registration of a surviving description (`dnotify`);
//! `g:<queue>:<flags>:<event flags>` a fanotify group and
//! `m:<queue>:<wd>:<ino>:<type>:<mask>:<hex path>` one of its marks (what
//! its reader needs to turn records into events): the servers do not
//! keep these, the process does, and `execve` keeps the process.
//! Numbers are hexadecimal. `dev`/`pino` identify the placeholder memfd the
//! fd was a dup of: the new image checks each fd still refers to it (fds
//! closed by `FD_CLOEXEC` or replaced since vanish, and their descriptions
//! are closed at the server).

use std::fmt::Write as _;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdState {
    pub fd: i32,
    pub desc: u64,
    pub ino: u64,
    pub flags: u32,
    pub ftype: u32,
    pub cookie: u64,
    pub placeholder: (u64, u64),
    pub path: Option<Vec<u8>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct State {
    /// `(path, inode if known)`; the CLI only knows the path.
    pub cwd: Option<(Vec<u8>, Option<u64>)>,
    pub fds: Vec<FdState>,
    /// The atoll path of the program the new image runs, when it was
    /// started from a file in the mount (what `/proc/self/exe` names).
    pub exe: Option<Vec<u8>>,
    /// The process holds (or held) POSIX record locks, passed on to the
    /// new image's session.
    pub locks: bool,
    /// Unreported client counter deltas (`counters::unreported`), for the
    /// new image to report with its own.
    pub counters: Vec<u64>,
    /// The session the new image runs in, handed over whole.
    pub attached: Option<Attached>,
    /// Watches of the queues whose descriptors survive.
    pub watches: Vec<WatchState>,
    /// fanotify groups among those queues, with their marks.
    pub groups: Vec<GroupState>,
    /// dnotify registrations of descriptions that survive (`dnotify`).
    pub dnotify: Vec<DnotifyState>,
    /// The description the cwd holds (`ns::cwd::hold_dir`), referenced by
    /// the new image's session.
    pub cwd_desc: Option<u64>,
    /// Descriptors the exec left a memfd at for the new image's loader to
    /// write to, with the memfd's `(st_dev, st_ino)` (`exec/caught.rs`).
    pub caught: Vec<(i32, (u64, u64))>,
}

/// A dnotify registration (`dnotify::Reg`): the description, the queue
/// made for it, the shadow's `(st_dev, st_ino)` and its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnotifyState {
    pub desc: u64,
    pub queue: u64,
    pub queue_ino: u64,
    pub shadow: (u64, u64),
    pub path: Vec<u8>,
}

/// A watch of a notification queue, as `inotify::unmount` keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchState {
    pub queue: u64,
    pub wd: i32,
    pub dir: bool,
}

/// A fanotify group as its reader keeps it (`fanotify::Group`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GroupState {
    pub queue: u64,
    pub flags: u32,
    pub event_flags: u32,
    pub marks: Vec<MarkState>,
}

/// One mark of a group (`fanotify::Mark`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkState {
    pub wd: i32,
    pub key: u64,
    pub ftype: u32,
    pub mask: u64,
    pub path: Vec<u8>,
}

/// What a new image needs to join its session at once (`BootRequest::
/// Reattached`): inherited descriptors of the buffer cache and of the
/// control block, and what the boot thread would have answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    pub session: u64,
    /// `None` in a copy island (its processes never map the cache).
    pub cache: Option<CarriedFd>,
    pub control: CarriedFd,
    /// `InstanceInfo`, postcard-encoded.
    pub info: Vec<u8>,
    /// The old image's umask (what the kernel hands the new image), so
    /// the new one need not read it with two `umask` calls at start.
    pub umask: Option<u32>,
}

/// A descriptor left open across `execve`, and the file it refers to, so
/// the new image takes only that file at that number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CarriedFd {
    pub fd: i32,
    pub dev: u64,
    pub ino: u64,
}

fn hex(b: &[u8]) -> String {
    // By table, not `write!` per byte: the state of every exec is
    // encoded here (the instance's information alone is a few hundred
    // bytes), in forked children that then exec at once.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() & 1 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn num(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

impl State {
    pub fn encode(&self) -> String {
        let mut s = String::from("v1");
        if let Some((p, ino)) = &self.cwd {
            let _ = write!(s, ";c:{}", hex(p));
            if let Some(i) = ino {
                let _ = write!(s, ":{i:x}");
            }
        }
        if let Some(d) = self.cwd_desc {
            let _ = write!(s, ";d:{d:x}");
        }
        if let Some(e) = &self.exe {
            let _ = write!(s, ";e:{}", hex(e));
        }
        if self.locks {
            s.push_str(";l");
        }
        for f in &self.fds {
            let _ = write!(
                s,
                ";f:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}",
                f.fd, f.desc, f.ino, f.flags, f.ftype, f.cookie, f.placeholder.0, f.placeholder.1
            );
            if let Some(p) = &f.path {
                let _ = write!(s, ":{}", hex(p));
            }
        }
        if !self.counters.is_empty() {
            s.push_str(";k");
            for n in &self.counters {
                let _ = write!(s, ":{n:x}");
            }
        }
        for w in &self.watches {
            let _ = write!(s, ";w:{:x}:{:x}:{:x}", w.queue, w.wd, w.dir as u8);
        }
        for n in &self.dnotify {
            let _ = write!(
                s,
                ";n:{:x}:{:x}:{:x}:{:x}:{:x}:{}",
                n.desc,
                n.queue,
                n.queue_ino,
                n.shadow.0,
                n.shadow.1,
                hex(&n.path)
            );
        }
        for g in &self.groups {
            let _ = write!(s, ";g:{:x}:{:x}:{:x}", g.queue, g.flags, g.event_flags);
            for m in &g.marks {
                let _ = write!(
                    s,
                    ";m:{:x}:{:x}:{:x}:{:x}:{:x}:{}",
                    g.queue,
                    m.wd,
                    m.key,
                    m.ftype,
                    m.mask,
                    hex(&m.path)
                );
            }
        }
        for (fd, (dev, ino)) in &self.caught {
            let _ = write!(s, ";x:{fd:x}:{dev:x}:{ino:x}");
        }
        if let Some(a) = &self.attached {
            let fd = |c: &CarriedFd| format!("{:x}:{:x}:{:x}", c.fd, c.dev, c.ino);
            let cache = a.cache.as_ref().map(fd).unwrap_or_else(|| "::".into());
            let _ = write!(
                s,
                ";a:{:x}:{cache}:{}:{}",
                a.session,
                fd(&a.control),
                hex(&a.info)
            );
            if let Some(u) = a.umask {
                let _ = write!(s, ":{u:x}");
            }
        }
        s
    }

    /// Parse; `None` for anything malformed (the new image then starts
    /// with an empty table rather than trusting garbage).
    pub fn decode(s: &str) -> Option<State> {
        let mut parts = s.split(';');
        if parts.next()? != "v1" {
            return None;
        }
        let mut st = State::default();
        for p in parts {
            let mut f = p.split(':');
            match f.next()? {
                "c" => {
                    let path = unhex(f.next()?)?;
                    let ino = match f.next() {
                        Some(x) => Some(num(x)?),
                        None => None,
                    };
                    st.cwd = Some((path, ino));
                }
                "d" => st.cwd_desc = Some(num(f.next()?)?),
                "e" => st.exe = Some(unhex(f.next()?)?),
                "w" => {
                    let mut n = || f.next().and_then(num);
                    st.watches.push(WatchState {
                        queue: n()?,
                        wd: i32::try_from(n()?).ok()?,
                        dir: n()? != 0,
                    });
                }
                "n" => {
                    let mut n = || f.next().and_then(num);
                    st.dnotify.push(DnotifyState {
                        desc: n()?,
                        queue: n()?,
                        queue_ino: n()?,
                        shadow: (n()?, n()?),
                        path: unhex(f.next()?)?,
                    });
                }
                "g" => {
                    let mut n = || f.next().and_then(num);
                    st.groups.push(GroupState {
                        queue: n()?,
                        flags: u32::try_from(n()?).ok()?,
                        event_flags: u32::try_from(n()?).ok()?,
                        marks: Vec::new(),
                    });
                }
                "m" => {
                    let mut n = || f.next().and_then(num);
                    let queue = n()?;
                    let mark = MarkState {
                        wd: i32::try_from(n()?).ok()?,
                        key: n()?,
                        ftype: u32::try_from(n()?).ok()?,
                        mask: n()?,
                        path: unhex(f.next()?)?,
                    };
                    // A mark follows its group's `g`.
                    let g = st.groups.iter_mut().rfind(|g| g.queue == queue)?;
                    g.marks.push(mark);
                }
                "l" => st.locks = true,
                "x" => {
                    let mut n = || f.next().and_then(num);
                    let fd = i32::try_from(n()?).ok()?;
                    st.caught.push((fd, (n()?, n()?)));
                }
                "k" => st.counters = f.map(num).collect::<Option<Vec<u64>>>()?,
                "a" => {
                    let session = num(f.next()?)?;
                    let mut carried = |empty_ok: bool| -> Option<Option<CarriedFd>> {
                        let (fd, dev, ino) = (f.next()?, f.next()?, f.next()?);
                        if empty_ok && fd.is_empty() && dev.is_empty() && ino.is_empty() {
                            return Some(None);
                        }
                        Some(Some(CarriedFd {
                            fd: i32::try_from(num(fd)?).ok()?,
                            dev: num(dev)?,
                            ino: num(ino)?,
                        }))
                    };
                    let cache = carried(true)?;
                    let control = carried(false)??;
                    let info = unhex(f.next()?)?;
                    let umask = match f.next() {
                        Some(u) => Some(u32::try_from(num(u)?).ok()? & 0o777),
                        None => None,
                    };
                    st.attached = Some(Attached {
                        session,
                        cache,
                        control,
                        info,
                        umask,
                    });
                }
                "f" => {
                    let mut n = || f.next().and_then(num);
                    let fd = n()? as i32;
                    let desc = n()?;
                    let ino = n()?;
                    let flags = n()? as u32;
                    let ftype = n()? as u32;
                    let cookie = n()?;
                    let dev = n()?;
                    let pino = n()?;
                    let path = match f.next() {
                        Some(x) => Some(unhex(x)?),
                        None => None,
                    };
                    st.fds.push(FdState {
                        fd,
                        desc,
                        ino,
                        flags,
                        ftype,
                        cookie,
                        placeholder: (dev, pino),
                        path,
                    });
                }
                _ => return None,
            }
        }
        Some(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lower_case_digits_per_byte_and_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let text = hex(&all);
        let by_format: String = all.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(text, by_format);
        assert_eq!(unhex(&text), Some(all));
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn state_round_trips_through_text() {
        let st = State {
            cwd: Some((b"/atoll/src dir".to_vec(), Some(0x0100_0000_0000_0007))),
            fds: vec![
                FdState {
                    fd: 3,
                    desc: 0x0200_0000_0000_0001,
                    ino: 42,
                    flags: 0o100002,
                    ftype: 1,
                    cookie: 0,
                    placeholder: (12, 3456),
                    path: None,
                },
                FdState {
                    fd: 7,
                    desc: 9,
                    ino: 1,
                    flags: 0o200000,
                    ftype: 2,
                    cookie: 0x0300_0000_0000_0010,
                    placeholder: (12, 3456),
                    path: Some(b"/atoll".to_vec()),
                },
            ],
            exe: Some(b"/atoll/bin/prog".to_vec()),
            locks: true,
            counters: vec![0, 7, 0x1_0000_0000],
            attached: Some(Attached {
                session: 0x2a,
                cache: Some(CarriedFd {
                    fd: 900,
                    dev: 12,
                    ino: 77,
                }),
                control: CarriedFd {
                    fd: 903,
                    dev: 12,
                    ino: 78,
                },
                info: vec![0, 1, 0xfe],
                umask: Some(0o027),
            }),
            watches: vec![
                WatchState {
                    queue: 0x0100_0000_0000_0009,
                    wd: 1,
                    dir: true,
                },
                WatchState {
                    queue: 0x0100_0000_0000_0009,
                    wd: 2,
                    dir: false,
                },
            ],
            groups: vec![GroupState {
                queue: 0x0100_0000_0000_000a,
                flags: 0x200,
                event_flags: 0o2,
                marks: vec![MarkState {
                    wd: 1,
                    key: 0x0100_0000_0000_0001,
                    ftype: 2,
                    mask: 0x4000_0008,
                    path: b"/atoll/a b".to_vec(),
                }],
            }],
            dnotify: vec![DnotifyState {
                desc: 0x0200_0000_0000_0003,
                queue: 0x0100_0000_0000_000b,
                queue_ino: 0x0100_0000_0000_000c,
                shadow: (0x2a, 0x1234),
                path: b"/run/atoll/x/dnotify/10c".to_vec(),
            }],
            cwd_desc: Some(0x0100_0000_0000_0011),
            caught: vec![(2, (0x2b, 0x99))],
        };
        let text = st.encode();
        assert!(!text.contains(' '), "env-safe text: {text}");
        assert_eq!(State::decode(&text), Some(st));
    }

    #[test]
    fn cwd_without_inode_and_garbage() {
        let st = State {
            cwd: Some((b"/atoll/src".to_vec(), None)),
            fds: vec![],
            exe: None,
            locks: false,
            counters: vec![],
            // A copy island's hand-over: no cache descriptor.
            attached: Some(Attached {
                session: 1,
                cache: None,
                control: CarriedFd {
                    fd: 901,
                    dev: 1,
                    ino: 2,
                },
                info: vec![],
                umask: None,
            }),
            ..State::default()
        };
        assert_eq!(State::decode(&st.encode()), Some(st));
        assert_eq!(State::decode("v1;a:1:::"), None, "no control descriptor");
        assert_eq!(State::decode("v1;a:1:384:1:2:385:1:2:0"), None, "odd hex");
        assert_eq!(
            State::decode("v1;a:1:384::2:385:1:2:"),
            None,
            "half a cache"
        );
        assert_eq!(State::decode("v2;c:00"), None);
        assert_eq!(State::decode("v1;f:3:zz"), None);
        assert_eq!(State::decode("v1;c:0"), None);
        assert_eq!(State::decode("v1;q:1"), None);
        assert_eq!(State::decode("v1;k:1:x"), None);
        assert_eq!(
            State::decode("v1;m:a:1:1:2:8:00"),
            None,
            "a mark before its group"
        );
        assert_eq!(State::decode("v1;w:a:1"), None, "half a watch");
        assert_eq!(State::decode("v1"), Some(State::default()));
    }
}
