//! Default ACLs (Linux's `posix_acl_create`): every kind of inode made in
//! a directory with a default ACL — `touch`, `mkdir`, `mkfifo`, `mknod`,
//! `open` from Python under umask 077, `O_TMPFILE`, a Unix socket's
//! `bind`, two levels down — gets the mode and ACLs Linux gives it, and
//! copies (`cp -a`, `rsync -A`) of such a tree too; compared with the same
//! script on a host directory, in every configuration that makes the new
//! inode on a server that does not own the directory.

use std::path::Path;
use std::process::Stdio;

use atoll_tests::{
    assert_same, atoll, normalized, output_within, require, run_on_host, MOUNT, RUN_LIMIT,
};

/// Shell function `show PATH…`: each name under the paths, sorted, with
/// its mode and (not for symlinks) its ACL.
const SHOW: &str = r#"
show() {
    find "$@" | sort | while read -r f; do
        echo "$(stat -c '%A' "$f") $f"
        [ -L "$f" ] || getfacl -cp "$f" | grep -v '^$' | sed 's/^/    /'
    done
}
"#;

/// Every kind of creation in `d` (default ACL with a named user, so a
/// mask) and below it, then copies of the tree.
const CREATIONS: &str = r#"
setfacl -d -m u:nobody:rwx,g::r-x,o::- d
touch d/f
mkdir d/sub
mkfifo d/p
mknod d/c c 1 3
ln -s f d/l
python3 -c 'import os; os.umask(0o077); os.close(os.open("d/py", os.O_CREAT | os.O_WRONLY, 0o666))'
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("d/sock")'
python3 - <<'P'
import os
fd = os.open("d", os.O_TMPFILE | os.O_WRONLY, 0o640)
print("tmpfile", oct(os.fstat(fd).st_mode), os.getxattr(fd, "system.posix_acl_access").hex())
P
mkdir -p d/sub/deeper/h; touch d/sub/deeper/g
(umask 077; mkdir d/sub/u; echo x > d/sub/u/x)
for i in $(seq 1 12); do echo $i > d/n$i; done
mkdir plain; touch plain/f
"#;

/// The whole script: `swap_to` is run (with `1`, then `0`) between
/// creations, for adaptive directories; empty for none.
fn script(swap: &str) -> String {
    format!(
        r#"
        set -e
        cd "$ROOT"
        umask 022
        {SHOW}
        mkdir d
        {swap_1}
        {CREATIONS}
        {swap_0}
        touch d/after-swap; mkdir d/sub/after-swap
        show d plain
        echo '-- getfacl -R'
        getfacl -R -p d | grep -c .
        echo '-- cp -a and rsync -A'
        cp -a d c1; rsync -aA d/ r1/
        show c1 r1
        "#,
        swap_1 = swap.replace("$V", "1"),
        swap_0 = swap.replace("$V", "0"),
    )
}

fn check(opts: &[&str], swap: &str) {
    for p in ["setfacl", "getfacl", "rsync", "python3", "mknod"] {
        require(p);
    }
    let out = assert_same(opts, &script(swap), true);
    // The inherited ACL, with the mode 0666 masked by it (not the umask).
    assert!(out.contains("-rw-rw---- d/py\n"), "{out}");
    assert!(out.contains("drwxrwx--- d/sub/deeper/h\n"), "{out}");
    assert!(out.contains("-rw-r--r-- plain/f\n"), "{out}");
}

#[test]
fn default_acls_are_inherited_as_on_linux_on_one_server() {
    check(&["--servers", "1"], "");
}

#[test]
fn default_acls_are_inherited_as_on_linux_in_distributed_directories() {
    check(&["--servers", "3", "--distribute", "all"], "");
}

#[test]
fn default_acls_are_inherited_as_on_linux_on_several_servers() {
    check(&["--servers", "3"], "");
}

#[test]
fn default_acls_are_inherited_as_on_linux_across_directory_swaps() {
    // On the host the attribute is an ordinary one, which `show` omits.
    check(
        &["--servers", "3"],
        "setfattr -n user.atoll.distributed -v $V d",
    );
}

/// Creation affinity (`affinity.rs` of the tests): a creator pinned to
/// cpu 1 of a fake two-socket machine gets its inodes on server 1, away
/// from the directory server 0 owns.
#[test]
fn default_acls_are_inherited_by_inodes_placed_on_the_creators_socket() {
    require("taskset");
    let sysfs = tempfile::tempdir().expect("tempdir");
    for (cpu, pkg) in [(0, 0), (1, 1)] {
        let d = sysfs
            .path()
            .join(format!("devices/system/cpu/cpu{cpu}/topology"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("physical_package_id"), format!("{pkg}\n")).unwrap();
    }
    let body = script("");
    let pinned = format!("taskset -c 1 bash -c '{}'", body.replace('\'', r"'\''"));
    let (dir, host) = run_on_host(&body);
    let host = normalized(&host, dir.path());
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "256M", "--placement", "local"])
        .args(["--servers", "2", "--distribute", "all"])
        .arg("--")
        .args(["bash", "-c", &pinned])
        .env("ROOT", MOUNT)
        .env("ATOLL_SYSFS_ROOT", sysfs.path())
        .stdin(Stdio::null());
    let got = output_within(cmd, RUN_LIMIT);
    let got = normalized(&got, Path::new(MOUNT));
    assert_eq!(host.1, got.1, "atoll stderr:\n{}", got.2);
    assert_eq!(host.0, got.0, "atoll stderr:\n{}", got.2);
    // Most new inodes live on server 1 (owner: the inode number's top byte).
    let owners = run_placed_owners(sysfs.path());
    assert!(owners.contains("1\n"), "{owners}");
}

/// Owner servers of the inodes a pinned creator makes in a directory with
/// a default ACL, one per line.
fn run_placed_owners(sysfs: &Path) -> String {
    let script = r#"
        set -e
        mkdir $ROOT/d && setfacl -d -m u:nobody:rwx $ROOT/d
        taskset -c 1 bash -c 'for i in $(seq 1 20); do : > $ROOT/d/f$i; done'
        for f in $ROOT/d/*; do echo $(( $(stat -c %i "$f") >> 56 )); done
    "#;
    let mut cmd = atoll();
    cmd.args(["run", "--memory", "256M", "--placement", "local"])
        .args(["--servers", "2", "--distribute", "all"])
        .arg("--")
        .args(["bash", "-c", script])
        .env("ROOT", MOUNT)
        .env("ATOLL_SYSFS_ROOT", sysfs)
        .stdin(Stdio::null());
    let out = output_within(cmd, RUN_LIMIT);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A process that already knows a distributed directory's attributes
/// creates in it before, after `setfacl -d` by another process, and after
/// `setfacl -k`: the creation after each change sees it, as on Linux.
#[test]
fn a_default_acl_set_by_another_process_applies_to_the_next_creation() {
    require("setfacl");
    let script = r#"
        set -e
        cd "$ROOT"
        umask 022
        mkdir d
        python3 - <<'P'
import os, subprocess
def make(name):
    os.close(os.open(f"d/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
    os.mkdir(f"d/{name}.dir", 0o777)
    for n in (name, name + ".dir"):
        print(n, oct(os.stat(f"d/{n}").st_mode), len(os.listxattr(f"d/{n}")))
for i in range(3):
    make(f"before{i}")
subprocess.run(["setfacl", "-d", "-m", "u:nobody:rwx,g::r-x,o::-", "d"], check=True)
for i in range(3):
    make(f"set{i}")
subprocess.run(["setfacl", "-k", "d"], check=True)
for i in range(3):
    make(f"removed{i}")
P
    "#;
    let out = assert_same(&["--servers", "3", "--distribute", "all"], script, true);
    assert!(out.contains("set0 0o100660 1\n"), "{out}");
    assert!(out.contains("removed0 0o100644 0\n"), "{out}");
}
