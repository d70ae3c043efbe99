//! Data calls of a program on another host (`ReadData`/`WriteData`
//! through its node's proxy to the first node's servers): writes of up to
//! 32 KiB per call, reads of the node's 8 KiB chunks, at sizes around
//! those bounds and odd offsets, print what tmpfs prints; the bytes one
//! remote host wrote are read the same on another; a write that fills the
//! instance stops part way and reports exactly the bytes before `ENOSPC`.
//! The script is `datacalls/sizes.py` (also run in a local copy island by
//! `datacalls.rs`).

use atoll_tests::{normalized, run_in_host_dir};

use super::{first_node_servers, on, text};

#[path = "../datacalls/script.rs"]
mod script;
use script::script;

#[test]
fn data_calls_around_their_bounds_through_a_remote_host_are_as_on_tmpfs() {
    atoll_tests::require("python3");
    let Some(c) = first_node_servers() else {
        return;
    };
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir on /dev/shm");
    let (dir, host) = run_in_host_dir(dir, &script(&["write", "check"]));
    assert!(host.status.success(), "{host:?}");
    let (_, want, _) = normalized(&host, dir.path());
    let checked: String = want
        .lines()
        .filter(|l| l.starts_with("r "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(checked.lines().count(), 44, "{want}");
    // The third host writes and reads back; the second reads what it
    // wrote (no copies of either process or node in between).
    assert_eq!(text(&on(&c, 2, &script(&["write", "check"]))), want);
    assert_eq!(text(&on(&c, 1, &script(&["check"]))), checked);
}

#[test]
fn a_remote_write_filling_the_instance_reports_the_bytes_before_enospc() {
    atoll_tests::require("python3");
    let Some(c) = first_node_servers() else {
        return;
    };
    let out = on(&c, 2, &script(&["enospc"]));
    assert!(
        text(&out).contains("enospc True True True True errno 28\n"),
        "{}",
        text(&out)
    );
}
