//! Bounded metadata (docs/ARCHITECTURE.md, "Bounded metadata"): a program
//! creating empty files until `ENOSPC` stops at the instance's inode limit
//! in every configuration, `df -i` agrees, the servers' memory stays within
//! the documented bound, and the instance works again once files go.

use atoll_tests::OutputBounded as _;
use std::process::Command;

use atoll_tests::Booted;

/// Inode limit of these tests (small, so the loop is quick).
const INODES: u64 = 2000;
/// Documented bound on the servers' metadata per inode of the limit
/// (README, `--inodes`): 2 KiB, names of 255 bytes and a lookup record
/// included.
const BYTES_PER_INODE: u64 = 2048;
/// Memory the instance process may gain besides metadata: malloc arenas
/// of the server threads, channels of the sessions, status replies.
const SLACK: u64 = 8 << 20;

/// What these tests ask of an instance.
trait Instance {
    fn exec(&self, script: &str) -> (bool, String, String);
    fn rss(&self) -> u64;
}

impl Instance for Booted {
    fn exec(&self, script: &str) -> (bool, String, String) {
        let out = self.command(script).output_bounded().expect("atoll exec");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Resident anonymous memory of the instance process (its servers'
    /// heap), in bytes.
    fn rss(&self) -> u64 {
        let pid = self.status()["pid"].as_u64().expect("pid");
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        let kb: u64 = st
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("RssAnon");
        kb * 1024
    }
}

/// Create `$ROOT/d/<prefix>N` (names padded to 250 bytes, the costliest
/// kind) until creation fails; print the count, whether the failure was
/// ENOSPC, and `df -i`'s inodes, used and free.
fn fill(prefix: &str) -> String {
    format!(
        r#"set -u
mkdir -p $ROOT/d
pad=$(printf '%0240d' 0)
log=$(mktemp)
i=0
while true > "$ROOT/d/{prefix}$pad$i"; do i=$((i+1)); done 2>$log
err=$(cat $log); rm -f $log
case "$err" in *"No space left on device"*) e=ENOSPC;; *) e="other: $err";; esac
echo "$i $e $(df -i $ROOT | tail -1 | awk '{{print $2, $3, $4}}')""#
    )
}

fn loop_stops_at_the_inode_limit(opts: &[&str]) {
    let limit = INODES.to_string();
    let mut all = vec!["--memory", "64M", "--inodes", &limit];
    all.extend_from_slice(opts);
    let inst = Booted::new(&all);
    let before = inst.rss();
    // The root and `d` are inodes too.
    let files = INODES - 2;
    let expect = format!("{files} ENOSPC {INODES} {INODES} 0\n");
    let (ok, out, err) = inst.exec(&fill("a"));
    assert!(ok, "{err}");
    assert_eq!(out, expect, "{opts:?}: {err}");
    let st = inst.status();
    assert_eq!(st["limits"]["inodes"]["used"], INODES, "{st}");
    assert_eq!(st["limits"]["inodes"]["free"], 0, "{st}");
    let grown = inst.rss().saturating_sub(before);
    assert!(
        grown <= INODES * BYTES_PER_INODE + SLACK,
        "{opts:?}: servers grew by {grown} bytes for {INODES} inodes"
    );
    // Delete, and the same loop succeeds again up to the same limit.
    let (ok, _, err) = inst.exec("rm -rf $ROOT/d && df -i $ROOT | tail -1");
    assert!(ok, "{err}");
    assert_eq!(inst.status()["limits"]["inodes"]["used"], 1);
    let (ok, out, err) = inst.exec(&fill("b"));
    assert!(ok, "{err}");
    assert_eq!(out, expect, "{opts:?} after deleting: {err}");
}

#[test]
fn creating_files_until_enospc_stops_at_the_limit_on_one_server() {
    loop_stops_at_the_inode_limit(&["--servers", "1"]);
}

#[test]
fn creating_files_until_enospc_stops_at_the_limit_on_three_servers() {
    loop_stops_at_the_inode_limit(&["--servers", "3"]);
}

#[test]
fn creating_files_until_enospc_stops_at_the_limit_in_a_distributed_directory() {
    loop_stops_at_the_inode_limit(&["--servers", "3", "--distribute", "all"]);
}

/// Directories, symlinks, FIFOs and sockets count as inodes too; each is
/// refused with ENOSPC at the limit and works again after a deletion.
#[test]
fn every_kind_of_inode_is_refused_at_the_limit_and_allowed_after_a_delete() {
    let inst = Booted::new(&["--servers", "2", "--memory", "64M", "--inodes", "50"]);
    let script = r#"
cd $ROOT
i=0; while true > f$i; do i=$((i+1)); done 2>/dev/null
echo files $i
mkdir dir 2>&1 | grep -o 'No space left on device'
ln -s target link 2>&1 | grep -o 'No space left on device'
mkfifo fifo 2>&1 | grep -o 'No space left on device'
python3 -c '
import socket, errno
s = socket.socket(socket.AF_UNIX)
try:
    s.bind("sock"); print("bound")
except OSError as e:
    print(errno.errorcode[e.errno])
'
rm f0 f1 f2 f3
mkdir dir && ln -s target link && mkfifo fifo && echo made
python3 -c '
import socket
socket.socket(socket.AF_UNIX).bind("sock"); print("bound")
'
df -i $ROOT | tail -1 | awk '{print $3, $4}'
"#;
    let (ok, out, err) = inst.exec(script);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "files 49\nNo space left on device\nNo space left on device\n\
         No space left on device\nENOSPC\nmade\nbound\n50 0\n",
        "{err}"
    );
}

/// `atoll status` shows the inode count and the other limits.
#[test]
fn status_shows_inodes_and_limits() {
    let inst = Booted::new(&["--servers", "1", "--memory", "64M", "--inodes", "100"]);
    let (ok, _, err) = inst.exec("touch $ROOT/a $ROOT/b");
    assert!(ok, "{err}");
    let out = Command::new(atoll_tests::atoll_bin())
        .args(["status", "--id", &inst.id])
        .output_bounded()
        .expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("inodes       3/100 in use (97 free)"),
        "{text}"
    );
    assert!(text.contains("open descriptions 0/8192"), "{text}");
    assert!(text.contains("locks 0/8192"), "{text}");
}

/// Through real system calls: xattr values past 64 KiB are `E2BIG`, those
/// that fit no inode `ENOSPC`; hard links past the limit `ENOSPC` (tmpfs
/// counts them as inodes); each works again after a deletion.
#[test]
fn xattrs_and_hard_links_give_linux_errnos_at_their_limits() {
    atoll_tests::require("python3");
    let inst = Booted::new(&["--servers", "2", "--memory", "64M", "--inodes", "10"]);
    let script = r#"
cd $ROOT && touch f && python3 - <<'PY'
import errno, os
def code(f):
    try:
        f(); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print(code(lambda: os.setxattr("f", "user.a", b"x" * 70000)))
print(code(lambda: os.setxattr("f", "user.a", b"x" * 5000)))
print(code(lambda: os.setxattr("f", "user.a", b"x" * 4000)))
n = 0
while code(lambda: os.link("f", "l%d" % n)) == "ok":
    n += 1
print(n, code(lambda: os.link("f", "more")))
os.unlink("l0")
print(code(lambda: os.link("f", "more")), os.stat("f").st_nlink)
PY
"#;
    let (ok, out, err) = inst.exec(script);
    assert!(ok, "{err}");
    // Root and f are two inodes; f's first name is one of ten names.
    assert_eq!(out, "E2BIG\nENOSPC\nok\n9 ENOSPC\nok 10\n", "{err}");
}
