//! A remote program's copies of file data (client `rcache.rs`): reads it
//! repeats are answered from memory, and what close-to-open promises
//! holds — an open sees every write closed before it, a program reads
//! its own writes, a lock drops the copies, and a file's last partial
//! chunk is always asked again, so a growing file is followed.

use super::{cluster, node_counters, on, text, LIMIT};
use atoll_tests::output_within;

/// The reader on host C (no servers there). Each step waits for a flag
/// file that host A makes after changing `data` in place.
const READER: &str = r#"
import fcntl, os, sys, time
root = os.environ["ROOT"]
path = root + "/data"
def flag(name):
    open(root + "/" + name, "w").close()
def wait_for(name):
    deadline = time.time() + 60
    while not os.path.exists(root + "/" + name):
        if time.time() > deadline:
            sys.exit("no " + name)
        time.sleep(0.02)
def first(fd, n=4):
    return os.pread(fd, n, 0).decode()
fd = os.open(path, os.O_RDONLY)
whole = os.pread(fd, 40000, 0)
print("read", len(whole), whole[:4].decode())
print("again", os.pread(fd, 40000, 0) == whole)
flag("read-1")
wait_for("rewrote-2")
print("kept open", first(fd))
fd2 = os.open(path, os.O_RDONLY)
print("reopened", first(fd2), "and the first descriptor now", first(fd))
w = os.open(path, os.O_RDWR)
os.pwrite(w, b"mine", 0)
print("own write", first(fd))
flag("wrote-own")
wait_for("rewrote-3")
print("before the lock", first(fd))
fcntl.lockf(w, fcntl.LOCK_SH)
print("under the lock", first(fd))
fcntl.lockf(w, fcntl.LOCK_UN)
flag("locked")
wait_for("appended")
tail = os.pread(fd, 200, 32768)
print("past the last whole chunk", len(tail), tail[-4:].decode())
"#;

/// A file of 4 whole chunks (8 KiB) and a partial one, on host A.
const WRITE_A: &str = "python3 -c 'import sys; sys.stdout.write(\"A\" * 32868)' > $ROOT/data";

fn rewrite(letter: char) -> String {
    format!(
        "python3 -c 'import os; fd = os.open(\"/atoll/data\", os.O_WRONLY); \
         os.pwrite(fd, b\"{letter}\" * 32868, 0); os.close(fd)'"
    )
}

fn wait_then(flag: &str, then: &str) -> String {
    format!("while [ ! -e $ROOT/{flag} ]; do sleep 0.02; done; {then}")
}

#[test]
fn a_remote_reader_keeps_copies_with_close_to_open_consistency() {
    let Some(c) = cluster() else { return };
    on(&c, 0, WRITE_A);
    let script = format!("python3 -c '{}'", READER.replace('\'', "'\\''"));
    let reader = c.exec(&atoll_tests::atoll_bin(), 2, &script);
    let reader = std::thread::spawn(move || output_within(reader, LIMIT));
    on(
        &c,
        0,
        &wait_then(
            "read-1",
            &format!("{} && : > $ROOT/rewrote-2", rewrite('B')),
        ),
    );
    on(
        &c,
        0,
        &wait_then(
            "wrote-own",
            &format!("{} && : > $ROOT/rewrote-3", rewrite('C')),
        ),
    );
    on(
        &c,
        0,
        &wait_then("locked", "printf TAIL >> $ROOT/data && : > $ROOT/appended"),
    );
    let out = reader.join().expect("reader thread");
    assert!(
        out.status.success(),
        "reader: {}\n{}",
        text(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text(&out),
        "read 32868 AAAA\n\
         again True\n\
         kept open AAAA\n\
         reopened BBBB and the first descriptor now BBBB\n\
         own write mine\n\
         before the lock mine\n\
         under the lock CCCC\n\
         past the last whole chunk 104 TAIL\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The reader's counters reach the first node's status shortly after
    // it exits (posted at exit): reads from copies ("again", "kept open",
    // "before the lock") and reads that fetched.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let counted = |k: &serde_json::Value, name: &str| k[name].as_u64().unwrap_or(0);
    loop {
        let k = node_counters(&c, 0);
        let (hits, fetches) = (
            counted(&k, "remote_copies.hits"),
            counted(&k, "remote_copies.fetches"),
        );
        if hits >= 2 && fetches >= 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "remote copy counters not reported: hits {hits}, fetches {fetches}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A file of ten whole chunks (8 KiB) and a partial one, bytes `seed`..
fn pattern(seed: u8) -> String {
    format!(
        "python3 -c 'import sys; sys.stdout.buffer.write(bytes((i * 7 + {seed}) % 251 for i in range(82020)))'"
    )
}

/// A program that opens the file itself (a descriptor inherited across
/// `execve` is read as usual, not from copies).
const READ_SHARED: &str = "md5sum $ROOT/shared | cut -d' ' -f1";

/// The md5 sum `pattern(seed)` has, computed on this host.
fn pattern_sum(seed: u8) -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("{} | md5sum | cut -d' ' -f1", pattern(seed))])
        .output()
        .unwrap();
    assert!(out.status.success());
    text(&out)
}

fn copies_counters(c: &atoll_bench::hosts::Cluster, k: usize) -> (u64, u64, u64) {
    let n = node_counters(c, k);
    let get = |name: &str| n[name].as_u64().unwrap_or(0);
    (
        get("node_copies.hits"),
        get("node_copies.fetches"),
        get("node_copies.bytes"),
    )
}

/// Read-ahead fetches node `k` sent (`node/copies.rs` `read_ahead`).
fn ahead_count(c: &atoll_bench::hosts::Cluster, k: usize) -> u64 {
    node_counters(c, k)["node_copies.ahead"]
        .as_u64()
        .unwrap_or(0)
}

/// Two programs on host C read the same file: the second is answered by
/// C's node (its proxy's copies, `node/copies.rs`) instead of the first
/// host's servers, with the file's bytes. Another host then rewrites the
/// file in place; a program on C that opens it afterwards reads the new
/// bytes (close-to-open), though the node held the old ones.
#[test]
fn programs_of_one_node_share_its_copies_with_close_to_open_consistency() {
    let Some(c) = cluster() else { return };
    on(&c, 0, &format!("{} > $ROOT/shared", pattern(1)));
    let (_, f0, _) = copies_counters(&c, 2);
    let a0 = ahead_count(&c, 2);
    let first = on(&c, 2, READ_SHARED);
    assert_eq!(text(&first), pattern_sum(1));
    let (h1, f1, held) = copies_counters(&c, 2);
    let a1 = ahead_count(&c, 2);
    // A file nobody on C read before: its first read crosses, and the
    // node reads the other whole chunks ahead of the reader (`ahead.rs`).
    assert!(f1 > f0, "the first read crossed: {f0} → {f1}");
    // `md5sum` reads 32 KiB at a time: its first read (chunks 0..=3)
    // crosses and is kept; the node fetches 4..=7 and 8..=9 in its steps.
    assert_eq!(a1 - a0, 2, "chunks 4..=9 read ahead in two fetches");
    assert!(
        held >= 10 * 8192,
        "the node keeps its ten whole chunks: {held}"
    );
    let second = on(&c, 2, READ_SHARED);
    assert_eq!(text(&second), pattern_sum(1));
    let (h2, f2, _) = copies_counters(&c, 2);
    // The second reader's whole chunks come from the node. Not every one
    // need: a read that finds the program's reply ring full with nothing
    // owed crosses (`edge.rs` `answered_here`). So: answered here, and
    // nothing more read ahead (every chunk is held).
    assert!(
        h2 > h1,
        "the second reader's chunks come from the node: hits {h1} → {h2}"
    );
    assert_eq!(ahead_count(&c, 2), a1, "fetches {f0} → {f1} → {f2}");
    // B rewrites the file in place (same size) and closes it.
    on(
        &c,
        1,
        &format!(
            "{} > /tmp/new && python3 -c 'import os; fd = os.open(\"/atoll/shared\", os.O_WRONLY); \
             os.pwrite(fd, open(\"/tmp/new\", \"rb\").read(), 0); os.close(fd)'",
            pattern(2)
        ),
    );
    let after = on(&c, 2, READ_SHARED);
    assert_eq!(text(&after), pattern_sum(2), "C read the old bytes");
    let (h3, f3, _) = copies_counters(&c, 2);
    let a3 = ahead_count(&c, 2);
    assert_eq!(a3 - a1, 2, "the new bytes were read ahead again");
    let again = on(&c, 2, READ_SHARED);
    assert_eq!(text(&again), pattern_sum(2));
    let (h4, f4, _) = copies_counters(&c, 2);
    assert!(h4 > h3, "the new bytes are shared too: hits {h3} → {h4}");
    assert_eq!(ahead_count(&c, 2), a3, "fetches {f2} → {f3} → {f4}");
}

/// `--without node-copies`: the same two readers, and nothing is answered
/// by the node or kept there; the bytes are the file's.
#[test]
fn without_node_copies_every_read_a_program_misses_crosses() {
    let Some(c) = super::cluster_with(&["--without", "node-copies"]) else {
        return;
    };
    on(&c, 0, &format!("{} > $ROOT/shared", pattern(3)));
    for _ in 0..2 {
        let got = on(&c, 2, READ_SHARED);
        assert_eq!(text(&got), pattern_sum(3));
    }
    assert_eq!(copies_counters(&c, 2), (0, 0, 0));
    assert_eq!(ahead_count(&c, 2), 0, "nothing read ahead either");
}
