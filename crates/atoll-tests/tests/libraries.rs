//! Shared libraries stored in the mount, found by the dynamic loader of a
//! program as on Linux: through an absolute or `$ORIGIN` `RPATH` or
//! `RUNPATH`, `LD_LIBRARY_PATH` (absolute, relative, an empty entry), a
//! library's own `RUNPATH` for what it needs, with `execve`,
//! `posix_spawn`, `system` and Python's `subprocess`; and what projects
//! do with them (CMake building a shared library and running its tests
//! with `ctest`). Each script runs on a tmpfs directory and in the mount,
//! and must print the same. The loader runs before the client library,
//! so every one of these failed to start (`cannot open shared object
//! file`) before the exec learned to copy them (client `exec/libs.rs`).

use atoll_tests::{assert_same_on_tmpfs, require};

/// Two libraries and programs that use them: `libtwo` needs `libone`,
/// which it finds through its own `RUNPATH` (`$ORIGIN/one`); `libone`
/// has no `SONAME`. `show` prints what a program's environment says and
/// which atoll copies are left behind (none may be).
const PROJECT: &str = r#"
set -e
# The programs print it: the caller's own must not leak into the output.
unset LD_LIBRARY_PATH
cd "$ROOT" && mkdir -p lib/one bin && cd lib
printf 'int one(void) { return 1; }\n' > one.c
printf 'int one(void);\nint two(void) { return one() + 1; }\n' > two.c
printf '#include <stdio.h>\n#include <stdlib.h>\nint two(void);\nint main(void) { const char *p = getenv("LD_LIBRARY_PATH"); printf("two=%%d path=%%s\\n", two(), p ? p : "(unset)"); return 0; }\n' > main.c
cc -shared -fPIC -o one/libone.so one.c
cc -shared -fPIC -o libtwo.so two.c -Lone -lone -Wl,-rpath,'$ORIGIN/one' -Wl,-soname,libtwo.so
cc -o ../bin/rpath main.c -L. -ltwo -Lone -Wl,-rpath,"$ROOT/lib" -Wl,--disable-new-dtags
cc -o ../bin/runpath main.c -L. -ltwo -Lone -Wl,-rpath,'$ORIGIN/../lib' -Wl,--enable-new-dtags
cc -o ../bin/plain main.c -L. -ltwo -Lone
cd "$ROOT"
left() {
    if [ -n "$ATOLL_SOCKET" ]; then ls "$(dirname "$ATOLL_SOCKET")" | grep -c '^libs-' || true; else echo 0; fi
}
"#;

#[test]
fn programs_find_libraries_in_the_mount_by_rpath_runpath_and_ld_library_path() {
    require("cc");
    let script = format!(
        "{PROJECT}{}",
        r#"
bin/rpath
bin/runpath
(cd bin && ./runpath)
LD_LIBRARY_PATH="$ROOT/lib" bin/plain
(cd lib && LD_LIBRARY_PATH=. ../bin/plain)
(cd lib && LD_LIBRARY_PATH=/nonexistent: ../bin/plain)
LD_LIBRARY_PATH= bin/runpath
env -u LD_LIBRARY_PATH bin/plain 2>/dev/null || echo "not found: $?"
echo "left: $(left)"
"#
    );
    let out = assert_same_on_tmpfs(&[], &script, false);
    assert_eq!(out.matches("two=2").count(), 7, "{out}");
    assert!(out.contains("not found: 127"), "{out}");
    assert!(out.contains("left: 0"), "{out}");
}

#[test]
fn spawned_children_and_their_own_children_load_them_too() {
    require("cc");
    require("python3");
    let script = format!(
        "{PROJECT}{}",
        r#"
cat > spawn.c <<'X'
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
extern char **environ;
int main(int argc, char **argv) {
    pid_t pid; int st;
    char *args[] = {argv[1], NULL};
    int r = posix_spawn(&pid, argv[1], NULL, NULL, args, environ);
    waitpid(pid, &st, 0);
    printf("spawn=%d status=%d\n", r, WEXITSTATUS(st));
    fflush(stdout);
    return system(argv[1]);
}
X
cc -o bin/spawn spawn.c
bin/spawn bin/runpath
LD_LIBRARY_PATH="$ROOT/lib" bin/spawn bin/plain
python3 -c 'import subprocess, sys; print(subprocess.run([sys.argv[1]], capture_output=True, text=True).stdout, end="")' bin/rpath
bash -c 'bin/runpath & wait'
echo "left: $(left)"
"#
    );
    let out = assert_same_on_tmpfs(&[], &script, false);
    assert_eq!(out.matches("two=2").count(), 6, "{out}");
    assert!(out.contains("left: 0"), "{out}");
}

#[test]
fn a_failed_exec_leaves_no_copies_behind() {
    require("cc");
    // Its libraries are found and copied, then the kernel refuses the
    // image (its loader does not exist): the copies go with the plan.
    let script = format!(
        "{PROJECT}{}",
        r#"
cc -o bin/bad lib/main.c -Llib -ltwo -Llib/one -Wl,-rpath,'$ORIGIN/../lib' -Wl,--dynamic-linker=/nonexistent/ld.so
bin/bad 2>/dev/null || echo "refused: $?"
bin/runpath
echo "left: $(left)"
"#
    );
    let out = assert_same_on_tmpfs(&[], &script, false);
    assert!(out.contains("refused: 127"), "{out}");
    assert!(out.contains("left: 0"), "{out}");
}

#[test]
fn cmake_builds_a_shared_library_and_ctest_runs_its_tests_in_the_mount() {
    require("cmake");
    let out = assert_same_on_tmpfs(
        &["--servers", "2"],
        r#"
        set -e
        cd "$ROOT" && mkdir -p proj/src && cd proj
        cat > CMakeLists.txt <<'X'
cmake_minimum_required(VERSION 3.10)
project(shapes C)
enable_testing()
add_library(shapes SHARED src/shapes.c)
set_target_properties(shapes PROPERTIES VERSION 1.2.3 SOVERSION 1)
add_library(area SHARED src/area.c)
target_link_libraries(area shapes)
add_executable(check src/check.c)
target_link_libraries(check area)
add_test(NAME squares COMMAND check 7 49)
add_test(NAME areas COMMAND check 3 9)
X
        echo 'int square(int x) { return x * x; }' > src/shapes.c
        printf 'int square(int);\nint area(int s) { return square(s); }\n' > src/area.c
        printf '#include <stdio.h>\n#include <stdlib.h>\nint area(int);\nint main(int c, char **v) { int a = area(atoi(v[1])); printf("%%d\\n", a); return a != atoi(v[2]); }\n' > src/check.c
        mkdir build && cd build
        cmake .. > cmake.log 2>&1 || { cat cmake.log; exit 1; }
        make -j2 > make.log 2>&1 || { cat make.log; exit 1; }
        ./check 5 25
        ctest 2>&1 | grep -E 'tests passed|Passed|Failed' | sed 's/ *[0-9.]* sec$//'
        ls -1 libshapes*
        "#,
        false,
    );
    assert!(out.contains("100% tests passed"), "{out}");
    assert!(out.contains("25\n"), "{out}");
}

#[test]
fn ldd_and_the_loader_run_as_a_program_see_programs_and_libraries_of_the_mount() {
    require("cc");
    require("ldd");
    // `ldd` runs the loader twice (`--verify`, then with
    // `LD_TRACE_LOADED_OBJECTS=1`) and reads what it prints through a
    // pipe; the loader prints before any client could start.
    let script = format!(
        "{PROJECT}{}",
        r#"
# Where each library came from (a copy's name, the loader's order aside:
# the preloaded client brings the loader in earlier).
copy() { grep -v -e libatoll -e linux-vdso | sed -e 's/ (0x[0-9a-f]*)$//' -e 's#=> .*/libs-[0-9-]*/#=> COPY/#' -e "s#=> $ROOT/bin/\.\./lib/one/#=> COPY/#" -e "s#=> $ROOT/bin/\.\./lib/#=> COPY/#" -e "s#=> $ROOT/lib/one/#=> COPY/#" -e "s#=> $ROOT/lib/#=> COPY/#" | sort; }
ldd bin/runpath | copy
ldd bin/plain | copy
ldd /bin/true | grep -c 'libc.so.6 => '
x=$(LD_TRACE_LOADED_OBJECTS=1 bin/rpath); echo "$x" | copy
/lib64/ld-linux-x86-64.so.2 bin/runpath
/lib64/ld-linux-x86-64.so.2 --verify bin/runpath; echo "verify: $?"
/lib64/ld-linux-x86-64.so.2 --list bin/runpath | copy
echo "left: $(left)"
"#
    );
    let out = assert_same_on_tmpfs(&[], &script, false);
    assert!(out.contains("libtwo.so => COPY/libtwo.so"), "{out}");
    assert!(out.contains("libtwo.so => not found"), "{out}");
    assert!(out.contains("verify: 0"), "{out}");
    assert!(out.contains("left: 0"), "{out}");
}
