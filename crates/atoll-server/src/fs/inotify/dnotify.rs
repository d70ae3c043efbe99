//! dnotify (`fcntl(dirfd, F_NOTIFY, mask)`) on atoll directories: the
//! servers play a registration's events on a host directory, its
//! *shadow*, which the program's descriptor refers to in the kernel, so
//! the kernel's own dnotify sends the signal (docs/ARCHITECTURE.md,
//! "dnotify").
//!
//! A registration is a watch ([`WATCH_DNOTIFY`]) of a queue the client
//! made for it, held by every server (a directory's entries may live on
//! any). Where an inotify watch would get a record, this one gets the
//! host operation that makes the same fsnotify event on `shadow/d`: an
//! entry made (moved in from `shadow/s`, so the only event `d` sees is
//! `FS_MOVED_TO`, which dnotify counts as `DN_CREATE` like `FS_CREATE`),
//! removed, renamed within, moved out or in; a child read (`pread`),
//! written (`pwrite`) or changed (`chmod`); the directory itself read
//! (`getdents`) or changed. Entries of `d` carry the directory's names
//! (given by each server at registration for the entries it holds,
//! before the kernel registration exists, so they signal nothing), each a
//! one-byte file, so a read of it returns bytes (Linux reports a read
//! only then). Which events signal, the signal, its `siginfo`, one-shot
//! or `DN_MULTISHOT`, the owner, and the registration's end at `close`
//! are the kernel's, exactly as Linux's.
//!
//! Servers never wait on one another (Hare §6.2.3): each plays the
//! events it produces, in the order it produces them.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use atoll_proto::inotify::*;
use atoll_proto::{Errno, InodeId, QueueRef, Reply};

use super::Watch;
use crate::fs::{FileServer, R};
use crate::store::BlockStore;

/// One registration's shadow, as this server knows it.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(in crate::fs) struct Shadow {
    /// The host directory holding `d` (the shadow) and `s` (the stash).
    path: Vec<u8>,
    /// The `IN_MOVED_FROM` whose `IN_MOVED_TO` may follow (a rename
    /// within the directory is one host `rename`): its cookie and name.
    #[serde(skip)]
    from: Option<(u32, Vec<u8>)>,
    /// Names of stash files made here.
    #[serde(skip)]
    seq: u64,
}

/// The host operation that plays one event (its `IN_*` mask without
/// `IN_ISDIR`, and the entry's name; empty: the directory itself).
#[derive(Debug, PartialEq, Eq)]
pub(in crate::fs) enum Play<'a> {
    Make(&'a [u8]),
    Remove(&'a [u8]),
    MoveOut(&'a [u8]),
    MoveIn(&'a [u8]),
    Rename(&'a [u8], &'a [u8]),
    Read(&'a [u8]),
    Write(&'a [u8]),
    Chmod(&'a [u8]),
    ListSelf,
    ChmodSelf,
    Nothing,
}

/// What to play for event `mask` with `name`, given the `IN_MOVED_FROM`
/// held back (`from`, cookie and name); the new held-back move.
pub(in crate::fs) fn plan<'a>(
    mask: u32,
    cookie: u32,
    name: &'a [u8],
    from: Option<&'a (u32, Vec<u8>)>,
) -> Play<'a> {
    let m = mask & !IN_ISDIR;
    if name.is_empty() {
        return match m {
            IN_ACCESS => Play::ListSelf,
            IN_ATTRIB => Play::ChmodSelf,
            _ => Play::Nothing,
        };
    }
    match m {
        IN_CREATE => Play::Make(name),
        IN_DELETE => Play::Remove(name),
        IN_MOVED_FROM => Play::MoveOut(name),
        IN_MOVED_TO => match from {
            Some((c, old)) if *c == cookie && cookie != 0 => Play::Rename(old, name),
            _ => Play::MoveIn(name),
        },
        IN_ACCESS => Play::Read(name),
        IN_MODIFY => Play::Write(name),
        IN_ATTRIB => Play::Chmod(name),
        _ => Play::Nothing,
    }
}

impl Shadow {
    fn dir(&self) -> PathBuf {
        PathBuf::from(OsStr::from_bytes(&self.path)).join("d")
    }

    fn entry(&self, name: &[u8]) -> PathBuf {
        self.dir().join(OsStr::from_bytes(name))
    }

    /// A new one-byte file in the stash (where no event is watched).
    fn stash_file(&mut self, index: usize) -> Option<PathBuf> {
        self.seq += 1;
        let p = PathBuf::from(OsStr::from_bytes(&self.path))
            .join("s")
            .join(format!("{index}.{}", self.seq));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .ok()?;
        f.write_all(b"x").ok()?;
        Some(p)
    }

    /// Put a name in the shadow: made in the stash, moved in.
    fn make(&mut self, index: usize, name: &[u8]) {
        if let Some(p) = self.stash_file(index) {
            if std::fs::rename(&p, self.entry(name)).is_err() {
                let _ = std::fs::remove_file(&p);
            }
        }
    }

    /// Play one event (host errors are ignored: a shadow whose
    /// registration ended may be gone already).
    fn play(&mut self, index: usize, p: Play<'_>) {
        match p {
            Play::Make(n) | Play::MoveIn(n) => self.make(index, n),
            Play::Remove(n) => {
                let _ = std::fs::remove_file(self.entry(n));
            }
            Play::MoveOut(n) => {
                self.seq += 1;
                let to = PathBuf::from(OsStr::from_bytes(&self.path))
                    .join("s")
                    .join(format!("{index}.{}", self.seq));
                if std::fs::rename(self.entry(n), &to).is_ok() {
                    let _ = std::fs::remove_file(to);
                }
            }
            Play::Rename(a, b) => {
                let _ = std::fs::rename(self.entry(a), self.entry(b));
            }
            Play::Read(n) => {
                if let Ok(mut f) = std::fs::File::open(self.entry(n)) {
                    let _ = f.read(&mut [0u8; 1]);
                }
            }
            Play::Write(n) => {
                let f = std::fs::OpenOptions::new().write(true).open(self.entry(n));
                if let Ok(f) = f {
                    let _ = f.write_at(b"x", 0);
                }
            }
            Play::Chmod(n) => {
                let perm = std::fs::Permissions::from_mode(0o600);
                let _ = std::fs::set_permissions(self.entry(n), perm);
            }
            Play::ListSelf => {
                if let Ok(rd) = std::fs::read_dir(self.dir()) {
                    rd.for_each(drop);
                }
            }
            Play::ChmodSelf => {
                let perm = std::fs::Permissions::from_mode(0o700);
                let _ = std::fs::set_permissions(self.dir(), perm);
            }
            Play::Nothing => {}
        }
    }
}

impl<S: BlockStore> FileServer<S> {
    /// `Request::DnotifyRegister`.
    pub(in crate::fs) fn dnotify_register<'o>(
        &mut self,
        queue: QueueRef,
        ino: InodeId,
        wd: i32,
        shadow: &[u8],
    ) -> R<'o> {
        if !self.queue_alive(queue) {
            return Err(Errno::EBADF);
        }
        if shadow.is_empty() || shadow.contains(&0) {
            return Err(Errno::EINVAL);
        }
        let mut sh = Shadow {
            path: shadow.to_vec(),
            ..Shadow::default()
        };
        // The names held here, before the kernel registration exists
        // (the client makes it after every server answered): no signal.
        if !crate::fs::tape::replaying() {
            let names: Vec<Vec<u8>> = self
                .shards
                .get(&ino)
                .map(|s| s.after(0).map(|(_, n, _)| n.to_vec()).collect())
                .unwrap_or_default();
            for n in names {
                if !sh.entry(&n).exists() {
                    sh.make(self.cfg.index, &n);
                }
            }
        }
        self.notify.shadows.insert(queue, sh);
        let mask = DNOTIFY_EVENTS | WATCH_DNOTIFY;
        self.notify.add(ino, Watch { queue, wd, mask });
        self.hold(queue);
        Ok(Reply::Ok)
    }

    /// An event reached dnotify watch `w`: play it on its shadow.
    pub(super) fn dnotify_play(&mut self, w: Watch, mask: u32, cookie: u32, name: &[u8]) {
        if crate::fs::tape::replaying() {
            return;
        }
        let index = self.cfg.index;
        // Moves other shadows hold back came first: out they go, so the
        // kernel sees the events in the order they happened.
        for (q, sh) in self.notify.shadows.iter_mut() {
            if *q != w.queue {
                if let Some((_, old)) = sh.from.take() {
                    sh.play(index, Play::MoveOut(&old));
                }
            }
        }
        let Some(sh) = self.notify.shadows.get_mut(&w.queue) else {
            return;
        };
        let held = sh.from.take();
        let p = plan(mask, cookie, name, held.as_ref());
        match p {
            // Held back until its `IN_MOVED_TO` (or the end of the move).
            Play::MoveOut(n) => {
                let n = n.to_vec();
                if let Some((_, old)) = &held {
                    sh.play(index, Play::MoveOut(old));
                }
                sh.from = Some((cookie, n));
            }
            Play::Rename(..) => sh.play(index, p),
            p => {
                if let Some((_, old)) = &held {
                    sh.play(index, Play::MoveOut(old));
                }
                sh.play(index, p);
            }
        }
    }

    /// A move was reported: a held-back `IN_MOVED_FROM` whose
    /// `IN_MOVED_TO` went elsewhere moves out now.
    pub(super) fn dnotify_settle(&mut self) {
        if self.notify.shadows.is_empty() {
            return;
        }
        let index = self.cfg.index;
        for sh in self.notify.shadows.values_mut() {
            if let Some((_, old)) = sh.from.take() {
                sh.play(index, Play::MoveOut(&old));
            }
        }
    }

    /// Watches of dead queues went: forget their shadows; the queue's
    /// owner (`owned`) removes the host directory.
    pub(super) fn dnotify_forget(&mut self, queue: QueueRef, owned: bool) {
        if let Some(sh) = self.notify.shadows.remove(&queue) {
            if owned && !crate::fs::tape::replaying() {
                let _ = std::fs::remove_dir_all(OsStr::from_bytes(&sh.path));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_the_event() {
        assert_eq!(plan(IN_CREATE, 0, b"a", None), Play::Make(b"a"));
        assert_eq!(plan(IN_CREATE | IN_ISDIR, 0, b"a", None), Play::Make(b"a"));
        assert_eq!(plan(IN_DELETE, 0, b"a", None), Play::Remove(b"a"));
        assert_eq!(plan(IN_MODIFY, 0, b"a", None), Play::Write(b"a"));
        assert_eq!(plan(IN_ACCESS, 0, b"a", None), Play::Read(b"a"));
        assert_eq!(plan(IN_ATTRIB, 0, b"a", None), Play::Chmod(b"a"));
        assert_eq!(plan(IN_ACCESS | IN_ISDIR, 0, b"", None), Play::ListSelf);
        assert_eq!(plan(IN_ATTRIB | IN_ISDIR, 0, b"", None), Play::ChmodSelf);
        assert_eq!(plan(IN_OPEN, 0, b"a", None), Play::Nothing);
        assert_eq!(plan(IN_CLOSE_WRITE, 0, b"a", None), Play::Nothing);
        assert_eq!(plan(IN_DELETE_SELF, 0, b"", None), Play::Nothing);
    }

    #[test]
    fn a_move_within_is_one_rename() {
        let held = (7, b"old".to_vec());
        assert_eq!(plan(IN_MOVED_FROM, 7, b"old", None), Play::MoveOut(b"old"));
        assert_eq!(
            plan(IN_MOVED_TO, 7, b"new", Some(&held)),
            Play::Rename(b"old", b"new")
        );
        // Another move's cookie: the name arrives from elsewhere.
        assert_eq!(
            plan(IN_MOVED_TO, 8, b"new", Some(&held)),
            Play::MoveIn(b"new")
        );
        assert_eq!(plan(IN_MOVED_TO, 7, b"new", None), Play::MoveIn(b"new"));
    }

    fn shadow() -> (tempdir::Dir, Shadow) {
        let t = tempdir::Dir::new();
        std::fs::create_dir(t.0.join("d")).unwrap();
        std::fs::create_dir(t.0.join("s")).unwrap();
        let sh = Shadow {
            path: t.0.as_os_str().as_bytes().to_vec(),
            ..Shadow::default()
        };
        (t, sh)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p =
                    std::env::temp_dir().join(format!("atoll-dnotify-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn names(sh: &Shadow) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(sh.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_shadow_keeps_the_names() {
        let (_t, mut sh) = shadow();
        sh.play(0, Play::Make(b"a"));
        sh.play(0, Play::MoveIn(b"b"));
        assert_eq!(names(&sh), ["a", "b"]);
        sh.play(0, Play::Rename(b"a", b"c"));
        sh.play(0, Play::Write(b"c"));
        sh.play(0, Play::Read(b"c"));
        sh.play(0, Play::Chmod(b"c"));
        assert_eq!(names(&sh), ["b", "c"]);
        assert_eq!(std::fs::read(sh.entry(b"c")).unwrap(), b"x");
        sh.play(0, Play::MoveOut(b"b"));
        sh.play(0, Play::Remove(b"c"));
        assert!(names(&sh).is_empty());
        // The stash keeps nothing.
        let stash = PathBuf::from(OsStr::from_bytes(&sh.path)).join("s");
        assert_eq!(std::fs::read_dir(stash).unwrap().count(), 0);
    }
}
