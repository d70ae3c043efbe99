//! Microbenchmarks of Hare Table 5.1: creates, writes, renames,
//! directories. All P processes work in ONE shared directory (`shared/`),
//! which is what stresses directory distribution (Hare §5.4.1).

use std::fs::{self, File};
use std::io::{Read, Write};

use super::{sub, Job, Role, WorkerReport, Workload};
use crate::util::{list_names, At, BenchError, Result};

/// Bytes per write: one buffer-cache block (Hare Table 5.1, *writes*).
pub const WRITE_SIZE: usize = 4096;
/// Writes per file.
pub const WRITES_PER_FILE: u64 = 10;

pub fn setup(job: &Job) -> Result<()> {
    let d = sub(&job.dir, "shared");
    fs::create_dir(&d).at("mkdir", &d)
}

/// open(O_CREAT) + close + unlink per iteration.
pub fn creates(job: &Job, idx: usize) -> Result<WorkerReport> {
    let d = sub(&job.dir, "shared");
    let mut r = WorkerReport::new(Role::Worker, idx);
    for k in 0..job.iterations() {
        let p = d.join(format!("c{idx}.{k}"));
        let f = File::create(&p).at("create", &p)?;
        drop(f);
        fs::remove_file(&p).at("unlink", &p)?;
        r.ops += 3;
    }
    Ok(r)
}

fn block_for(idx: usize, k: u64) -> [u8; WRITE_SIZE] {
    [(idx as u64 * 31 + k) as u8; WRITE_SIZE]
}

/// create + 10 × 4 KiB writes + close + unlink; the last file of each worker
/// is kept for the check.
pub fn writes(job: &Job, idx: usize) -> Result<WorkerReport> {
    let d = sub(&job.dir, "shared");
    let mut r = WorkerReport::new(Role::Worker, idx);
    let n = job.iterations();
    for k in 0..n {
        let p = d.join(format!("w{idx}.{k}"));
        let buf = block_for(idx, k);
        let mut f = File::create(&p).at("create", &p)?;
        for _ in 0..WRITES_PER_FILE {
            f.write_all(&buf).at("write", &p)?;
        }
        drop(f);
        r.ops += 2 + WRITES_PER_FILE;
        if k + 1 < n {
            fs::remove_file(&p).at("unlink", &p)?;
            r.ops += 1;
        }
    }
    Ok(r)
}

/// create once, then rename `r{idx}.{k-1}` → `r{idx}.{k}` in the same
/// directory for every iteration (Hare Table 5.1, *renames*).
pub fn renames(job: &Job, idx: usize) -> Result<WorkerReport> {
    let d = sub(&job.dir, "shared");
    let mut r = WorkerReport::new(Role::Worker, idx);
    let first = d.join(format!("r{idx}.0"));
    let mut f = File::create(&first).at("create", &first)?;
    f.write_all(format!("{idx}").as_bytes())
        .at("write", &first)?;
    drop(f);
    r.ops += 3;
    for k in 1..=job.iterations() {
        let from = d.join(format!("r{idx}.{}", k - 1));
        let to = d.join(format!("r{idx}.{k}"));
        fs::rename(&from, &to).at("rename", &from)?;
        r.ops += 1;
    }
    Ok(r)
}

/// mkdir + rmdir of a unique directory per iteration.
pub fn directories(job: &Job, idx: usize) -> Result<WorkerReport> {
    let d = sub(&job.dir, "shared");
    let mut r = WorkerReport::new(Role::Worker, idx);
    for k in 0..job.iterations() {
        let p = d.join(format!("d{idx}.{k}"));
        fs::create_dir(&p).at("mkdir", &p)?;
        fs::remove_dir(&p).at("rmdir", &p)?;
        r.ops += 2;
    }
    Ok(r)
}

pub fn check(job: &Job) -> Result<()> {
    let d = sub(&job.dir, "shared");
    let names = list_names(&d)?;
    let n = job.iterations();
    let mut expected: Vec<String> = match job.workload {
        Workload::Creates | Workload::Directories => vec![],
        Workload::Writes => (0..job.nworkers)
            .map(|i| format!("w{i}.{}", n - 1))
            .collect(),
        Workload::Renames => (0..job.nworkers).map(|i| format!("r{i}.{n}")).collect(),
        _ => unreachable!("micro::check called for another workload"),
    };
    expected.sort();
    if names != expected {
        return Err(BenchError::Check(format!(
            "{}: shared/ holds {:?}, expected {:?}",
            job.workload.name(),
            trunc(&names),
            trunc(&expected)
        )));
    }
    for (i, name) in expected.iter().enumerate() {
        let p = d.join(name);
        let mut data = Vec::new();
        File::open(&p)
            .and_then(|mut f| f.read_to_end(&mut data))
            .at("read", &p)?;
        let want: Vec<u8> = match job.workload {
            Workload::Writes => {
                let b = block_for(i, n - 1);
                b.repeat(WRITES_PER_FILE as usize)
            }
            _ => format!("{i}").into_bytes(),
        };
        if data != want {
            return Err(BenchError::Check(format!(
                "{}: {} has {} bytes of wrong content (want {})",
                job.workload.name(),
                p.display(),
                data.len(),
                want.len()
            )));
        }
    }
    Ok(())
}

fn trunc(v: &[String]) -> Vec<&String> {
    v.iter().take(8).collect()
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run_tiny;
    use super::super::Workload;

    #[test]
    fn creates_leaves_shared_dir_empty_and_counts_three_ops_per_file() {
        let (_t, job, reports) = run_tiny(Workload::Creates, 2);
        assert_eq!(reports.len(), 2);
        for r in &reports {
            assert_eq!(r.ops, 3 * job.iterations());
        }
    }

    #[test]
    fn writes_keep_last_file_with_ten_blocks() {
        let (_t, job, reports) = run_tiny(Workload::Writes, 2);
        let n = job.iterations();
        assert_eq!(reports[0].ops, n * 12 + (n - 1));
        let md = std::fs::metadata(job.dir.join(format!("shared/w1.{}", n - 1))).unwrap();
        assert_eq!(md.len(), 40960);
    }

    #[test]
    fn renames_end_with_one_file_per_worker_holding_its_content() {
        let (_t, job, reports) = run_tiny(Workload::Renames, 3);
        assert_eq!(reports[2].ops, 3 + job.iterations());
        assert_eq!(
            std::fs::read_dir(job.dir.join("shared")).unwrap().count(),
            3
        );
    }

    #[test]
    fn directories_leave_nothing_behind() {
        let (_t, job, reports) = run_tiny(Workload::Directories, 2);
        assert_eq!(reports[1].ops, 2 * job.iterations());
        assert_eq!(
            std::fs::read_dir(job.dir.join("shared")).unwrap().count(),
            0
        );
    }
}
