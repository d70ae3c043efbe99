//! `hot-then-spread`: a workload whose best directory mode changes while it
//! runs (Hare §6.1.2, "Dynamic Directory Distribution"), to compare
//! adaptive directories with either fixed mode.
//!
//! Phase 1 (hot): all P processes create files in ONE shared directory,
//! `shared/` — the case distribution is for (Hare §5.4.1, *creates*).
//! Phase 2 (spread): each process makes its own directories under
//! `spread/pI/`, creates [`FILES_PER_DIR`] files in each and lists it — the
//! case distribution only costs (Hare §5.4.1: small directories, readdir,
//! like *pfind-sparse* and *build*), since every listing then asks every
//! server. Always-centralized loses phase 1, always-distributed phase 2; a
//! policy that spreads `shared/` once it is hot and leaves the small
//! directories centralized should win both.
//!
//! Files are kept (phase 1 grows `shared/` to P × N entries, which is what
//! makes it big as well as busy), so `check` can verify every name.

use std::fs::{self, File};

use super::{sub, Job, Role, WorkerReport};
use crate::util::{list_names, At, BenchError, Result};

/// Files per directory in phase 2 (a small directory, as in a source tree).
pub const FILES_PER_DIR: u64 = 16;

/// Phase-2 directories per process for `n` phase-1 creates: as many files
/// in the spread phase as in the hot one.
fn spread_dirs(n: u64) -> u64 {
    (n / FILES_PER_DIR).max(1)
}

pub fn setup(job: &Job) -> Result<()> {
    for d in ["shared", "spread"] {
        let d = sub(&job.dir, d);
        fs::create_dir(&d).at("mkdir", &d)?;
    }
    Ok(())
}

/// Phase 1, then phase 2, in one timed run.
pub fn run(job: &Job, idx: usize) -> Result<WorkerReport> {
    let t0 = std::time::Instant::now();
    let mut r = WorkerReport::new(Role::Worker, idx);
    let n = job.iterations();
    let shared = sub(&job.dir, "shared");
    for k in 0..n {
        let p = shared.join(format!("h{idx}.{k}"));
        drop(File::create(&p).at("create", &p)?);
        r.ops += 2;
    }
    // Each phase's time (µs, summed over the processes in the report's
    // `detail`), to see which phase a directory mode wins or loses.
    let hot = t0.elapsed();
    r.bump("hot_phase_us", hot.as_micros() as u64);
    let mine = sub(&job.dir, "spread").join(format!("p{idx}"));
    fs::create_dir(&mine).at("mkdir", &mine)?;
    r.ops += 1;
    for j in 0..spread_dirs(n) {
        let d = mine.join(format!("d{j}"));
        fs::create_dir(&d).at("mkdir", &d)?;
        for k in 0..FILES_PER_DIR {
            let p = d.join(format!("f{k}"));
            drop(File::create(&p).at("create", &p)?);
        }
        let listed = fs::read_dir(&d).at("readdir", &d)?.count() as u64;
        if listed != FILES_PER_DIR {
            return Err(BenchError::Check(format!(
                "{} lists {listed} entries, not {FILES_PER_DIR}",
                d.display()
            )));
        }
        r.ops += 2 + 2 * FILES_PER_DIR;
    }
    r.bump("spread_phase_us", (t0.elapsed() - hot).as_micros() as u64);
    Ok(r)
}

pub fn check(job: &Job) -> Result<()> {
    let n = job.iterations();
    let shared = list_names(&sub(&job.dir, "shared"))?;
    let mut want: Vec<String> = (0..job.nworkers)
        .flat_map(|i| (0..n).map(move |k| format!("h{i}.{k}")))
        .collect();
    want.sort();
    if shared != want {
        return Err(BenchError::Check(format!(
            "shared/ holds {} names, expected {}",
            shared.len(),
            want.len()
        )));
    }
    let mut files: Vec<String> = (0..FILES_PER_DIR).map(|k| format!("f{k}")).collect();
    files.sort();
    for i in 0..job.nworkers {
        let mine = sub(&job.dir, "spread").join(format!("p{i}"));
        let dirs = list_names(&mine)?;
        if dirs.len() as u64 != spread_dirs(n) {
            return Err(BenchError::Check(format!(
                "{} holds {} directories, expected {}",
                mine.display(),
                dirs.len(),
                spread_dirs(n)
            )));
        }
        for d in dirs {
            if list_names(&mine.join(&d))? != files {
                return Err(BenchError::Check(format!(
                    "{}/{d}: wrong files",
                    mine.display()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{testutil, Workload};

    #[test]
    fn hot_then_spread_runs_and_checks() {
        let (_t, job, reports) = testutil::run_tiny(Workload::HotThenSpread, 3);
        let n = job.iterations();
        let per = 2 * n + 1 + super::spread_dirs(n) * (2 + 2 * super::FILES_PER_DIR);
        assert!(reports.iter().all(|r| r.ops == per), "{reports:?}");
    }
}
