//! A lowered limit on open files (`ulimit -n`, `RLIMIT_NOFILE`) below
//! the numbers atoll keeps its own descriptors at (900 and up): programs
//! exec, open and list their descriptors as on Linux. GNU tar's own test
//! "scarce file descriptors" (`extrac11.at`) is the model: every `execve`
//! under `ulimit -n 10` used to fail with `EINVAL`.

use atoll_tests::{assert_same, require};

#[test]
fn programs_exec_and_open_files_under_a_lowered_open_files_limit() {
    require("python3");
    let script = r#"
        cd "$ROOT"; echo data > f
        for n in 512 64 16 10; do
            (ulimit -n $n; cat f; /bin/true && echo "exec under $n")
            # A child's first descriptors get the numbers Linux gives.
            (ulimit -n $n; python3 -c 'import os; print(os.open("f", os.O_RDONLY), os.pipe())')
        done
        # Only the soft limit lowered: the same.
        python3 -c '
import os, resource, subprocess
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (12, hard))
print(subprocess.run(["cat", "f"], capture_output=True).stdout.decode().strip(), os.open("f", 0))
'
    "#;
    let out = assert_same(&["--servers", "2"], script, true);
    assert!(out.contains("exec under 10\n3 (4, 5)\n"), "{out}");
}

/// GNU tar's "scarce file descriptors" test: with `ulimit -n 10`, tar
/// archives and extracts an 11-deep tree of directories, closing and
/// reopening directories as descriptors run short, as on Linux.
#[test]
fn tar_archives_a_deep_tree_with_scarce_descriptors() {
    require("tar");
    let script = r#"
        cd "$ROOT"; exec </dev/null
        dirs='a a/b a/b/c a/b/c/d a/b/c/d/e a/b/c/d/e/f a/b/c/d/e/f/g a/b/c/d/e/f/g/h a/b/c/d/e/f/g/h/i a/b/c/d/e/f/g/h/i/j a/b/c/d/e/f/g/h/i/j/k'
        mkdir $dirs dest
        for dir in $dirs; do for file in X Y Z; do echo $file > $dir/$file; done; done
        ( (exec 3<&- 4<&- 5<&- 6<&- 7<&- 8<&- 9<&- && ulimit -n 10 &&
           tar -cf archive.tar a && tar -xf archive.tar -C dest a) &&
          diff -r a dest/a && echo same )
    "#;
    let out = assert_same(&["--servers", "3", "--distribute", "all"], script, true);
    assert!(out.ends_with("same\n"), "{out}");
}
