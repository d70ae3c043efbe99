//! A server rebuilt from its journal equals the one it replaces
//! (`journal`, `fs::tape`, `server::rebuild`): random requests from
//! several sessions, sessions that end, blocks claimed and freed; then
//! the live server is dropped and the journal replayed.

use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;

use atoll_msg::{Control, PollMode, SharedRegion};
use atoll_proto::{
    decode, encode, Cred, FileType, InodeId, Reply, ReplyFrame, Request, RequestFrame, SessionId,
    SetAttr, UnlinkKind, BLOCK_SIZE, MAX_FRAME, ROOT,
};
use proptest::prelude::*;

use crate::fs::{tape, FsConfig, Limits};
use crate::health::Health;
use crate::journal::{Journal, Kind};
use crate::server::{fresh_server, rebuild, rebuild_answering, serve_frame_kept, ServerParams};

const BLOCKS: u32 = 256;

pub(crate) fn params(journal: Arc<Journal>) -> (ServerParams, Rc<Control>) {
    let (cache_fd, _) = SharedRegion::create("atoll-test", BLOCKS as usize * BLOCK_SIZE).unwrap();
    let (control_fd, control) = Control::create(1).unwrap();
    let limits = Limits::for_memory(u64::from(BLOCKS) * BLOCK_SIZE as u64);
    limits.install(&control);
    let p = ServerParams {
        fs: FsConfig {
            index: 0,
            nservers: 1,
            first_block: 0,
            nblocks: BLOCKS,
            root_owner: Cred::default(),
            core: -1,
            track_lookups: true,
            track_absent: true,
            limits,
        },
        poll: PollMode::Block,
        pin: None,
        cache_fd,
        control_fd: control_fd.try_clone().unwrap(),
        pool: Arc::new(atoll_msg::BlockPool::new(0, BLOCKS, 1)),
        trace: None,
        adaptive: false,
        health: Arc::new(Health::new(&[None], 1)),
        journal: Some(journal),
        process: false,
        resume: false,
        adopted: Vec::new(),
        ended: Vec::new(),
    };
    let control = Rc::new(Control::map(control_fd.as_fd()).unwrap());
    (p, control)
}

/// One step of a random history.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    Create {
        dir: u8,
        name: u8,
        session: u8,
    },
    Mkdir {
        dir: u8,
        name: u8,
    },
    Write {
        desc: u8,
        len: u16,
        at: u16,
    },
    Truncate {
        file: u8,
        size: u16,
    },
    Rename {
        from: (u8, u8),
        to: (u8, u8),
    },
    Unlink {
        dir: u8,
        name: u8,
    },
    Close {
        desc: u8,
    },
    Share {
        desc: u8,
        to: u8,
    },
    Xattr {
        file: u8,
        len: u8,
    },
    EndSession {
        session: u8,
    },
    /// `Map` (`unmap`: `Unmap`) of a file as one of `session`'s mappings.
    Map {
        file: u8,
        session: u8,
        mapping: u8,
        unmap: bool,
    },
    /// `Exec` of a file by session `to`.
    Exec {
        file: u8,
        to: u8,
    },
}

pub(crate) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..4u8, 0..6u8, 1..4u8).prop_map(|(dir, name, session)| Step::Create {
            dir,
            name,
            session
        }),
        (0..4u8, 0..6u8).prop_map(|(dir, name)| Step::Mkdir { dir, name }),
        (0..8u8, 1..20_000u16, 0..30_000u16).prop_map(|(desc, len, at)| Step::Write {
            desc,
            len,
            at
        }),
        (0..8u8, 0..20_000u16).prop_map(|(file, size)| Step::Truncate { file, size }),
        ((0..4u8, 0..6u8), (0..4u8, 0..6u8)).prop_map(|(from, to)| Step::Rename { from, to }),
        (0..4u8, 0..6u8).prop_map(|(dir, name)| Step::Unlink { dir, name }),
        (0..8u8).prop_map(|desc| Step::Close { desc }),
        (0..8u8, 1..4u8).prop_map(|(desc, to)| Step::Share { desc, to }),
        (0..8u8, 0..200u8).prop_map(|(file, len)| Step::Xattr { file, len }),
        (1..4u8).prop_map(|session| Step::EndSession { session }),
        (0..8u8, 1..4u8, 0..3u8, any::<bool>()).prop_map(|(file, session, mapping, unmap)| {
            Step::Map {
                file,
                session,
                mapping,
                unmap,
            }
        }),
        (0..8u8, 1..4u8).prop_map(|(file, to)| Step::Exec { file, to }),
    ]
}

/// A live server with a journal, fed requests as the server loop feeds
/// them.
pub(crate) struct Live {
    pub(crate) fs: Option<crate::fs::FileServer<crate::sys::SharedStore>>,
    pub(crate) journal: Arc<Journal>,
    dirs: Vec<InodeId>,
    files: Vec<InodeId>,
    descs: Vec<(atoll_proto::DescId, u8)>,
    next_id: u64,
    /// Every reply frame that went out, with its request's id, as encoded
    /// (`snapshot_tests` compares them with a successor's replay).
    pub(crate) replies: Vec<(u64, Vec<u8>)>,
}

impl Live {
    /// A fresh server with a journal of `bytes`, its creation recorded.
    pub(crate) fn boot(bytes: usize) -> (Live, ServerParams, Rc<Control>) {
        let (_fd, journal) = Journal::create(bytes).unwrap();
        let journal = Arc::new(journal);
        let (p, control) = params(journal.clone());
        tape::record();
        let fs = fresh_server(&p, &control).unwrap();
        tape::with_recorded(|t| journal.append(Kind::Genesis, SessionId(0), t, b""));
        let live = Live {
            fs: Some(fs),
            journal,
            dirs: vec![ROOT],
            files: vec![],
            descs: vec![],
            next_id: 0,
            replies: Vec::new(),
        };
        (live, p, control)
    }

    fn call(&mut self, session: u8, req: Request<'_>) -> Option<Reply<'static>> {
        let out = self.call_encoded(session, req)?;
        let reply: ReplyFrame<'_> = decode(&out).unwrap();
        Some(match reply.reply {
            Reply::Entry { ino, ftype } => Reply::Entry { ino, ftype },
            Reply::Opened {
                desc,
                attr,
                created,
                watched,
                served,
            } => Reply::Opened {
                desc,
                attr,
                created,
                watched,
                served,
            },
            Reply::Err(e) => Reply::Err(e),
            Reply::Written(n) => Reply::Written(n),
            Reply::Skipped => Reply::Skipped,
            _ => Reply::Ok,
        })
    }

    /// Serve `req` from `session` (journaled) and return its reply frame
    /// as encoded; `None` if none goes out.
    fn call_encoded(&mut self, session: u8, req: Request<'_>) -> Option<Vec<u8>> {
        let mut inb = vec![0u8; MAX_FRAME];
        let mut out = vec![0u8; MAX_FRAME];
        let mut scratch = Vec::new();
        self.next_id += 1;
        let frame = RequestFrame {
            id: self.next_id,
            cred: Cred::default(),
            pid: 0,
            req,
            vouched: Default::default(),
        };
        let bytes = encode(&frame, &mut inb).unwrap().to_vec();
        let fs = self.fs.as_mut().unwrap();
        let n = serve_frame_kept(
            fs,
            Some(&self.journal),
            SessionId(u64::from(session)),
            &bytes,
            &mut scratch,
            &mut out,
        )?;
        out.truncate(n);
        self.replies.push((self.next_id, as_replayed(&out)));
        Some(out)
    }

    fn name(n: u8) -> Vec<u8> {
        format!("n{n}").into_bytes()
    }

    fn dir(&self, d: u8) -> InodeId {
        self.dirs[d as usize % self.dirs.len()]
    }

    pub(crate) fn apply(&mut self, s: &Step) {
        match *s {
            Step::Create { dir, name, session } => {
                let dir = self.dir(dir);
                let name = Self::name(name);
                let r = self.call(
                    session,
                    Request::Open {
                        dir,
                        name: &name,
                        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
                        perm: 0o644,
                        umask: 0o022,
                        inherit: atoll_proto::Inherit::Unread,
                    },
                );
                if let Some(Reply::Opened { desc, attr, .. }) = r {
                    self.descs.push((desc, session));
                    self.files.push(attr.ino);
                }
            }
            Step::Mkdir { dir, name } => {
                let dir = self.dir(dir);
                let name = Self::name(name);
                let r = self.call(
                    1,
                    Request::MakeNode {
                        dir,
                        name: &name,
                        ftype: FileType::Directory,
                        perm: 0o755,
                        rdev: 0,
                        target: b"",
                        home: 0,
                        spread: 0,
                        inherit: atoll_proto::Inherit::Unread,
                        umask: 0,
                    },
                );
                if let Some(Reply::Entry { ino, .. }) = r {
                    self.dirs.push(ino);
                }
            }
            Step::Write { desc, len, at } => {
                if let Some(&(d, session)) = self.descs.get(desc as usize) {
                    self.call(
                        session,
                        Request::Write {
                            desc: d,
                            len: u64::from(len),
                            offset: Some(u64::from(at)),
                            fsize: None,
                        },
                    );
                }
            }
            Step::Truncate { file, size } => {
                if let Some(&ino) = self.files.get(file as usize) {
                    let set = SetAttr {
                        size: Some(u64::from(size)),
                        ..SetAttr::NONE
                    };
                    self.call(
                        1,
                        Request::SetAttr {
                            ino,
                            set,
                            via: None,
                        },
                    );
                }
            }
            Step::Rename { from, to } => {
                let (olddir, newdir) = (self.dir(from.0), self.dir(to.0));
                let (a, b) = (Self::name(from.1), Self::name(to.1));
                self.call(
                    1,
                    Request::Rename {
                        olddir,
                        oldname: &a,
                        newdir,
                        newname: &b,
                        flags: 0,
                    },
                );
            }
            Step::Unlink { dir, name } => {
                let dir = self.dir(dir);
                let name = Self::name(name);
                for kind in [UnlinkKind::NonDirectory, UnlinkKind::Directory] {
                    self.call(
                        1,
                        Request::Unlink {
                            dir,
                            name: &name,
                            kind,
                            expect: None,
                        },
                    );
                }
            }
            Step::Close { desc } => {
                if (desc as usize) < self.descs.len() {
                    let (d, session) = self.descs.remove(desc as usize);
                    self.call(session, Request::Close { desc: d });
                }
            }
            Step::Share { desc, to } => {
                if let Some(&(d, session)) = self.descs.get(desc as usize) {
                    let held = self.descs.iter().filter(|&&e| e == (d, to)).count() as u32;
                    let r = self.call(
                        session,
                        Request::Share {
                            desc: d,
                            to: SessionId(u64::from(to)),
                            held,
                        },
                    );
                    if matches!(r, Some(Reply::Ok)) {
                        self.descs.push((d, to));
                    }
                }
            }
            Step::Xattr { file, len } => {
                if let Some(&ino) = self.files.get(file as usize) {
                    let value = vec![b'x'; len as usize];
                    self.call(
                        1,
                        Request::SetXattr {
                            ino,
                            name: b"user.k",
                            value: &value,
                            flags: 0,
                            via: None,
                        },
                    );
                }
            }
            Step::Map {
                file,
                session,
                mapping,
                unmap,
            } => {
                if let Some(&ino) = self.files.get(file as usize) {
                    let mapping = u64::from(mapping);
                    let req = if unmap {
                        Request::Unmap { ino, mapping }
                    } else {
                        Request::Map {
                            ino,
                            to: SessionId(u64::from(session)),
                            mapping,
                        }
                    };
                    self.call(session, req);
                }
            }
            Step::Exec { file, to } => {
                if let Some(&ino) = self.files.get(file as usize) {
                    let to = SessionId(u64::from(to));
                    self.call(1, Request::Exec { ino, to });
                }
            }
            Step::EndSession { session } => {
                let s = SessionId(u64::from(session));
                tape::clear();
                self.fs.as_mut().unwrap().session_closed(s);
                tape::with_recorded(|t| self.journal.append(Kind::Closed, s, t, b""));
                self.descs.retain(|&(_, owner)| owner != session);
            }
        }
    }
}

fn live_then_rebuilt(steps: &[Step]) -> (String, String) {
    let (mut live, p, control) = Live::boot(16 << 20);
    for s in steps {
        live.apply(s);
    }
    let before = live.fs.as_ref().unwrap().state_digest();
    live.fs = None; // gives its share of the pool to the rebuilt server
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    (before, rebuilt.state_digest())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn a_rebuilt_server_equals_the_one_it_replaces(
        steps in proptest::collection::vec(step(), 1..120)
    ) {
        let (live, rebuilt) = live_then_rebuilt(&steps);
        prop_assert_eq!(live, rebuilt);
    }
}

#[test]
fn a_journal_that_replays_differently_is_refused() {
    let steps = [
        Step::Create {
            dir: 0,
            name: 1,
            session: 1,
        },
        Step::Write {
            desc: 0,
            len: 9000,
            at: 0,
        },
    ];
    let (live, rebuilt) = live_then_rebuilt(&steps);
    assert_eq!(live, rebuilt);
    assert!(live.contains("size=9000"), "{live}");

    // A journal whose request lost an answer of its tape: the replay asks
    // the pool a question nobody answered, and refuses the result.
    let (mut live, p, control) = Live::boot(1 << 20);
    let journal = live.journal.clone();
    live.apply(&steps[0]);
    live.fs = None;
    tape::off();
    let records = journal.read_all().unwrap();
    let (_fd2, cut) = Journal::create(1 << 20).unwrap();
    for (i, r) in records.iter().enumerate() {
        let tape = if i == records.len() - 1 {
            &r.tape[..r.tape.len().saturating_sub(2)]
        } else {
            &r.tape[..]
        };
        cut.append(r.kind, r.session, tape, &r.frame);
    }
    let err = rebuild(&p, &control, &cut).err().expect("refused");
    assert!(err.contains("replayed differently"), "{err}");
}

/// A server process killed half way through a request leaves that
/// request's reservations in the instance's gauges and its own charge
/// words (a kill after `admit`, before the request reached the journal):
/// the rebuilt server gives them back, so the gauges equal what servers
/// hold again (the 1,000-kill soak's "2 open descriptions nobody had
/// open" after everything was removed).
#[test]
fn a_rebuilt_server_gives_back_what_a_request_it_died_in_had_reserved() {
    use crate::fs::limits::{DESCRIPTIONS, INODES};
    let steps = [
        Step::Create {
            dir: 0,
            name: 1,
            session: 1,
        },
        Step::Create {
            dir: 0,
            name: 2,
            session: 2,
        },
    ];
    let (mut live, p, control) = Live::boot(1 << 20);
    for s in &steps {
        live.apply(s);
    }
    let held = |c: &Control| (c.gauge(INODES).used(), c.gauge(DESCRIPTIONS).used());
    let before = held(&control);
    assert!(before.0 >= 3 && before.1 >= 2, "{before:?}");
    // What `admit` of a new `Open` did before the process was killed.
    for r in [INODES, DESCRIPTIONS] {
        assert!(control.gauge(r).try_take(1));
        let w = control.charged(0, r);
        w.store(
            w.load(std::sync::atomic::Ordering::Relaxed) + 1,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    live.fs = None;
    tape::off();
    let _rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    assert_eq!(held(&control), before);
}

/// Write chains come back with the journal (`fs::chain`): a chain cut
/// by a successor that answered a request `EIO` stays cut in a server
/// rebuilt after it, and a chain opened after the cut goes on.
#[test]
fn write_chains_and_their_cuts_are_rebuilt_from_the_journal() {
    let (mut live, p, control) = Live::boot(16 << 20);
    live.apply(&Step::Create {
        dir: 0,
        name: 1,
        session: 1,
    });
    let (d, _) = live.descs[0];
    let data = [5u8; 100];
    let piece = |id, seq| Request::WriteData {
        desc: d,
        data: &data,
        offset: None,
        fsize: None,
        chain: Some(atoll_proto::Chain {
            id,
            seq,
            last: false,
        }),
    };
    assert!(matches!(
        live.call(1, piece(1, 0)),
        Some(Reply::Written(100))
    ));
    let s = SessionId(1);
    tape::clear();
    live.fs.as_mut().unwrap().cut_chains(s);
    tape::with_recorded(|t| live.journal.append(Kind::CutChains, s, t, b""));
    assert!(matches!(
        live.call(1, piece(2, 0)),
        Some(Reply::Written(100))
    ));
    live.fs = None;
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    live.fs = Some(rebuilt);
    tape::record();
    assert!(matches!(live.call(1, piece(1, 1)), Some(Reply::Skipped)));
    assert!(matches!(
        live.call(1, piece(2, 1)),
        Some(Reply::Written(100))
    ));
}

/// A `Share` is idempotent across a server's death (fos §3.5): the one
/// the dead server applied and journaled, then sent again by a client
/// its successor answered `EIO`, counts once in the rebuilt server; one
/// that never reached the journal is applied by the retry.
#[test]
fn a_share_sent_again_after_a_rebuild_counts_once() {
    let (mut live, p, control) = Live::boot(1 << 20);
    live.apply(&Step::Create {
        dir: 0,
        name: 1,
        session: 1,
    });
    let (d, _) = live.descs[0];
    let share = |to: u64| Request::Share {
        desc: d,
        to: SessionId(to),
        held: 0,
    };
    // Applied and journaled; its answer died with the server.
    assert!(matches!(live.call(1, share(2)), Some(Reply::Ok)));
    live.fs = None;
    tape::off();
    live.fs = Some(rebuild(&p, &control, &live.journal).expect("the journal replays"));
    tape::record();
    // Both sent again by their clients: session 2's is already there,
    // session 3's (lost before the journal) is applied now.
    assert!(matches!(live.call(1, share(2)), Some(Reply::Ok)));
    assert!(matches!(live.call(1, share(3)), Some(Reply::Ok)));
    assert!(matches!(live.call(1, share(3)), Some(Reply::Ok)));
    // A count the sender does not expect is refused, not guessed at.
    let stale = Request::Share {
        desc: d,
        to: SessionId(2),
        held: 5,
    };
    assert!(matches!(
        live.call(1, stale),
        Some(Reply::Err(atoll_proto::Errno::ESTALE))
    ));
    // One reference each: the first close of either ends its hold.
    let close = Request::Close { desc: d };
    for s in [1u8, 2, 3] {
        assert!(matches!(live.call(s, close.clone()), Some(Reply::Ok)));
    }
    for s in [2u8, 3] {
        assert!(matches!(
            live.call(s, close.clone()),
            Some(Reply::Err(atoll_proto::Errno::EBADF))
        ));
    }
    // And the same again in a server rebuilt from all of it.
    let before = live.fs.as_ref().unwrap().state_digest();
    live.fs = None;
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    assert_eq!(before, rebuilt.state_digest());
}

/// A process's own `Map` and an exec hand-over's `Exec` are idempotent
/// across a server's death as `Share` is (fos §3.5): applied and
/// journaled by the dead server, then sent again by clients its successor
/// answered `EIO`, each counts once in the rebuilt server. The file is
/// writable again once its one runner ended, and it goes with the one
/// `Unmap` of its one mapping, its close and unlink.
#[test]
fn a_map_and_an_exec_sent_again_after_a_rebuild_count_once() {
    use atoll_proto::Errno;
    let (mut live, p, control) = Live::boot(1 << 20);
    live.apply(&Step::Create {
        dir: 0,
        name: 1,
        session: 1,
    });
    let (d, _) = live.descs[0];
    let ino = live.files[0];
    let map = || Request::Map {
        ino,
        to: SessionId(1),
        mapping: 1,
    };
    let exec = || Request::Exec {
        ino,
        to: SessionId(2),
    };
    assert!(matches!(live.call(1, map()), Some(Reply::Ok)));
    assert!(matches!(
        live.call(1, Request::Close { desc: d }),
        Some(Reply::Ok)
    ));
    assert!(matches!(live.call(1, exec()), Some(Reply::Ok)));
    // Both answers died with the server; its successor replays both.
    live.fs = None;
    tape::off();
    live.fs = Some(rebuild(&p, &control, &live.journal).expect("the journal replays"));
    tape::record();
    assert!(matches!(live.call(1, map()), Some(Reply::Ok)));
    assert!(matches!(live.call(1, exec()), Some(Reply::Ok)));
    let open_for_writing = || Request::Open {
        dir: ROOT,
        name: b"n1",
        flags: libc::O_WRONLY as u32,
        perm: 0,
        umask: 0o022,
        inherit: atoll_proto::Inherit::Unread,
    };
    assert!(matches!(
        live.call(3, open_for_writing()),
        Some(Reply::Err(Errno::ETXTBSY))
    ));
    live.apply(&Step::EndSession { session: 2 });
    let Some(Reply::Opened { desc: w, .. }) = live.call(3, open_for_writing()) else {
        panic!("the one runner ended: writable again")
    };
    assert!(matches!(
        live.call(3, Request::Close { desc: w }),
        Some(Reply::Ok)
    ));
    live.apply(&Step::Unlink { dir: 0, name: 1 });
    let stat = || Request::GetAttr { ino };
    assert!(matches!(live.call(1, stat()), Some(Reply::Ok)), "mapped");
    let unmap = Request::Unmap { ino, mapping: 1 };
    assert!(matches!(live.call(1, unmap), Some(Reply::Ok)));
    assert!(matches!(
        live.call(1, stat()),
        Some(Reply::Err(Errno::ENOENT))
    ));
    // And the same in a server rebuilt from all of it.
    let before = live.fs.as_ref().unwrap().state_digest();
    live.fs = None;
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    assert_eq!(before, rebuilt.state_digest());
}

/// A reply frame as encoded, less what differs between a server and its
/// successor's replay by design: the served count an `Opened` carries
/// (`Control::count_served`; the replay counts each request it replays
/// again, so the successor's count is further on, which only makes a
/// client ask for attributes it could have kept).
pub(crate) fn as_replayed(bytes: &[u8]) -> Vec<u8> {
    let Ok(mut f) = decode::<ReplyFrame<'_>>(bytes) else {
        return bytes.to_vec();
    };
    if let Reply::Opened { served, .. } = &mut f.reply {
        *served = 0;
    }
    let mut out = vec![0u8; MAX_FRAME];
    encode(&f, &mut out).unwrap().to_vec()
}

/// Serve `req` from session 1 as a server process that is killed right
/// after the request reached the journal and before its reply went out
/// (`Journal::owe` unsettled), then rebuild. The reply it would have
/// sent, and the one its successor's replay computed for it.
fn killed_before_replying(
    live: &mut Live,
    p: &ServerParams,
    control: &Rc<Control>,
    req: Request<'_>,
) -> (Vec<u8>, Option<Vec<u8>>) {
    live.journal.owe(SessionId(1), 0, live.next_id + 1);
    let lost = live.call_encoded(1, req).expect("a call is answered");
    live.fs = None;
    tape::off();
    let owed = live.journal.owed();
    assert!(owed.is_some_and(|o| o.journaled));
    let (rebuilt, answer) =
        rebuild_answering(p, control, &live.journal, owed).expect("the journal replays");
    live.journal.settle();
    live.fs = Some(rebuilt);
    tape::record();
    (as_replayed(&lost), answer.map(|a| as_replayed(&a)))
}

/// The reply a dead server owed is the one the replay of its record
/// computes (fos §3.5, `rebuild_answering`), byte for byte: a creating
/// open (description and inode numbers, timestamps), writes (the blocks
/// a `Write` granted), a read at the description's offset (bytes read
/// from the buffer cache again), a chmod, a rename, an unlink and the
/// close that frees the file. A request owed that never reached the
/// journal gets none (it is served again).
#[test]
fn the_reply_a_dead_server_owed_is_the_one_its_replay_computes() {
    let (mut live, p, control) = Live::boot(1 << 20);
    let owed = |live: &mut Live, req: Request<'_>| {
        let (lost, answer) = killed_before_replying(live, &p, &control, req);
        assert_eq!(answer.as_deref(), Some(&lost[..]));
        lost
    };
    let open = Request::Open {
        dir: ROOT,
        name: b"a",
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        perm: 0o644,
        umask: 0o022,
        inherit: atoll_proto::Inherit::Unread,
    };
    let opened = owed(&mut live, open);
    let Ok(ReplyFrame {
        reply: Reply::Opened { desc, attr, .. },
        ..
    }) = decode::<ReplyFrame<'_>>(&opened)
    else {
        panic!("created")
    };
    let data = Request::WriteData {
        desc,
        data: b"hello, world",
        offset: None,
        fsize: None,
        chain: None,
    };
    owed(&mut live, data);
    let grant = Request::Write {
        desc,
        len: 3 * BLOCK_SIZE as u64,
        offset: None,
        fsize: None,
    };
    let granted = owed(&mut live, grant);
    assert!(matches!(
        decode::<ReplyFrame<'_>>(&granted).map(|f| f.reply),
        Ok(Reply::Extents { .. })
    ));
    let rewind = Request::Seek {
        desc,
        offset: 0,
        whence: libc::SEEK_SET as u32,
    };
    owed(&mut live, rewind);
    let read = owed(
        &mut live,
        Request::ReadData {
            desc,
            len: 5,
            offset: None,
            report: true,
        },
    );
    assert!(matches!(
        decode::<ReplyFrame<'_>>(&read).map(|f| f.reply),
        Ok(Reply::Data(b"hello"))
    ));
    let chmod = Request::SetAttr {
        ino: attr.ino,
        set: SetAttr {
            perm: Some(0o600),
            ..SetAttr::NONE
        },
        via: None,
    };
    owed(&mut live, chmod);
    let rename = Request::Rename {
        olddir: ROOT,
        oldname: b"a",
        newdir: ROOT,
        newname: b"b",
        flags: 0,
    };
    owed(&mut live, rename);
    let unlink = Request::Unlink {
        dir: ROOT,
        name: b"b",
        kind: UnlinkKind::NonDirectory,
        expect: None,
    };
    owed(&mut live, unlink);
    owed(&mut live, Request::Close { desc });
    // Owed, but it died before its record was kept: nothing to answer.
    live.journal.owe(SessionId(1), 0, live.next_id + 1);
    live.fs = None;
    tape::off();
    let owed = live.journal.owed();
    assert!(owed.is_some_and(|o| !o.journaled));
    let (_, answer) =
        rebuild_answering(&p, &control, &live.journal, owed).expect("the journal replays");
    assert_eq!(answer, None);
}

/// A request that changes nothing is never journaled: a server killed
/// after taking it leaves it owed and not journaled, which its successor
/// answers "not applied" (`takeover`), and the client's second send gets
/// from the rebuilt server the reply the dead one would have sent, byte
/// for byte (ids aside: the second send has its own).
#[test]
fn a_request_that_changes_nothing_sent_again_after_a_rebuild_is_answered_as_before() {
    let (mut live, p, control) = Live::boot(1 << 20);
    live.apply(&Step::Create {
        dir: 0,
        name: 1,
        session: 1,
    });
    let name = Live::name(1);
    let lookup = Request::Lookup {
        dir: ROOT,
        name: &name,
    };
    let body = |frame: &[u8]| {
        let (_, rest) = postcard::take_from_bytes::<u64>(frame).unwrap();
        rest.to_vec()
    };
    live.journal.owe(SessionId(1), 0, live.next_id + 1);
    let lost = live.call_encoded(1, lookup.clone()).expect("answered");
    let Ok(ReplyFrame {
        reply: Reply::Entry { ino, .. },
        ..
    }) = decode::<ReplyFrame<'_>>(&lost)
    else {
        panic!("found")
    };
    let lost_attr = live.call_encoded(1, Request::GetAttr { ino }).unwrap();
    live.fs = None;
    tape::off();
    let owed = live.journal.owed();
    assert!(
        owed.is_some_and(|o| !o.journaled),
        "never journaled: {owed:?}"
    );
    let (rebuilt, answer) =
        rebuild_answering(&p, &control, &live.journal, owed).expect("the journal replays");
    assert_eq!(answer, None, "nothing to answer from: it is not applied");
    live.journal.settle();
    live.fs = Some(rebuilt);
    tape::record();
    let again = live.call_encoded(1, lookup).expect("answered");
    assert_eq!(body(&again), body(&lost));
    let again_attr = live.call_encoded(1, Request::GetAttr { ino }).unwrap();
    assert_eq!(body(&again_attr), body(&lost_attr));
}
