//! Names: rename and its flags, hard links, unlink and rmdir (the
//! three-phase protocol, Hare §3.4.1), moves of directories, readdir cookies.

use super::*;

#[test]
fn rename_replaces_target_atomically() {
    let mut t = server(8);
    let (da, a) = t.create(ROOT, "a");
    t.write(S1, da, b"new", None).unwrap();
    let (db, b) = t.create(ROOT, "b");
    t.close(S1, db);
    let r = t.rename(ROOT, "a", ROOT, "b", 0).unwrap();
    assert_eq!(
        r,
        Own::Renamed(a, FileType::Regular, Some((b, FileType::Regular, true)))
    );
    assert_eq!(t.lookup(ROOT, "b"), Ok(a));
    assert_eq!(t.lookup(ROOT, "a"), Err(Errno::ENOENT));
    assert_eq!(t.stat(b), Err(Errno::ENOENT), "replaced inode freed");
    assert_eq!(t.list(ROOT, 4096), vec![".", "..", "b"]);
}

#[test]
fn rename_noreplace_and_exchange() {
    let mut t = server(8);
    let (_, a) = t.create(ROOT, "a");
    let (_, b) = t.create(ROOT, "b");
    assert_eq!(
        t.rename(ROOT, "a", ROOT, "b", RENAME_NOREPLACE),
        Err(Errno::EEXIST)
    );
    t.rename(ROOT, "a", ROOT, "b", RENAME_EXCHANGE).unwrap();
    assert_eq!((t.lookup(ROOT, "a"), t.lookup(ROOT, "b")), (Ok(b), Ok(a)));
    assert_eq!(
        t.rename(ROOT, "a", ROOT, "c", RENAME_EXCHANGE),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        t.rename(ROOT, "a", ROOT, "b", RENAME_EXCHANGE | RENAME_NOREPLACE),
        Err(Errno::EINVAL)
    );
    t.rename(ROOT, "a", ROOT, "c", RENAME_NOREPLACE).unwrap();
    assert_eq!(t.lookup(ROOT, "c"), Ok(b));
}

#[test]
fn rename_follows_linux_type_rules_for_directories() {
    let mut t = server(8);
    let d1 = t.mkdir(ROOT, "d1");
    let d2 = t.mkdir(ROOT, "d2");
    t.create(ROOT, "f");
    t.create(d2, "inside");
    assert_eq!(t.rename(ROOT, "d1", ROOT, "f", 0), Err(Errno::ENOTDIR));
    assert_eq!(t.rename(ROOT, "f", ROOT, "d1", 0), Err(Errno::EISDIR));
    assert_eq!(t.rename(ROOT, "d1", ROOT, "d2", 0), Err(Errno::ENOTEMPTY));
    t.unlink(d2, "inside", UnlinkKind::NonDirectory).unwrap();
    t.rename(ROOT, "d1", ROOT, "d2", 0).unwrap();
    assert_eq!(t.lookup(ROOT, "d2"), Ok(d1));
    // A directory moved into another records its new parent for `..`.
    let d3 = t.mkdir(ROOT, "d3");
    t.rename(ROOT, "d2", d3, "moved", 0).unwrap();
    assert_eq!(t.lookup(d1, ".."), Ok(d3));
    assert_eq!(t.stat(d3).unwrap().nlink, 3);
    assert_eq!(t.stat(ROOT).unwrap().nlink, 3, "root holds d3 only, plus f");
}

#[test]
fn hard_links_count_and_survive_unlink_of_one_name() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "f");
    t.write(S1, d, b"shared", None).unwrap();
    t.close(S1, d);
    let r = t.ok(
        S1,
        USER,
        Request::Link {
            dir: ROOT,
            name: b"g",
            ino: f,
            ftype: FileType::Regular,
            replace: false,
            moved_from: None,
        },
    );
    assert_eq!(r, Own::Linked(None));
    assert_eq!(t.stat(f).unwrap().nlink, 2);
    t.unlink(ROOT, "f", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(t.stat(f).unwrap().nlink, 1);
    let (d, _) = t.open_as(S1, USER, ROOT, "g", 0, 0).unwrap();
    assert_eq!(t.read(S1, d, 10, None).unwrap(), b"shared");
    // Cross-server style reference counting through Ref/Unref.
    t.ok(
        S1,
        USER,
        Request::Ref {
            ino: f,
            link: false,
        },
    );
    assert_eq!(t.stat(f).unwrap().nlink, 2);
    t.ok(
        S1,
        USER,
        Request::Unref {
            ino: f,
            via: None,
            replaced: false,
        },
    );
    let dir = t.mkdir(ROOT, "dir");
    // A directory being moved across servers has two names for a moment,
    // never three: a second move waits (EAGAIN) for the first.
    t.ok(
        S1,
        USER,
        Request::Ref {
            ino: dir,
            link: false,
        },
    );
    assert_eq!(
        t.err(
            S2,
            USER,
            Request::Ref {
                ino: dir,
                link: false
            }
        ),
        RETRY
    );
    t.ok(
        S1,
        USER,
        Request::Unref {
            ino: dir,
            via: None,
            replaced: false,
        },
    );
    assert!(t.stat(dir).is_ok(), "the directory keeps its one name");
    t.ok(
        S2,
        USER,
        Request::Ref {
            ino: dir,
            link: false,
        },
    );
    t.ok(
        S2,
        USER,
        Request::Unref {
            ino: dir,
            via: None,
            replaced: false,
        },
    );
}

#[test]
fn directory_moved_by_link_then_unlink_keeps_its_entries() {
    // The client's cross-server rename: Link the new name, then Unlink
    // the old one with kind Move (an rmdir's kind Directory would refuse:
    // the directory is not empty).
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    let d = t.mkdir(a, "d");
    let (_, f) = t.create(d, "f");
    let link = Request::Link {
        dir: b,
        name: b"d",
        ino: d,
        ftype: FileType::Directory,
        replace: true,
        moved_from: None,
    };
    assert_eq!(t.ok(S1, USER, link), Own::Linked(None));
    assert_eq!(
        t.unlink(a, "d", UnlinkKind::Directory),
        Err(Errno::ENOTEMPTY),
        "an rmdir never removes a non-empty directory, moving or not"
    );
    let unlink = Request::Unlink {
        dir: a,
        name: b"d",
        kind: UnlinkKind::Move,
        expect: None,
    };
    assert_eq!(t.err(S1, USER, unlink), Errno::EINVAL, "Move needs expect");
    let unlink = Request::Unlink {
        dir: a,
        name: b"d",
        kind: UnlinkKind::Move,
        expect: Some(d),
    };
    assert_eq!(
        t.call(S1, USER, unlink),
        Own::Unlinked(d, FileType::Directory, true)
    );
    t.ok(S1, USER, Request::SetParent { dir: d, parent: b });
    assert_eq!(t.lookup(d, "f"), Ok(f));
    assert_eq!(t.lookup(d, ".."), Ok(b));
    assert_eq!(t.stat(d).unwrap().nlink, 2);
    t.create(d, "g");
}

#[test]
fn unlinked_open_file_lives_until_last_close() {
    let mut t = server(8);
    let (d, f) = t.create(ROOT, "tmp");
    t.write(S1, d, b"still here", None).unwrap();
    t.ok(S1, USER, share_req(d, S2, 0));
    let r = t.unlink(ROOT, "tmp", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(r, Own::Unlinked(f, FileType::Regular, true));
    assert_eq!(t.lookup(ROOT, "tmp"), Err(Errno::ENOENT));
    assert_eq!(t.stat(f).unwrap().nlink, 0);
    t.close(S1, d);
    assert_eq!(t.read(S2, d, 100, Some(0)).unwrap(), b"still here");
    assert_eq!(t.stats().blocks_used, 1);
    t.close(S2, d);
    assert_eq!(t.stat(f), Err(Errno::ENOENT));
    assert_eq!(t.stats().blocks_used, 0);
    assert_eq!(t.stats().open_descriptions, 0);
}

#[test]
fn unlink_and_rmdir_check_types_and_emptiness() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    t.create(d, "f");
    assert_eq!(
        t.unlink(ROOT, "d", UnlinkKind::NonDirectory),
        Err(Errno::EISDIR)
    );
    assert_eq!(t.unlink(d, "f", UnlinkKind::Directory), Err(Errno::ENOTDIR));
    assert_eq!(
        t.unlink(ROOT, "d", UnlinkKind::Directory),
        Err(Errno::ENOTEMPTY)
    );
    assert_eq!(
        t.unlink(ROOT, ".", UnlinkKind::Directory),
        Err(Errno::EINVAL)
    );
    t.unlink(d, "f", UnlinkKind::NonDirectory).unwrap();
    let e = t.call(
        S1,
        USER,
        Request::Unlink {
            dir: ROOT,
            name: b"d",
            kind: UnlinkKind::Directory,
            expect: Some(ROOT),
        },
    );
    assert_eq!(e, Own::Err(Errno::ESTALE));
    t.unlink(ROOT, "d", UnlinkKind::Directory).unwrap();
    assert_eq!(t.stat(d), Err(Errno::ENOENT));
    // Creating in a removed directory fails.
    assert_eq!(
        t.open_as(S1, USER, d, "x", RW | CREAT, 0o644).unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn three_phase_rmdir_holds_creations_until_commit_or_abort() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    t.create(d, "f");
    assert_eq!(
        t.err(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        Errno::ENOTEMPTY
    );
    t.unlink(d, "f", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    // A concurrent rmdir waits for the outcome (never EBUSY), and only the
    // marking session decides it.
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    assert_eq!(
        t.err(
            S2,
            USER,
            Request::FinishRmdir {
                dir: d,
                commit: true
            }
        ),
        Errno::EINVAL
    );
    assert_eq!(
        t.open_as(S1, USER, d, "g", RW | CREAT, 0o644).unwrap_err(),
        RETRY
    );
    assert_eq!(t.lookup(d, "g"), Err(Errno::ENOENT), "lookups proceed");
    t.ok(
        S1,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: false,
        },
    );
    t.create(d, "g");
    t.unlink(d, "g", UnlinkKind::NonDirectory).unwrap();
    t.ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    t.unlink(ROOT, "d", UnlinkKind::Directory).unwrap();
    t.ok(
        S1,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: true,
        },
    );
    assert_eq!(
        t.open_as(S1, USER, d, "h", RW | CREAT, 0o644).unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn rmdir_losers_wait_then_see_enoent_and_dead_markers_release() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    t.ok(S1, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    // The marking process dies mid-rmdir: its mark is aborted, so the
    // waiter goes on and creations are possible again.
    t.fs.session_closed(S1);
    t.create(d, "f");
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        Errno::ENOTEMPTY
    );
    t.unlink(d, "f", UnlinkKind::NonDirectory).unwrap();
    t.ok(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    t.call(
        S2,
        USER,
        Request::Unlink {
            dir: ROOT,
            name: b"d",
            kind: UnlinkKind::Directory,
            expect: Some(d),
        },
    );
    t.ok(
        S2,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: true,
        },
    );
    // The loser of the race, after waiting: ENOENT as on Linux.
    assert_eq!(
        t.err(SessionId(3), USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        Errno::ENOENT
    );
}

/// A cross-server move (`Ref`, `Link` new name, `Unlink` old name) and an
/// rmdir of the moved directory exclude each other at the directory's
/// owner: an rmdir waits while a move holds its second name, and a move
/// cannot start on a directory an rmdir has marked or removed. Otherwise
/// the move's new name could outlive the directory (Hare §3.4.1).
#[test]
fn moves_and_rmdirs_of_one_directory_exclude_each_other() {
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    let d = t.mkdir(a, "d");
    let link = Request::Link {
        dir: b,
        name: b"d",
        ino: d,
        ftype: FileType::Directory,
        replace: false,
        moved_from: None,
    };
    // A move whose new name lives on another server holds a `Ref` here:
    // an rmdir waits, whether it marks or is one Unlink.
    t.ok(
        S1,
        USER,
        Request::Ref {
            ino: d,
            link: false,
        },
    );
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    assert_eq!(t.unlink(a, "d", UnlinkKind::Directory).unwrap_err(), RETRY);
    t.ok(
        S1,
        USER,
        Request::Unref {
            ino: d,
            via: None,
            replaced: false,
        },
    );
    // One whose new name lives here: its `Link` counts the second name.
    t.ok(S1, USER, link);
    assert_eq!(
        t.err(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 }),
        RETRY
    );
    assert_eq!(t.unlink(a, "d", UnlinkKind::Directory).unwrap_err(), RETRY);
    // No third name, and the provisional name stays put for the undo.
    let third = Request::Link {
        dir: ROOT,
        name: b"third",
        ino: d,
        ftype: FileType::Directory,
        replace: false,
        moved_from: None,
    };
    assert_eq!(t.err(S2, USER, third), RETRY);
    assert_eq!(t.err(S2, USER, rename_req(b, "d", "elsewhere")), RETRY);
    t.call(
        S1,
        USER,
        Request::Unlink {
            dir: a,
            name: b"d",
            kind: UnlinkKind::Move,
            expect: Some(d),
        },
    );
    // The move is done: the rmdir goes ahead under the new name.
    t.ok(S2, USER, Request::MarkRmdir { dir: d, epoch: 0 });
    // A marked directory cannot start a move; the mover waits.
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::Ref {
                ino: d,
                link: false
            }
        ),
        RETRY
    );
    let link_back = || Request::Link {
        dir: a,
        name: b"d",
        ino: d,
        ftype: FileType::Directory,
        replace: false,
        moved_from: None,
    };
    assert_eq!(t.err(S1, USER, link_back()), RETRY);
    t.unlink(b, "d", UnlinkKind::Directory).unwrap();
    t.ok(
        S2,
        USER,
        Request::FinishRmdir {
            dir: d,
            commit: true,
        },
    );
    // ... and after the commit learns it is gone.
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::Ref {
                ino: d,
                link: false
            }
        ),
        Errno::ENOENT
    );
    assert_eq!(t.err(S1, USER, link_back()), Errno::ENOENT);
}

#[test]
fn unfinished_directory_moves_are_undone_when_the_session_dies() {
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    let d = t.mkdir(a, "d");
    let (_, f) = t.create(d, "f");
    let link = |name: &'static [u8]| Request::Link {
        dir: b,
        name,
        ino: d,
        ftype: FileType::Directory,
        replace: true,
        moved_from: None,
    };
    // Died after `Link`, before `Unlink` of the old name: the provisional
    // new name goes, the directory keeps its one name and its link count.
    t.ok(S2, USER, link(b"d"));
    t.fs.session_closed(S2);
    assert_eq!(t.lookup(b, "d"), Err(Errno::ENOENT));
    assert_eq!(t.lookup(a, "d"), Ok(d));
    assert_eq!(t.lookup(d, "f"), Ok(f));
    t.ok(
        S1,
        USER,
        Request::Ref {
            ino: d,
            link: false,
        },
    ); // one name again: not RETRY
    t.ok(
        S1,
        USER,
        Request::Unref {
            ino: d,
            via: None,
            replaced: false,
        },
    );
    // Died after `Ref` only: the owner drops the extra link.
    t.ok(
        S2,
        USER,
        Request::Ref {
            ino: d,
            link: false,
        },
    );
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::Ref {
                ino: d,
                link: false
            }
        ),
        RETRY
    );
    t.fs.session_closed(S2);
    t.ok(
        S1,
        USER,
        Request::Ref {
            ino: d,
            link: false,
        },
    );
    t.ok(
        S1,
        USER,
        Request::Unref {
            ino: d,
            via: None,
            replaced: false,
        },
    );
    // A finished move (`MoveDone`) survives its session.
    t.ok(S2, USER, link(b"e"));
    t.ok(
        S2,
        USER,
        Request::Unlink {
            dir: a,
            name: b"d",
            kind: UnlinkKind::Move,
            expect: Some(d),
        },
    );
    t.ok(S2, USER, Request::MoveDone { dir: b, name: b"e" });
    t.fs.session_closed(S2);
    assert_eq!(t.lookup(b, "e"), Ok(d));
    assert_eq!(t.lookup(d, "f"), Ok(f));
    assert_eq!(t.stat(b).unwrap().nlink, 3);
    assert_eq!(t.stat(a).unwrap().nlink, 2);
}

#[test]
fn a_directory_replaced_by_rename_must_be_marked_when_its_entries_live_elsewhere() {
    let mut t = server_n(0, 2, 8);
    let mk = |t: &mut T, name: &'static str, home: u8, distributed: bool| match t.ok(
        S1,
        USER,
        Request::MakeNode {
            dir: ROOT,
            name: name.as_bytes(),
            ftype: FileType::Directory,
            perm: 0o755,
            rdev: 0,
            target: b"",
            home,
            spread: if distributed { 2 } else { 0 },
            inherit: atoll_proto::Inherit::Unread,
            umask: 0,
        },
    ) {
        Own::Entry(ino, _) => ino,
        other => panic!("{other:?}"),
    };
    mk(&mut t, "s", 0, false);
    let dist = mk(&mut t, "dist", 0, true);
    let remote = mk(&mut t, "remote", 1, false);
    let local = mk(&mut t, "local", 0, false);
    // Entries of `dist` may be on server 1, of `remote` are: not here.
    assert_eq!(t.rename(ROOT, "s", ROOT, "dist", 0), Err(Errno::ESTALE));
    assert_eq!(t.rename(ROOT, "s", ROOT, "remote", 0), Err(Errno::ESTALE));
    // Another process's mark (its rmdir under way) vouches nothing for us.
    t.ok(
        S2,
        USER,
        Request::MarkRmdir {
            dir: dist,
            epoch: 0,
        },
    );
    assert_eq!(t.rename(ROOT, "s", ROOT, "dist", 0), Err(Errno::ESTALE));
    t.ok(
        S2,
        USER,
        Request::FinishRmdir {
            dir: dist,
            commit: false,
        },
    );
    t.ok(
        S1,
        USER,
        Request::MarkRmdir {
            dir: dist,
            epoch: 0,
        },
    );
    assert!(t.rename(ROOT, "s", ROOT, "dist", 0).is_ok());
    assert_ne!(t.lookup(ROOT, "dist"), Ok(dist));
    let here = (0..)
        .map(|i| format!("x{i}"))
        .find(|n| entry_server(dist, n.as_bytes(), 2) == 0)
        .unwrap();
    assert_eq!(
        t.err(
            S1,
            USER,
            Request::MakeNode {
                dir: dist,
                name: here.as_bytes(),
                ftype: FileType::Regular,
                perm: 0o644,
                rdev: 0,
                target: b"",
                home: 0,
                spread: 0,
                inherit: atoll_proto::Inherit::Unread,
                umask: 0,
            }
        ),
        Errno::ENOENT,
        "the replaced directory is gone here"
    );
    let flag = atoll_proto::RENAME_VICTIM_MARKED;
    assert!(t.rename(ROOT, "dist", ROOT, "remote", flag).is_ok());
    // A victim whose entries are all here needs no mark.
    assert!(t.rename(ROOT, "remote", ROOT, "local", 0).is_ok());
    assert_eq!(t.stat(local), Err(Errno::ENOENT));
    assert_eq!(t.stat(remote), Err(Errno::ENOENT));
}

#[test]
fn relink_exchanges_names_and_is_undone_if_the_session_dies() {
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let b = t.mkdir(ROOT, "b");
    t.create(a, "f");
    let (_, g) = t.create(ROOT, "g");
    let relink = |name: &'static [u8], ino, ftype, expect| Request::Relink {
        dir: ROOT,
        name,
        ino,
        ftype,
        expect,
    };
    assert_eq!(
        t.err(S1, USER, relink(b"a", b, FileType::Directory, g)),
        Errno::ESTALE,
        "the entry must still name the expected inode"
    );
    // A finished exchange of a directory and a file: entries and link
    // counts stay, each inode under the other's name.
    t.ok(S1, USER, relink(b"a", g, FileType::Regular, a));
    t.ok(S1, USER, relink(b"g", a, FileType::Directory, g));
    t.ok(
        S1,
        USER,
        Request::MoveDone {
            dir: ROOT,
            name: b"a",
        },
    );
    t.ok(
        S1,
        USER,
        Request::MoveDone {
            dir: ROOT,
            name: b"g",
        },
    );
    t.fs.session_closed(S1);
    assert_eq!(t.lookup(ROOT, "a"), Ok(g));
    assert_eq!(t.lookup(ROOT, "g"), Ok(a));
    assert!(t.lookup(a, "f").is_ok());
    assert_eq!(t.stat(g).unwrap().nlink, 1);
    assert_eq!(t.stat(ROOT).unwrap().nlink, 4);
    // An unfinished one (the process died between the two halves): the
    // provisional name names its inode again.
    t.ok(S2, USER, relink(b"b", a, FileType::Directory, b));
    assert_eq!(t.lookup(ROOT, "b"), Ok(a));
    t.fs.session_closed(S2);
    assert_eq!(t.lookup(ROOT, "b"), Ok(b));
    assert_eq!(t.lookup(ROOT, "g"), Ok(a));
    assert_eq!(t.stat(ROOT).unwrap().nlink, 4);
}

#[test]
fn the_directory_move_lock_excludes_other_sessions_until_released_or_dead() {
    let mut t = server(8);
    let lock = |acquire| Request::RenameLock { acquire };
    t.ok(S1, USER, lock(true));
    // Threads of one process share a session: they wait for each other.
    assert_eq!(t.err(S1, USER, lock(true)), RETRY);
    assert_eq!(t.err(S2, USER, lock(true)), RETRY);
    assert_eq!(t.err(S2, USER, lock(false)), Errno::EINVAL);
    t.ok(S1, USER, lock(false));
    t.ok(S2, USER, lock(true));
    t.fs.session_closed(S2);
    t.ok(S1, USER, lock(true));
}

#[test]
fn readdir_lists_dot_entries_first_and_resumes_by_cookie() {
    let mut t = server(8);
    let d = t.mkdir(ROOT, "d");
    for i in 0..50 {
        t.create(d, &format!("file-{i:02}"));
    }
    let all = t.list(d, 200);
    assert_eq!(&all[..2], &[".", ".."]);
    assert_eq!(all.len(), 52);
    let e = t.err(
        S1,
        USER,
        Request::ReadDir {
            dir: d,
            cookie: 0,
            max_bytes: 10,
            epoch: 0,
        },
    );
    assert_eq!(e, Errno::EINVAL);
}

#[test]
fn readdir_cookies_neither_lose_nor_duplicate_entries_across_changes() {
    let mut t = server(8);
    for i in 0..40 {
        t.create(ROOT, &format!("keep-{i:02}"));
    }
    let mut seen = vec![];
    let mut cookie = 0;
    let mut round = 0;
    loop {
        let Own::Dirents(data, end) = t.ok(
            S1,
            USER,
            Request::ReadDir {
                dir: ROOT,
                cookie,
                max_bytes: 128,
                epoch: 0,
            },
        ) else {
            panic!()
        };
        for (_, off, _, name) in parse_dirents(&data) {
            seen.push(String::from_utf8(name).unwrap());
            cookie = off;
        }
        if end {
            break;
        }
        // Churn between calls: add, remove and rename other entries.
        round += 1;
        t.create(ROOT, &format!("new-{round}"));
        t.unlink(ROOT, &format!("new-{round}"), UnlinkKind::NonDirectory)
            .unwrap();
        t.create(ROOT, &format!("tmp-{round}"));
        t.rename(
            ROOT,
            &format!("tmp-{round}"),
            ROOT,
            &format!("moved-{round}"),
            0,
        )
        .unwrap();
    }
    let keep: Vec<_> = seen.iter().filter(|n| n.starts_with("keep-")).collect();
    assert_eq!(keep.len(), 40, "every stable entry exactly once");
    let mut dedup = seen.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), seen.len(), "no duplicates: {seen:?}");
}

// ---------------------------------------------------------------- sessions

/// `Names` lists every entry held here that names the inode, in whichever
/// directory, and follows renames and removals.
#[test]
fn names_lists_the_entries_naming_an_inode() {
    let mut t = server(8);
    let a = t.mkdir(ROOT, "a");
    let (_, f) = t.create(a, "f");
    let link = Request::Link {
        dir: ROOT,
        name: b"g",
        ino: f,
        ftype: FileType::Regular,
        replace: false,
        moved_from: None,
    };
    assert_eq!(t.ok(S1, USER, link), Own::Linked(None));
    let names = |t: &mut T, ino| match t.ok(S1, USER, Request::Names { ino }) {
        Own::Bytes(b) => {
            let mut v: Vec<(InodeId, Vec<u8>)> = atoll_proto::parse_names(&b)
                .map(|(d, n)| (d, n.to_vec()))
                .collect();
            v.sort();
            v
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        names(&mut t, f),
        vec![(ROOT, b"g".to_vec()), (a, b"f".to_vec())]
    );
    t.rename(a, "f", ROOT, "h", 0).unwrap();
    t.unlink(ROOT, "g", UnlinkKind::NonDirectory).unwrap();
    assert_eq!(names(&mut t, f), vec![(ROOT, b"h".to_vec())]);
    assert_eq!(names(&mut t, a), vec![(ROOT, b"a".to_vec())]);
}
