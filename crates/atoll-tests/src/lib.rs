//! End-to-end test harness: runs real programs under `atoll run` and the
//! same programs on an ordinary host directory, and compares what they print.
//!
//! Layers: this crate sits on top of everything — it drives the built
//! `atoll` binary (crate `atoll-cli`) and, through it, the preload library,
//! the client library, the messaging layer and the file servers. It needs
//! `cargo build --workspace` (same profile) to have produced `atoll` and
//! `libatoll_preload.so`; a missing artifact is a test failure, not a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The mount path used by the tests (must not exist on the host).
pub const MOUNT: &str = "/atoll";

/// Directory holding `atoll` and `libatoll_preload.so` for this profile.
pub fn artifact_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ATOLL_ARTIFACTS") {
        return PathBuf::from(dir);
    }
    // Test executables live in target/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// Path of the `atoll` binary; panics with instructions when it is missing.
pub fn atoll_bin() -> PathBuf {
    let dir = artifact_dir();
    let bin = dir.join("atoll");
    let lib = dir.join("libatoll_preload.so");
    assert!(
        bin.exists() && lib.exists(),
        "{} or {} missing: run `cargo build --workspace` with the same profile first",
        bin.display(),
        lib.display()
    );
    bin
}

/// Environment variable naming the island (`coherent`, `incoherent`,
/// `copy`) the tests' instances run in unless a test chooses one itself:
/// `ATOLL_TEST_ISLAND=copy cargo test -p atoll-tests --test pipes` runs
/// those tests in a copy island (`make test-islands`). It reaches `atoll`
/// as `ATOLL_ISLAND`, the default of `--island`.
pub const ENV_TEST_ISLAND: &str = "ATOLL_TEST_ISLAND";

/// A command line for `atoll` with the test defaults (small cache, quiet).
pub fn atoll() -> Command {
    let mut cmd = Command::new(atoll_bin());
    cmd.env("LC_ALL", "C")
        .env("TZ", "UTC")
        .env_remove("ATOLL_SOCKET")
        .env_remove("LD_PRELOAD")
        .env_remove("ATOLL_ISLAND");
    if let Ok(kind) = std::env::var(ENV_TEST_ISLAND) {
        cmd.env("ATOLL_ISLAND", kind);
    }
    cmd
}

/// Let `cmd` start with `SIGINT` and `SIGQUIT` at their default action,
/// whatever the test run inherited: a suite started in the background of
/// a shell without job control (or under `nohup`) ignores them, and a
/// program inherits that, so a test that interrupts programs with them
/// would wait for the programs to end instead.
pub fn with_default_interrupts(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and calls
    // only `signal`, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// Run `bash -c script` under a fresh instance (extra `atoll run` options
/// first). `$ROOT` is the mount root inside the script.
pub fn run_in_atoll(opts: &[&str], script: &str) -> Output {
    let mut cmd = atoll();
    cmd.arg("run");
    if !opts.contains(&"--memory") {
        cmd.args(["--memory", "256M"]);
    }
    cmd.args(opts).arg("--");
    cmd.args(["bash", "-c", script]).env("ROOT", MOUNT);
    cmd.stdin(Stdio::null());
    output_within(cmd, RUN_LIMIT)
}

/// Longest a single `atoll run` of a test may take: a hang becomes a
/// failure with a message instead of a test run that never ends.
pub const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// `cmd.output()`, but the command and everything it started are killed
/// (SIGKILL) and the test fails when it runs longer than `limit`.
pub fn output_within(mut cmd: Command, limit: std::time::Duration) -> Output {
    bounded_output(&mut cmd, limit)
}

/// Longest any command of a test may take ([`OutputBounded`]): long
/// enough for a whole conformance suite on a loaded machine, short enough
/// that a hang fails the run in minutes instead of stopping it.
pub const COMMAND_LIMIT: std::time::Duration = std::time::Duration::from_secs(900);

/// `Command::output` that cannot hang a test run: every command a test
/// runs (atoll's and the host's alike) goes through it.
pub trait OutputBounded {
    /// As `output()` with stdin `/dev/null`, but the command and
    /// everything it started are killed and the test fails after
    /// [`COMMAND_LIMIT`].
    fn output_bounded(&mut self) -> std::io::Result<Output>;
}

impl OutputBounded for Command {
    fn output_bounded(&mut self) -> std::io::Result<Output> {
        Ok(bounded_output(self.stdin(Stdio::null()), COMMAND_LIMIT))
    }
}

fn bounded_output(cmd: &mut Command, limit: std::time::Duration) -> Output {
    use std::io::Read;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out_pipe.read_to_end(&mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err_pipe.read_to_end(&mut b);
        b
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            kill_tree(child.id());
            let _ = child.wait();
            panic!("command did not finish within {limit:?}: {cmd:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// SIGKILL `root` and every process descended from it (found through
/// `/proc/*/stat`), so that nothing a hung command started keeps its
/// output pipes open.
fn kill_tree(root: u32) {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let after = &stat[stat.rfind(')')? + 2..];
            let ppid = after.split(' ').nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut doomed = vec![root];
    let mut i = 0;
    while i < doomed.len() {
        let p = doomed[i];
        doomed.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    for pid in doomed {
        // SAFETY: kill takes plain integers.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

/// Run `bash -c script` on a fresh host directory, `$ROOT` naming it.
pub fn run_on_host(script: &str) -> (tempfile::TempDir, Output) {
    run_in_host_dir(tempfile::tempdir().expect("tempdir"), script)
}

/// Run `bash -c script` in `dir` (a fresh host directory, e.g. on a
/// tmpfs), `$ROOT` naming it.
pub fn run_in_host_dir(dir: tempfile::TempDir, script: &str) -> (tempfile::TempDir, Output) {
    let out = Command::new("bash")
        .args(["-c", script])
        .env("ROOT", dir.path())
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output_bounded()
        .expect("spawn bash");
    (dir, out)
}

/// What a run printed, with its root directory replaced by `$ROOT` so that
/// atoll and host runs compare equal.
pub fn normalized(out: &Output, root: &Path) -> (i32, String, String) {
    let root = root.to_string_lossy().to_string();
    let fix = |b: &[u8]| String::from_utf8_lossy(b).replace(&root, "$ROOT");
    (
        out.status.code().unwrap_or(-1),
        fix(&out.stdout),
        fix(&out.stderr),
    )
}

/// Run `script` on the host and under atoll; assert identical exit status
/// and stdout (stderr too unless `compare_stderr` is false). Returns the
/// atoll stdout for further assertions.
pub fn assert_same(opts: &[&str], script: &str, compare_stderr: bool) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_same_in(dir, opts, script, compare_stderr)
}

/// [`assert_same`] with the host run on a tmpfs (`/dev/shm`), for what
/// only tmpfs does as atoll does (`O_TMPFILE` names, `st_size` of
/// directories).
pub fn assert_same_on_tmpfs(opts: &[&str], script: &str, compare_stderr: bool) -> String {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir on /dev/shm");
    assert_same_in(dir, opts, script, compare_stderr)
}

fn assert_same_in(
    dir: tempfile::TempDir,
    opts: &[&str],
    script: &str,
    compare_stderr: bool,
) -> String {
    let (dir, host) = run_in_host_dir(dir, script);
    let host = normalized(&host, dir.path());
    let atoll = run_in_atoll(opts, script);
    let atoll = normalized(&atoll, Path::new(MOUNT));
    assert_eq!(
        host.1, atoll.1,
        "stdout differs for script:\n{script}\n--- host stderr:\n{}\n--- atoll stderr:\n{}",
        host.2, atoll.2
    );
    assert_eq!(
        host.0, atoll.0,
        "exit status differs; atoll stderr:\n{}",
        atoll.2
    );
    if compare_stderr {
        assert_eq!(host.2, atoll.2, "stderr differs for script:\n{script}");
    }
    atoll.1
}

/// The count `name` in the output of `atoll run --stats` (0 if absent).
pub fn stats_counter(out: &str, name: &str) -> u64 {
    out.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name)).then(|| w.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// How many requests named `op` all servers served, from the JSON that
/// `atoll run --stats-json FILE` wrote to `path`, and that JSON.
pub fn served_ops(path: &Path) -> (impl Fn(&str) -> u64, serde_json::Value) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("stats json")).expect("json");
    let servers: Vec<serde_json::Value> = v["servers"].as_array().cloned().unwrap_or_default();
    let count = move |op: &str| -> u64 {
        servers
            .iter()
            .flat_map(|s| s["ops"].as_array().cloned().unwrap_or_default())
            .filter(|o| o["op"] == op)
            .map(|o| o["count"].as_u64().unwrap_or(0))
            .sum()
    };
    (count, v)
}

/// Sum of the counts of `key` (a system call number, `direct` or
/// `remembered`) over every line of a trap file (`ATOLL_TRAP_STATS`).
pub fn trap_count(traps: &Path, key: &str) -> u64 {
    let s = std::fs::read_to_string(traps).unwrap_or_default();
    s.lines()
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter_map(|f| f.split_once(':'))
        .filter(|(k, _)| *k == key)
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

/// True when `program` is on PATH (tests that need it fail loudly if not:
/// CI installs every program the suite uses).
pub fn require(program: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{program}` is not installed; .ci/run installs it (apt-get install …)"
    );
}

/// Compile a C probe program into `dir`, returning its path.
pub fn compile_probe(dir: &Path, name: &str, source: &str) -> PathBuf {
    compile_probe_with(dir, name, source, &[])
}

/// [`compile_probe`], linked statically (a program that cannot load the
/// client, which atoll runs behind its relay).
pub fn compile_static_probe(dir: &Path, name: &str, source: &str) -> PathBuf {
    compile_probe_with(dir, name, source, &["-static"])
}

fn compile_probe_with(dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write probe source");
    let bin = dir.join(name);
    let status = Command::new("cc")
        .args(["-O1", "-Wall"])
        .args(extra)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success(), "probe {name} failed to compile");
    bin
}

/// A detached instance (`atoll boot OPTS`), stopped on drop. Test files
/// add what they need of it through their own extension traits.
pub struct Booted {
    pub id: String,
}

impl Booted {
    pub fn new(opts: &[&str]) -> Booted {
        Booted::with_env(opts, &[])
    }

    /// As [`Booted::new`], with `env` in the instance's environment.
    pub fn with_env(opts: &[&str], env: &[(&str, &str)]) -> Booted {
        let mut cmd = atoll();
        cmd.arg("boot").args(opts).envs(env.iter().copied());
        let out = cmd.output_bounded().expect("atoll boot");
        assert!(
            out.status.success(),
            "boot failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(!id.is_empty(), "boot printed no id");
        Booted { id }
    }

    /// `atoll exec` of `bash -c script` in the instance, with `$ROOT` the
    /// mount, not yet run.
    pub fn command(&self, script: &str) -> Command {
        let mut cmd = atoll();
        cmd.args(["exec", "--id", &self.id, "--", "bash", "-c", script])
            .env("ROOT", MOUNT);
        cmd
    }

    /// `atoll chaos --id ID ARGS…`: whether the fault was injected.
    pub fn chaos(&self, args: &[&str]) -> Output {
        atoll()
            .args(["chaos", "--id", &self.id])
            .args(args)
            .output_bounded()
            .expect("atoll chaos")
    }

    /// `$ROOT/d`, distributed over every server, holding `f1`…`f90` with
    /// `x1`…`x90`; its inode number (whose top byte names its owner).
    pub fn distributed_dir_with_files(&self) -> u64 {
        let setup = self
            .command(
                r#"mkdir "$ROOT/d" && setfattr -n user.atoll.distributed -v 1 "$ROOT/d" &&
               for i in $(seq 90); do echo "x$i" > "$ROOT/d/f$i"; done; stat -c %i "$ROOT/d""#,
            )
            .output_bounded()
            .expect("setup");
        assert!(setup.status.success());
        String::from_utf8_lossy(&setup.stdout)
            .trim()
            .parse()
            .expect("an inode number")
    }

    /// `atoll status --json` of the instance.
    pub fn status(&self) -> serde_json::Value {
        let out = atoll()
            .args(["status", "--id", &self.id, "--json"])
            .output_bounded()
            .expect("status");
        assert!(
            out.status.success(),
            "status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        let _ = atoll().args(["stop", "--id", &self.id]).status();
    }
}

/// Shell lines that make, in the current directory, `proj/` holding a small
/// C project (`f1.c` … `fN.c`, a `main.c` that prints `sum S` and exits 0
/// only if `S` is right, and a Makefile with one object per source), and
/// leave the shell inside `proj/`. For build tests under `make -jN`.
pub fn c_project_script(files: u32) -> String {
    let sum = files * (files + 1) / 2;
    format!(
        r#"
        mkdir proj && cd proj
        for i in $(seq 1 {files}); do
            printf 'int f%d(void) {{ return %d; }}\n' $i $i > f$i.c
        done
        {{
            for i in $(seq 1 {files}); do echo "int f$i(void);"; done
            echo '#include <stdio.h>'
            echo 'int main(void) {{ int s = 0;'
            for i in $(seq 1 {files}); do echo "s += f$i();"; done
            echo 'printf("sum %d\n", s); return s == {sum} ? 0 : 1; }}'
        }} > main.c
        cat > Makefile <<'EOF'
SRCS := $(sort $(wildcard *.c))
OBJS := $(SRCS:.c=.o)
prog: $(OBJS)
	$(CC) -o $@ $^
%.o: %.c
	$(CC) -O1 -c $< -o $@
EOF
"#
    )
}

#[cfg(test)]
mod bounded_tests {
    use super::*;

    /// A command that hangs, with a child of its own holding its output
    /// open, fails the test after the limit instead of hanging it.
    #[test]
    #[should_panic(expected = "did not finish within")]
    fn a_hung_command_and_its_children_are_killed_at_the_limit() {
        let mut cmd = Command::new("bash");
        cmd.args(["-c", "sleep 1000 & sleep 1000"]);
        output_within(cmd, std::time::Duration::from_millis(500));
    }
}
