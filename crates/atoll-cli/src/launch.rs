//! Starting programs as clients of an instance: the environment that makes
//! a process an atoll client (`LD_PRELOAD`, `ATOLL_SOCKET`, `ATOLL_PRELOAD`,
//! `ATOLL_STATE`), the `/bin/sh` trampoline for programs that live inside
//! the mount, waiting with signal relaying, and shell-style exit statuses.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::{bail, Context, Result};
use atoll_proto::boot::{ENV_SESSION_FD, ENV_SOCKET, ENV_STATE};

use crate::config::{under_mount, UsageError};
use crate::signals::Terminator;

pub const PRELOAD_NAME: &str = "libatoll_preload.so";
/// Names the client library for children (and for `atoll` itself: an
/// explicit path overrides the search next to the executable).
pub const ENV_PRELOAD: &str = "ATOLL_PRELOAD";

/// A failure that carries the exit status atoll should end with (127 for a
/// command that does not exist, 126 for one that cannot be executed, as
/// shells do).
#[derive(Debug)]
pub struct ExitWith {
    pub code: i32,
    pub msg: String,
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for ExitWith {}

/// Locate `libatoll_preload.so`: `$ATOLL_PRELOAD`, else next to the `atoll`
/// executable, else one directory up (for `target/<profile>/deps` layouts),
/// else in `../lib/atoll` (what `make install PREFIX=…` lays out).
pub fn find_preload() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_PRELOAD).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return std::fs::canonicalize(&p)
            .with_context(|| format!("{ENV_PRELOAD}={} cannot be used", p.display()));
    }
    let exe = std::env::current_exe().context("cannot locate the atoll executable")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(PRELOAD_NAME),
        dir.join("..").join(PRELOAD_NAME),
        dir.join("../lib/atoll").join(PRELOAD_NAME),
    ];
    for c in &candidates {
        if c.is_file() {
            return std::fs::canonicalize(c).with_context(|| format!("{}", c.display()));
        }
    }
    bail!(
        "cannot find {PRELOAD_NAME} next to {} (build it with `cargo build -p atoll-preload`, \
         or set {ENV_PRELOAD})",
        exe.display()
    )
}

/// Where a program is started.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkDir {
    /// Inherit atoll's own working directory.
    Inherit,
    /// A host directory.
    Host(PathBuf),
    /// A directory inside the instance (absolute path under the mount).
    Atoll(String),
}

/// Classify `--cwd`: absolute paths only; under the mount → atoll cwd.
pub fn work_dir(mount: &str, cwd: Option<&Path>) -> Result<WorkDir, UsageError> {
    let Some(cwd) = cwd else {
        return Ok(WorkDir::Inherit);
    };
    if !cwd.is_absolute() {
        return Err(UsageError(format!(
            "--cwd {}: must be an absolute path",
            cwd.display()
        )));
    }
    match under_mount(mount, cwd) {
        Some(rel) if rel.is_empty() => Ok(WorkDir::Atoll(mount.to_string())),
        Some(rel) => Ok(WorkDir::Atoll(format!(
            "{mount}/{}",
            rel.trim_end_matches('/')
        ))),
        None => Ok(WorkDir::Host(cwd.to_path_buf())),
    }
}

/// What every client of one instance gets in its environment.
#[derive(Debug, Clone)]
pub struct ClientEnv {
    pub socket: PathBuf,
    pub mount: String,
    pub preload: PathBuf,
}

impl ClientEnv {
    /// `argv` as a client of the instance, started in `dir`.
    pub fn command(&self, argv: &[String], dir: &WorkDir) -> Result<Command> {
        let Some((prog, rest)) = argv.split_first() else {
            return Err(UsageError("missing command".into()).into());
        };
        let mut cmd = if self.needs_trampoline(prog, dir) {
            // The host kernel cannot execve a file that lives in atoll; a
            // preloaded shell's exec is intercepted and served by atoll.
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(r#"exec "$0" "$@""#).arg(prog).args(rest);
            c
        } else {
            let mut c = Command::new(prog);
            c.args(rest);
            c
        };
        cmd.envs(self.vars());
        // Leftovers of an enclosing instance would point elsewhere.
        cmd.env_remove(ENV_SESSION_FD).env_remove(ENV_STATE);
        match dir {
            WorkDir::Inherit => {}
            WorkDir::Host(d) => {
                cmd.current_dir(d);
            }
            WorkDir::Atoll(d) => {
                let (k, v) = state_env(d)?;
                cmd.env(k, v);
            }
        }
        Ok(cmd)
    }

    /// The variables that make a process a client of this instance.
    pub fn vars(&self) -> Vec<(String, String)> {
        let preload = self.ld_preload(std::env::var_os("LD_PRELOAD"));
        vec![
            ("LD_PRELOAD".into(), preload.to_string_lossy().into_owned()),
            (ENV_PRELOAD.into(), self.preload.display().to_string()),
            (ENV_SOCKET.into(), self.socket.display().to_string()),
        ]
    }

    /// Must `prog` be started through the shell trampoline? Yes when it
    /// names a file in the mount: an absolute path under it, a relative
    /// path while the cwd is in atoll, or a bare name found through a
    /// `PATH` entry under the mount.
    fn needs_trampoline(&self, prog: &str, dir: &WorkDir) -> bool {
        if prog.starts_with('/') {
            return under_mount(&self.mount, Path::new(prog)).is_some();
        }
        if prog.contains('/') {
            return matches!(dir, WorkDir::Atoll(_));
        }
        std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| {
                (d.is_relative() && matches!(dir, WorkDir::Atoll(_)))
                    || under_mount(&self.mount, &d).is_some()
            })
        })
    }

    /// The client library first, then whatever was preloaded already.
    fn ld_preload(&self, existing: Option<OsString>) -> OsString {
        let mut v = OsString::from(&self.preload);
        if let Some(old) = existing {
            let old_s = old.to_string_lossy();
            let rest: Vec<&str> = old_s
                .split([':', ' '])
                .filter(|s| !s.is_empty() && Path::new(s) != self.preload)
                .collect();
            if !rest.is_empty() {
                v.push(":");
                v.push(rest.join(":"));
            }
        }
        v
    }
}

/// The `ATOLL_STATE` variable that starts a client with its cwd in atoll
/// (the client library restores it as if inherited across `execve`).
fn state_env(cwd: &str) -> Result<(String, String)> {
    Ok(atoll_client::initial_state_env(cwd))
}

/// Start `cmd`, relay terminating signals to it, wait for it.
pub fn run_child(term: &Terminator, mut cmd: Command, what: &str) -> Result<ExitStatus> {
    crate::sys::unblock_terminating_in_child(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            };
            return Err(ExitWith {
                code,
                msg: format!("cannot run {what}: {e}"),
            }
            .into());
        }
    };
    term.watch_child(child.id());
    let status = child.wait();
    term.unwatch();
    status.with_context(|| format!("waiting for {what}"))
}

/// Shell convention: the exit code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> ClientEnv {
        ClientEnv {
            socket: "/run/atoll/x/boot.sock".into(),
            mount: "/atoll".into(),
            preload: "/opt/atoll/libatoll_preload.so".into(),
        }
    }

    fn argv(cmd: &Command) -> Vec<String> {
        std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    fn env_of(cmd: &Command, key: &str) -> Option<Option<String>> {
        cmd.get_envs()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    #[test]
    fn host_programs_start_directly_with_client_environment() {
        let c = env()
            .command(&["ls".into(), "-l".into()], &WorkDir::Inherit)
            .unwrap();
        assert_eq!(argv(&c), ["ls", "-l"]);
        assert_eq!(
            env_of(&c, "ATOLL_SOCKET"),
            Some(Some("/run/atoll/x/boot.sock".into()))
        );
        assert_eq!(
            env_of(&c, "ATOLL_PRELOAD"),
            Some(Some("/opt/atoll/libatoll_preload.so".into()))
        );
        assert_eq!(env_of(&c, "ATOLL_SESSION_FD"), Some(None));
        assert!(env_of(&c, "LD_PRELOAD")
            .unwrap()
            .unwrap()
            .starts_with("/opt/atoll/libatoll_preload.so"));
    }

    #[test]
    fn programs_inside_the_mount_go_through_the_shell() {
        let c = env()
            .command(&["/atoll/bin/tool".into(), "a b".into()], &WorkDir::Inherit)
            .unwrap();
        assert_eq!(
            argv(&c),
            [
                "/bin/sh",
                "-c",
                r#"exec "$0" "$@""#,
                "/atoll/bin/tool",
                "a b"
            ]
        );
        // Relative paths count when the cwd is inside atoll.
        let atoll_cwd = WorkDir::Atoll("/atoll/src".into());
        assert!(env().needs_trampoline("./configure", &atoll_cwd));
        assert!(!env().needs_trampoline("./configure", &WorkDir::Inherit));
        assert!(!env().needs_trampoline("/atollx/tool", &WorkDir::Inherit));
    }

    #[test]
    fn ld_preload_puts_the_client_first_without_duplicates() {
        let e = env();
        assert_eq!(e.ld_preload(None), "/opt/atoll/libatoll_preload.so");
        assert_eq!(
            e.ld_preload(Some(
                "/x/a.so /opt/atoll/libatoll_preload.so:/y/b.so".into()
            )),
            "/opt/atoll/libatoll_preload.so:/x/a.so:/y/b.so"
        );
    }

    #[test]
    fn cwd_is_classified_by_mount() {
        assert_eq!(work_dir("/atoll", None).unwrap(), WorkDir::Inherit);
        assert_eq!(
            work_dir("/atoll", Some(Path::new("/atoll/src/"))).unwrap(),
            WorkDir::Atoll("/atoll/src".into())
        );
        assert_eq!(
            work_dir("/atoll", Some(Path::new("/atoll"))).unwrap(),
            WorkDir::Atoll("/atoll".into())
        );
        assert_eq!(
            work_dir("/atoll", Some(Path::new("/tmp"))).unwrap(),
            WorkDir::Host("/tmp".into())
        );
        assert!(work_dir("/atoll", Some(Path::new("src"))).is_err());
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 128 + 15);
    }
}
