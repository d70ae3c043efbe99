//! What the dynamic loader prints before the client library starts
//! reaches an atoll pipe or file at fd 2, as on Linux: the
//! `error while loading shared libraries` of a program whose library is
//! gone (exit status 127) through a pipeline, a redirect to a file in the
//! mount (and an append), a command substitution, many such programs at
//! once, and `LD_DEBUG` output of a program that does start, ahead of its
//! own stderr (client `exec/caught.rs`, server `caught.rs`); programs
//! started by `posix_spawn` and `posix_spawnp` (with and without file
//! actions, Python's `subprocess` and `os.posix_spawn`), and by a
//! scheduling server (`--exec-via spawn`). Each script runs on a tmpfs
//! directory and under `atoll run --servers 2`, and must print the same;
//! before the exec gave the loader a memfd at fd 2 the messages were lost
//! under atoll.

use atoll_tests::{assert_same_on_tmpfs, require};

/// `p` needs `libgone.so`, which is removed; `ok` needs `libhere.so`,
/// kept in a host directory (`$H`: the loader's search then names no path
/// of the mount, which the exec would copy), and writes its own stderr
/// and stdout.
const PROGRAMS: &str = r#"
set -e
unset LD_LIBRARY_PATH LD_DEBUG LD_WARN
cd "$ROOT"
H=$(mktemp -d)
trap 'rm -rf "$H"' EXIT
printf 'int gone(void) { return 1; }\n' > "$H/gone.c"
printf '#include <stdio.h>\nint gone(void);\nint main(void) { fprintf(stderr, "own stderr\\n"); printf("own stdout\\n"); return gone() - 1; }\n' > "$H/main.c"
cc -shared -fPIC -o "$H/libgone.so" "$H/gone.c" -Wl,-soname,libgone.so
cc -shared -fPIC -o "$H/libhere.so" "$H/gone.c" -Wl,-soname,libhere.so
cc -o p "$H/main.c" -L"$H" -lgone -Wl,-rpath,"$H/nowhere"
cc -o ok "$H/main.c" -L"$H" -lhere -Wl,-rpath,"$H"
rm "$H/libgone.so"
set +e
"#;

fn script(body: &str) -> String {
    format!("{PROGRAMS}{body}")
}

const OPTS: &[&str] = &["--servers", "2"];

const MESSAGE: &str = "./p: error while loading shared libraries: libgone.so: cannot open shared object file: No such file or directory";

#[test]
fn a_loader_error_reaches_a_pipe_a_file_and_a_command_substitution() {
    require("cc");
    let out = assert_same_on_tmpfs(
        OPTS,
        &script(
            r#"
echo "[pipe]"
./p 2>&1 | cat
echo "status: ${PIPESTATUS[*]}"
echo "[stderr only]"
./p 2>&1 >/dev/null | tr a-z A-Z
echo "[file]"
./p 2> err
echo "status: $?"
cat err
echo "[append]"
echo before > log
./p 2>> log
echo after >> log
cat log
echo "[substitution]"
x=$(./p 2>&1)
echo "status: $? <$x>"
echo "[subshell]"
(./p; echo "inner: $?") 2>&1 | cat
echo "[reader gone]"
./p 2>&1 | true
echo "nothing waits"
echo "[all the loader's debugging]"
LD_DEBUG=all ./p 2>&1 | grep -c "error while loading"
"#,
        ),
        false,
    );
    assert_eq!(out.matches(MESSAGE).count(), 5, "{out}");
    assert!(out.contains(&MESSAGE.to_uppercase()), "{out}");
    assert!(out.contains("status: 127 0"), "{out}");
}

#[test]
fn many_failing_programs_at_once_each_deliver_their_message() {
    require("cc");
    // More programs than cores, into pipes and into one file opened for
    // appending; every message whole, none lost, none twice.
    let out = assert_same_on_tmpfs(
        OPTS,
        &script(
            r#"
for i in $(seq 1 16); do
    (./p 2>&1 | sed "s/^/$i: /" > "out.$i") &
    ./p 2>> all &
done
wait
cat out.* | sort -n
sort all | uniq -c
"#,
        ),
        false,
    );
    assert_eq!(out.matches(MESSAGE).count(), 17, "{out}");
    assert!(out.contains(&format!("16 {MESSAGE}")), "{out}");
}

#[test]
fn ld_debug_output_comes_before_the_program_s_own_stderr() {
    require("cc");
    // The loader's lines up to the program's start (which the client
    // serves from the memfd), the ones it writes after the client started
    // (`calling init`), and the program's own, in order; the client's own
    // library and the pids are left out of the comparison.
    let out = assert_same_on_tmpfs(
        OPTS,
        &script(
            r#"
filter() {
    grep -v -e atoll_preload -e '^[[:space:]]*[0-9]*:[[:space:]]*$' | sed -e 's/^[[:space:]]*[0-9]*:[[:space:]]*//' -e "s#$H#H#g"
}
echo "[pipe]"
LD_DEBUG=libs ./ok 2>&1 | filter
echo "[file]"
LD_DEBUG=libs ./ok 2> dbg > out
echo "status: $?"
filter < dbg
cat out
echo "[failing]"
LD_DEBUG=libs ./p 2>&1 | filter
"#,
        ),
        false,
    );
    let first = |s: &str| out.find(s).unwrap_or_else(|| panic!("no {s:?} in {out}"));
    assert!(
        first("find library=libhere.so") < first("own stderr"),
        "{out}"
    );
    assert!(
        first("transferring control: ./ok") < first("own stderr"),
        "{out}"
    );
    assert!(out.contains(MESSAGE), "{out}");
}

/// A C program that starts `argv[2]` with `posix_spawn` (`plain`, no file
/// actions), `posix_spawnp` (`spawnp`) or `posix_spawn` with a file action
/// (`actions`), or `system` (`system`), and prints its exit status once
/// it was reaped.
const SPAWNER: &str = r#"
cat > "$H/sp.c" <<'C'
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
extern char **environ;
int main(int argc, char **argv) {
  pid_t pid; int st, r;
  char *args[] = { argv[2], NULL };
  posix_spawn_file_actions_t fa, *fap = NULL;
  if (!strcmp(argv[1], "actions")) {
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 5, "/dev/null", 0, 0);
    fap = &fa;
  }
  if (!strcmp(argv[1], "system")) {
    st = system(argv[2]);
    printf("status %d\n", WEXITSTATUS(st));
    return 0;
  }
  if (!strcmp(argv[1], "spawnp")) r = posix_spawnp(&pid, argv[2], NULL, NULL, args, environ);
  else r = posix_spawn(&pid, argv[2], fap, NULL, args, environ);
  if (r) { printf("spawn: %s\n", strerror(r)); return 1; }
  waitpid(pid, &st, 0);
  printf("status %d\n", WEXITSTATUS(st));
  return 0;
}
C
cc -o sp "$H/sp.c"
for m in plain spawnp actions system; do
  echo "[$m pipe]"; ./sp $m ./p 2>&1 | cat
  echo "[$m file]"; ./sp $m ./p 2> err; cat err
done
echo "[at once]"
for i in 1 2 3 4 5 6; do ./sp plain ./p > "sp.$i" 2>&1 & done; wait
cat sp.* | sort | uniq -c
PY=$(python3 -c 'import sys; print(sys.executable)')
"$PY" - <<'PYEOF'
import os, subprocess
for kw in [dict(), dict(close_fds=False)]:
    r = subprocess.run(["./p"], stderr=subprocess.PIPE, **kw)
    print("subprocess", kw, r.returncode, r.stderr.decode().strip())
r, w = os.pipe()
pid = os.posix_spawn("./p", ["./p"], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, w, 2)])
os.close(w)
print("os.posix_spawn", os.read(r, 4096).decode().strip(), os.waitpid(pid, 0)[1] >> 8)
PYEOF
"#;

/// The spawns' lines: every case of [`SPAWNER`] got the message.
fn assert_spawns_caught(out: &str) {
    for m in ["plain", "spawnp", "actions", "system"] {
        for how in ["pipe", "file"] {
            let head = format!("[{m} {how}]\n");
            let at = out
                .find(&head)
                .unwrap_or_else(|| panic!("no {head} in {out}"));
            assert!(
                out[at..].starts_with(&format!("{head}{MESSAGE}\nstatus 127\n"))
                    || out[at..].starts_with(&format!("{head}status 127\n{MESSAGE}\n")),
                "{out}"
            );
        }
    }
    assert!(out.contains(&format!("6 {MESSAGE}\n")), "{out}");
    assert!(
        out.contains(&format!("subprocess {{}} 127 {MESSAGE}\n")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "subprocess {{'close_fds': False}} 127 {MESSAGE}\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("os.posix_spawn {MESSAGE} 127\n")),
        "{out}"
    );
}

#[test]
fn programs_started_by_posix_spawn_deliver_the_loader_s_message() {
    require("cc");
    require("python3");
    let out = assert_same_on_tmpfs(OPTS, &script(SPAWNER), true);
    assert_spawns_caught(&out);
}

#[test]
fn programs_a_scheduling_server_starts_deliver_the_loader_s_message() {
    require("cc");
    require("python3");
    // Every exec goes to another core's scheduling server, whose child
    // receives the caller's descriptors (`--exec-via spawn`).
    let opts = &[
        "--servers",
        "2",
        "--placement",
        "round-robin",
        "--exec-via",
        "spawn",
    ];
    let body = format!(
        r#"
echo "[pipe]"
./p 2>&1 | cat
echo "status: ${{PIPESTATUS[*]}}"
echo "[file]"
./p 2> err
echo "status: $?"
cat err
echo "[substitution]"
x=$(./p 2>&1)
echo "status: $? <$x>"
{SPAWNER}"#
    );
    let out = assert_same_on_tmpfs(opts, &script(&body), true);
    assert!(
        out.contains(&format!("[pipe]\n{MESSAGE}\nstatus: 127 0\n")),
        "{out}"
    );
    assert!(
        out.contains(&format!("[file]\nstatus: 127\n{MESSAGE}\n")),
        "{out}"
    );
    assert!(out.contains(&format!("status: 127 <{MESSAGE}>")), "{out}");
    assert_spawns_caught(&out);
}
