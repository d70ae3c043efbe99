//! *fsstress* (Hare Table 5.1): each process repeatedly picks a random
//! metadata or data operation and runs it in its own subtree `s<idx>/`.
//!
//! Unlike the original, every worker keeps a model of its subtree (names,
//! kinds, file sizes, hard links) and predicts each call's outcome; any
//! disagreement fails the run. Random choices depend only on the seed and
//! the model, so the check phase replays the same sequence without touching
//! the file system ("dry" mode) and compares the final model with the tree.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{sub, Job, Role, WorkerReport};
use crate::util::{At, BenchError, Result, Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(usize),
    Dir,
    Symlink,
}

/// Names per directory are drawn from a small space so operations keep
/// hitting existing entries (collisions are the interesting cases).
const NAMES: usize = 16;
const MAX_DEPTH: usize = 2;
const MAX_FILE: usize = 16 * 1024;

struct Stress {
    root: PathBuf,
    entries: BTreeMap<String, Node>,
    sizes: Vec<u64>,
    rng: Rng,
    exec: bool,
    r: WorkerReport,
    buf: Vec<u8>,
}

fn subtree(job: &Job, idx: usize) -> PathBuf {
    sub(&job.dir, &format!("s{idx}"))
}

pub fn setup(job: &Job) -> Result<()> {
    for i in 0..job.nworkers {
        let p = subtree(job, i);
        fs::create_dir(&p).at("mkdir", &p)?;
    }
    Ok(())
}

pub fn run(job: &Job, idx: usize) -> Result<WorkerReport> {
    let mut s = Stress::new(job, idx, true);
    for _ in 0..job.iterations() {
        s.step()?;
    }
    s.r.bump("live_entries", s.entries.len() as u64);
    Ok(s.r)
}

/// Replay every worker's sequence and compare the result with the tree.
pub fn check(job: &Job) -> Result<()> {
    for idx in 0..job.nworkers {
        let mut s = Stress::new(job, idx, false);
        for _ in 0..job.iterations() {
            s.step()?;
        }
        s.compare_tree()?;
    }
    Ok(())
}

fn errno_of(r: &io::Result<()>) -> Option<i32> {
    match r {
        Ok(()) => None,
        Err(e) => Some(e.raw_os_error().unwrap_or(-1)),
    }
}

impl Stress {
    fn new(job: &Job, idx: usize, exec: bool) -> Stress {
        Stress {
            root: subtree(job, idx),
            entries: BTreeMap::new(),
            sizes: Vec::new(),
            rng: Rng::new(0xf5f5_0000 | idx as u64),
            exec,
            r: WorkerReport::new(Role::Worker, idx),
            buf: vec![0x5a; MAX_FILE],
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn depth(rel: &str) -> usize {
        if rel.is_empty() {
            0
        } else {
            rel.matches('/').count() + 1
        }
    }

    fn children<'a>(&'a self, dir: &'a str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        self.entries
            .iter()
            .filter(move |(k, _)| match k.rsplit_once('/') {
                Some((parent, _)) => parent == dir,
                None => dir.is_empty(),
            })
    }

    /// A random directory (including the subtree root `""`). Two passes
    /// over the model instead of collecting: this runs on every operation.
    fn pick_dir(&mut self, for_create: bool) -> String {
        let ok =
            |k: &String, n: &Node| *n == Node::Dir && (!for_create || Self::depth(k) < MAX_DEPTH);
        let count = self.entries.iter().filter(|(k, n)| ok(k, n)).count();
        let i = self.rng.below(count + 1);
        if i == count {
            return String::new();
        }
        let (k, _) = self
            .entries
            .iter()
            .filter(|(k, n)| ok(k, n))
            .nth(i)
            .expect("counted");
        k.clone()
    }

    fn pick(&mut self, want: impl Fn(&Node) -> bool) -> Option<(String, Node)> {
        let count = self.entries.values().filter(|n| want(n)).count();
        if count == 0 {
            return None;
        }
        let i = self.rng.below(count);
        let (k, n) = self.entries.iter().filter(|(_, n)| want(n)).nth(i)?;
        Some((k.clone(), *n))
    }

    fn new_name(&mut self, prefix: char) -> String {
        let parent = self.pick_dir(true);
        let n = self.rng.below(NAMES);
        if parent.is_empty() {
            format!("{prefix}{n}")
        } else {
            format!("{parent}/{prefix}{n}")
        }
    }

    /// Compare the call's outcome (when executing) with the model's
    /// prediction `want` (None = success, Some(errno) = that error).
    fn expect(
        &mut self,
        op: &'static str,
        rel: &str,
        want: Option<i32>,
        got: Option<io::Result<()>>,
    ) -> Result<()> {
        self.r.ops += 1;
        self.r.bump(op, 1);
        let Some(got) = got else { return Ok(()) };
        let g = errno_of(&got);
        if g != want {
            return Err(BenchError::Check(format!(
                "fsstress {op} {}: expected {}, got {}",
                self.path(rel).display(),
                describe(want),
                describe(g)
            )));
        }
        Ok(())
    }

    fn step(&mut self) -> Result<()> {
        match self.rng.below(100) {
            0..=11 => self.create(),
            12..=23 => self.write(),
            24..=31 => self.read(),
            32..=35 => self.truncate(),
            36..=45 => self.unlink(),
            46..=52 => self.mkdir(),
            53..=58 => self.rmdir(),
            59..=68 => self.rename(),
            69..=78 => self.stat(),
            79..=84 => self.readdir(),
            85..=89 => self.link(),
            90..=92 => self.symlink(),
            93..=96 => self.chmod(),
            _ => self.fsync(),
        }
    }

    fn create(&mut self) -> Result<()> {
        let rel = self.new_name('f');
        let p = self.path(&rel);
        let exists = self.entries.contains_key(&rel);
        let got = self.exec.then(|| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
                .map(drop)
        });
        self.expect("create", &rel, exists.then_some(libc::EEXIST), got)?;
        if !exists {
            self.sizes.push(0);
            self.entries.insert(rel, Node::File(self.sizes.len() - 1));
        }
        Ok(())
    }

    fn write(&mut self) -> Result<()> {
        let Some((rel, Node::File(ino))) = self.pick(|n| matches!(n, Node::File(_))) else {
            return self.create();
        };
        let off = self.rng.below(MAX_FILE / 2) as u64;
        let len = 1 + self.rng.below(MAX_FILE / 2);
        let p = self.path(&rel);
        let buf = &self.buf[..len];
        let got = self.exec.then(|| {
            let mut f = OpenOptions::new().write(true).open(&p)?;
            f.seek(SeekFrom::Start(off))?;
            f.write_all(buf)
        });
        self.expect("write", &rel, None, got)?;
        self.sizes[ino] = self.sizes[ino].max(off + len as u64);
        Ok(())
    }

    fn read(&mut self) -> Result<()> {
        let Some((rel, Node::File(ino))) = self.pick(|n| matches!(n, Node::File(_))) else {
            return self.readdir();
        };
        let p = self.path(&rel);
        let want = self.sizes[ino];
        let got = self.exec.then(|| {
            let mut v = Vec::new();
            fs::File::open(&p)?.read_to_end(&mut v)?;
            if v.len() as u64 != want {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(())
        });
        self.expect("read", &rel, None, got)
    }

    fn truncate(&mut self) -> Result<()> {
        let Some((rel, Node::File(ino))) = self.pick(|n| matches!(n, Node::File(_))) else {
            return self.create();
        };
        let len = self.rng.below(MAX_FILE) as u64;
        let p = self.path(&rel);
        let got = self
            .exec
            .then(|| OpenOptions::new().write(true).open(&p)?.set_len(len));
        self.expect("truncate", &rel, None, got)?;
        self.sizes[ino] = len;
        Ok(())
    }

    fn unlink(&mut self) -> Result<()> {
        let Some((rel, _)) = self.pick(|n| !matches!(n, Node::Dir)) else {
            return self.create();
        };
        let p = self.path(&rel);
        let got = self.exec.then(|| fs::remove_file(&p));
        self.expect("unlink", &rel, None, got)?;
        self.entries.remove(&rel);
        Ok(())
    }

    fn mkdir(&mut self) -> Result<()> {
        let rel = self.new_name('d');
        let p = self.path(&rel);
        let exists = self.entries.contains_key(&rel);
        let got = self.exec.then(|| fs::create_dir(&p));
        self.expect("mkdir", &rel, exists.then_some(libc::EEXIST), got)?;
        if !exists {
            self.entries.insert(rel, Node::Dir);
        }
        Ok(())
    }

    fn rmdir(&mut self) -> Result<()> {
        let Some((rel, _)) = self.pick(|n| *n == Node::Dir) else {
            return self.mkdir();
        };
        let p = self.path(&rel);
        let empty = self.children(&rel).next().is_none();
        let got = self.exec.then(|| fs::remove_dir(&p));
        self.expect("rmdir", &rel, (!empty).then_some(libc::ENOTEMPTY), got)?;
        if empty {
            self.entries.remove(&rel);
        }
        Ok(())
    }

    fn rename(&mut self) -> Result<()> {
        let Some((from, node)) = self.pick(|_| true) else {
            return self.create();
        };
        let to = self.new_name(if node == Node::Dir { 'd' } else { 'f' });
        let dst = self.entries.get(&to).copied();
        if node == Node::Dir {
            // Only into a free name outside the directory itself: the
            // replace-a-directory cases differ too much between systems.
            if dst.is_some() || to == from || to.starts_with(&format!("{from}/")) {
                return self.stat();
            }
        } else if dst == Some(Node::Dir) {
            let (p, q) = (self.path(&from), self.path(&to));
            let got = self.exec.then(|| fs::rename(&p, &q));
            // rename(2): a non-directory over a directory is EISDIR.
            return self.expect("rename", &from, Some(libc::EISDIR), got);
        }
        let (p, q) = (self.path(&from), self.path(&to));
        let got = self.exec.then(|| fs::rename(&p, &q));
        self.expect("rename", &from, None, got)?;
        if from == to {
            return Ok(());
        }
        // Same inode under two names: POSIX rename does nothing.
        if let (Node::File(a), Some(Node::File(b))) = (node, dst) {
            if a == b {
                return Ok(());
            }
        }
        let moved: Vec<(String, Node)> = self
            .entries
            .range(from.clone()..)
            .take_while(|(k, _)| **k == from || k.starts_with(&format!("{from}/")))
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        for (k, _) in &moved {
            self.entries.remove(k);
        }
        self.entries.remove(&to);
        for (k, n) in moved {
            let nk = format!("{to}{}", &k[from.len()..]);
            self.entries.insert(nk, n);
        }
        Ok(())
    }

    fn stat(&mut self) -> Result<()> {
        let Some((rel, node)) = self.pick(|_| true) else {
            return self.create();
        };
        let p = self.path(&rel);
        let want_size = match node {
            Node::File(i) => Some(self.sizes[i]),
            _ => None,
        };
        let got = self.exec.then(|| {
            let md = fs::symlink_metadata(&p)?;
            let ok = match node {
                Node::Dir => md.is_dir(),
                Node::Symlink => md.file_type().is_symlink(),
                Node::File(_) => md.is_file() && Some(md.len()) == want_size,
            };
            if ok {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
        });
        self.expect("stat", &rel, None, got)
    }

    fn readdir(&mut self) -> Result<()> {
        let dir = self.pick_dir(false);
        let p = self.path(&dir);
        let mut want: Vec<String> = self
            .children(&dir)
            .map(|(k, _)| k.rsplit('/').next().unwrap_or(k).to_string())
            .collect();
        want.sort();
        let got = self.exec.then(|| match crate::util::list_names(&p) {
            Ok(names) if names == want => Ok(()),
            Ok(_) => Err(io::Error::from_raw_os_error(libc::EIO)),
            Err(BenchError::Io { source, .. }) => Err(source),
            Err(_) => Err(io::Error::from_raw_os_error(libc::EIO)),
        });
        self.expect("readdir", &dir, None, got)
    }

    fn link(&mut self) -> Result<()> {
        let Some((from, Node::File(ino))) = self.pick(|n| matches!(n, Node::File(_))) else {
            return self.create();
        };
        let to = self.new_name('f');
        let exists = self.entries.contains_key(&to);
        let (p, q) = (self.path(&from), self.path(&to));
        let got = self.exec.then(|| fs::hard_link(&p, &q));
        self.expect("link", &to, exists.then_some(libc::EEXIST), got)?;
        if !exists {
            self.entries.insert(to, Node::File(ino));
        }
        Ok(())
    }

    fn symlink(&mut self) -> Result<()> {
        let rel = self.new_name('l');
        let exists = self.entries.contains_key(&rel);
        let p = self.path(&rel);
        let got = self
            .exec
            .then(|| std::os::unix::fs::symlink("target-that-need-not-exist", &p));
        self.expect("symlink", &rel, exists.then_some(libc::EEXIST), got)?;
        if !exists {
            self.entries.insert(rel, Node::Symlink);
        }
        Ok(())
    }

    fn chmod(&mut self) -> Result<()> {
        let Some((rel, _)) = self.pick(|n| matches!(n, Node::File(_))) else {
            return self.create();
        };
        let mode = if self.rng.below(2) == 0 { 0o644 } else { 0o600 };
        let p = self.path(&rel);
        let got = self
            .exec
            .then(|| fs::set_permissions(&p, fs::Permissions::from_mode(mode)));
        self.expect("chmod", &rel, None, got)
    }

    fn fsync(&mut self) -> Result<()> {
        let Some((rel, _)) = self.pick(|n| matches!(n, Node::File(_))) else {
            return self.create();
        };
        let p = self.path(&rel);
        let got = self
            .exec
            .then(|| OpenOptions::new().write(true).open(&p)?.sync_all());
        self.expect("fsync", &rel, None, got)
    }

    /// The tree on disk must be exactly the model.
    fn compare_tree(&self) -> Result<()> {
        let mut found = BTreeMap::new();
        walk(&self.root, "", &mut found)?;
        for (k, n) in &self.entries {
            let ok = match (n, found.get(k)) {
                (Node::Dir, Some(Found::Dir)) => true,
                (Node::Symlink, Some(Found::Symlink)) => true,
                (Node::File(i), Some(Found::File(len))) => *len == self.sizes[*i],
                _ => false,
            };
            if !ok {
                return Err(BenchError::Check(format!(
                    "fsstress: {} is {:?} on disk, model says {:?}",
                    self.path(k).display(),
                    found.get(k),
                    n
                )));
            }
        }
        if found.len() != self.entries.len() {
            let extra: Vec<_> = found
                .keys()
                .filter(|k| !self.entries.contains_key(*k))
                .take(5)
                .collect();
            return Err(BenchError::Check(format!(
                "fsstress: unexpected entries in {}: {extra:?}",
                self.root.display()
            )));
        }
        Ok(())
    }
}

#[derive(Debug)]
enum Found {
    File(u64),
    Dir,
    Symlink,
}

fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Found>) -> Result<()> {
    for e in fs::read_dir(dir).at("readdir", dir)? {
        let e = e.at("readdir", dir)?;
        let name = e.file_name().to_string_lossy().into_owned();
        let k = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let md = fs::symlink_metadata(e.path()).at("stat", &e.path())?;
        if md.is_dir() {
            walk(&e.path(), &k, out)?;
            out.insert(k, Found::Dir);
        } else if md.file_type().is_symlink() {
            out.insert(k, Found::Symlink);
        } else {
            out.insert(k, Found::File(md.len()));
        }
    }
    Ok(())
}

fn describe(e: Option<i32>) -> String {
    match e {
        None => "success".into(),
        Some(n) => io::Error::from_raw_os_error(n).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run_tiny;
    use super::super::Workload;
    use super::*;

    #[test]
    fn fsstress_model_agrees_with_the_host_file_system() {
        let (_t, job, reports) = run_tiny(Workload::Fsstress, 2);
        for r in &reports {
            assert_eq!(r.ops, job.iterations());
            // A mix of operations really ran.
            assert!(r.detail.len() >= 8, "{:?}", r.detail);
        }
    }

    #[test]
    fn check_detects_a_tampered_subtree() {
        let (_t, job, _) = run_tiny(Workload::Fsstress, 1);
        std::fs::write(job.dir.join("s0/intruder"), b"x").unwrap();
        assert!(matches!(job.check(), Err(BenchError::Check(_))));
    }
}
