//! Data calls of a copy island (`ReadData`/`WriteData`, client
//! `msgdata.rs`): since issue 16 one carries up to 32 KiB, a frame that
//! fills several 64-byte lines of a 256 KiB ring. Reads and writes of
//! sizes around the old and new bounds (8 KiB, 32 KiB, 64 KiB, 1 MiB + 3)
//! at odd offsets print what tmpfs prints, with two servers; a write
//! that fills the instance stops part way and reports exactly the bytes
//! before `ENOSPC`. The same script runs through a remote host in
//! `hosts.rs` (`datacalls`).

use atoll_tests::{assert_same_on_tmpfs, run_in_atoll};

#[path = "datacalls/script.rs"]
mod script;
use script::script;

#[test]
fn data_calls_around_their_bounds_in_a_copy_island_are_as_on_tmpfs() {
    atoll_tests::require("python3");
    let out = assert_same_on_tmpfs(
        &["--servers", "2", "--island", "copy"],
        &script(&["write", "check"]),
        true,
    );
    // 11 sizes × 4 offsets, written then read.
    assert_eq!(out.lines().filter(|l| l.starts_with("w ")).count(), 44);
    assert_eq!(out.lines().filter(|l| l.starts_with("r ")).count(), 44);
    assert!(
        out.contains("w 1048579 32771 1048579 524290 1048579 "),
        "{out}"
    );
}

#[test]
fn a_write_filling_a_copy_island_reports_the_bytes_before_enospc() {
    atoll_tests::require("python3");
    let out = run_in_atoll(
        &["--servers", "2", "--island", "copy", "--memory", "64M"],
        &script(&["enospc"]),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("enospc True True True True errno 28\n"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
