//! From parsed options to an `atoll_server::InstanceConfig`: server count,
//! core placement (`--split`), poll mode, ablation switches, distributed
//! directories and the runtime root.
//!
//! Placement follows Hare's two configurations (Hare §5.3.2): *timeshare*
//! (servers and programs share every core; server i is pinned to usable
//! core i mod n) and *split* (servers own the last N usable cores, programs
//! are confined to the others).
//!
//! Without `--servers` and `--poll` the server count and poll mode come
//! from the machine (`shape::default_shape`: its usable cores and load).

use std::fmt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use atoll_proto::boot::{PollMode, Without};
use atoll_server::InstanceConfig;

use crate::args::{InstanceArgs, PollArg, Technique};
use crate::shape::{default_shape, Machine};

/// Bad input found after parsing (exit status 2, like clap's own errors).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A validated instance configuration plus where programs may run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config: InstanceConfig,
    /// With `--split`: the cores programs are confined to.
    pub app_cores: Option<Vec<usize>>,
    /// Where the server count came from: an option, or the default for
    /// the machine ("default for 2 usable cores, load 0.30").
    pub servers_why: String,
    /// Where the poll mode came from, likewise.
    pub poll_why: String,
}

/// Cores this process may run on (its affinity mask), ascending.
pub fn usable_cores() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => {
            let cores: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
                .filter(|&c| set.is_set(c))
                .collect();
            if cores.is_empty() {
                vec![0]
            } else {
                cores
            }
        }
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

pub fn plan(args: &InstanceArgs) -> Result<Plan, UsageError> {
    let cores = usable_cores();
    plan_on(args, &cores, &Machine::here(cores.len()))
}

/// [`plan`] for the usable `cores` of machine `m`.
fn plan_on(args: &InstanceArgs, cores: &[usize], m: &Machine) -> Result<Plan, UsageError> {
    let shape = default_shape(m);
    let (hosts, auto_scale) = match args.servers {
        Some(crate::args::ServerCount::Fixed(n)) => (Some(n), false),
        Some(crate::args::ServerCount::Auto) => (None, true),
        None => (None, false),
    };
    // The file servers are fixed for the instance's life; the processes
    // running them can change (`atoll scale`, up to one per server).
    let servers = match (args.max_servers, hosts) {
        (Some(max), Some(n)) if max < n => {
            return Err(UsageError(format!(
                "--max-servers {max} is below --servers {n}"
            )))
        }
        (Some(max), _) => max,
        (None, Some(n)) => n,
        // `--servers auto`: as many servers as usable cores, for the
        // processes running them to grow into (`atoll scale`).
        (None, None) if auto_scale => cores.len().min(atoll_proto::MAX_SERVERS),
        (None, None) => shape.servers,
    };
    let servers_why = match (args.max_servers, hosts, auto_scale) {
        (Some(_), _, _) => "--max-servers".to_string(),
        (None, Some(_), _) => "--servers".to_string(),
        (None, None, true) => format!("--servers auto: one per usable core ({})", cores.len()),
        (None, None, false) => shape.why.clone(),
    };
    let hosts = hosts.unwrap_or(servers);
    let (server_cores, app_cores) = place(servers, args.split, cores)?;
    let (poll, poll_why) = match (args.poll, args.split) {
        (Some(p), _) => (
            match p {
                PollArg::Spin => PollMode::Spin,
                PollArg::Block => PollMode::Block,
                PollArg::Adaptive => PollMode::Adaptive,
            },
            "--poll".to_string(),
        ),
        // Split servers own their cores: spinning costs nobody a CPU.
        (None, true) => (PollMode::Spin, "--split: servers on their own cores".into()),
        (None, false) => (shape.poll, shape.why.clone()),
    };
    let distribute = args
        .distribute
        .iter()
        .map(|d| distribute_prefix(&args.mount, d))
        .collect::<Result<Vec<_>, _>>()?;
    let env = std::env::var(crate::args::ENV_ISLAND).ok();
    let island = crate::args::IslandArg::resolve(args.island, args.incoherent, env.as_deref())
        .map_err(UsageError)?;
    Ok(Plan {
        config: InstanceConfig {
            servers,
            hosts,
            auto_scale,
            // `--max-servers` caps the set; without it servers may join.
            room: args.max_servers.map_or(0, |_| servers),
            memory: args.memory,
            mount: args.mount.clone(),
            poll,
            split: args.split,
            server_cores,
            island,
            without: without(&args.without),
            distribute,
            adaptive_dirs: args.adaptive_dirs == "on",
            server_exe: (!args.without.contains(&Technique::Processes)).then(server_exe),
            fs_policy: atoll_names::Policy::parse(&args.fleet_policy).ok_or_else(|| {
                UsageError(format!(
                    "--fleet-policy {}: say one of {}",
                    args.fleet_policy,
                    atoll_names::Policy::NAMES.join(", ")
                ))
            })?,
            inodes: args.inodes,
            syscall_sites: if args.syscall_sites == "trap" {
                atoll_proto::boot::SyscallSites::Trap
            } else {
                atoll_proto::boot::SyscallSites::Rewrite
            },
            runtime_root: args
                .runtime_dir
                .clone()
                .unwrap_or_else(default_runtime_root),
        },
        app_cores,
        servers_why,
        poll_why,
    })
}

/// Server cores (one per server) and, when split, the program cores.
///
/// Split with cores `[0, 1]` and one server: server on 1, programs on 0.
pub fn place(
    servers: usize,
    split: bool,
    cores: &[usize],
) -> Result<(Vec<usize>, Option<Vec<usize>>), UsageError> {
    if !split {
        let server_cores = (0..servers).map(|i| cores[i % cores.len()]).collect();
        return Ok((server_cores, None));
    }
    if servers >= cores.len() {
        return Err(UsageError(format!(
            "--split needs a core left for programs: {servers} server(s) but only {} usable core(s)",
            cores.len()
        )));
    }
    let (apps, srv) = cores.split_at(cores.len() - servers);
    Ok((srv.to_vec(), Some(apps.to_vec())))
}

fn without(list: &[Technique]) -> Without {
    let mut w = Without::default();
    for t in list {
        match t {
            Technique::DirDistribution => w.dir_distribution = true,
            Technique::DirCache => w.dir_cache = true,
            Technique::Broadcast => w.broadcast = true,
            Technique::DirectCache => w.direct_cache = true,
            Technique::Coalescing => w.coalescing = true,
            Technique::Affinity => w.affinity = true,
            Technique::HybridFd => w.hybrid_fd = true,
            Technique::Recovery => w.recovery = true,
            Technique::Processes => w.processes = true,
            Technique::RemoteCopies => w.remote_copies = true,
            Technique::NodeCopies => w.node_copies = true,
            Technique::SizeBoard => w.size_board = true,
            Technique::ReadLease => w.read_lease = true,
            Technique::DirectLinks => w.direct_links = true,
            Technique::NegativeLookups => w.negative_lookups = true,
            Technique::RememberedSites => w.remembered_sites = true,
            Technique::ReplyHandoff => w.reply_handoff = true,
            Technique::PostedAttrs => w.posted_attrs = true,
        }
    }
    w
}

/// `--distribute` value → prefix relative to the mount (`""` = everything).
///
/// With mount `/atoll`: `all` → `""`, `/atoll/src/` → `src`, `a/b` → `a/b`.
fn distribute_prefix(mount: &str, value: &str) -> Result<String, UsageError> {
    if value == "all" {
        return Ok(String::new());
    }
    let rel = if value.starts_with('/') {
        match under_mount(mount, Path::new(value)) {
            Some(rel) => rel,
            None => {
                return Err(UsageError(format!(
                    "--distribute {value}: path is not under the mount {mount}"
                )))
            }
        }
    } else {
        value.to_string()
    };
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(UsageError(format!(
            "--distribute {value}: path must not contain . or .."
        )));
    }
    Ok(parts.join("/"))
}

/// The part of absolute `path` below `mount` (`""` for the mount itself),
/// or `None` when `path` is not under the mount.
pub fn under_mount(mount: &str, path: &Path) -> Option<String> {
    let rest = path.to_str()?.strip_prefix(mount)?;
    if rest.is_empty() || rest.starts_with('/') {
        Some(rest.trim_start_matches('/').to_string())
    } else {
        None // `/atollx` is not under `/atoll`
    }
}

/// `$XDG_RUNTIME_DIR/atoll`, or `/tmp/atoll-$UID`.
pub fn default_runtime_root() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(x) if !x.is_empty() => PathBuf::from(x).join("atoll"),
        _ => PathBuf::from(format!("/tmp/atoll-{}", rustix::process::getuid().as_raw())),
    }
}

pub fn runtime_root(opt: &Option<PathBuf>) -> PathBuf {
    opt.clone().unwrap_or_else(default_runtime_root)
}

/// Create the runtime root (mode 0700) if needed and refuse one that another
/// user could tamper with: runtime directories hold the boot socket, which
/// grants full access to the instance. Then remove what ended instances
/// left in it (`registry::sweep_stale`).
pub fn ensure_runtime_root(root: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(root)?;
    let uid = rustix::process::getuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "runtime root {} is not a directory owned by uid {uid}",
                root.display()
            ),
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("runtime root {} is writable by other users", root.display()),
        ));
    }
    crate::registry::sweep_stale(root);
    Ok(())
}

/// The executable server processes start from: this one, by its path (so
/// that `ps` names them), or through `/proc/self/exe` if its file was
/// replaced or removed since it started.
pub fn server_exe() -> std::path::PathBuf {
    std::env::current_exe()
        .ok()
        .filter(|p| p.is_file())
        .unwrap_or_else(|| std::path::PathBuf::from("/proc/self/exe"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> InstanceArgs {
        let mut v = vec!["atoll", "boot", "--mount", "/atoll-test-absent"];
        v.extend_from_slice(extra);
        match crate::args::Cli::try_parse_from(v).unwrap().command {
            crate::args::Command::Boot(b) => b.instance,
            _ => unreachable!(),
        }
    }

    /// Plan on an idle machine whose CPUs are exactly `cores`.
    fn plan_with_cores(args: &InstanceArgs, cores: &[usize]) -> Result<Plan, UsageError> {
        plan_on(args, cores, &machine(cores.len(), cores.len(), 0.0))
    }

    fn machine(usable: usize, online: usize, load: f64) -> Machine {
        Machine {
            usable,
            online,
            load: Some(load),
        }
    }

    #[test]
    fn split_with_two_cores_puts_server_on_core_1_and_programs_on_core_0() {
        let p = plan_with_cores(&args(&["--split", "--servers", "1"]), &[0, 1]).unwrap();
        assert_eq!(p.config.server_cores, [1]);
        assert_eq!(p.app_cores, Some(vec![0]));
        assert_eq!(p.config.poll, PollMode::Spin);
        assert!(p.config.split);
    }

    #[test]
    fn split_uses_the_last_usable_cores() {
        let p = plan_with_cores(&args(&["--split", "--servers", "2"]), &[2, 3, 5, 7]).unwrap();
        assert_eq!(p.config.server_cores, [5, 7]);
        assert_eq!(p.app_cores, Some(vec![2, 3]));
    }

    #[test]
    fn split_needs_a_core_for_programs() {
        let e = plan_with_cores(&args(&["--split", "--servers", "2"]), &[0, 1]).unwrap_err();
        assert!(e.0.contains("core left"), "{e}");
        // The default count (half the cores) leaves programs the rest.
        let p = plan_with_cores(&args(&["--split"]), &[0, 1]).unwrap();
        assert_eq!(
            (p.config.server_cores, p.app_cores),
            (vec![1], Some(vec![0]))
        );
        assert!(plan_with_cores(&args(&["--split"]), &[0]).is_err());
    }

    #[test]
    fn timeshare_spreads_servers_over_all_cores() {
        let p = plan_with_cores(&args(&["--servers", "3"]), &[0, 1]).unwrap();
        assert_eq!(p.config.server_cores, [0, 1, 0]);
        assert_eq!(p.app_cores, None);
        assert_eq!(p.config.poll, PollMode::Adaptive);
    }

    #[test]
    fn defaults_come_from_the_machine() {
        // 2 idle cores: one server, adaptive.
        let p = plan_on(&args(&[]), &[0, 1], &machine(2, 2, 0.3)).unwrap();
        assert_eq!((p.config.servers, p.config.poll), (1, PollMode::Adaptive));
        assert_eq!(p.config.server_cores, [0]);
        assert_eq!(p.servers_why, "default for 2 usable cores, load 0.30");
        assert_eq!(p.poll_why, p.servers_why);
        // Loaded: the servers sleep at once.
        let p = plan_on(&args(&[]), &[0, 1], &machine(2, 2, 3.0)).unwrap();
        assert_eq!((p.config.servers, p.config.poll), (1, PollMode::Block));
        // 64 idle cores: 32 servers on the first 32.
        let cores: Vec<usize> = (0..64).collect();
        let p = plan_on(&args(&[]), &cores, &machine(64, 64, 1.0)).unwrap();
        assert_eq!((p.config.servers, p.config.poll), (32, PollMode::Adaptive));
        assert_eq!(p.config.server_cores, (0..32).collect::<Vec<_>>());
    }

    #[test]
    fn defaults_count_only_the_affinity_mask() {
        // `taskset -c 3` on 8 CPUs: one usable core.
        let p = plan_on(&args(&[]), &[3], &machine(1, 8, 0.5)).unwrap();
        assert_eq!((p.config.servers, p.config.poll), (1, PollMode::Block));
        assert_eq!(p.config.server_cores, [3]);
        assert_eq!(p.servers_why, "default for 1 usable core of 8, load 0.50");
        // `taskset -c 4-7` on 8 CPUs: four.
        let p = plan_on(&args(&[]), &[4, 5, 6, 7], &machine(4, 8, 0.5)).unwrap();
        assert_eq!(p.config.server_cores, [4, 5]);
    }

    #[test]
    fn explicit_options_win_over_the_machine_default() {
        let busy = machine(2, 2, 9.0);
        let p = plan_on(&args(&["--servers", "2", "--poll", "spin"]), &[0, 1], &busy).unwrap();
        assert_eq!((p.config.servers, p.config.poll), (2, PollMode::Spin));
        assert_eq!(
            (p.servers_why.as_str(), p.poll_why.as_str()),
            ("--servers", "--poll")
        );
        // One given, the other from the machine.
        let p = plan_on(&args(&["--servers", "2"]), &[0, 1], &busy).unwrap();
        assert_eq!((p.config.servers, p.config.poll), (2, PollMode::Block));
        let p = plan_on(&args(&["--poll", "adaptive"]), &[0, 1], &busy).unwrap();
        assert_eq!((p.config.servers, p.config.poll), (1, PollMode::Adaptive));
        // `--split` keeps spinning on its dedicated cores, loaded or not.
        let p = plan_on(&args(&["--split"]), &[0, 1], &busy).unwrap();
        assert_eq!(p.config.poll, PollMode::Spin);
        // `--max-servers` and `--servers auto` keep their meaning.
        let p = plan_on(&args(&["--max-servers", "3"]), &[0, 1], &busy).unwrap();
        assert_eq!(p.config.servers, 3);
        let p = plan_on(&args(&["--servers", "auto"]), &[0, 1, 2, 3], &busy).unwrap();
        assert_eq!(p.config.servers, 4);
    }

    #[test]
    fn explicit_poll_mode_wins_over_split_default() {
        let p = plan_with_cores(
            &args(&["--split", "--servers", "1", "--poll", "block"]),
            &[0, 1],
        )
        .unwrap();
        assert_eq!(p.config.poll, PollMode::Block);
    }

    #[test]
    fn without_flags_map_to_boot_without() {
        let p = plan_with_cores(
            &args(&["--without", "dir-cache", "--without", "coalescing"]),
            &[0],
        )
        .unwrap();
        let w = p.config.without;
        assert!(w.dir_cache && w.coalescing);
        assert!(!w.dir_distribution && !w.broadcast && !w.direct_cache);
        assert!(!w.affinity && !w.hybrid_fd && !w.remembered_sites);
        let p = plan_with_cores(&args(&["--without", "remembered-sites"]), &[0]).unwrap();
        assert!(p.config.without.remembered_sites && !p.config.without.dir_cache);
    }

    #[test]
    fn distribute_values_become_mount_relative_prefixes() {
        let m = "/atoll";
        assert_eq!(distribute_prefix(m, "all").unwrap(), "");
        assert_eq!(distribute_prefix(m, "/atoll/src/").unwrap(), "src");
        assert_eq!(distribute_prefix(m, "/atoll").unwrap(), "");
        assert_eq!(distribute_prefix(m, "a//b/").unwrap(), "a/b");
        assert!(distribute_prefix(m, "/atollx/a").is_err());
        assert!(distribute_prefix(m, "/tmp").is_err());
        assert!(distribute_prefix(m, "a/../b").is_err());
    }

    #[test]
    fn under_mount_respects_component_boundaries() {
        assert_eq!(
            under_mount("/atoll", Path::new("/atoll")),
            Some(String::new())
        );
        assert_eq!(
            under_mount("/atoll", Path::new("/atoll/x/y")),
            Some("x/y".into())
        );
        assert_eq!(under_mount("/atoll", Path::new("/atollx")), None);
        assert_eq!(under_mount("/atoll", Path::new("/tmp")), None);
    }

    #[test]
    fn runtime_root_is_created_private() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("a/b");
        ensure_runtime_root(&root).unwrap();
        let mode = std::fs::metadata(&root).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        ensure_runtime_root(&root).unwrap(); // idempotent
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(ensure_runtime_root(&root).is_err());
    }
}
