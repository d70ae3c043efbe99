//! Real programs under `atoll run`, compared with the same programs on a
//! host directory: what they print and how they exit must be identical.

use atoll_tests::{assert_same, require, run_in_atoll};

#[test]
fn bash_redirections_heredocs_globbing_and_cd() {
    assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        mkdir -p a/b/c && cd a/b
        echo one > f1; echo two >> f1; printf 'x\ny\n' > f2
        cat <<EOF > here.txt
line 1 $((6*7))
line 2
EOF
        exec 3>fd3.txt; echo via-fd3 >&3; exec 3>&-
        cat f1 f2 here.txt fd3.txt
        echo *.txt f?
        cd c && pwd && cd .. && pwd && cd "$ROOT" && pwd
        [ -d a/b/c ] && echo isdir
        [ -f a/b/f1 ] && echo isfile
        [ -e nope ] || echo missing
        wc -l < a/b/f1
        while read -r l; do echo "got $l"; done < a/b/f2
        "#,
        true,
    );
}

#[test]
fn coreutils_file_management() {
    assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        mkdir -p src/d1/d2
        for i in 1 2 3 4 5; do seq $i 100 > src/d1/n$i; done
        echo hello > src/d1/d2/h
        cp -r src dst
        mv dst/d1/n1 dst/d1/moved
        ln src/d1/n2 hard
        ln -s src/d1/d2/h soft
        readlink soft
        cat soft
        stat -c '%n %s %h %F %a' hard soft src/d1/n2 | sort
        chmod 640 hard && stat -c '%a' src/d1/n2
        touch -d '2020-01-02 03:04:05' hard && stat -c '%Y' src/d1/n2
        truncate -s 10000 big && stat -c '%s' big
        dd if=/dev/zero of=zeros bs=4096 count=3 status=none && stat -c '%s' zeros
        find . | sort
        find src -type f -exec du -b {} + | sort -k2
        ls -l --time-style=+ src/d1 | grep -v -e '^total' -e '^d' | awk '{print $1, $2, $5, $NF}'
        cat src/d1/n3 | sort -n | wc -l
        sort -r src/d1/n4 | head -3
        rm -rf dst
        ls
        rm hard soft
        ls -a src/d1
        "#,
        true,
    );
}

#[test]
fn tar_and_gzip_round_trip() {
    assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        mkdir -p tree/sub
        for i in $(seq 1 40); do head -c $((i * 997)) /dev/urandom > tree/sub/f$i; done
        ln -s sub/f1 tree/link
        (cd tree && find . -type f | sort | xargs md5sum) > before
        tar czf t.tgz tree
        mkdir out && tar xzf t.tgz -C out
        (cd out/tree && find . -type f | sort | xargs md5sum) > after
        cmp before after && echo same
        readlink out/tree/link
        gzip -k before && gunzip -c before.gz | cmp - before && echo gz-ok
        "#,
        true,
    );
}

#[test]
fn python_os_walk_shutil_tempfile_and_fd_calls() {
    require("python3");
    assert_same(
        &[],
        r#"
        cd "$ROOT" && python3 - <<'EOF'
import os, shutil, tempfile
os.makedirs("p/q/r")
for i in range(5):
    with open(f"p/q/f{i}", "w") as f:
        f.write("x" * i)
shutil.copytree("p", "p2")
for root, dirs, files in sorted(os.walk("p2")):
    print(root, sorted(dirs), sorted(files))
fd = os.open("raw", os.O_CREAT | os.O_RDWR, 0o600)
os.write(fd, b"abcdef")
os.lseek(fd, 2, os.SEEK_SET)
print(os.read(fd, 3))
os.ftruncate(fd, 4)
print(os.fstat(fd).st_size, oct(os.fstat(fd).st_mode & 0o777))
fd2 = os.dup(fd)
os.lseek(fd2, 0, os.SEEK_SET)
print(os.read(fd, 10))
os.close(fd); os.close(fd2)
with tempfile.TemporaryDirectory(dir=".") as t:
    with tempfile.NamedTemporaryFile(dir=t, delete=False) as f:
        f.write(b"tmp")
        name = f.name
    print(open(name, "rb").read(), os.path.exists(name))
print(os.path.exists("tmp"), sorted(os.listdir(".")))
os.rename("raw", "p/raw")
os.replace("p/q/f1", "p/q/f2")
print(sorted(os.listdir("p/q")), os.stat("p/q/f2").st_size)
shutil.rmtree("p2")
print(os.path.realpath("p/q/../q/f3").replace(os.getcwd(), "CWD"))
EOF
        "#,
        true,
    );
}

#[test]
fn git_init_add_commit_log_status_fsck() {
    require("git");
    assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e
        export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'
        git init -q -b main repo && cd repo
        for i in 1 2 3; do echo "file $i" > f$i; done
        mkdir d && echo deep > d/x
        git add . && git commit -q -m first
        echo change >> f1 && git rm -q f3 && git mv f2 g2
        git status --short
        git commit -q -am second
        git log --format='%H %s'
        git fsck --strict 2>&1 | grep -v '^Checking' || true
        git ls-files
        git gc -q && git count-objects -v | grep -E '^(count|in-pack)'
        "#,
        true,
    );
}

#[test]
fn gcc_compiles_links_and_runs_in_the_mount() {
    require("gcc");
    let out = assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        cat > hello.c <<'EOF'
#include <stdio.h>
int square(int);
int main(void) { printf("hello %d\n", square(7)); return 0; }
EOF
        echo 'int square(int x) { return x * x; }' > sq.c
        gcc -c sq.c -o sq.o
        gcc -O2 hello.c sq.o -o hello
        ./hello
        "#,
        true,
    );
    assert!(
        out.contains("hello 49"),
        "program built in the mount must run: {out}"
    );
}

#[test]
fn make_j2_builds_a_multi_file_project() {
    require("make");
    let out = assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        mkdir proj && cd proj
        for i in $(seq 1 12); do
            printf 'int f%d(void) { return %d; }\n' $i $i > f$i.c
        done
        {
            for i in $(seq 1 12); do echo "int f$i(void);"; done
            echo '#include <stdio.h>'
            echo 'int main(void) { int s = 0;'
            for i in $(seq 1 12); do echo "s += f$i();"; done
            echo 'printf("sum %d\n", s); return 0; }'
        } > main.c
        cat > Makefile <<'EOF'
SRCS := $(wildcard *.c)
OBJS := $(SRCS:.c=.o)
prog: $(OBJS)
	$(CC) -o $@ $^
%.o: %.c
	$(CC) -O1 -c $< -o $@
clean:
	rm -f $(OBJS) prog
EOF
        make -s -j2
        ./prog
        make -s -j2 && echo up-to-date
        ls *.o | wc -l
        "#,
        true,
    );
    assert!(out.contains("sum 78"), "{out}");
}

/// rustc is a many-threaded compiler that maps its inputs and writes
/// through temporary files and renames, and cargo runs it under a
/// jobserver: a real build tool nobody here wrote.
#[test]
fn cargo_builds_tests_and_runs_a_crate_in_the_mount() {
    require("cargo");
    let out = assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        export CARGO_TARGET_DIR="$ROOT/target" CARGO_TERM_COLOR=never
        mkdir -p demo/src
        printf '[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n' > demo/Cargo.toml
        cat > demo/src/lib.rs <<'END'
pub mod shapes;
pub fn total(xs: &[u64]) -> u64 { xs.iter().map(|x| shapes::square(*x)).sum() }
#[cfg(test)]
mod tests {
    #[test]
    fn sums_squares() { assert_eq!(super::total(&[1, 2, 3]), 14); }
}
END
        echo 'pub fn square(x: u64) -> u64 { x * x }' > demo/src/shapes.rs
        cat > demo/src/main.rs <<'END'
fn main() {
    let n: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    println!("total {}", demo::total(&n));
}
END
        cd demo
        cargo build --offline -q -j2
        cargo run --offline -q -- 3 4 5
        cargo test --offline -q -j2 2>&1 | grep -o 'test result: ok. [0-9]* passed' | sort | uniq -c
        touch src/shapes.rs && cargo build --offline -q && echo rebuilt
        test -x "$CARGO_TARGET_DIR/debug/demo" && echo binary-in-target
        "#,
        false,
    );
    assert!(out.contains("total 50"), "{out}");
    assert!(out.contains("1 test result: ok. 1 passed"), "{out}");
}

/// `/dev/stderr`, `/dev/fd/N` and `/proc/self/fd/N` of a descriptor that
/// is an atoll file reopen that file (new description, O_TRUNC applied),
/// through libc wrappers (bash, python) and through the trap path (sed's
/// fopen): the bytes must land in the file, not in the placeholder.
#[test]
fn dev_stderr_and_dev_fd_of_mount_files_reopen_them() {
    let out = assert_same(
        &[],
        r#"
        cd "$ROOT"; echo a > a
        sed --posix "w/dev/stderr" a >o 2>e; echo "sed e=[$(cat e)]"
        (echo x >> /dev/stderr) 2>f2; echo "f2=[$(cat f2)]"
        (echo y > /dev/stderr) 2>f2b; echo "f2b=[$(cat f2b)]"
        python3 -c 'open("/dev/stderr","w").write("py\n")' 2>f3; echo "f3=[$(cat f3)]"
        python3 -c 'open("/proc/self/fd/2","a").write("py\n")' 2>f4; echo "f4=[$(cat f4)]"
        exec 5>f5; echo five > /dev/fd/5; cat /dev/fd/5 < /dev/null; echo "f5=[$(cat f5)]"
        exec 6<a; python3 -c 'import os; print(open("/dev/fd/6").read().strip(), os.lseek(6, 0, 1))'
        echo log | tee -a /dev/stderr 2>>f6 >/dev/null; echo "f6=[$(cat f6)]"
        "#,
        true,
    );
    assert!(out.contains("sed e=[a]"), "{out}");
    assert!(out.contains("f5=[five]"), "{out}");
    assert!(out.contains("f6=[log]"), "{out}");
}

#[test]
fn shebang_script_stored_in_the_mount_runs() {
    let out = assert_same(
        &[],
        r#"
        set -e
        cd "$ROOT"
        printf '#!/bin/sh\necho "script $0 args: $*"\n' > s.sh
        chmod +x s.sh
        ./s.sh a b
        "$ROOT/s.sh" c
        mkdir bin && mv s.sh bin/ && PATH="$ROOT/bin:$PATH" s.sh d
        printf '#!/bin/sh\nexit 7\n' > fail.sh && chmod +x fail.sh
        ./fail.sh || echo "status $?"
        "#,
        true,
    );
    assert!(out.contains("args: a b"), "{out}");
}

#[test]
fn files_outside_the_mount_are_untouched_host_files() {
    // Host paths keep working normally while the cwd is inside the mount.
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("h.txt"), "host data\n").unwrap();
    let script = format!(
        "cd $ROOT && cat {0}/h.txt && cp {0}/h.txt . && echo more >> {0}/h.txt && cat h.txt && cd .. && pwd",
        host.path().display()
    );
    let out = run_in_atoll(&[], &script);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "host data\nhost data\n/\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("h.txt")).unwrap(),
        "host data\nmore\n"
    );
    assert!(
        !std::path::Path::new(atoll_tests::MOUNT).exists(),
        "the mount must not appear on the host"
    );
}

#[test]
fn several_servers_give_identical_results() {
    for servers in ["1", "3"] {
        assert_same(
            &["--servers", servers],
            r#"
            set -e
            cd "$ROOT"
            mkdir -p x/y z
            for i in $(seq 1 50); do echo $i > x/y/f$i; done
            mv x/y z/
            ls z/y | sort -n | tail -3
            cat z/y/f7
            rm -r z
            ls
            "#,
            true,
        );
    }
}
