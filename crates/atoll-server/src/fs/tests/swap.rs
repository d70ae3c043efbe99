//! The hot-swap of a directory's mode (`fs::adapt`, Hare §6.1.2, K42 ch. 6),
//! with three servers driven by hand as a coordinating client would.

use super::*;
use atoll_proto::{entry_server_in, parse_moved, AdaptStep};

const N: usize = 3;

fn servers() -> Vec<T> {
    (0..N).map(|i| server_n(i, N, 64)).collect()
}

fn step(t: &mut T, s: SessionId, dir: InodeId, step: AdaptStep<'_>) -> Own {
    t.call(s, USER, Request::Adapt { dir, step })
}

fn mode(t: &mut T, dir: InodeId) -> ModeInfo {
    match t.ok(S1, USER, Request::DirMode { dir }) {
        Own::Mode(m) => m,
        other => panic!("{other:?}"),
    }
}

fn vouch(d: InodeId, epoch: u32) -> [Vouched; 1] {
    [Vouched {
        ino: d,
        perm: 0o755,
        uid: USER.uid,
        gid: USER.gid,
        epoch,
        default_acl: false,
        access_acl: false,
        verdict: None,
    }]
}

/// `(cookie, name)` of every entry on every server, read with `epoch`, in
/// cookie order (the client's merged listing).
fn listing(ts: &mut [T], dir: InodeId, epoch: u32) -> Vec<(u64, String)> {
    let mut all = vec![];
    for t in ts.iter_mut() {
        let req = Request::ReadDir {
            dir,
            cookie: 2,
            max_bytes: 64 * 1024,
            epoch,
        };
        let Own::Dirents(data, true) = t.ok(S1, USER, req) else {
            panic!("one reply holds them all")
        };
        for (_, off, _, name) in parse_dirents(&data) {
            all.push((off, String::from_utf8(name).unwrap()));
        }
    }
    all.sort();
    all
}

/// Block, transfer and complete a swap `Begin` started (home last).
fn finish_swap(ts: &mut [T], dir: InodeId, info: ModeInfo) {
    let epoch = info.epoch;
    for t in ts.iter_mut().skip(1) {
        let b = AdaptStep::Block {
            epoch,
            distributed: info.distributed,
            base_seq: info.base_seq,
            width: info.width,
        };
        assert_eq!(step(t, S2, dir, b), Own::Ok);
    }
    for from in 0..N {
        let Own::Exported(data, None) = step(
            &mut ts[from],
            S2,
            dir,
            AdaptStep::Export { epoch, after: 0 },
        ) else {
            panic!("one export holds them all")
        };
        for (seq, ino, ftype, name) in parse_moved(&data) {
            let to = entry_server_in(dir, info.route_width(), name);
            assert_ne!(to, from, "only misplaced entries are exported");
            let mut one = vec![];
            atoll_proto::pack_moved(&mut one, seq, ino, ftype, name);
            let import = AdaptStep::Import { epoch, data: &one };
            assert_eq!(step(&mut ts[to], S2, dir, import), Own::Ok);
        }
    }
    for i in (1..N).chain([0]) {
        assert_eq!(
            step(&mut ts[i], S2, dir, AdaptStep::Complete { epoch }),
            Own::Ok
        );
    }
}

#[test]
fn swap_moves_entries_with_their_cookies_and_blocks_until_complete() {
    let mut ts = servers();
    let d = ts[0].mkdir(ROOT, "d");
    for i in 0..30 {
        ts[0].create(d, &format!("f{i}"));
    }
    ts[0].mkdir(d, "sub");
    let before = listing(&mut ts[..1], d, 0);
    assert_eq!(before.len(), 31);
    assert_eq!(ts[0].stat(d).unwrap().nlink, 3);

    // Begin: the home server blocks the directory (K42's forward+block).
    let begin = AdaptStep::Begin {
        distributed: true,
        resume: false,
        width: N as u32,
    };
    let Own::Mode(info) = step(&mut ts[0], S2, d, begin) else {
        panic!()
    };
    assert!(info.swapping && info.distributed && info.epoch == 1);
    let lookup = Request::Lookup {
        dir: d,
        name: b"f1",
    };
    assert_eq!(ts[0].err(S1, USER, lookup.clone()), Errno::EMODE);
    let read = Request::ReadDir {
        dir: d,
        cookie: 0,
        max_bytes: 4096,
        epoch: 0,
    };
    assert_eq!(ts[0].err(S1, USER, read), Errno::EMODE);
    assert!(mode(&mut ts[0], d).swapping);
    let mark = Request::MarkRmdir { dir: d, epoch: 0 };
    assert_eq!(ts[0].err(S1, USER, mark), Errno::EMODE);

    finish_swap(&mut ts, d, info);
    let now = mode(&mut ts[0], d);
    assert!(now.distributed && !now.swapping && now.epoch == 1);
    // Every entry is on its hash server now, with the cookie it had.
    assert_eq!(listing(&mut ts, d, 1), before);
    for i in 0..30 {
        let name = format!("f{i}");
        let at = entry_server_in(d, N, name.as_bytes());
        for (s, t) in ts.iter_mut().enumerate() {
            let r = t.call(
                S1,
                USER,
                Request::Lookup {
                    dir: d,
                    name: name.as_bytes(),
                },
            );
            match s == at {
                true => assert!(matches!(r, Own::Entry(..)), "{name} on {s}: {r:?}"),
                false => assert_eq!(r, Own::Err(Errno::EMODE), "{name} on {s}"),
            }
        }
    }
    assert_eq!(
        ts[0].stat(d).unwrap().nlink,
        3,
        "subdirectories still counted"
    );
    let stats = ts[0].stats();
    assert_eq!((stats.mode_swaps, stats.adapted_dirs), (1, vec![d]));
    let one = atoll_proto::SwappedDir {
        ino: d.0,
        distributed: true,
        swaps: 1,
        swapping: false,
    };
    assert_eq!(stats.swapped_dirs, vec![one.clone()]);
    assert_eq!(ts[1].stats().swapped_dirs, vec![], "reported by home only");

    // A new entry on another server gets a cookie of its own residue.
    let name = (0..100)
        .map(|i| format!("n{i}"))
        .find(|n| entry_server_in(d, N, n.as_bytes()) == 1)
        .unwrap();
    let create = Request::Open {
        dir: d,
        name: name.as_bytes(),
        flags: RW | CREAT,
        perm: 0o644,
        umask: 0,
        inherit: atoll_proto::Inherit::Unread,
    };
    // Routed by the epoch before the swap: told so; by this one: served.
    let stale = ts[1].callv(S1, USER, &vouch(d, 0), create.clone());
    assert_eq!(stale, Own::Err(Errno::EMODE));
    assert!(matches!(
        ts[1].callv(S1, USER, &vouch(d, 1), create),
        Own::Opened(..)
    ));
    let all = listing(&mut ts, d, 1);
    let (seq, _) = all.iter().find(|(_, n)| *n == name).unwrap();
    assert!(*seq >= info.base_seq && seq % N as u64 == 1, "cookie {seq}");

    // And back: everything gathers on the home server, cookies kept.
    let begin = AdaptStep::Begin {
        distributed: false,
        resume: false,
        width: N as u32,
    };
    let Own::Mode(back) = step(&mut ts[0], S2, d, begin) else {
        panic!()
    };
    assert_eq!((back.distributed, back.epoch), (false, 2));
    finish_swap(&mut ts, d, back);
    assert_eq!(listing(&mut ts[..1], d, 2), all);
    assert_eq!(listing(&mut ts[1..], d, 2), vec![]);
    assert_eq!(ts[0].stat(d).unwrap().nlink, 3);
    assert_eq!(ts[0].stats().adapted_dirs, vec![]);
    let back_home = atoll_proto::SwappedDir {
        distributed: false,
        swaps: 2,
        ..one
    };
    assert_eq!(ts[0].stats().swapped_dirs, vec![back_home]);
    // A request routed by the old mode is told so.
    let old = Request::Lookup {
        dir: d,
        name: name.as_bytes(),
    };
    assert_eq!(ts[1].err(S1, USER, old), Errno::EMODE);
    assert!(matches!(ts[0].ok(S1, USER, lookup), Own::Entry(..)));
}

#[test]
fn orphaned_swap_is_resumed_by_another_session_and_cancel_keeps_the_mode() {
    let mut ts = servers();
    let d = ts[0].mkdir(ROOT, "d");
    ts[0].create(d, "a");
    let begin = |resume| AdaptStep::Begin {
        distributed: true,
        resume,
        width: N as u32,
    };
    let Own::Mode(info) = step(&mut ts[0], S2, d, begin(false)) else {
        panic!()
    };
    // Another coordinator waits for the first ...
    assert_eq!(
        step(&mut ts[0], S1, d, begin(false)),
        Own::Err(Errno::EBUSY)
    );
    // ... until it dies: then anyone may resume its swap.
    ts[0].fs.session_closed(S2);
    assert!(mode(&mut ts[0], d).orphaned);
    let Own::Mode(again) = step(&mut ts[0], S1, d, begin(true)) else {
        panic!()
    };
    assert_eq!((again.epoch, again.base_seq), (info.epoch, info.base_seq));
    assert_eq!(
        step(&mut ts[0], S1, d, AdaptStep::Cancel { epoch: 1 }),
        Own::Ok
    );
    let m = mode(&mut ts[0], d);
    assert!(!m.distributed && !m.swapping && m.epoch == 0);
    assert!(matches!(
        ts[0].ok(S1, USER, Request::Lookup { dir: d, name: b"a" }),
        Own::Entry(..)
    ));
}

#[test]
fn a_marked_directory_does_not_swap_and_a_spread_one_is_not_removed_by_one_unlink() {
    let mut ts = servers();
    let d = ts[0].mkdir(ROOT, "d");
    ts[0].ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    let begin = AdaptStep::Begin {
        distributed: true,
        resume: false,
        width: N as u32,
    };
    assert_eq!(step(&mut ts[0], S2, d, begin), Own::Err(Errno::EBUSY));
    ts[0].ok(
        S1,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: false,
        },
    );
    let Own::Mode(info) = step(&mut ts[0], S2, d, begin) else {
        panic!()
    };
    finish_swap(&mut ts, d, info);
    // rmdir by one message would only see the home shard: told to mark.
    let rmdir = Request::Unlink {
        dir: ROOT,
        name: b"d",
        kind: UnlinkKind::Directory,
        expect: Some(d),
    };
    assert_eq!(ts[0].err(S1, USER, rmdir), Errno::EMODE);
    // A mark routed by the old epoch is stale; by the new one it holds.
    assert_eq!(
        ts[0].err(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        Errno::EMODE
    );
    for t in ts.iter_mut() {
        t.ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 1 });
    }
    let rmdir = Request::Unlink {
        dir: ROOT,
        name: b"d",
        kind: UnlinkKind::Directory,
        expect: Some(d),
    };
    assert!(matches!(ts[0].ok(S1, USER, rmdir), Own::Unlinked(..)));
}

#[test]
fn policy_asks_the_busy_session_to_spread_a_big_contended_directory() {
    let mut ts = servers();
    let t = &mut ts[0];
    t.fs.set_adaptive(true);
    t.fs.adapt.policy.limits = super::super::adapt::policy::Thresholds {
        hot_ops: 8,
        hot_sessions: 2,
        min_entries: 4,
        window: std::time::Duration::from_secs(60),
        // The CPU question has its own test (`fs/adapt/policy.rs`).
        spare_cpu: false,
        ..Default::default()
    };
    let d = t.mkdir(ROOT, "d");
    let small = t.mkdir(ROOT, "small");
    for i in 0..5 {
        t.create(d, &format!("f{i}"));
    }
    for s in [S1, S2].iter().cycle().take(12) {
        t.call(
            *s,
            USER,
            Request::Lookup {
                dir: small,
                name: b"x",
            },
        );
    }
    assert_eq!(t.fs.take_adapt_notices(), vec![], "a small directory stays");
    let mut asked = vec![];
    for s in [S1, S2].iter().cycle().take(12) {
        t.call(
            *s,
            USER,
            Request::Lookup {
                dir: d,
                name: b"f1",
            },
        );
        asked.extend(t.fs.take_adapt_notices());
    }
    assert_eq!(
        asked,
        vec![(S2, d, true)],
        "once, to the session that tipped it"
    );
    t.fs.set_adaptive(false);
    for _ in 0..20 {
        t.call(
            S1,
            USER,
            Request::Lookup {
                dir: d,
                name: b"f1",
            },
        );
    }
    assert_eq!(t.fs.take_adapt_notices(), vec![]);
}

/// A swap spreads over the width the coordinator gives at `Begin` (its
/// member count), not over the servers there are: here 2 of 3, as when a
/// third member joined after the swap began (Hare §6.1.1). The third
/// holds none of the names and the mode reports the width.
#[test]
fn a_swap_spreads_over_the_width_it_began_with() {
    let mut ts = servers();
    let d = ts[0].mkdir(ROOT, "d");
    for i in 0..40 {
        ts[0].create(d, &format!("f{i}"));
    }
    let before = listing(&mut ts[..1], d, 0);
    let begin = AdaptStep::Begin {
        distributed: true,
        resume: false,
        width: 2,
    };
    let Own::Mode(info) = step(&mut ts[0], S2, d, begin) else {
        panic!()
    };
    assert_eq!((info.width, info.route_width()), (2, 2));
    finish_swap(&mut ts, d, info);
    let now = mode(&mut ts[0], d);
    assert!(now.distributed && now.width == 2 && now.epoch == 1);
    assert_eq!(listing(&mut ts, d, 1), before, "every name stays");
    assert!(
        listing(&mut ts[2..], d, 1).is_empty(),
        "none past the width"
    );
    assert!(
        !listing(&mut ts[1..2], d, 1).is_empty(),
        "the width is used"
    );
    for i in 0..40 {
        let name = format!("f{i}");
        let at = entry_server_in(d, 2, name.as_bytes());
        assert!(at < 2);
        let r = ts[at].call(
            S1,
            USER,
            Request::Lookup {
                dir: d,
                name: name.as_bytes(),
            },
        );
        assert!(matches!(r, Own::Entry(..)), "{name} on {at}: {r:?}");
    }
}

/// A directory made distributed records the width the client asked for
/// in its id, and its home server reports it as its mode.
#[test]
fn a_distributed_directory_records_its_width_in_its_id() {
    let mut ts = servers();
    let made = ts[0].call(
        S1,
        USER,
        Request::MakeNode {
            dir: ROOT,
            name: b"w",
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home: 0,
            spread: 2,
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
        },
    );
    let Own::Entry(w, _) = made else {
        panic!("{made:?}")
    };
    assert!(w.is_distributed() && w.width() == 2);
    let m = mode(&mut ts[0], w);
    assert_eq!((m.distributed, m.width, m.route_width()), (true, 2, 2));
    // A width that does not hold the home is refused.
    let bad = ts[0].call(
        S1,
        USER,
        Request::MakeNode {
            dir: ROOT,
            name: b"bad",
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home: 2,
            spread: 2,
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
        },
    );
    assert_eq!(bad, Own::Err(Errno::EINVAL));
}
