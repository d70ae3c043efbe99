//! The workloads of Hare's evaluation (Hare ch. 5, Table 5.1).
//!
//! Every workload is plain `std::fs` code (or a standard program such as
//! `tar`, `unzip`, `make`) that works on ANY directory: run inside a process
//! started with an atoll instance's environment it exercises atoll through
//! the preload library; run anywhere else it exercises the host file system.
//! No atoll API is used here, by design.
//!
//! Life cycle of one measured run (driven by `harness`), each step in its
//! own process so the file system under test sees only ordinary programs:
//!
//! ```text
//!   setup  (1 process)  build trees, shared dirs, generated projects
//!   run    (one process per role, all released by one start barrier)
//!   check  (1 process)  verify the result on the file system itself
//!   clean  (1 process)  remove the run directory
//! ```
//!
//! Operations are counted exactly as the workers issue them (one per
//! file-system call: open, close, write, unlink, rename, mkdir, rmdir,
//! readdir of one directory, ...). For workloads that drive external
//! programs (`extract`, `punzip`, `build`) an operation is one entry the
//! program created (or one compiler/linker job for `build`), because their
//! exact system calls are not observable without tracing.
//!
//! The peers' own benchmarks ([`Workload::PEERS`]: dbench, fs_mark, fio,
//! postmark, an extract of a Debian source tarball) run the unmodified
//! programs the same way and report the programs' own metric as the
//! result's throughput (see `peers`).

mod apps;
mod debian;
mod fsstress;
mod mail;
mod micro;
mod peer_output;
mod peers;
mod procs;
mod spread;
mod tree;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use apps::{prepare_inputs, Inputs};
pub use peers::prepare_debian;
pub use procs::ENV_PLACEMENT;
pub use tree::TreeShape;

use crate::util::{BenchError, Result};

/// The extended attribute that asks atoll to distribute the directories
/// created below a directory (Hare §3.4).
pub const DISTRIBUTED_XATTR: &str = "user.atoll.distributed";

/// Benchmark sizes. `Full` follows Hare's Table 5.1 (approximately where
/// the thesis is not precise); `Quick` runs the whole default suite on tmpfs
/// in well under a minute; `Tiny` is for unit tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Size {
    Tiny,
    Quick,
    Default,
    Full,
}

#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Creates,
    Writes,
    Renames,
    Directories,
    RmDense,
    RmSparse,
    PfindDense,
    PfindSparse,
    Extract,
    Punzip,
    Mailbench,
    Fsstress,
    Build,
    ExecLocal,
    ExecRemote,
    PipeThroughput,
    PipeLatency,
    Dbench,
    #[serde(rename = "fs_mark")]
    #[value(name = "fs_mark")]
    FsMark,
    FioRandrw,
    FioSeq,
    Postmark,
    ExtractDebian,
    HotThenSpread,
}

impl Workload {
    pub const ALL: [Workload; 13] = [
        Workload::Creates,
        Workload::Writes,
        Workload::Renames,
        Workload::Directories,
        Workload::RmDense,
        Workload::RmSparse,
        Workload::PfindDense,
        Workload::PfindSparse,
        Workload::Extract,
        Workload::Punzip,
        Workload::Mailbench,
        Workload::Fsstress,
        Workload::Build,
    ];

    /// Processes and pipes (fos Table 4 spawn, Hare §3.5 pipes): run after
    /// Hare's file-system suite ([`Workload::ALL`]) by default, but not
    /// part of its targets.
    pub const PROCS: [Workload; 4] = [
        Workload::ExecLocal,
        Workload::ExecRemote,
        Workload::PipeThroughput,
        Workload::PipeLatency,
    ];

    /// The peers' own benchmarks: unmodified programs whose own output
    /// gives the metric. Run after [`Workload::PROCS`] by default; each has
    /// a target of its own (atoll ≥ 1× tmpfs).
    pub const PEERS: [Workload; 6] = [
        Workload::Dbench,
        Workload::FsMark,
        Workload::FioRandrw,
        Workload::FioSeq,
        Workload::Postmark,
        Workload::ExtractDebian,
    ];

    /// Is this one of [`Workload::PEERS`]?
    pub fn is_peer(self) -> bool {
        Workload::PEERS.contains(&self)
    }

    /// The unit of the metric a peer benchmark reports itself (the
    /// result's throughput for these workloads); `None` for the others,
    /// whose throughput is operations per second.
    pub fn native_metric(self) -> Option<&'static str> {
        match self {
            Workload::Dbench => Some("MB/s"),
            Workload::FsMark => Some("files/s"),
            Workload::FioRandrw => Some("IOPS"),
            Workload::FioSeq => Some("MiB/s"),
            Workload::Postmark => Some("transactions/s"),
            Workload::ExtractDebian => Some("entries/s"),
            _ => None,
        }
    }

    /// Beyond Hare's evaluation: a workload whose best directory mode
    /// changes as it runs, for adaptive directories (Hare §6.1.2; compare
    /// the systems `atoll`, `atoll-distributed` and `atoll-adaptive`).
    pub const ADAPTIVE: [Workload; 1] = [Workload::HotThenSpread];

    /// Does Hare run this workload in distributed directories? Hare §5.4.1
    /// turns distribution on for the workloads that work concurrently in
    /// one directory and off for those it only costs (readdir of small
    /// directories, many rmdirs: pfind-sparse, rm-sparse, fsstress).
    pub fn distributes_directories(self) -> bool {
        matches!(
            self,
            Workload::Creates
                | Workload::Renames
                | Workload::PfindDense
                | Workload::Mailbench
                | Workload::Build
        )
    }

    /// Every workload (the default suite): Hare's first, then
    /// [`Workload::PROCS`], [`Workload::PEERS`] and [`Workload::ADAPTIVE`].
    pub fn every() -> impl Iterator<Item = Workload> {
        Workload::ALL
            .into_iter()
            .chain(Workload::PROCS)
            .chain(Workload::PEERS)
            .chain(Workload::ADAPTIVE)
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Creates => "creates",
            Workload::Writes => "writes",
            Workload::Renames => "renames",
            Workload::Directories => "directories",
            Workload::RmDense => "rm-dense",
            Workload::RmSparse => "rm-sparse",
            Workload::PfindDense => "pfind-dense",
            Workload::PfindSparse => "pfind-sparse",
            Workload::Extract => "extract",
            Workload::Punzip => "punzip",
            Workload::Mailbench => "mailbench",
            Workload::Fsstress => "fsstress",
            Workload::Build => "build",
            Workload::ExecLocal => "exec-local",
            Workload::ExecRemote => "exec-remote",
            Workload::PipeThroughput => "pipe-throughput",
            Workload::PipeLatency => "pipe-latency",
            Workload::Dbench => "dbench",
            Workload::FsMark => "fs_mark",
            Workload::FioRandrw => "fio-randrw",
            Workload::FioSeq => "fio-seq",
            Workload::Postmark => "postmark",
            Workload::ExtractDebian => "extract-debian",
            Workload::HotThenSpread => "hot-then-spread",
        }
    }

    pub fn from_name(s: &str) -> Option<Workload> {
        Workload::every().find(|w| w.name() == s)
    }

    /// Metadata-only workloads (the "atoll ≥ 10× FUSE" target).
    pub fn is_metadata(self) -> bool {
        matches!(
            self,
            Workload::Creates
                | Workload::Renames
                | Workload::Directories
                | Workload::RmDense
                | Workload::RmSparse
                | Workload::PfindDense
                | Workload::PfindSparse
        )
    }

    /// The `ATOLL_PLACEMENT` the worker processes start with: the client
    /// library reads it at start-up and places every `execve` accordingly
    /// (`local` = where the caller runs; `round-robin` = the next core, so
    /// remote on a machine with more than one core).
    pub fn placement(self) -> Option<&'static str> {
        match self {
            Workload::ExecLocal => Some("local:0"),
            Workload::ExecRemote => Some("round-robin:0"),
            _ => None,
        }
    }

    /// External programs the workload needs (skipped with a message if
    /// one is missing).
    pub fn tools(self) -> &'static [&'static str] {
        match self {
            Workload::Extract => &["tar"],
            Workload::Punzip => &["zip", "unzip"],
            Workload::Build => &["make", "cc"],
            Workload::Dbench => &["dbench"],
            Workload::FsMark => &["fs_mark"],
            Workload::FioRandrw | Workload::FioSeq => &["fio"],
            Workload::Postmark => &["postmark"],
            Workload::ExtractDebian => &["tar"],
            _ => &[],
        }
    }

    /// Why this workload cannot run here, on one line (a missing program
    /// or a file it needs), or `None`.
    pub fn unavailable(self) -> Option<String> {
        if let Some(t) = self.tools().iter().find(|t| !crate::util::have_tool(t)) {
            return Some(format!("`{t}` is not installed"));
        }
        if self == Workload::Dbench && peers::dbench_loadfile().is_none() {
            return Some(format!(
                "dbench's load file is not installed (looked for {})",
                peers::DBENCH_LOADFILES.join(", ")
            ));
        }
        None
    }

    /// The processes of the run phase for parallelism `p`.
    pub fn roles(self, p: usize) -> Vec<(Role, usize)> {
        match self {
            // One `make -j P`: make itself spreads the jobs; so do dbench
            // (P clients), fs_mark (P directories) and fio (P jobs).
            Workload::Build
            | Workload::Dbench
            | Workload::FsMark
            | Workload::FioRandrw
            | Workload::FioSeq => vec![(Role::Worker, 0)],
            // P delivering processes and one queue manager (sv6 mailbench).
            Workload::Mailbench => {
                let mut v: Vec<_> = (0..p).map(|i| (Role::Worker, i)).collect();
                v.push((Role::Qman, p));
                v
            }
            _ => (0..p).map(|i| (Role::Worker, i)).collect(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    #[default]
    Worker,
    /// mailbench's queue manager.
    Qman,
}

/// One workload at one size and parallelism in one directory.
#[derive(Clone, Debug)]
pub struct Job {
    pub workload: Workload,
    pub size: Size,
    /// The run directory (created by setup, removed by clean).
    pub dir: PathBuf,
    /// Parallelism P.
    pub nworkers: usize,
    /// Ask for distributed directories where Hare's evaluation does
    /// ([`Workload::distributes_directories`]); off for a system measured
    /// exactly as a user gets it (`atoll`).
    pub distribute: bool,
    /// Host-side inputs (tarball, zip archive) for extract and punzip.
    pub inputs: Inputs,
}

/// What one worker process reports on stdout (one JSON line).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerReport {
    pub role: Role,
    pub index: usize,
    /// File-system operations issued (see the module comment).
    pub ops: u64,
    /// The worker's own view of its running time.
    pub elapsed_ns: u64,
    /// Workload-specific counts (entries seen, failed attempts, ...).
    #[serde(default)]
    pub detail: BTreeMap<String, u64>,
    /// A peer benchmark's own metric for this process, in the unit of
    /// [`Workload::native_metric`] (summed over the processes of a run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<f64>,
}

impl WorkerReport {
    pub fn new(role: Role, index: usize) -> WorkerReport {
        WorkerReport {
            role,
            index,
            ..WorkerReport::default()
        }
    }

    pub fn bump(&mut self, key: &str, n: u64) {
        *self.detail.entry(key.to_string()).or_insert(0) += n;
    }

    pub fn get(&self, key: &str) -> u64 {
        self.detail.get(key).copied().unwrap_or(0)
    }
}

/// Iterations per worker for the loop workloads at each size.
fn per_worker(w: Workload, size: Size) -> u64 {
    let t = match w {
        Workload::Creates => [20, 10_000, 30_000, 65_535],
        Workload::Writes => [5, 2_000, 10_000, 65_535],
        Workload::Renames => [20, 10_000, 30_000, 56_000],
        Workload::Directories => [20, 10_000, 40_000, 128_000],
        Workload::Mailbench => [10, 3_000, 10_000, 50_000],
        Workload::Fsstress => [300, 10_000, 30_000, 65_525],
        Workload::ExecLocal | Workload::ExecRemote => [3, 300, 1_000, 5_000],
        // 64 KiB writes: 256 KiB, 8 MiB, 64 MiB, 512 MiB.
        Workload::PipeThroughput => [4, 128, 1_024, 8_192],
        Workload::PipeLatency => [20, 5_000, 20_000, 100_000],
        // Phase-1 creates per process (as many again in phase 2).
        // Kept files: P × 2N of them must fit `atoll`'s default inode limit
        // (131 072 at 1 GiB) up to P = 8.
        Workload::HotThenSpread => [20, 1_000, 4_000, 8_000],
        _ => [0; 4],
    };
    t[size as usize]
}

impl Job {
    pub fn iterations(&self) -> u64 {
        per_worker(self.workload, self.size)
    }

    pub fn tree(&self) -> Option<TreeShape> {
        match self.workload {
            Workload::RmDense | Workload::PfindDense => Some(TreeShape::dense(self.size)),
            Workload::RmSparse | Workload::PfindSparse => Some(TreeShape::sparse(self.size)),
            _ => None,
        }
    }

    /// Prepare the run directory (untimed).
    pub fn setup(&self) -> Result<()> {
        use crate::util::At;
        std::fs::create_dir_all(&self.dir).at("mkdir", &self.dir)?;
        if self.distribute && self.workload.distributes_directories() {
            // Directories made under the run directory are distributed
            // (atoll's per-directory request, inherited below). Other file
            // systems keep the attribute or refuse it; either is harmless.
            let _ = rustix::fs::setxattr(
                &self.dir,
                DISTRIBUTED_XATTR,
                b"1",
                rustix::fs::XattrFlags::empty(),
            );
        }
        match self.workload {
            Workload::Creates | Workload::Writes | Workload::Renames | Workload::Directories => {
                micro::setup(self)
            }
            Workload::RmDense
            | Workload::RmSparse
            | Workload::PfindDense
            | Workload::PfindSparse => tree::setup(self),
            Workload::Extract | Workload::Punzip | Workload::Build => apps::setup(self),
            Workload::Mailbench => mail::setup(self),
            Workload::Fsstress => fsstress::setup(self),
            Workload::Dbench
            | Workload::FsMark
            | Workload::FioRandrw
            | Workload::FioSeq
            | Workload::Postmark
            | Workload::ExtractDebian => peers::setup(self),
            Workload::HotThenSpread => spread::setup(self),
            Workload::ExecLocal
            | Workload::ExecRemote
            | Workload::PipeThroughput
            | Workload::PipeLatency => Ok(()),
        }
    }

    /// The timed part of one process.
    pub fn run(&self, role: Role, index: usize) -> Result<WorkerReport> {
        let t0 = std::time::Instant::now();
        let mut r = match (self.workload, role) {
            (Workload::Mailbench, Role::Qman) => mail::qman(self, index)?,
            (_, Role::Qman) => {
                return Err(BenchError::Invalid(format!(
                    "{} has no queue manager",
                    self.workload.name()
                )))
            }
            (Workload::Creates, _) => micro::creates(self, index)?,
            (Workload::Writes, _) => micro::writes(self, index)?,
            (Workload::Renames, _) => micro::renames(self, index)?,
            (Workload::Directories, _) => micro::directories(self, index)?,
            (Workload::RmDense | Workload::RmSparse, _) => tree::rm(self, index)?,
            (Workload::PfindDense | Workload::PfindSparse, _) => tree::pfind(self, index)?,
            (Workload::Extract, _) => apps::extract(self, index)?,
            (Workload::Punzip, _) => apps::punzip(self, index)?,
            (Workload::Build, _) => apps::build(self)?,
            (Workload::Mailbench, _) => mail::deliver(self, index)?,
            (Workload::Fsstress, _) => fsstress::run(self, index)?,
            (Workload::HotThenSpread, _) => spread::run(self, index)?,
            (Workload::ExecLocal | Workload::ExecRemote, _) => procs::exec(self, index)?,
            (Workload::PipeThroughput, _) => procs::pipe_throughput(self, index)?,
            (Workload::PipeLatency, _) => procs::pipe_latency(self, index)?,
            (
                Workload::Dbench
                | Workload::FsMark
                | Workload::FioRandrw
                | Workload::FioSeq
                | Workload::Postmark
                | Workload::ExtractDebian,
                _,
            ) => peers::run(self, index)?,
        };
        r.elapsed_ns = t0.elapsed().as_nanos() as u64;
        Ok(r)
    }

    /// Verify the file system holds the expected result (untimed).
    pub fn check(&self) -> Result<()> {
        match self.workload {
            Workload::Creates | Workload::Writes | Workload::Renames | Workload::Directories => {
                micro::check(self)
            }
            Workload::RmDense
            | Workload::RmSparse
            | Workload::PfindDense
            | Workload::PfindSparse => tree::check(self),
            Workload::Extract | Workload::Punzip | Workload::Build => apps::check(self),
            Workload::Mailbench => mail::check(self),
            Workload::Fsstress => fsstress::check(self),
            Workload::Dbench
            | Workload::FsMark
            | Workload::FioRandrw
            | Workload::FioSeq
            | Workload::Postmark
            | Workload::ExtractDebian => peers::check(self),
            Workload::HotThenSpread => spread::check(self),
            // Checked as they run (exit status, bytes, echoes).
            Workload::ExecLocal
            | Workload::ExecRemote
            | Workload::PipeThroughput
            | Workload::PipeLatency => Ok(()),
        }
    }

    /// Cross-check what the workers reported.
    pub fn check_reports(&self, reports: &[WorkerReport]) -> Result<()> {
        let expected = self.roles().len();
        if reports.len() != expected {
            return Err(BenchError::Check(format!(
                "{} reports for {} processes",
                reports.len(),
                expected
            )));
        }
        match self.workload {
            Workload::RmDense
            | Workload::RmSparse
            | Workload::PfindDense
            | Workload::PfindSparse => tree::check_reports(self, reports),
            Workload::Mailbench => mail::check_reports(self, reports),
            Workload::ExecLocal
            | Workload::ExecRemote
            | Workload::PipeThroughput
            | Workload::PipeLatency => procs::check_reports(self, reports),
            _ => Ok(()),
        }
    }

    pub fn roles(&self) -> Vec<(Role, usize)> {
        self.workload.roles(self.nworkers)
    }

    /// Remove the run directory.
    pub fn clean(&self) -> Result<()> {
        use crate::util::At;
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if crate::util::is_not_found(&e) => Ok(()),
            r => r.at("rm -r", &self.dir),
        }
    }
}

pub(crate) fn sub(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// Run one workload end to end in-process (threads stand in for the
    /// worker processes) on a fresh temp dir at tiny size.
    pub fn run_tiny(w: Workload, p: usize) -> (tempfile::TempDir, Job, Vec<WorkerReport>) {
        let t = tempfile::tempdir().unwrap();
        let inputs = prepare_inputs(&t.path().join("aux"), Size::Tiny, None, &[w]).unwrap();
        let job = Job {
            workload: w,
            size: Size::Tiny,
            dir: t.path().join("run"),
            nworkers: p,
            distribute: true,
            inputs,
        };
        job.setup().unwrap();
        let reports: Vec<WorkerReport> = std::thread::scope(|s| {
            let hs: Vec<_> = job
                .roles()
                .into_iter()
                .map(|(role, i)| {
                    let job = &job;
                    s.spawn(move || job.run(role, i))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        job.check_reports(&reports).unwrap();
        job.check().unwrap();
        (t, job, reports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Setup asks for distributed directories exactly for the workloads
    /// Hare §5.4.1 runs distributed, through the attribute atoll reads.
    #[test]
    fn setup_requests_distribution_for_hares_distributed_workloads() {
        let t = tempfile::tempdir().unwrap();
        let probe = t.path().join("probe");
        std::fs::create_dir(&probe).unwrap();
        if rustix::fs::setxattr(&probe, "user.probe", b"1", rustix::fs::XattrFlags::empty())
            .is_err()
        {
            eprintln!("skipped: the test directory's file system has no user xattrs");
            return;
        }
        let mut distributed = Vec::new();
        for w in Workload::ALL {
            let inputs = prepare_inputs(&t.path().join("aux"), Size::Tiny, None, &[w]).unwrap();
            let job = Job {
                workload: w,
                size: Size::Tiny,
                dir: t.path().join(w.name()),
                nworkers: 1,
                distribute: true,
                inputs,
            };
            job.setup().unwrap();
            let mut v = [0u8; 8];
            if rustix::fs::getxattr(&job.dir, DISTRIBUTED_XATTR, &mut v).is_ok() {
                distributed.push(w.name());
            }
            job.clean().unwrap();
        }
        assert_eq!(
            distributed,
            ["creates", "renames", "pfind-dense", "mailbench", "build"]
        );
    }

    #[test]
    fn workload_names_round_trip_and_match_clap() {
        use clap::ValueEnum;
        for w in Workload::every() {
            assert_eq!(Workload::from_name(w.name()), Some(w));
            assert_eq!(w.to_possible_value().unwrap().get_name(), w.name());
        }
    }

    #[test]
    fn mailbench_has_a_queue_manager_besides_p_workers() {
        let r = Workload::Mailbench.roles(3);
        assert_eq!(r.len(), 4);
        assert_eq!(r[3], (Role::Qman, 3));
        assert_eq!(Workload::Build.roles(8).len(), 1);
    }

    #[test]
    fn clean_removes_the_run_dir() {
        let (_t, job, _) = testutil::run_tiny(Workload::Creates, 1);
        job.clean().unwrap();
        assert!(!job.dir.exists());
        job.clean().unwrap();
    }
}
