//! Indistinguishability across islands (Cosh §3, §6): the same real
//! programs print the same in a coherent island (clients map the buffer
//! cache), an incoherent one (private copies, written back at flushes) and
//! a copy island (no shared memory: every byte crosses in messages), with
//! two servers, and the same as on the host's tmpfs-like directory.
//!
//! The subset covers what the islands do differently: pipes (a shell
//! pipeline, a FIFO, `SIGPIPE`), `mmap` (a program stores through a shared
//! mapping, another reads with `read`; private stores stay private), exec
//! of programs stored in the mount, a description shared across `fork`
//! (one offset), and a `make -j2` build. The whole suite runs in one island
//! with `ATOLL_TEST_ISLAND=copy` (`make test-islands`).

use atoll_tests::OutputBounded as _;
use atoll_tests::{assert_same, compile_probe, require, run_in_atoll};

const ISLANDS: [&str; 3] = ["coherent", "incoherent", "copy"];

/// `assert_same` in each island, two servers.
fn same_in_every_island(script: &str) -> Vec<String> {
    ISLANDS
        .iter()
        .map(|island| assert_same(&["--servers", "2", "--island", island], script, true))
        .collect()
}

#[test]
fn pipelines_fifos_and_sigpipe_are_the_same_in_every_island() {
    let outs = same_in_every_island(
        r#"
        set -e
        cd "$ROOT"
        seq 1 50000 | sort -rn | awk '{ s += $1 } END { print s }' | tr 0-9 a-j
        head -c 1000000 /dev/urandom > blob
        cat blob | cat | cat > copy && cmp blob copy && echo "1 MB through pipes"
        mkfifo f
        ( seq 1 2000 > f ) &
        awk '{ s += $1 } END { print "fifo", s }' < f
        wait
        # Four writers share one description of the FIFO, held open until
        # all have written, so the reader's end of file comes after them.
        ( exec 5> f; for i in 1 2 3 4; do printf 'w%d\n' $i >&5 & done; wait ) &
        sort < f | tr '\n' ' '; echo
        wait
        set +e; yes | head -n 3; echo "status ${PIPESTATUS[*]}"
        "#,
    );
    for out in &outs {
        assert!(out.contains("1 MB through pipes"), "{out}");
        assert!(out.contains("fifo 2001000"), "{out}");
        assert!(out.contains("w1 w2 w3 w4"), "{out}");
        assert!(out.contains("status 141 0"), "{out}");
    }
}

/// Stores through `MAP_SHARED` reach the file for a later `read` by
/// another program; stores through `MAP_PRIVATE` never do.
const MMAP_PROBE: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, 10000) < 0) { perror("setup"); return 1; }
    char *s = mmap(0, 10000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *p = mmap(0, 10000, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (s == MAP_FAILED || p == MAP_FAILED) { perror("mmap"); return 1; }
    close(fd);
    for (int i = 0; i < 10000; i++) s[i] = 'a' + i % 26;
    memcpy(s + 5000, "SHARED", 6);
    memcpy(p + 100, "PRIVATE", 7);
    if (msync(s, 10000, MS_SYNC) < 0) { perror("msync"); return 1; }
    memcpy(s + 9000, "UNMAPPED", 8);
    if (munmap(s, 10000) < 0 || munmap(p, 10000) < 0) { perror("munmap"); return 1; }
    printf("mapped\n");
    return 0;
}
"#;

#[test]
fn mmap_stores_reach_read_the_same_in_every_island() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(dir.path(), "mmapprobe", MMAP_PROBE);
    let script = format!(
        r#"
        set -e
        cd "$ROOT"
        {probe} m
        ls -l m | awk '{{ print $5 }}'
        dd if=m bs=1 skip=5000 count=6 2>/dev/null; echo
        dd if=m bs=1 skip=9000 count=8 2>/dev/null; echo
        dd if=m bs=1 skip=100 count=7 2>/dev/null; echo
        md5sum < m
        python3 -c 'import mmap; f = open("m", "r+b"); m = mmap.mmap(f.fileno(), 0); m[0:2] = b"PY"; m.flush(); m.close(); f.close()'
        head -c 4 m; echo
        "#,
        probe = probe.display()
    );
    let outs = same_in_every_island(&script);
    for out in &outs {
        assert!(out.contains("SHARED\nUNMAPPED\n"), "{out}");
        assert!(!out.contains("PRIVATE"), "private stores leaked: {out}");
        assert!(out.contains("PYcd"), "{out}");
    }
}

#[test]
fn exec_and_a_shared_offset_across_fork_are_the_same_in_every_island() {
    require("cc");
    let dir = tempfile::tempdir().unwrap();
    let probe = compile_probe(
        dir.path(),
        "hello",
        "#include <stdio.h>\nint main(int c, char **v) { printf(\"hello %s\\n\", v[1]); return 3; }\n",
    );
    let script = format!(
        r#"
        cd "$ROOT"
        cp {probe} hello && ./hello mount; echo "status $?"
        printf '#!/bin/sh\necho script "$@"\n' > s.sh && chmod +x s.sh && ./s.sh a b
        # One description, one offset: parent and children append in turn.
        {{ echo one; ( echo two ); sh -c 'echo three'; echo four; }} > log
        cat log
        seq 1 6 > nums
        exec 3< nums
        read -u 3 a; ( read -u 3 b; echo "child $b" ); read -u 3 c
        echo "parent $a $c"
        exec 3<&-
        "#,
        probe = probe.display()
    );
    let outs = same_in_every_island(&script);
    for out in &outs {
        assert!(out.contains("hello mount\nstatus 3"), "{out}");
        assert!(out.contains("one\ntwo\nthree\nfour\n"), "{out}");
        assert!(out.contains("child 2\nparent 1 3"), "{out}");
    }
}

#[test]
fn make_j2_builds_the_same_in_every_island() {
    require("make");
    require("cc");
    let outs = same_in_every_island(&format!(
        r#"
        set -e
        cd "$ROOT"
{}        make -s -j2
        ./prog
        ar rcs libf.a f1.o f2.o && ar t libf.a
        ls *.o | wc -l
        "#,
        atoll_tests::c_project_script(10)
    ));
    for out in &outs {
        assert!(out.contains("sum 55"), "{out}");
    }
}

/// A copy island's programs never map the buffer cache (nor hold a
/// descriptor of it); a coherent island's do once they read a file
/// (`cat`, which lists its own mappings after the file). And the servers say how the
/// data crossed: copies only in a copy island, shares in a coherent one.
#[test]
fn a_copy_island_maps_no_buffer_cache_and_only_copies() {
    let script = r#"
        seq 1 20000 > $ROOT/x && cat $ROOT/x | wc -l
        echo "maps $(cat $ROOT/x /proc/self/maps | grep -c 'memfd:atoll-cache')"
        echo "fds $(ls -l /proc/self/fd/ 2>/dev/null | grep -c 'memfd:atoll-cache')"
        "#;
    for (island, maps) in [("copy", "maps 0"), ("coherent", "maps 1")] {
        let out = run_in_atoll(&["--servers", "2", "--island", island], script);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{island}: {text}");
        assert!(text.contains("20000"), "{island}: {text}");
        assert!(text.contains(maps), "{island}: {text}");
        if island == "copy" {
            assert!(text.contains("fds 0"), "{island}: {text}");
        }
    }
    let b = atoll_tests::Booted::new(&["--servers", "2", "--island", "copy", "--memory", "64M"]);
    let out = b
        .command("seq 1 20000 > $ROOT/y && cat $ROOT/y | wc -c")
        .output_bounded()
        .unwrap();
    assert!(out.status.success());
    let st = b.status();
    assert_eq!(st["island"], "copy", "{st}");
    let t = &st["transfers"];
    assert_eq!(t["shares"], 0, "a copy island shares nothing: {t}");
    // The file written, read by cat, and twice through the pipe.
    assert!(t["copy_bytes"].as_u64().unwrap() >= 4 * 108_894, "{t}");
    assert!(st["pool"]["used"].as_u64().unwrap() > 0, "{st}");

    // Per client: a live process that wrote and read 100 kB is shown
    // with what the servers copied for it.
    use std::io::{BufRead, Write};
    let mut child = b
        .command(
            r#"exec python3 -c 'import sys
open(sys.argv[1], "wb").write(b"x" * 100000); open(sys.argv[1], "rb").read()
print("ready", flush=True); sys.stdin.read()' $ROOT/z"#,
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let st = b.status();
    let clients = st["client_transfers"].as_array().unwrap().clone();
    drop(child.stdin.take().map(|mut i| i.write_all(b"")));
    assert!(child.wait().unwrap().success());
    assert!(
        clients
            .iter()
            .any(|c| c["copy_bytes"] == 200_000 && c["share_bytes"] == 0),
        "{clients:?}"
    );
}

/// Reads larger than one message in a copy island keep several requests
/// in flight: one that ends at the end of the file part way through its
/// window returns what is there, and the replies still on their way do
/// not confuse the calls that follow on the same thread; a file growing
/// under a reader, reads at every alignment, the same in every island.
#[test]
fn large_reads_across_the_end_of_a_file_are_the_same_in_every_island() {
    let script = r#"
        cd "$ROOT"
        python3 - <<'PY'
import os, hashlib
data = bytes((i * 7 + i // 8191) & 255 for i in range(300000))
fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, data[:100000])
for off, n in [(50000, 70000), (0, 100000), (99999, 40000), (100000, 9000), (8191, 8193), (1, 65537)]:
    got = os.pread(fd, n, off)
    print(off, n, len(got), got == data[off:off + n][:len(got)], os.pread(fd, 10, 3) == data[3:13])
os.write(fd, data[100000:])
got = os.pread(fd, 300000, 0)
print(len(got), hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest())
with open("f", "rb") as f:
    print(sum(len(b) for b in iter(lambda: f.read(24577), b"")))
PY
    "#;
    let outs = same_in_every_island(script);
    assert!(
        outs[0].contains("50000 70000 50000 True True\n"),
        "{}",
        outs[0]
    );
    assert!(outs[0].contains("300000 True\n300000\n"), "{}", outs[0]);
}

/// Large writes that stop part way (`RLIMIT_FSIZE`, at a point that is
/// no multiple of a `WriteData` piece) return what they wrote and leave
/// exactly that in the file, as on the host: a copy island keeps several
/// pieces of one write in flight, and the pieces after the short one must
/// not be written. Also `pwrite` at odd offsets, `write` at the shared
/// offset, and `EFBIG` at the limit (Python ignores `SIGXFSZ`). The limit
/// is above what the client itself needs at startup (`ulimit -f` below
/// about 2.5 MiB kills any program under `atoll run`, as it did before).
#[test]
fn large_writes_stopped_part_way_are_the_same_in_every_island() {
    let script = r#"
        cd "$ROOT"
        ulimit -f 3001
        python3 - <<'PY'
import os, hashlib
data = bytes((i * 13 + i // 8191) & 255 for i in range(1 << 20))
fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
for off, n in [(1, 100003), (8191, 8193), (12345, 65537), (500000, 1 << 20)]:
    print("pwrite", off, n, os.pwrite(fd, data[:n], off))
def tryw(what, f):
    try:
        print(what, f())
    except OSError as e:
        print(what, "errno", e.errno)
tryw("short pwrite", lambda: os.pwrite(fd, data, 2500001))
os.lseek(fd, 3000000, 0)
tryw("short write", lambda: os.write(fd, data))
tryw("offset", lambda: os.lseek(fd, 0, 1))
tryw("at the limit", lambda: os.write(fd, data))
tryw("past it", lambda: os.pwrite(fd, data[:10], 4000000))
st = os.fstat(fd)
got = open("f", "rb").read()
print("size", st.st_size, len(got), hashlib.sha256(got).hexdigest())
PY
    "#;
    let outs = same_in_every_island(script);
    assert!(outs[0].contains("short pwrite 573023\n"), "{}", outs[0]);
    assert!(outs[0].contains("short write 73024\n"), "{}", outs[0]);
    assert!(outs[0].contains("at the limit errno 27\n"), "{}", outs[0]);
}

/// `O_APPEND` writes of two processes land whole and in each writer's
/// order: small records never torn, and the bytes of large appends (each
/// many `WriteData` pieces in a copy island) all there, in order.
#[test]
fn appends_of_two_writers_keep_their_bytes_in_every_island() {
    let script = r#"
        cd "$ROOT"
        python3 - <<'PY'
import os
big = bytes(65 + (i * 7 + i // 8192) % 26 for i in range(200000))
pid = os.fork()
fd = os.open("log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
if pid == 0:
    for i in range(300):
        os.write(fd, b"<%04d" % i + b"." * 94 + b">")
    os._exit(0)
for k in range(5):
    assert os.write(fd, big) == len(big)
os.waitpid(pid, 0)
data = open("log", "rb").read()
small = [data[i:i + 100] for i in range(len(data)) if data[i:i + 1] == b"<"]
print("records", len(small), all(r == b"<%04d" % n + b"." * 94 + b">" for n, r in enumerate(small)))
rest = data
for r in small:
    rest = rest.replace(r, b"", 1)
print("appended", len(data), rest == big * 5)
PY
    "#;
    let outs = same_in_every_island(script);
    assert!(outs[0].contains("records 300 True\n"), "{}", outs[0]);
    assert!(outs[0].contains("appended 1030000 True\n"), "{}", outs[0]);
}

/// `ENOSPC` in the middle of large writes: every write returns what it
/// stored, and the file holds exactly the bytes the writes reported, in
/// the islands whose servers copy (`--memory` bounds the instance, so the
/// host cannot be compared).
#[test]
fn writes_stopped_by_enospc_report_exactly_what_the_file_holds() {
    let script = r#"
        cd "$ROOT"
        python3 - <<'PY'
import os
data = bytes((i * 29 + i // 8191) & 255 for i in range(3000001))
fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
total, err, wrote = 0, None, []
while err is None:
    try:
        n = os.write(fd, data)
    except OSError as e:
        err = e.errno
        break
    if n == 0:
        err = 0
    total += n
    wrote.append(data[:n])
size = os.fstat(fd).st_size
back = open("f", "rb").read()
want = b"".join(wrote)
print("total", total > 0, total == size, back == want, "errno", err)
PY
    "#;
    for island in ["copy", "coherent"] {
        let out = run_in_atoll(&["--island", island, "--memory", "64M"], script);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("total True True True errno 28\n"),
            "{island}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
