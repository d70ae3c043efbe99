//! The mount shows in a listing of the host directory it appears in, as a
//! mount point does on Linux (`ls /` lists `atoll`; client `mountentry.rs`):
//! once per listing, again after a rewind, as a directory whose inode number
//! is the one `stat` gives, and nowhere else.

use atoll_tests::{atoll, output_within, RUN_LIMIT};

/// Run `script` under `atoll run --servers 2 --mount MOUNT` and return
/// its standard output.
fn run(mount: &str, script: &str) -> String {
    let mut cmd = atoll();
    cmd.args([
        "run",
        "--servers",
        "2",
        "--memory",
        "64M",
        "--mount",
        mount,
        "--",
    ]);
    cmd.args(["bash", "-c", script]);
    let out = output_within(cmd, RUN_LIMIT);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The names of `dir` as the host lists them, with `extra` added, sorted.
fn host_names_with(dir: &std::path::Path, extra: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.push(extra.to_string());
    names.sort();
    names
}

/// Listings by the same program in several ways: `ls`, Python's `listdir`
/// and `scandir` (read twice through one stream's rewind), `find`, a glob.
const LISTINGS: &str = r#"
cd "$PARENT" || exit 1
export LC_ALL=C
echo "ls: $(ls -A "$PARENT" | tr '\n' ' ')"
python3 - "$PARENT" "$NAME" <<'PY'
import os, sys
parent, name = sys.argv[1], sys.argv[2]
print("listdir:", " ".join(sorted(os.listdir(parent))))
fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
first = sorted(os.listdir(fd))
os.lseek(fd, 0, os.SEEK_SET)
second = sorted(os.listdir(fd))
print("rewound:", first == second, first.count(name))
for e in os.scandir(parent):
    if e.name == name:
        print("scandir:", e.is_dir(follow_symlinks=False), e.inode() == os.stat(e.path).st_ino)
PY
echo "find: $(find "$PARENT" -mindepth 1 -maxdepth 1 -name "$NAME")"
echo "glob: $(echo "$PARENT"/"$NAME"*)"
echo "type: $(ls -ld "$PARENT/$NAME" | cut -c1)"
echo "elsewhere: $(ls -A "$PARENT/sub" | tr '\n' ' ')"
# Listings at once, more of them than cores.
for i in 1 2 3 4 5 6; do ls -A "$PARENT" > "$MOUNT/l$i" & done; wait
for i in 1 2 3 4 5 6; do cmp -s "$MOUNT/l1" "$MOUNT/l$i" || echo "listing $i differs"; done
grep -cx "$NAME" "$MOUNT/l1"
"#;

#[test]
fn the_mount_shows_once_in_its_parent_s_listing_as_a_directory() {
    atoll_tests::require("python3");
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path();
    for f in ["a", "b.txt", "zz"] {
        std::fs::write(parent.join(f), f).unwrap();
    }
    std::fs::create_dir(parent.join("sub")).unwrap();
    std::fs::write(parent.join("sub/inner"), "x").unwrap();
    let mount = parent.join("m");
    let script = format!(
        "PARENT={p}; NAME=m; MOUNT={m}\n{LISTINGS}",
        p = parent.display(),
        m = mount.display()
    );
    let out = run(mount.to_str().unwrap(), &script);
    let want = host_names_with(parent, "m").join(" ");
    let expected = format!(
        "ls: {want} \nlistdir: {want}\nrewound: True 1\nscandir: True True\n\
         find: {p}/m\nglob: {p}/m\ntype: d\nelsewhere: inner \n1\n",
        p = parent.display()
    );
    assert_eq!(out, expected);
    assert!(!mount.exists(), "nothing was made on the host");
}

#[test]
fn a_listing_of_the_root_shows_the_default_mount() {
    let out = run(
        "/atoll",
        "LC_ALL=C ls -A / | tr '\\n' ' '; echo; stat -c %i /atoll; ls -i / | awk '$2 == \"atoll\" {print $1}'",
    );
    let mut lines = out.lines();
    let want = host_names_with(std::path::Path::new("/"), "atoll");
    let got: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(got, want, "{out}");
    let (stat_ino, listed_ino) = (lines.next().unwrap(), lines.next().unwrap());
    assert_eq!(stat_ino, listed_ino, "{out}");
}
