//! Access ACLs of a directory decide who may create and remove names in
//! it (Linux's `posix_acl_permission` for `may_create`/`may_delete`): on a
//! root-owned 0755 directory, `u:nobody:rwx` lets `nobody` make, rename,
//! link and remove names, `u:nobody:r-x` does not, a named group entry
//! (primary or supplementary group) does, a mask limits a named entry,
//! the sticky bit still holds, and a process that keeps running sees each
//! change of the ACL at its next creation, with its credentials switched
//! back and forth. Compared with the same script on a host tmpfs, with
//! the directories distributed over three servers, so that most names
//! live on servers that do not own the directory (Hare §3.4).

use std::path::Path;

use atoll_tests::{normalized, require, run_in_atoll, MOUNT};

const SCRIPT: &str = r#"
set -e
cd "$ROOT"
chmod 755 .
umask 022
t() { if out=$("$@" 2>&1); then echo "ok $*"; else echo "fail $*: ${out##*: }"; fi; }
# Every kind of name change in d, as the caller; `v$1` is root's.
ops() {
  t touch d/f$1
  t mkdir d/m$1
  t mkfifo d/p$1
  t ln -s x d/s$1
  t mv d/f$1 d/g$1
  t ln d/g$1 d/h$1
  t mv d/v$1 d/w$1
  t mv d/w$1 d2/w$1
  t rm -f $(ls -d d/g$1 d/h$1 d/p$1 d/s$1 2>/dev/null)
  t rm -f d/x$1
  t rmdir d/m$1
  t /usr/bin/python3 -c 'import os; os.close(os.open("d", os.O_TMPFILE | os.O_WRONLY, 0o600))'
  t ls d/.
}
export -f t ops
as() { setpriv --reuid=65534 --regid="$1" --groups="$2" bash -c "$3"; }
victims() { for i in "$@"; do echo v > d/v$i; echo x > d/x$i; done; }
mkdir d d2
chmod 755 d d2
setfacl -m u:nobody:rwx d2

echo '== u:nobody:rwx'
setfacl -m u:nobody:rwx d
getfacl -cp d
victims a1 a2 a3 a4 a5 a6
for i in a1 a2 a3 a4 a5 a6; do as 65534 65534 "ops $i"; done

echo '== u:nobody:r-x'
setfacl -m u:nobody:r-x d
victims b1 b2 b3 b4
for i in b1 b2 b3 b4; do as 65534 65534 "ops $i"; done

echo '== renaming into a directory that refuses'
setfacl -m u:nobody:rwx d
setfacl -m u:nobody:r-x d2
victims c1 c2 c3 c4
for i in c1 c2 c3 c4; do as 65534 65534 "ops $i"; done
setfacl -m u:nobody:rwx d2

echo '== g:nogroup:rwx, primary then supplementary group'
setfacl -x u:nobody d
setfacl -m g:nogroup:rwx d
getfacl -cp d
victims d1 d2 d3 d4
for i in d1 d2; do as 65534 65534 "ops $i"; done
for i in d3 d4; do as 4321 4321,65534 "ops $i"; done
echo '-- not in the group'
victims e1 e2
for i in e1 e2; do as 4321 4321 "ops $i"; done

echo '== a mask limits the named entry'
setfacl -x g:nogroup d
setfacl -m u:nobody:rwx,m::r-x d
getfacl -cp d
victims f1 f2 f3
for i in f1 f2 f3; do as 65534 65534 "ops $i"; done

echo '== the sticky bit still holds'
setfacl -m m::rwx d
chmod +t d
victims g1 g2 g3
for i in g1 g2 g3; do as 65534 65534 "ops $i"; done
chmod -t d

echo '== a running process sees each change, switching credentials'
/usr/bin/python3 - <<'P'
import os, subprocess
os.setgroups([])
def make(name, uid):
    os.setegid(uid); os.seteuid(uid)
    try:
        os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
        os.rename(name, name + ".moved")
        os.unlink(name + ".moved")
        r = "ok"
    except OSError as e:
        r = e.strerror
    os.seteuid(0); os.setegid(0)
    print(name, uid, r)
def acl(entry):
    subprocess.run(["setfacl", "-m", entry, "d"], check=True)
for i in range(6):
    acl("u:nobody:rwx")
    make("d/live%d" % i, 65534)
    make("d/root%d" % i, 0)
    acl("u:nobody:r-x")
    make("d/late%d" % i, 65534)
    make("d/rootlate%d" % i, 0)
    acl("u:nobody:rwx")
    make("d/again%d" % i, 65534)
P
echo '== what is left'
ls -l d d2 | awk 'NF > 2 {print $1, $3, $4, $NF}'
"#;

/// Run `script` with `$ROOT` a fresh directory on a host tmpfs.
fn on_host_tmpfs(script: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir on /dev/shm");
    let (dir, out) = atoll_tests::run_in_host_dir(dir, script);
    normalized(&out, dir.path())
}

fn check(opts: &[&str]) {
    for p in ["setfacl", "getfacl", "setpriv", "python3"] {
        require(p);
    }
    // Run by `nobody`: a python3 outside root's home.
    assert!(Path::new("/usr/bin/python3").exists());
    let host = on_host_tmpfs(SCRIPT);
    let got = normalized(&run_in_atoll(opts, SCRIPT), Path::new(MOUNT));
    let first_difference = host.1.lines().zip(got.1.lines()).find(|(h, a)| h != a);
    assert_eq!(
        host.1, got.1,
        "stdout differs, first at {first_difference:?}; atoll stderr:\n{}",
        got.2
    );
    assert_eq!(
        host.0, got.0,
        "exit status differs; atoll stderr:\n{}",
        got.2
    );
    assert_eq!(host.2, got.2, "stderr differs");
    // The script tells both outcomes apart (not a vacuous comparison).
    for line in [
        "ok touch d/fa1\n",
        "fail touch d/fb1: Permission denied\n",
        "fail mv d/wc1 d2/wc1: Permission denied\n",
        "ok touch d/fd3\n",
        "fail touch d/fe1: Permission denied\n",
        "fail touch d/ff1: Permission denied\n",
        "fail mv d/vg1 d/wg1: Operation not permitted\n",
        "fail rm -f d/xg1: Operation not permitted\n",
        "fail rm -f d/xb1: Permission denied\n",
        "d/late0 65534 Permission denied\n",
        "d/again5 65534 ok\n",
    ] {
        assert!(got.1.contains(line), "missing {line:?} in\n{}", got.1);
    }
}

#[test]
fn access_acls_decide_name_changes_in_distributed_directories() {
    check(&["--servers", "3", "--distribute", "all"]);
}

#[test]
fn access_acls_decide_name_changes_on_one_server() {
    check(&["--servers", "1"]);
}
