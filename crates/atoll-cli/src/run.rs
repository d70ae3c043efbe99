//! `atoll run` and `atoll exec`: one command as a client of an instance.
//!
//! `run` sequence: validate everything → block terminating signals → boot
//! the instance (server threads in this process) → record it → imports
//! (`cp -a` under the instance) → the command → exports → shut down (servers,
//! runtime directory, shared memory) → statistics → exit with the command's
//! status. Any failure after boot still shuts the instance down.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use atoll_server::Instance;

use crate::args::{ExecArgs, RunArgs};
use crate::config::{self, under_mount, Plan, UsageError};
use crate::launch::{self, ClientEnv, WorkDir};
use crate::registry::{self, InstanceRecord};
use crate::report;
use crate::signals::Terminator;

/// One `--import` (host → atoll) or `--export` (atoll → host) copy.
#[derive(Debug, Clone, PartialEq)]
pub struct Copy {
    pub src: String,
    pub dest: String,
}

/// `--import SRC[:DEST]`: DEST defaults to mount + basename(SRC); a
/// relative DEST is relative to the mount root.
///
/// `./src` with mount `/atoll` → `cp -a ./src /atoll/src`.
pub fn parse_import(mount: &str, spec: &str) -> Result<Copy, UsageError> {
    let (src, dest) = match spec.rsplit_once(':') {
        Some((s, d)) => (s, Some(d)),
        None => (spec, None),
    };
    if src.is_empty() {
        return Err(UsageError(format!("--import {spec}: empty source")));
    }
    let dest = match dest {
        Some(d) => atoll_path(mount, d).ok_or_else(|| {
            UsageError(format!(
                "--import {spec}: destination must be inside the mount {mount}"
            ))
        })?,
        None => {
            let base = basename(src).ok_or_else(|| {
                UsageError(format!(
                    "--import {spec}: cannot name a destination; write SRC:DEST"
                ))
            })?;
            format!("{mount}/{base}")
        }
    };
    Ok(Copy {
        src: src.to_string(),
        dest,
    })
}

/// `--export SRC:DEST`: SRC inside the mount (relative = relative to the
/// mount root), DEST on the host.
pub fn parse_export(mount: &str, spec: &str) -> Result<Copy, UsageError> {
    let Some((src, dest)) = spec.rsplit_once(':') else {
        return Err(UsageError(format!(
            "--export {spec}: expected SRC:DEST (SRC inside the instance, DEST on the host)"
        )));
    };
    if dest.is_empty() {
        return Err(UsageError(format!("--export {spec}: empty destination")));
    }
    let src = atoll_path(mount, src).ok_or_else(|| {
        UsageError(format!(
            "--export {spec}: source must be inside the mount {mount}"
        ))
    })?;
    Ok(Copy {
        src,
        dest: dest.to_string(),
    })
}

/// Absolute atoll path for `p`: absolute paths must be under the mount,
/// relative ones are taken from the mount root.
fn atoll_path(mount: &str, p: &str) -> Option<String> {
    if p.starts_with('/') {
        under_mount(mount, Path::new(p))?;
        Some(p.to_string())
    } else if p.is_empty() {
        None
    } else {
        Some(format!("{mount}/{p}"))
    }
}

/// Last meaningful component of a host path (`./a/b/` → `b`), resolving
/// `.` and `..` through the file system.
fn basename(src: &str) -> Option<String> {
    let p = Path::new(src);
    let name = match p.file_name() {
        Some(n) => n.to_os_string(),
        None => std::fs::canonicalize(p).ok()?.file_name()?.to_os_string(),
    };
    name.into_string().ok()
}

pub fn run(args: RunArgs) -> Result<i32> {
    let plan = config::plan(&args.instance)?;
    let mount = plan.config.mount.clone();
    let dir = launch::work_dir(&mount, args.cwd.as_deref())?;
    let imports = args
        .import
        .iter()
        .map(|s| parse_import(&mount, s))
        .collect::<Result<Vec<_>, _>>()?;
    let exports = args
        .export
        .iter()
        .map(|s| parse_export(&mount, s))
        .collect::<Result<Vec<_>, _>>()?;
    for c in &imports {
        if std::fs::symlink_metadata(&c.src).is_err() {
            bail!("--import {}: no such file or directory on the host", c.src);
        }
    }
    let preload = launch::find_preload()?;
    let root = &plan.config.runtime_root;
    config::ensure_runtime_root(root)
        .with_context(|| format!("runtime root {}", root.display()))?;

    // Clients read it at start-up (`atoll_client` pipe mode); set while
    // this process is still single-threaded.
    if let Some(p) = &args.pipes {
        std::env::set_var("ATOLL_PIPES", p);
    }
    // Programs inherit the placement policy (and a fresh cursor) from the
    // environment; set while this process is still single-threaded.
    std::env::set_var(
        atoll_sched::ENV_PLACEMENT,
        placement_env(&args.placement, &args.exec_via),
    );
    // Before any server thread exists, so that they inherit the mask.
    let term = Terminator::install().context("cannot set up signal handling")?;
    // Opened before anything runs, so a bad path is a usage error at once.
    let trace_out = match &args.trace {
        Some(path) => Some(
            std::fs::File::create(path)
                .map_err(|e| config::UsageError(format!("--trace {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let instance = Instance::boot_with(plan.config.clone(), trace_out.is_some())
        .context("cannot boot the instance")?;
    let trace = instance.trace();
    tracing::info!(id = instance.id(), "instance up");
    let scheds = start_scheds(
        &instance,
        plan.app_cores.as_deref(),
        plan.config.server_exe.as_deref(),
    );
    let outcome = drive(
        &term, &instance, &plan, &args, &dir, &imports, &exports, preload,
    );
    let execs = scheds.map(|s| s.shutdown()).unwrap_or_default();
    let stats = instance.shutdown();
    if let (Some(sink), Some(file), Some(path)) = (trace, trace_out, &args.trace) {
        crate::tracecmd::write(&sink, file)
            .with_context(|| format!("cannot write the trace to {}", path.display()))?;
    }
    if args.stats {
        eprint!("{}", report::stats_table(&stats));
        eprintln!("{}", exec_line(&execs));
    }
    if let Some(file) = &args.stats_json {
        let mut json = report::stats_json(&stats);
        json["exec"] = exec_json(&execs);
        let json = serde_json::to_string_pretty(&json)?;
        std::fs::write(file, json + "\n")
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    outcome
}

#[allow(clippy::too_many_arguments)]
fn drive(
    term: &Terminator,
    instance: &Instance,
    plan: &Plan,
    args: &RunArgs,
    dir: &WorkDir,
    imports: &[Copy],
    exports: &[Copy],
    preload: PathBuf,
) -> Result<i32> {
    let record = InstanceRecord::for_self(instance, "run", &args.command).with_shape(plan);
    if let Err(e) = record.write() {
        tracing::warn!("cannot record the instance for `atoll list`: {e}");
    }
    if let Some(cores) = &plan.app_cores {
        confine_to(cores).context("cannot confine programs to their cores")?;
    }
    let env = ClientEnv {
        socket: instance.socket_path().to_path_buf(),
        mount: plan.config.mount.clone(),
        preload,
    };
    for c in imports {
        if let Some(sig) = term.received() {
            return Ok(128 + sig);
        }
        copy(term, &env, c, "import")?;
    }
    if let Some(sig) = term.received() {
        return Ok(128 + sig);
    }
    let cmd = env.command(&args.command, dir)?;
    let status = launch::run_child(term, cmd, &format!("'{}'", args.command[0]))?;
    let code = launch::exit_code(status);
    tracing::debug!(code, "command finished");
    if let Some(sig) = term.received() {
        if !exports.is_empty() {
            tracing::warn!("interrupted by signal {sig}: exports skipped");
        }
        return Ok(code);
    }
    for c in exports {
        if let Err(e) = copy(term, &env, c, "export") {
            // The command's own failure is the more useful status to keep.
            if code != 0 {
                eprintln!("atoll: error: {e:#}");
                return Ok(code);
            }
            return Err(e);
        }
    }
    Ok(code)
}

/// Start the scheduling servers (one per program core, Hare §3.6): as
/// processes of `exe` when given (`--with processes`, the default), else
/// as threads. Without them every exec simply stays local, so a failure
/// is only a warning.
pub fn start_scheds(
    instance: &Instance,
    app_cores: Option<&[usize]>,
    exe: Option<&std::path::Path>,
) -> Option<atoll_sched::Scheds> {
    let cores = app_cores.map_or_else(config::usable_cores, <[usize]>::to_vec);
    let dir = instance.runtime_dir();
    let started = match exe {
        Some(exe) => atoll_sched::Scheds::start_processes(dir, &cores, exe),
        None => atoll_sched::Scheds::start(dir, &cores),
    };
    match started {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("no scheduling servers, every exec stays local: {e}");
            None
        }
    }
}

/// `"exec": {"per_core": {"0": n, ...}}` of `--stats-json`.
fn exec_json(execs: &[(usize, u64)]) -> serde_json::Value {
    let per_core: serde_json::Map<String, serde_json::Value> = execs
        .iter()
        .map(|(c, n)| (c.to_string(), serde_json::Value::from(*n)))
        .collect();
    serde_json::json!({ "per_core": per_core })
}

/// The `--stats` line for execs.
fn exec_line(execs: &[(usize, u64)]) -> String {
    let cores: Vec<String> = execs
        .iter()
        .map(|(c, n)| format!("core {c}: {n}"))
        .collect();
    format!("execs        {}", cores.join(", "))
}

/// `cp -a SRC DEST` as a client of the instance.
fn copy(term: &Terminator, env: &ClientEnv, c: &Copy, what: &str) -> Result<()> {
    let argv = ["cp".to_string(), "-a".into(), c.src.clone(), c.dest.clone()];
    let cmd = env.command(&argv, &WorkDir::Inherit)?;
    let status = launch::run_child(term, cmd, "cp")?;
    if !status.success() {
        bail!("{what} {} → {} failed ({status})", c.src, c.dest);
    }
    Ok(())
}

/// The `ATOLL_PLACEMENT` value programs start with (values checked by
/// the argument parser).
fn placement_env(policy: &str, exec_via: &str) -> String {
    let policy = atoll_sched::Policy::parse(policy).unwrap_or(atoll_sched::Policy::RoundRobin);
    let via = atoll_sched::ExecVia::parse(exec_via).unwrap_or(atoll_sched::ExecVia::Place);
    atoll_sched::placement::env_value(policy, via, 0)
}

/// Pin this thread, and hence the children it starts, to `cores`
/// (`--split`: programs stay off the servers' cores).
fn confine_to(cores: &[usize]) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cores {
        set.set(c);
    }
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

pub fn exec(args: ExecArgs) -> Result<i32> {
    let root = config::runtime_root(&args.select.runtime_dir);
    let rec = registry::select(registry::scan(&root), args.select.id.as_deref(), &root)?;
    let dir = launch::work_dir(&rec.mount, args.cwd.as_deref())?;
    let env = ClientEnv {
        socket: rec.socket.clone(),
        mount: rec.mount.clone(),
        preload: launch::find_preload()?,
    };
    std::env::set_var(
        atoll_sched::ENV_PLACEMENT,
        placement_env(&args.placement, &args.exec_via),
    );
    let term = Terminator::install().context("cannot set up signal handling")?;
    let cmd = env.command(&args.command, &dir)?;
    let status = launch::run_child(&term, cmd, &format!("'{}'", args.command[0]))?;
    Ok(launch::exit_code(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_destination_defaults_to_mount_plus_basename() {
        let c = parse_import("/atoll", "./proj/src/").unwrap();
        assert_eq!(c.dest, "/atoll/src");
        assert_eq!(c.src, "./proj/src/");
        let c = parse_import("/atoll", "/home/u/p:/atoll/q").unwrap();
        assert_eq!((c.src.as_str(), c.dest.as_str()), ("/home/u/p", "/atoll/q"));
        let c = parse_import("/atoll", "p:q/r").unwrap();
        assert_eq!(c.dest, "/atoll/q/r");
    }

    #[test]
    fn import_destination_must_be_inside_the_mount() {
        assert!(parse_import("/atoll", "p:/tmp/q").is_err());
        assert!(parse_import("/atoll", ":/atoll/q").is_err());
        assert!(parse_import("/atoll", "/").is_err());
    }

    #[test]
    fn export_needs_an_atoll_source_and_a_host_destination() {
        let c = parse_export("/atoll", "/atoll/out:./res").unwrap();
        assert_eq!((c.src.as_str(), c.dest.as_str()), ("/atoll/out", "./res"));
        let c = parse_export("/atoll", "out:/tmp/x").unwrap();
        assert_eq!(c.src, "/atoll/out");
        assert!(parse_export("/atoll", "/atoll/out").is_err());
        assert!(parse_export("/atoll", "/etc:/tmp/x").is_err());
        assert!(parse_export("/atoll", "/atoll/out:").is_err());
    }
}
