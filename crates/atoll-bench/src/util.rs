//! Small helpers shared by the workloads: the typed error, a seeded PRNG,
//! and directory walking that counts entries.

use std::io;
use std::path::{Path, PathBuf};

/// Everything a workload, its setup or its check can fail with.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file system produced a wrong result (the check failed).
    #[error("check failed: {0}")]
    Check(String),
    /// A program the workload needs (tar, unzip, make, cc) is missing.
    #[error("missing tool: {0}")]
    MissingTool(String),
    /// A helper program ran but failed.
    #[error("{0}")]
    Tool(String),
    /// The workload was asked for something it cannot do.
    #[error("invalid request: {0}")]
    Invalid(String),
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Attach the operation and path to an `io::Result`.
pub trait At<T> {
    fn at(self, op: &'static str, path: &Path) -> Result<T>;
}

impl<T> At<T> for io::Result<T> {
    fn at(self, op: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| BenchError::Io {
            op,
            path: path.to_path_buf(),
            source,
        })
    }
}

pub fn is_not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

pub fn is_not_empty(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTEMPTY) || e.raw_os_error() == Some(libc::EEXIST)
}

/// SplitMix64: deterministic per worker, so a run can be repeated exactly.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// Entries below `root` (not counting `root`), without following symlinks.
pub fn count_entries(root: &Path) -> Result<u64> {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).at("readdir", &dir)? {
            let e = e.at("readdir", &dir)?;
            n += 1;
            if e.file_type().at("stat", &e.path())?.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(n)
}

/// Names in one directory, sorted.
pub fn list_names(dir: &Path) -> Result<Vec<String>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).at("readdir", dir)? {
        let e = e.at("readdir", dir)?;
        v.push(e.file_name().to_string_lossy().into_owned());
    }
    v.sort();
    Ok(v)
}

/// Is `prog` runnable from `PATH`?
pub fn have_tool(prog: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|d| {
        let p = d.join(prog);
        std::fs::metadata(&p)
            .map(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
            .unwrap_or(false)
    })
}

/// Run a helper program; a non-zero exit becomes [`BenchError::Tool`].
pub fn run_tool(cmd: &mut std::process::Command) -> Result<std::process::Output> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| {
        if is_not_found(&e) {
            BenchError::MissingTool(prog.clone())
        } else {
            BenchError::Tool(format!("{prog}: {e}"))
        }
    })?;
    if !out.status.success() {
        return Err(BenchError::Tool(format!(
            "{prog} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_shuffle_is_a_permutation() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut v: Vec<u32> = (0..100).collect();
        a.shuffle(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        v.sort();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn count_entries_counts_files_and_dirs_below_root() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/f"), b"x").unwrap();
        std::fs::write(t.path().join("g"), b"x").unwrap();
        assert_eq!(count_entries(t.path()).unwrap(), 4);
    }
}
