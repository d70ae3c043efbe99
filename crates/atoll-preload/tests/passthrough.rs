//! Without an instance the library must be invisible: real programs print
//! exactly what they print without it, in mode Off and in SUD self-test
//! mode (every call trapped or wrapped, then answered `Host`).

mod common;

use common::{command, run, stderr, stdout, Preload};

/// A shell session touching many libc entry points: file creation, rename,
/// links, symlinks, chmod, directory listing, pipes, subshells, command
/// substitution, coreutils and Python's os module.
const SCRIPT: &str = r#"
set -e
cd "$1"
mkdir -p sub/deep
printf 'line1\nline2\nline3\n' > sub/f.txt
cp sub/f.txt sub/g.txt
mv sub/g.txt sub/deep/h.txt
ln -s ../f.txt sub/deep/link
ln sub/f.txt sub/hard
chmod 640 sub/hard
ls -la sub sub/deep | awk '{print $1, $NF}'
stat -c '%s %h %a %F %n' sub/f.txt sub/deep/link sub/hard
readlink sub/deep/link
cat sub/deep/link | sort -r | head -2
wc -l < sub/f.txt
find . | sort
x=$(cd sub && pwd); echo "${x##*/}"
(echo in-subshell; true) | tr a-z A-Z
for i in 1 2 3; do echo $i > sub/n$i & done; wait
cat sub/n1 sub/n2 sub/n3
touch -d '2001-02-03 04:05:06' sub/f.txt; date -r sub/f.txt -u +%F
truncate -s 10 sub/f.txt; stat -c %s sub/f.txt
/usr/bin/python3 - <<'PY'
import os, subprocess, threading
os.makedirs("py/a", exist_ok=True)
with open("py/a/x", "w") as f:
    f.write("data" * 1000)
print(os.stat("py/a/x").st_size, sorted(os.listdir("py")))
fd = os.open("py/a/x", os.O_RDONLY)
print(len(os.pread(fd, 100, 3990)))
os.close(fd)
res = []
ts = [threading.Thread(target=lambda i=i: res.append(len(os.listdir("sub")))) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print(res)
print(subprocess.run(["ls", "py/a"], capture_output=True, text=True).stdout.strip())
os.rename("py/a/x", "py/a/y"); os.unlink("py/a/y"); os.rmdir("py/a")
print(os.path.realpath("sub/deep/link").endswith("sub/f.txt"))
PY
rm -rf sub py
ls -A
echo exit-ok
"#;

fn run_script(how: Preload) -> (String, String, Option<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = command("bash", how);
    c.arg("-c").arg(SCRIPT).arg("script").arg(dir.path());
    let o = run(c);
    (stdout(&o), stderr(&o), o.status.code())
}

#[test]
fn shell_coreutils_and_python_are_unchanged_by_the_library_without_an_instance() {
    let native = run_script(Preload::None);
    assert_eq!(native.2, Some(0), "native run failed: {}", native.1);
    assert!(native.0.contains("exit-ok"));
    let off = run_script(Preload::Off);
    assert_eq!(off, native);
}

#[test]
fn shell_coreutils_and_python_are_unchanged_under_sud_selftest() {
    let native = run_script(Preload::None);
    let selftest = run_script(Preload::SelfTest);
    assert_eq!(selftest.1, native.1, "stderr differs");
    assert_eq!(selftest.0, native.0);
    assert_eq!(selftest.2, Some(0));
}

#[test]
fn mode_off_arms_nothing_and_writes_no_stats() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats");
    let mut c = command("bash", Preload::Off);
    c.env("ATOLL_TRAP_STATS", &stats)
        .arg("-c")
        .arg("ls / >/dev/null; grep -c SigCgt /proc/self/status");
    let o = run(c);
    assert!(o.status.success());
    assert!(!stats.exists(), "mode Off must not count traps");
}
