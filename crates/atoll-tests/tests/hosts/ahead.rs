//! The node's read-ahead (`node/copies.rs` `read_ahead`): a program on a
//! host without servers that reads a file sequentially has its node fetch
//! the chunks ahead of it in batches (fetches of its own step, up to
//! 32 KiB), so its own reads (32 KiB `ReadData`, issue 16) are answered
//! at the node instead of each crossing. The bytes are the file's, never
//! past its end, and close-to-open holds across a rewrite.

use super::{first_node_servers as cluster, node_counters, on, text, LIMIT};
use atoll_tests::output_within;

/// 64 MiB.
const BIG: usize = 64 << 20;
/// A program's `ReadData` (`atoll_proto::MAX_DATA_CALL`): the step of a
/// reader of large buffers (`md5sum`'s 32 KiB), and so of the read-ahead.
const CALL: usize = 32 << 10;

/// A file of `size` bytes: a run of 251 bytes (not a divisor of a chunk,
/// so a chunk answered at the wrong offset shows) turned by `seed`.
fn pattern(seed: u8, size: usize) -> String {
    format!(
        "python3 -c 'import sys; r = bytes((i + {seed}) % 251 for i in range(251)); \
         sys.stdout.buffer.write((r * ({size} // 251 + 1))[:{size}])'"
    )
}

/// The md5 sum and size of `pattern(seed, size)`, computed on this host.
fn pattern_sum(seed: u8, size: usize) -> String {
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            &format!("{} | md5sum | cut -d' ' -f1", pattern(seed, size)),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    format!("{} {size}\n", text(&out).trim())
}

/// The reader: md5 sum and size of a file it opens itself (a descriptor
/// inherited across `execve` is not read from copies, nor read ahead).
fn read(name: &str) -> String {
    format!("echo $(md5sum $ROOT/{name} | cut -d' ' -f1) $(stat -c %s $ROOT/{name})")
}

fn counter(c: &atoll_bench::hosts::Cluster, k: usize, name: &str) -> u64 {
    node_counters(c, k)[name].as_u64().unwrap_or(0)
}

/// (reads that crossed, reads answered at the node from held chunks or
/// from a read-ahead they waited for, read-ahead fetches sent) at node `k`.
fn reads(c: &atoll_bench::hosts::Cluster, k: usize) -> (u64, u64, u64) {
    let n = node_counters(c, k);
    let get = |name: &str| n[name].as_u64().unwrap_or(0);
    (
        get("node_copies.fetches"),
        get("node_copies.hits") + get("node_copies.ahead_waits"),
        get("node_copies.ahead"),
    )
}

/// 64 MiB written on A, read on C while B reads it too: both get the
/// file's bytes, and C's reads are answered at its node (read ahead), not
/// each across the link. B then rewrites the file in place; C, opening it
/// after B closed it, reads the new bytes, though its node held old ones.
#[test]
fn a_sequential_remote_reader_is_answered_by_its_nodes_read_ahead() {
    let Some(c) = cluster() else { return };
    on(&c, 0, &format!("{} > $ROOT/big", pattern(1, BIG)));
    let before = reads(&c, 2);
    let atoll = atoll_tests::atoll_bin();
    let other = c.exec(&atoll, 1, &read("big"));
    let other = std::thread::spawn(move || output_within(other, LIMIT));
    let got = on(&c, 2, &read("big"));
    let other = other.join().expect("reader on B");
    assert!(other.status.success(), "{other:?}");
    assert_eq!(text(&got), pattern_sum(1, BIG), "C read other bytes");
    assert_eq!(text(&other), pattern_sum(1, BIG), "B read other bytes");
    let after = reads(&c, 2);
    let calls = (BIG / CALL) as u64;
    let (crossed, here, ahead) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    eprintln!(
        "C: {crossed} reads crossed, {here} answered at the node ({} after waiting), \
         {ahead} read ahead",
        counter(&c, 2, "node_copies.ahead_waits")
    );
    assert!(
        ahead >= calls / 2,
        "the node read ahead {ahead} fetches of {calls}"
    );
    // Each of the program's reads crossed before; now a few do (the
    // first, and those that outran the read-ahead on a loaded machine).
    assert!(
        crossed < calls / 4 && here > calls / 2,
        "{crossed} reads crossed, {here} answered at the node, of {calls}"
    );
    // B rewrites in place (same size) and closes; C opens after.
    on(
        &c,
        1,
        &format!(
            "{} > /tmp/new && python3 -c 'import os; fd = os.open(\"/atoll/big\", os.O_WRONLY); \
             d = open(\"/tmp/new\", \"rb\").read(); os.pwrite(fd, d, 0); os.close(fd)' && rm /tmp/new",
            pattern(2, BIG)
        ),
    );
    assert_eq!(
        text(&on(&c, 2, &read("big"))),
        pattern_sum(2, BIG),
        "C read bytes from before the rewrite"
    );
}

/// Read-ahead stays within the file as its reader opened it: a file of
/// whole chunks and a partial one read to its end, then cut short and
/// read again, then grown and read again — each time exactly the file.
#[test]
fn read_ahead_returns_no_bytes_past_the_end_nor_stale_ones_after_a_reopen() {
    let Some(c) = cluster() else { return };
    let size = 40 * 8192 + 100;
    on(&c, 0, &format!("{} > $ROOT/f", pattern(3, size)));
    assert_eq!(text(&on(&c, 2, &read("f"))), pattern_sum(3, size));
    assert!(counter(&c, 2, "node_copies.ahead") > 0, "no read-ahead");
    // Cut to 10 whole chunks and 5 bytes, on A.
    let short = 10 * 8192 + 5;
    on(&c, 0, &format!("truncate -s {short} $ROOT/f"));
    assert_eq!(text(&on(&c, 2, &read("f"))), pattern_sum(3, short));
    // Rewritten longer with other bytes, on B.
    let long = 50 * 8192 + 7;
    on(&c, 1, &format!("{} > $ROOT/f", pattern(4, long)));
    assert_eq!(text(&on(&c, 2, &read("f"))), pattern_sum(4, long));
    // Read in pieces that straddle chunks, at sizes the reader asks.
    let pieces = on(
        &c,
        2,
        "python3 -c 'import os, hashlib; fd = os.open(os.environ[\"ROOT\"] + \"/f\", os.O_RDONLY); \
         h = hashlib.md5(); n = 0\nwhile True:\n    b = os.read(fd, 5000)\n    \
         if not b: break\n    h.update(b); n += len(b)\nprint(h.hexdigest(), n)'",
    );
    assert_eq!(text(&pieces), pattern_sum(4, long));
}

/// A program that writes 1 MiB at a time until the instance's memory is
/// full: each `write` reports exactly what it wrote (a remote program's
/// write keeps several pieces in flight, `msgdata.rs`), the file holds
/// exactly that much, and the next `write` fails with `ENOSPC`.
const FILL: &str = r#"
import errno, os
path = os.environ["ROOT"] + "/full"
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
buf = bytes(range(256)) * 4096
total = 0
while True:
    try:
        n = os.write(fd, buf)
    except OSError as e:
        print("error", errno.errorcode[e.errno])
        break
    total += n
os.fsync(fd)
os.close(fd)
print("size matches", os.stat(path).st_size == total, total > (64 << 20))
data = open(path, "rb").read()
print("bytes match", data == (buf * (total // len(buf) + 1))[:total])
"#;

/// A write that fails across the link (the instance's memory is full)
/// fails in the program, as on Linux: `dd` exits non-zero with `ENOSPC`,
/// and a program that goes on writing sees exactly what was written.
#[test]
fn a_write_error_across_the_link_reaches_the_program() {
    let Some(c) = cluster() else { return };
    let out = output_within(
        c.exec(
            &atoll_tests::atoll_bin(),
            2,
            "dd if=/dev/zero of=$ROOT/full bs=1M count=400 conv=fsync",
        ),
        LIMIT,
    );
    assert!(
        !out.status.success(),
        "dd of 400 MiB into 128 MiB succeeded"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No space left on device"), "dd said: {err}");
    on(&c, 2, "rm $ROOT/full");
    let script = format!("python3 -c '{}'", FILL.replace('\'', "'\\''"));
    assert_eq!(
        text(&on(&c, 2, &script)),
        "error ENOSPC\nsize matches True True\nbytes match True\n"
    );
}

/// A program reading two files at once on one lane (`cmp`): each is read
/// ahead, the channel's fetches bounded (`AHEAD_PER_CHAN`), and the bytes
/// are each file's: a difference in the last chunk is found where it is.
#[test]
fn two_files_read_side_by_side_are_each_read_ahead() {
    let Some(c) = cluster() else { return };
    let size = 16 << 20;
    on(
        &c,
        0,
        &format!(
            "{p} > $ROOT/one && {p} > $ROOT/two && printf Z | dd of=$ROOT/two bs=1 seek={at} conv=notrunc 2>/dev/null",
            p = pattern(5, size),
            at = size - 10
        ),
    );
    let before = counter(&c, 2, "node_copies.ahead");
    let out = output_within(
        c.exec(
            &atoll_tests::atoll_bin(),
            2,
            "cmp $ROOT/one $ROOT/two; echo status $?",
        ),
        LIMIT,
    );
    let said = text(&out);
    assert!(
        said.contains(&format!("differ: char {},", size - 9)) && said.ends_with("status 1\n"),
        "cmp said: {said}"
    );
    let ahead = counter(&c, 2, "node_copies.ahead") - before;
    assert!(ahead >= (size / CALL) as u64, "read ahead {ahead} fetches");
}

/// A reader that writes ahead of itself through the file while read-ahead
/// of those bytes is on its way reads its own write, not the fetched bytes.
const OWN_WRITE: &str = r#"
import os
fd = os.open(os.environ["ROOT"] + "/f", os.O_RDWR)
first = os.read(fd, 65536)
os.pwrite(fd, b"mine", 200000)
rest = os.read(fd, 300000 - 65536)
print(len(first) + len(rest), rest[200000 - 65536:200000 - 65536 + 4].decode())
"#;

#[test]
fn a_reader_reads_its_own_write_ahead_of_itself() {
    let Some(c) = cluster() else { return };
    on(&c, 0, &format!("{} > $ROOT/f", pattern(6, 1 << 20)));
    let before = counter(&c, 2, "node_copies.ahead");
    let script = format!("python3 -c '{}'", OWN_WRITE.replace('\'', "'\\''"));
    assert_eq!(text(&on(&c, 2, &script)), "300000 mine\n");
    assert!(
        counter(&c, 2, "node_copies.ahead") > before,
        "no read-ahead"
    );
}

/// Between hosts, a channel's frames cross several to a message
/// (`wire.rs` `Requests`/`Replies`): 16 MiB written with `dd bs=1M` on C
/// and read back there, byte for byte, and the node's read-ahead batches
/// (4–8 `ReadData` of 32 KiB found together) left packed, fewer messages
/// than frames. Before, every frame was a message of its own (the counters did
/// not exist: both read 0 and the test fails).
#[test]
fn a_remote_reader_s_read_ahead_crosses_in_packed_messages() {
    let Some(c) = cluster() else { return };
    let size = 16 << 20;
    on(
        &c,
        2,
        &format!(
            "{} | dd of=$ROOT/packed bs=1M iflag=fullblock status=none",
            pattern(5, size)
        ),
    );
    let names = [
        "node_wire.request_frames",
        "node_wire.request_messages",
        "node_wire.reply_frames",
        "node_wire.reply_messages",
    ];
    let get = |name: &str| counter(&c, 2, name);
    let before: Vec<u64> = names.iter().map(|n| get(n)).collect();
    assert_eq!(text(&on(&c, 2, &read("packed"))), pattern_sum(5, size));
    let d: Vec<u64> = names.iter().zip(&before).map(|(n, b)| get(n) - b).collect();
    let (frames, messages, rf, rm) = (d[0], d[1], d[2], d[3]);
    let calls = (size / CALL) as u64;
    eprintln!(
        "C's read: {frames} request frames in {messages} messages, {rf} reply frames in {rm} \
         messages"
    );
    // Every 32 KiB was asked for once (by the node's read-ahead or by the
    // reader's own read that outran it), a few more for the reader's opens
    // and stats; each read-ahead batch left as one message (the reader's
    // own calls that cross go one to a message).
    assert!(
        frames >= calls,
        "{frames} request frames for {calls} calls of 32 KiB"
    );
    assert!(
        messages > 0 && messages * 4 <= frames * 3,
        "{frames} request frames in {messages} messages"
    );
    // How many replies leave together is timing (the head holds them only
    // while it spins, `head.rs` `Held`): only counted here.
    assert!(rm > 0 && rf >= rm, "{rf} reply frames in {rm} messages");
}
