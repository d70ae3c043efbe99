//! Directory trees for *rm* and *pfind* (Hare Table 5.1).
//!
//! Shape: `tree/` holds `top` directories; every directory at depth
//! `d < levels` has `fanout` subdirectories, and every directory holds
//! `files` empty files. Dense (Hare): 2 top-level directories, 3 sub-levels
//! of 10 directories, many files per directory; sparse: 1 top-level
//! directory, 14 sub-levels of 2 directories, no files.
//!
//! *rm* is a parallel `rm -r`: every worker walks the whole tree in its own
//! random order and removes what is still there; ENOENT and ENOTEMPTY mean
//! another worker got there first or is still inside. Whoever removes the
//! last child of a directory is still in that directory's loop and removes
//! it afterwards, so the tree always disappears completely, and the
//! successful removals of all workers add up to exactly the tree's entries.
//!
//! *pfind* walks the tree breadth first, shuffling each level so the
//! workers do not herd onto the same server (Hare §5.3.1).

use std::fs;
use std::path::{Path, PathBuf};

use super::{sub, Job, Role, Size, WorkerReport};
use crate::util::{is_not_empty, is_not_found, At, BenchError, Result, Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    pub top: u64,
    pub levels: u32,
    pub fanout: u64,
    pub files: u64,
}

impl TreeShape {
    pub fn dense(size: Size) -> TreeShape {
        let (levels, fanout, files) = match size {
            Size::Tiny => (2, 2, 3),
            Size::Quick => (2, 5, 100),
            Size::Default => (3, 5, 100),
            Size::Full => (3, 10, 200),
        };
        TreeShape {
            top: 2,
            levels,
            fanout,
            files,
        }
    }

    pub fn sparse(size: Size) -> TreeShape {
        let levels = match size {
            Size::Tiny => 3,
            Size::Quick => 12,
            Size::Default => 13,
            Size::Full => 14,
        };
        TreeShape {
            top: 1,
            levels,
            fanout: 2,
            files: 0,
        }
    }

    /// Directories below the root.
    pub fn dirs(&self) -> u64 {
        let per_top: u64 = (0..=self.levels).map(|d| self.fanout.pow(d)).sum();
        self.top * per_top
    }

    /// All entries below the root (directories + files).
    pub fn entries(&self) -> u64 {
        self.dirs() * (1 + self.files)
    }

    /// Build the tree under `root` (which must not exist).
    pub fn build(&self, root: &Path) -> Result<()> {
        fs::create_dir(root).at("mkdir", root)?;
        for t in 0..self.top {
            self.build_dir(&root.join(format!("d{t}")), 0)?;
        }
        Ok(())
    }

    fn build_dir(&self, dir: &Path, depth: u32) -> Result<()> {
        fs::create_dir(dir).at("mkdir", dir)?;
        for f in 0..self.files {
            let p = dir.join(format!("f{f}"));
            fs::File::create(&p).at("create", &p)?;
        }
        if depth < self.levels {
            for s in 0..self.fanout {
                self.build_dir(&dir.join(format!("d{s}")), depth + 1)?;
            }
        }
        Ok(())
    }
}

fn root(job: &Job) -> PathBuf {
    sub(&job.dir, "tree")
}

fn shape(job: &Job) -> TreeShape {
    job.tree().expect("tree workload")
}

pub fn setup(job: &Job) -> Result<()> {
    shape(job).build(&root(job))
}

fn seed(job: &Job, idx: usize) -> u64 {
    (job.workload as u64) << 32 | idx as u64
}

/// Parallel removal; `ops` counts successful unlink/rmdir calls, `detail`
/// the extra calls (`readdir`, `lost_races`).
pub fn rm(job: &Job, idx: usize) -> Result<WorkerReport> {
    let mut r = WorkerReport::new(Role::Worker, idx);
    let mut rng = Rng::new(seed(job, idx));
    rm_tree(&root(job), &mut rng, &mut r)?;
    Ok(r)
}

fn rm_tree(dir: &Path, rng: &mut Rng, r: &mut WorkerReport) -> Result<()> {
    let mut entries: Vec<(PathBuf, bool)> = Vec::new();
    match fs::read_dir(dir) {
        Ok(rd) => {
            r.bump("readdir", 1);
            for e in rd {
                match e {
                    Ok(e) => {
                        let is_dir = match e.file_type() {
                            Ok(t) => t.is_dir(),
                            Err(err) if is_not_found(&err) => continue,
                            Err(err) => return Err(err).at("stat", &e.path()),
                        };
                        entries.push((e.path(), is_dir));
                    }
                    Err(err) if is_not_found(&err) => break,
                    Err(err) => return Err(err).at("readdir", dir),
                }
            }
        }
        Err(e) if is_not_found(&e) => {
            r.bump("lost_races", 1);
            return Ok(());
        }
        Err(e) => return Err(e).at("readdir", dir),
    }
    rng.shuffle(&mut entries);
    for (p, is_dir) in entries {
        if is_dir {
            rm_tree(&p, rng, r)?;
        } else {
            match fs::remove_file(&p) {
                Ok(()) => r.ops += 1,
                Err(e) if is_not_found(&e) => r.bump("lost_races", 1),
                Err(e) => return Err(e).at("unlink", &p),
            }
        }
    }
    match fs::remove_dir(dir) {
        Ok(()) => r.ops += 1,
        Err(e) if is_not_found(&e) || is_not_empty(&e) => r.bump("lost_races", 1),
        Err(e) => return Err(e).at("rmdir", dir),
    }
    Ok(())
}

/// Randomized breadth-first walk; `ops` = directories read + entries
/// returned; `detail.entries` = entries found (must equal the tree's).
pub fn pfind(job: &Job, idx: usize) -> Result<WorkerReport> {
    let mut r = WorkerReport::new(Role::Worker, idx);
    let mut rng = Rng::new(seed(job, idx));
    let mut level = vec![root(job)];
    let mut entries = 0u64;
    while !level.is_empty() {
        rng.shuffle(&mut level);
        let mut next = Vec::new();
        for dir in &level {
            r.ops += 1;
            for e in fs::read_dir(dir).at("readdir", dir)? {
                let e = e.at("readdir", dir)?;
                entries += 1;
                r.ops += 1;
                if e.file_type().at("stat", &e.path())?.is_dir() {
                    next.push(e.path());
                }
            }
        }
        level = next;
    }
    r.bump("entries", entries);
    Ok(r)
}

pub fn check(job: &Job) -> Result<()> {
    let root = root(job);
    match job.workload {
        super::Workload::RmDense | super::Workload::RmSparse => match fs::symlink_metadata(&root) {
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e).at("stat", &root),
            Ok(_) => Err(BenchError::Check(format!(
                "{} still exists after rm ({} entries left)",
                root.display(),
                crate::util::count_entries(&root).unwrap_or(0)
            ))),
        },
        _ => {
            let n = crate::util::count_entries(&root)?;
            let want = shape(job).entries();
            if n != want {
                return Err(BenchError::Check(format!(
                    "tree has {n} entries after pfind, expected {want}"
                )));
            }
            Ok(())
        }
    }
}

pub fn check_reports(job: &Job, reports: &[WorkerReport]) -> Result<()> {
    let want = shape(job).entries();
    match job.workload {
        super::Workload::RmDense | super::Workload::RmSparse => {
            let removed: u64 = reports.iter().map(|r| r.ops).sum();
            // + 1: the root directory itself.
            if removed != want + 1 {
                return Err(BenchError::Check(format!(
                    "workers removed {removed} entries, the tree had {}",
                    want + 1
                )));
            }
        }
        _ => {
            for r in reports {
                if r.get("entries") != want {
                    return Err(BenchError::Check(format!(
                        "pfind worker {} found {} entries, expected {want}",
                        r.index,
                        r.get("entries")
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run_tiny;
    use super::super::Workload;
    use super::*;

    #[test]
    fn shapes_match_hare_at_full_size() {
        // 1 top + 14 sub-levels of 2: 2^15 - 1 directories.
        assert_eq!(TreeShape::sparse(Size::Full).dirs(), 32_767);
        let d = TreeShape::dense(Size::Full);
        assert_eq!(d.dirs(), 2 * (1 + 10 + 100 + 1000));
        assert_eq!(d.entries(), d.dirs() * 201);
    }

    #[test]
    fn built_tree_has_the_computed_number_of_entries() {
        let t = tempfile::tempdir().unwrap();
        let s = TreeShape::dense(Size::Tiny);
        s.build(&t.path().join("tree")).unwrap();
        assert_eq!(
            crate::util::count_entries(&t.path().join("tree")).unwrap(),
            s.entries()
        );
    }

    #[test]
    fn rm_dense_removes_the_whole_tree_with_parallel_workers() {
        let (_t, job, reports) = run_tiny(Workload::RmDense, 3);
        assert!(!job.dir.join("tree").exists());
        let total: u64 = reports.iter().map(|r| r.ops).sum();
        assert_eq!(total, TreeShape::dense(Size::Tiny).entries() + 1);
    }

    #[test]
    fn rm_sparse_removes_the_whole_tree() {
        let (_t, job, _) = run_tiny(Workload::RmSparse, 1);
        assert!(!job.dir.join("tree").exists());
    }

    #[test]
    fn pfind_counts_every_entry_in_each_worker() {
        for w in [Workload::PfindDense, Workload::PfindSparse] {
            let (_t, job, reports) = run_tiny(w, 2);
            let want = job.tree().unwrap().entries();
            for r in reports {
                assert_eq!(r.get("entries"), want);
                assert_eq!(r.ops, want + job.tree().unwrap().dirs() + 1);
            }
        }
    }
}
