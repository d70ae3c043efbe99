//! Finding running instances: each runtime directory holds an
//! `instance.json` written by the driver once the instance accepts
//! connections. An instance is *live* while the process named there runs
//! (same pid *and* same start time, so a recycled pid does not count).
//! The runtime directory, record included, disappears with the instance.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const RECORD: &str = "instance.json";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct InstanceRecord {
    pub id: String,
    pub pid: u32,
    /// Start time of `pid` in clock ticks since boot (`/proc/PID/stat`
    /// field 22); 0 = unknown.
    #[serde(default)]
    pub start_time: u64,
    /// `run` (lives as long as its command) or `boot` (detached).
    #[serde(default)]
    pub kind: String,
    pub socket: PathBuf,
    /// Filled in from the record's location when absent (the instance
    /// runtime writes a shorter record before the driver completes it).
    #[serde(default)]
    pub runtime_dir: PathBuf,
    pub mount: String,
    #[serde(default)]
    pub servers: u32,
    #[serde(default)]
    pub cache_bytes: u64,
    /// Seconds since the Unix epoch.
    #[serde(default)]
    pub started: u64,
    /// For `run`: the command.
    #[serde(default)]
    pub command: Vec<String>,
    /// How servers and clients wait (`spin`, `block`, `adaptive`).
    #[serde(default)]
    pub poll: String,
    /// Where the server count came from: `--servers`, or the default for
    /// the machine ("default for 2 usable cores, load 0.30").
    #[serde(default)]
    pub servers_why: String,
    /// Where the poll mode came from, likewise.
    #[serde(default)]
    pub poll_why: String,
}

impl InstanceRecord {
    /// A record for an instance served by this very process.
    pub fn for_self(
        instance: &atoll_server::Instance,
        kind: &str,
        command: &[String],
    ) -> InstanceRecord {
        let pid = std::process::id();
        let info = instance.info();
        InstanceRecord {
            id: instance.id().to_string(),
            pid,
            start_time: start_time(pid).unwrap_or(0),
            kind: kind.to_string(),
            socket: instance.socket_path().to_path_buf(),
            runtime_dir: instance.runtime_dir().to_path_buf(),
            mount: info.mount.clone(),
            servers: info.servers,
            cache_bytes: info.cache_bytes,
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            command: command.to_vec(),
            poll: String::new(),
            servers_why: String::new(),
            poll_why: String::new(),
        }
    }

    /// With the poll mode and where it and the server count came from.
    pub fn with_shape(mut self, plan: &crate::config::Plan) -> InstanceRecord {
        self.poll = crate::shape::poll_name(plan.config.poll).to_string();
        self.servers_why = plan.servers_why.clone();
        self.poll_why = plan.poll_why.clone();
        self
    }

    /// Write atomically (temporary file + rename) into the runtime dir, so
    /// a concurrent `atoll list` never reads half a record.
    pub fn write(&self) -> io::Result<()> {
        let tmp = self.runtime_dir.join(".instance.json.tmp");
        let json = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        std::fs::write(&tmp, json)?;
        // Clients run this executable for programs that cannot load the
        // client library (`atoll __foreign`, client `exec/foreign.rs`).
        if let Ok(exe) = std::env::current_exe() {
            let link = self.runtime_dir.join(atoll_proto::boot::EXE_LINK);
            if std::fs::read_link(&link).ok().as_deref() != Some(exe.as_path()) {
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&exe, &link)?;
            }
        }
        std::fs::rename(&tmp, self.runtime_dir.join(RECORD))
    }

    pub fn is_live(&self) -> bool {
        let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) else {
            return false;
        };
        match rustix::process::test_kill_process(pid) {
            Ok(()) | Err(rustix::io::Errno::PERM) => {}
            Err(_) => return false,
        }
        match proc_stat(self.pid) {
            // A zombie has ended; only its exit status is left to collect.
            Some((state, _)) if state == 'Z' || state == 'X' => false,
            Some((_, started)) => self.start_time == 0 || started == self.start_time,
            None => self.start_time == 0,
        }
    }
}

/// `(state, start time)` of a process from `/proc/PID/stat`.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: the
    // fields after it start after the *last* ')'.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    // Field 3 is the state; field 22 the start time, 19 fields later.
    let state = rest.next()?.chars().next()?;
    let started = rest.nth(18)?.parse().ok()?;
    Some((state, started))
}

/// Start time of a process in clock ticks since boot.
pub fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, t)| t)
}

/// Live instances under `root`, oldest first. Unreadable or stale records
/// are skipped.
pub fn scan(root: &Path) -> Vec<InstanceRecord> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<InstanceRecord> = dir
        .flatten()
        .filter_map(|e| {
            let bytes = std::fs::read(e.path().join(RECORD)).ok()?;
            let mut r: InstanceRecord = serde_json::from_slice(&bytes).ok()?;
            if r.runtime_dir.as_os_str().is_empty() {
                r.runtime_dir = e.path();
            }
            Some(r)
        })
        .filter(InstanceRecord::is_live)
        .collect();
    out.sort_by(|a, b| (a.started, &a.id).cmp(&(b.started, &b.id)));
    out
}

/// A runtime directory without a record this old is a boot that died
/// before it wrote one (a live boot writes it within seconds).
const UNRECORDED_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Remove the runtime directories under `root` that no instance uses any
/// more, with the tmpfs directory their `dnotify` link names (server
/// `shadows.rs`): an instance whose driver was killed (`SIGKILL`, a
/// crashed machine's `/tmp` kept) cannot remove its own, and each left
/// behind a directory on `/dev/shm`. Stale means: a record whose process
/// has ended, or no record and, after [`UNRECORDED_GRACE`], no listener on
/// the boot socket. Called before an instance starts; errors are ignored
/// (another starting instance may sweep the same directory).
pub fn sweep_stale(root: &Path) -> usize {
    let Ok(dir) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut swept = 0;
    for entry in dir.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) || !is_stale(&path) {
            continue;
        }
        atoll_server::remove_runtime_dir(&path);
        swept += 1;
    }
    if swept > 0 {
        tracing::debug!("removed {swept} runtime directories of ended instances");
    }
    swept
}

fn is_stale(dir: &Path) -> bool {
    match std::fs::read(dir.join(RECORD)) {
        Ok(bytes) => match serde_json::from_slice::<InstanceRecord>(&bytes) {
            Ok(r) => !r.is_live(),
            Err(_) => unrecorded_and_abandoned(dir),
        },
        Err(_) => unrecorded_and_abandoned(dir),
    }
}

fn unrecorded_and_abandoned(dir: &Path) -> bool {
    let old = std::fs::metadata(dir)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= UNRECORDED_GRACE);
    old && !listened_on(&dir.join(atoll_server::BOOT_SOCKET))
}

/// Does a process accept connections on the boot socket (a sequenced-packet
/// socket) at `path`?
fn listened_on(path: &Path) -> bool {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let Ok(addr) = SocketAddrUnix::new(path) else {
        return false;
    };
    rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .and_then(|fd| rustix::net::connect(&fd, &addr))
    .is_ok()
}

/// Why an instance could not be chosen.
#[derive(Debug)]
pub enum SelectError {
    NoneRunning(PathBuf),
    Ambiguous(Vec<String>),
    Unknown(String),
    AmbiguousPrefix(String, Vec<String>),
}

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectError::NoneRunning(root) => write!(
                f,
                "no running atoll instance under {} (start one with `atoll boot`)",
                root.display()
            ),
            SelectError::Ambiguous(ids) => write!(
                f,
                "{} instances are running ({}); choose one with --id",
                ids.len(),
                ids.join(", ")
            ),
            SelectError::Unknown(id) => write!(f, "no running instance with id '{id}'"),
            SelectError::AmbiguousPrefix(id, ids) => {
                write!(f, "id '{id}' matches several instances: {}", ids.join(", "))
            }
        }
    }
}

impl std::error::Error for SelectError {}

/// Pick an instance: by exact id, else by unique id prefix; without an id,
/// the only running one.
pub fn select(
    live: Vec<InstanceRecord>,
    id: Option<&str>,
    root: &Path,
) -> Result<InstanceRecord, SelectError> {
    let ids = |v: &[InstanceRecord]| v.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    match id {
        None => match live.len() {
            0 => Err(SelectError::NoneRunning(root.to_path_buf())),
            1 => Ok(live.into_iter().next().expect("one element")),
            _ => Err(SelectError::Ambiguous(ids(&live))),
        },
        Some(id) => {
            if let Some(r) = live.iter().find(|r| r.id == id) {
                return Ok(r.clone());
            }
            let matching: Vec<InstanceRecord> = live
                .into_iter()
                .filter(|r| !id.is_empty() && r.id.starts_with(id))
                .collect();
            match matching.len() {
                0 => Err(SelectError::Unknown(id.to_string())),
                1 => Ok(matching.into_iter().next().expect("one element")),
                _ => Err(SelectError::AmbiguousPrefix(id.to_string(), ids(&matching))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(dir: &Path, id: &str, pid: u32, start_time: u64) -> InstanceRecord {
        let runtime_dir = dir.join(id);
        std::fs::create_dir_all(&runtime_dir).unwrap();
        InstanceRecord {
            id: id.into(),
            pid,
            start_time,
            kind: "boot".into(),
            socket: runtime_dir.join("boot.sock"),
            runtime_dir,
            mount: "/atoll".into(),
            servers: 2,
            cache_bytes: 1 << 20,
            started: 1,
            command: vec![],
            poll: String::new(),
            servers_why: String::new(),
            poll_why: String::new(),
        }
    }

    #[test]
    fn start_time_of_self_is_known_and_stable() {
        let me = std::process::id();
        let a = start_time(me).unwrap();
        assert_eq!(start_time(me), Some(a));
    }

    #[test]
    fn scan_returns_live_records_and_skips_stale_ones() {
        let t = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let live = record(t.path(), "live1", me, start_time(me).unwrap());
        live.write().unwrap();
        // Same pid, different start time: the pid was recycled.
        record(t.path(), "recycled", me, 1).write().unwrap();
        // A pid that cannot exist (beyond pid_max).
        record(t.path(), "dead", 0x3fff_fff0, 0).write().unwrap();
        std::fs::create_dir(t.path().join("junk")).unwrap();
        std::fs::write(t.path().join("junk").join(RECORD), b"{not json").unwrap();
        let found = scan(t.path());
        assert_eq!(found, vec![live]);
    }

    #[test]
    fn sweep_removes_ended_instances_only() {
        let t = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let live = record(t.path(), "live1", me, start_time(me).unwrap());
        live.write().unwrap();
        let dead = record(t.path(), "dead", 0x3fff_fff0, 0);
        dead.write().unwrap();
        // A boot in progress: no record yet, and young.
        std::fs::create_dir(t.path().join("booting")).unwrap();
        // A boot that died long ago: no record, no listener, old.
        let old = t.path().join("abandoned");
        std::fs::create_dir(&old).unwrap();
        let long_ago = std::time::SystemTime::now() - 2 * UNRECORDED_GRACE;
        std::fs::File::open(&old)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        // An old one without a record whose boot socket still listens.
        let listening = t.path().join("listening");
        std::fs::create_dir(&listening).unwrap();
        let sock = rustix::net::socket(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            None,
        )
        .unwrap();
        let addr =
            rustix::net::SocketAddrUnix::new(listening.join(atoll_server::BOOT_SOCKET)).unwrap();
        rustix::net::bind(&sock, &addr).unwrap();
        rustix::net::listen(&sock, 1).unwrap();
        std::fs::File::open(&listening)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();

        assert_eq!(sweep_stale(t.path()), 2);
        let mut left: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["booting", "listening", "live1"]);
        assert_eq!(scan(t.path()), vec![live]);
    }

    #[test]
    fn an_exited_but_unreaped_process_is_not_live() {
        let t = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let started = start_time(pid).unwrap_or(0);
        // Wait (bounded) for it to become a zombie, without reaping it.
        for _ in 0..1000 {
            if proc_stat(pid).is_some_and(|(s, _)| s == 'Z') {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!record(t.path(), "z", pid, started).is_live());
        child.wait().unwrap();
    }

    #[test]
    fn select_by_id_prefix_or_uniqueness() {
        let t = tempfile::tempdir().unwrap();
        let a = record(t.path(), "a1b2", 1, 0);
        let b = record(t.path(), "a1c3", 1, 0);
        let both = vec![a.clone(), b.clone()];
        assert_eq!(select(vec![a.clone()], None, t.path()).unwrap(), a);
        assert!(matches!(
            select(both.clone(), None, t.path()),
            Err(SelectError::Ambiguous(_))
        ));
        assert_eq!(select(both.clone(), Some("a1c"), t.path()).unwrap(), b);
        assert_eq!(select(both.clone(), Some("a1b2"), t.path()).unwrap(), a);
        assert!(matches!(
            select(both.clone(), Some("a1"), t.path()),
            Err(SelectError::AmbiguousPrefix(..))
        ));
        assert!(matches!(
            select(both, Some("zz"), t.path()),
            Err(SelectError::Unknown(_))
        ));
        assert!(matches!(
            select(vec![], None, t.path()),
            Err(SelectError::NoneRunning(_))
        ));
    }
}
