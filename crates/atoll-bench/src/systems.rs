//! The systems a benchmark runs on. `tmpfs` and `fuse` live here; the atoll
//! configurations come from the caller through [`SystemFactory`], because
//! only the `atoll` command knows how to boot an instance.
//!
//! Life cycle of a system: `prepare` (mount / boot) → runs, each in a fresh
//! subdirectory of `Target::dir`, with `counters` sampled around each run →
//! `cleanup` (unmount / stop). The harness never touches `Target::dir`
//! itself: only worker processes started with `Target::env` do, so a path
//! that exists only for intercepted processes (`/atoll/...`) works.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// Where and how worker processes reach a system.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// A directory on the system under test (need not exist on the host).
    pub dir: PathBuf,
    /// Environment for worker processes (e.g. `LD_PRELOAD`, `ATOLL_SOCKET`).
    pub env: Vec<(String, String)>,
    /// CPUs the worker processes (and the programs they start) are
    /// confined to; empty = no restriction. For the split configuration
    /// these are the application cores (Hare §5.3.2).
    pub cpus: Vec<usize>,
}

/// One file system under test.
pub trait System {
    /// Name in tables and JSON; atoll systems start with `atoll-`.
    fn name(&self) -> String;
    /// Make the system ready; called once before its runs.
    fn prepare(&mut self) -> anyhow::Result<Target>;
    /// Undo `prepare`; called once after its runs (also after failures).
    fn cleanup(&mut self) -> anyhow::Result<()>;
    /// Cumulative counters, if the system keeps any. The harness reports the
    /// difference across each run. Recognised fields: `messages` (total
    /// messages; gives messages per operation) and `servers` (an array of
    /// per-server objects, e.g. `{"requests": n}`, for per-server load).
    fn counters(&self) -> Option<serde_json::Value>;
    /// Tuned per workload as Hare's evaluation is (distributed directories
    /// where it asks for them)? Not the system measured as users get it.
    fn tuned(&self) -> bool {
        true
    }
}

/// Supplied by the `atoll` command: boots atoll configurations.
pub trait SystemFactory {
    /// `split`: servers on dedicated cores (Hare §5.3.2) instead of
    /// timesharing with the application; `without`: techniques switched off
    /// (names as in [`atoll_proto::boot::Without`], see [`parse_without`]);
    /// `traced`: record a message trace, as `atoll run --trace` does.
    fn atoll(
        &mut self,
        split: bool,
        traced: bool,
        servers: usize,
        without: &[String],
    ) -> anyhow::Result<Box<dyn System>>;
    /// Exactly what `atoll run` gives with no options (the system `atoll`),
    /// with no per-workload tuning.
    fn atoll_default(&mut self) -> anyhow::Result<Box<dyn System>> {
        bail!("atoll systems are only available through `atoll bench`")
    }
    /// The system `atoll` with another directory-mode policy and nothing
    /// else changed: `atoll-distributed` (`--distribute all`) or
    /// `atoll-adaptive` (`--adaptive-dirs on`).
    fn atoll_dir_modes(&mut self, _modes: DirModes) -> anyhow::Result<Box<dyn System>> {
        bail!("atoll systems are only available through `atoll bench`")
    }
    /// `atoll run OPTIONS` with no per-workload tuning, named `name` in
    /// tables (the systems `atoll+KEY=VALUE+…`, see [`crate::run_options`]).
    fn atoll_with_options(
        &mut self,
        _name: &str,
        _options: &[String],
    ) -> anyhow::Result<Box<dyn System>> {
        bail!("atoll systems are only available through `atoll bench`")
    }
}

/// How the untuned `atoll` systems place a directory's entries (Hare §3.4,
/// §6.1.2): the three differ in this alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirModes {
    /// Every directory centralized on its home server (the system `atoll`).
    Centralized,
    /// Every directory distributed over all servers (`atoll-distributed`).
    Distributed,
    /// Centralized, swapped to distributed while hot (`atoll-adaptive`).
    Adaptive,
}

impl DirModes {
    /// The system's name in tables.
    pub fn system(self) -> &'static str {
        match self {
            DirModes::Centralized => "atoll",
            DirModes::Distributed => "atoll-distributed",
            DirModes::Adaptive => "atoll-adaptive",
        }
    }

    /// The `atoll run` options that give it.
    pub fn run_options(self) -> &'static [&'static str] {
        match self {
            DirModes::Centralized => &[],
            DirModes::Distributed => &["--distribute", "all"],
            DirModes::Adaptive => &["--adaptive-dirs", "on"],
        }
    }
}

/// A factory for builds without atoll (the stand-alone `atoll-bench`).
pub struct NoAtoll;

impl SystemFactory for NoAtoll {
    fn atoll(
        &mut self,
        _: bool,
        _: bool,
        _: usize,
        _: &[String],
    ) -> anyhow::Result<Box<dyn System>> {
        bail!("atoll systems are only available through `atoll bench`")
    }
}

/// Technique names accepted by `--without` (Hare §5.4), mapped onto the
/// boot protocol's switches.
pub fn parse_without(names: &[String]) -> anyhow::Result<atoll_proto::boot::Without> {
    let mut w = atoll_proto::boot::Without::default();
    for n in names {
        let flag = match n.replace('-', "_").as_str() {
            "dir_distribution" | "distribution" => &mut w.dir_distribution,
            "dir_cache" => &mut w.dir_cache,
            "broadcast" | "dir_broadcast" => &mut w.broadcast,
            "direct_cache" | "direct_access" => &mut w.direct_cache,
            "coalescing" => &mut w.coalescing,
            "affinity" | "creation_affinity" => &mut w.affinity,
            "hybrid_fd" => &mut w.hybrid_fd,
            "recovery" => &mut w.recovery,
            "processes" => &mut w.processes,
            "size_board" => &mut w.size_board,
            "read_lease" => &mut w.read_lease,
            "direct_links" => &mut w.direct_links,
            "negative_lookups" => &mut w.negative_lookups,
            "remembered_sites" => &mut w.remembered_sites,
            "reply_handoff" => &mut w.reply_handoff,
            "posted_attrs" => &mut w.posted_attrs,
            other => bail!(
                "unknown technique {other:?}; known: dir-distribution, dir-cache, broadcast, \
                 direct-cache, coalescing, affinity, hybrid-fd, recovery, processes, size-board, \
                 read-lease, direct-links, negative-lookups, remembered-sites, reply-handoff, posted-attrs"
            ),
        };
        *flag = true;
    }
    Ok(w)
}

fn sh(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A fresh tmpfs: mounted on a scratch directory if we may mount (we run as
/// root on the benchmark machines), else a directory in `/dev/shm`.
pub struct Tmpfs {
    label: String,
    mountpoint: PathBuf,
    mounted: bool,
}

impl Tmpfs {
    pub fn new(scratch: &Path, label: &str) -> Tmpfs {
        Tmpfs {
            label: label.to_string(),
            mountpoint: scratch.join(label),
            mounted: false,
        }
    }

    /// Mount (or fall back) and return the directory.
    fn up(&mut self) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(&self.mountpoint)?;
        let r = sh(Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0700", "atoll-bench"])
            .arg(&self.mountpoint));
        match r {
            Ok(()) => {
                self.mounted = true;
                Ok(self.mountpoint.clone())
            }
            Err(_) => {
                let d = PathBuf::from("/dev/shm").join(format!(
                    "atoll-bench-{}-{}",
                    std::process::id(),
                    self.label
                ));
                std::fs::create_dir_all(&d)?;
                self.mountpoint = d.clone();
                Ok(d)
            }
        }
    }

    fn down(&mut self) -> anyhow::Result<()> {
        if self.mounted {
            sh(Command::new("umount").arg(&self.mountpoint))?;
            self.mounted = false;
            let _ = std::fs::remove_dir(&self.mountpoint);
        } else if self.mountpoint.starts_with("/dev/shm") {
            let _ = std::fs::remove_dir_all(&self.mountpoint);
        }
        Ok(())
    }

    pub fn is_mounted(&self) -> bool {
        self.mounted
    }
}

impl System for Tmpfs {
    fn name(&self) -> String {
        "tmpfs".into()
    }
    fn prepare(&mut self) -> anyhow::Result<Target> {
        Ok(Target {
            dir: self.up()?,
            ..Target::default()
        })
    }
    fn cleanup(&mut self) -> anyhow::Result<()> {
        self.down()
    }
    fn counters(&self) -> Option<serde_json::Value> {
        None
    }
}

/// FUSE: Debian's `bindfs` mirroring a tmpfs directory, i.e. a user-space
/// file server reached through the kernel (the "messages through the
/// kernel" baseline, like Hare's UNFS3 comparison, §5.3.3). Mounted with
/// `attr_timeout=0` so that it is coherent (see `prepare`).
pub struct Fuse {
    backing: Tmpfs,
    mnt: PathBuf,
    mounted: bool,
}

impl Fuse {
    /// `Err(reason)` when this machine cannot run it.
    pub fn available() -> Result<(), String> {
        if !crate::util::have_tool("bindfs") {
            return Err("bindfs is not installed (apt-get install bindfs)".into());
        }
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse does not exist".into());
        }
        Ok(())
    }

    pub fn new(scratch: &Path) -> Fuse {
        Fuse {
            backing: Tmpfs::new(scratch, "fuse-backing"),
            mnt: scratch.join("fuse"),
            mounted: false,
        }
    }
}

impl System for Fuse {
    fn name(&self) -> String {
        "fuse".into()
    }
    fn prepare(&mut self) -> anyhow::Result<Target> {
        Fuse::available().map_err(anyhow::Error::msg)?;
        let back = self.backing.up()?;
        std::fs::create_dir_all(&self.mnt)?;
        // attr_timeout=0: with the kernel's default attribute caching, a
        // size changed through one hard link is stale through the other
        // (fsstress catches it); a baseline must be coherent to compare.
        sh(Command::new("bindfs")
            .args(["-o", "attr_timeout=0"])
            .arg(&back)
            .arg(&self.mnt))?;
        self.mounted = true;
        Ok(Target {
            dir: self.mnt.clone(),
            ..Target::default()
        })
    }
    fn cleanup(&mut self) -> anyhow::Result<()> {
        if self.mounted {
            if sh(Command::new("fusermount").arg("-u").arg(&self.mnt)).is_err() {
                sh(Command::new("umount").arg(&self.mnt))?;
            }
            self.mounted = false;
            let _ = std::fs::remove_dir(&self.mnt);
        }
        self.backing.down()
    }
    fn counters(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Counters after minus counters before, field by field (numbers are
/// subtracted, objects and equal-length arrays recursed, the rest taken
/// from `after`).
pub fn counter_delta(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (before, after) {
        (Value::Number(a), Value::Number(b)) => match (a.as_u64(), b.as_u64()) {
            (Some(x), Some(y)) => Value::from(y.saturating_sub(x)),
            _ => Value::from(b.as_f64().unwrap_or(0.0) - a.as_f64().unwrap_or(0.0)),
        },
        (Value::Object(a), Value::Object(b)) => Value::Object(
            b.iter()
                .map(|(k, v)| {
                    let d = a.get(k).map_or_else(|| v.clone(), |x| counter_delta(x, v));
                    (k.clone(), d)
                })
                .collect(),
        ),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            Value::Array(a.iter().zip(b).map(|(x, y)| counter_delta(x, y)).collect())
        }
        _ => after.clone(),
    }
}

/// Total messages in a counter delta: `messages`, else the sum of
/// `servers[*].requests`.
pub fn messages_in(delta: &serde_json::Value) -> Option<u64> {
    if let Some(m) = delta.get("messages").and_then(|v| v.as_u64()) {
        return Some(m);
    }
    let servers = delta.get("servers")?.as_array()?;
    let mut total = 0;
    for s in servers {
        total += s.get("requests")?.as_u64()?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counter_delta_subtracts_nested_numbers() {
        let a = json!({"messages": 10, "servers": [{"requests": 4}, {"requests": 6}], "id": "x"});
        let b = json!({"messages": 25, "servers": [{"requests": 9}, {"requests": 16}], "id": "x"});
        let d = counter_delta(&a, &b);
        assert_eq!(d["messages"], 15);
        assert_eq!(d["servers"][1]["requests"], 10);
        assert_eq!(d["id"], "x");
        assert_eq!(messages_in(&d), Some(15));
        assert_eq!(
            messages_in(&json!({"servers": [{"requests": 2}, {"requests": 3}]})),
            Some(5)
        );
        assert_eq!(messages_in(&json!({})), None);
    }

    #[test]
    fn parse_without_knows_hare_techniques_and_rejects_others() {
        let w = parse_without(&["dir-cache".into(), "broadcast".into()]).unwrap();
        assert!(w.dir_cache && w.broadcast && !w.dir_distribution);
        assert!(
            parse_without(&["remembered-sites".into()])
                .unwrap()
                .remembered_sites
        );
        assert!(parse_without(&["warp-drive".into()]).is_err());
    }

    #[test]
    fn no_atoll_factory_refuses_politely() {
        assert!(NoAtoll.atoll(true, false, 1, &[]).is_err());
        assert!(NoAtoll.atoll_with_options("atoll+split", &[]).is_err());
    }

    #[test]
    fn atoll_plus_names_are_run_options() {
        let o = |s: &str| crate::run_options(s);
        assert_eq!(
            o("atoll+servers=1+poll=block").unwrap(),
            ["--servers", "1", "--poll", "block"]
        );
        assert_eq!(o("atoll+split").unwrap(), ["--split"]);
        assert_eq!(o("atoll"), None);
        assert_eq!(o("atoll-split"), None);
        assert_eq!(o("atoll+"), None);
        assert_eq!(o("atoll+--servers=1"), None);
        assert_eq!(o("atoll+servers=1++poll=spin"), None);
    }
}
