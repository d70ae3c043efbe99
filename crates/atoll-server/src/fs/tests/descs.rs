//! Open descriptions: session death, sharing across sessions, and record
//! locks (POSIX, OFD, flock).

use super::*;

#[test]
fn session_death_releases_descriptions_and_locks() {
    let mut t = server(8);
    let base = t.stats();
    let (d, _) = t.create(ROOT, "f");
    let (d2, _) = t.open_as(S2, USER, ROOT, "f", RW, 0).unwrap();
    let lock = LockSpec {
        kind: locks::WR,
        start: 0,
        len: 0,
        owner: LockOwner::Process(S1.0),
        pid: 0,
    };
    t.ok(S1, USER, Request::SetLock { desc: d, lock });
    let theirs = LockSpec {
        owner: LockOwner::Process(S2.0),
        ..lock
    };
    assert_eq!(
        t.err(
            S2,
            USER,
            Request::SetLock {
                desc: d2,
                lock: theirs
            }
        ),
        Errno::EAGAIN
    );
    t.fs.session_closed(S1);
    assert_eq!(t.stats().open_descriptions, 1);
    t.ok(
        S2,
        USER,
        Request::SetLock {
            desc: d2,
            lock: theirs,
        },
    );
    t.fs.session_closed(S2);
    let after = t.stats();
    assert_eq!(after.open_descriptions, base.open_descriptions);
    assert_eq!(after.sessions, 0);
    // The description is gone for everyone.
    assert_eq!(t.read(S1, d, 1, Some(0)), Err(Errno::EBADF));
}

#[test]
fn share_gives_another_session_a_counted_reference() {
    let mut t = server(8);
    let (d, _) = t.create(ROOT, "f");
    assert_eq!(
        t.read(S2, d, 1, None),
        Err(Errno::EBADF),
        "not S2's description"
    );
    t.ok(S1, USER, share_req(d, S2, 0));
    t.ok(S1, USER, share_req(d, S2, 1));
    t.write(S1, d, b"abc", None).unwrap();
    // The offset is shared: S2 continues where S1 stopped.
    t.write(S2, d, b"def", None).unwrap();
    assert_eq!(t.read(S1, d, 10, Some(0)).unwrap(), b"abcdef");
    t.close(S1, d);
    t.close(S2, d);
    assert_eq!(t.stats().open_descriptions, 1);
    t.close(S2, d);
    assert_eq!(t.stats().open_descriptions, 0);
    assert_eq!(t.err(S2, USER, Request::Close { desc: d }), Errno::EBADF);
}

#[test]
fn a_passed_description_stays_open_in_flight_until_its_receiver_takes_it() {
    let mut t = server(8);
    let (d, _) = t.create(ROOT, "f");
    let flight = SessionId::in_flight(42);
    t.ok(S1, USER, share_req(d, flight, 0));
    // The sender closes before the receiver takes it: the description
    // lives on, as a file in a socket's queue does.
    t.close(S1, d);
    assert_eq!(t.stats().open_descriptions, 1);
    let s3 = SessionId(3);
    t.fs.session_opened(s3);
    t.ok(
        s3,
        USER,
        Request::Receive {
            desc: d,
            from: flight,
        },
    );
    t.write(s3, d, b"abc", Some(0)).unwrap();
    // Sent again after a server died: already taken, still Ok.
    t.ok(
        s3,
        USER,
        Request::Receive {
            desc: d,
            from: flight,
        },
    );
    // Nobody else can take it, nor take it as a holder.
    assert_eq!(
        t.err(
            S2,
            USER,
            Request::Receive {
                desc: d,
                from: flight
            }
        ),
        Errno::EBADF
    );
    assert_eq!(
        t.err(S2, USER, Request::Receive { desc: d, from: S1 }),
        Errno::EINVAL
    );
    t.close(s3, d);
    assert_eq!(t.stats().open_descriptions, 0);
    assert!(
        t.fs.open_sessions().iter().all(|s| !s.is_in_flight()),
        "the in-flight holder is gone"
    );
}

#[test]
fn a_description_passed_to_a_process_that_holds_it_keeps_one_reference() {
    let mut t = server(8);
    let (d, _) = t.create(ROOT, "f");
    t.ok(S1, USER, share_req(d, S2, 0));
    let flight = SessionId::in_flight(7);
    t.ok(S1, USER, share_req(d, flight, 0));
    t.ok(
        S2,
        USER,
        Request::Receive {
            desc: d,
            from: flight,
        },
    );
    t.close(S1, d);
    // S2's one reference stands for both of its descriptors.
    t.close(S2, d);
    assert_eq!(t.stats().open_descriptions, 0);
}

// ---------------------------------------------------------------- locks

#[test]
fn getlk_reports_the_conflicting_lock_and_close_releases_posix_locks() {
    let mut t = server(8);
    let (d1, _) = t.create(ROOT, "f");
    let (d2, _) = t.open_as(S2, USER, ROOT, "f", RW, 0).unwrap();
    let mine = LockSpec {
        kind: locks::RD,
        start: 10,
        len: 20,
        owner: LockOwner::Process(S1.0),
        pid: 0,
    };
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d1,
            lock: mine,
        },
    );
    let probe = LockSpec {
        kind: locks::WR,
        start: 0,
        len: 15,
        owner: LockOwner::Process(S2.0),
        pid: 0,
    };
    assert_eq!(
        t.ok(
            S2,
            USER,
            Request::GetLock {
                desc: d2,
                lock: probe
            }
        ),
        Own::Lock(Some(mine))
    );
    let read_probe = LockSpec {
        kind: locks::RD,
        ..probe
    };
    assert_eq!(
        t.ok(
            S2,
            USER,
            Request::GetLock {
                desc: d2,
                lock: read_probe
            }
        ),
        Own::Lock(None)
    );
    // Closing any descriptor of the file drops the process's locks.
    let (extra, _) = t.open_as(S1, USER, ROOT, "f", 0, 0).unwrap();
    t.close(S1, extra);
    assert_eq!(
        t.ok(
            S2,
            USER,
            Request::GetLock {
                desc: d2,
                lock: probe
            }
        ),
        Own::Lock(None)
    );
}

#[test]
fn ofd_and_flock_locks_belong_to_the_description() {
    let mut t = server(8);
    let (d1, _) = t.create(ROOT, "f");
    let (d2, _) = t.open_as(S1, USER, ROOT, "f", RW, 0).unwrap();
    let ofd = |d| LockSpec {
        kind: locks::WR,
        start: 0,
        len: 0,
        owner: LockOwner::Description(d),
        pid: 0,
    };
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d1,
            lock: ofd(d1),
        },
    );
    // Same process, other description: OFD locks conflict.
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::SetLock {
                desc: d2,
                lock: ofd(d2)
            }
        ),
        Errno::EAGAIN
    );
    // flock is a separate namespace.
    let fl = |d| LockSpec {
        kind: locks::WR,
        start: 0,
        len: 0,
        owner: LockOwner::Flock(d),
        pid: 0,
    };
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d2,
            lock: fl(d2),
        },
    );
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::SetLock {
                desc: d1,
                lock: fl(d1)
            }
        ),
        Errno::EAGAIN
    );
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::SetLock {
                desc: d1,
                lock: fl(d2)
            }
        ),
        Errno::EINVAL
    );
    t.close(S1, d1);
    t.ok(
        S1,
        USER,
        Request::SetLock {
            desc: d2,
            lock: ofd(d2),
        },
    );
    // A read lock needs a readable description.
    let (wo, _) = t
        .open_as(S1, USER, ROOT, "f", libc::O_WRONLY as u32, 0)
        .unwrap();
    let rd = LockSpec {
        kind: locks::RD,
        start: 0,
        len: 1,
        owner: LockOwner::Process(S1.0),
        pid: 0,
    };
    assert_eq!(
        t.err(S1, USER, Request::SetLock { desc: wo, lock: rd }),
        Errno::EBADF
    );
}

// ---------------------------------------------------------------- permissions

/// `SessionEnded` says whether the server still holds anything of a
/// session: a description shared with it at its fork (before it had a
/// channel here), or its channel; `Ok` once its end was served.
#[test]
fn session_ended_waits_for_the_end_of_what_a_session_holds() {
    let mut t = server(8);
    let child = SessionId(7);
    let ended = |t: &mut T| t.call(S1, USER, Request::SessionEnded { session: child });
    assert!(matches!(ended(&mut t), Own::Ok), "never heard of");
    let (d, _) = t.create(ROOT, "f");
    t.ok(S1, USER, share_req(d, child, 0));
    assert_eq!(
        t.err(S1, USER, Request::SessionEnded { session: child }),
        Errno::EAGAIN,
        "a shared description"
    );
    t.fs.session_closed(child);
    assert!(matches!(ended(&mut t), Own::Ok));
    // A channel alone counts too.
    t.fs.session_opened(child);
    assert_eq!(
        t.err(S1, USER, Request::SessionEnded { session: child }),
        Errno::EAGAIN,
        "a channel"
    );
    t.fs.session_closed(child);
    assert!(matches!(ended(&mut t), Own::Ok));
    // The parent's own reference is untouched.
    t.write(S1, d, b"abc", Some(0)).unwrap();
}
