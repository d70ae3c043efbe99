//! The descriptors the relay gives a filtered program for files in the
//! mount, which the kernel cannot open.
//!
//! * A regular file is copied into a memfd at `open` (the program then
//!   reads, writes, seeks and maps it with no notification at all); one
//!   opened for writing is written back, whole, to the atoll file at each
//!   `close` of one of its descriptors and when the program ends:
//!   close-to-open consistency, as `--incoherent` clients have it (Hare
//!   §3.2), not the shared buffer cache's.
//! * A directory is an empty memfd standing for a snapshot of its listing
//!   taken at `open`; `getdents64` is served from the snapshot, the
//!   memfd's own offset (which `lseek` and `rewinddir` move, and which
//!   dups and forks share) being the index of the next entry.
//!
//! Both memfds are named `atoll-relay:PID:KEY` (`paths::MEMFD_PREFIX`),
//! how the relay knows them again at `fstat`, `getdents64`, `fchdir`,
//! `close` and as `*at` directories. Entries live as long as the relay:
//! a directory's snapshot, and for a file open for writing the memfd
//! and a descriptor of the atoll file for the last write-back.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirEntryExt, FileExt};

use super::paths::{self, MEMFD_PREFIX};
use super::seccomp;

/// One listing entry: inode, `d_type`, name.
type Dirent = (u64, u8, Vec<u8>);

/// A descriptor given out.
enum Entry {
    Dir {
        st: libc::stat,
        list: Vec<Dirent>,
    },
    File {
        path: Vec<u8>,
        st: libc::stat,
        /// For a file open for writing: the memfd and the atoll file's
        /// descriptor it is written back through.
        back: Option<(OwnedFd, std::fs::File)>,
        /// Length and hash of the copy as last read from or written to the
        /// atoll file: a copy still so is not written back, so the file's
        /// times (set through the descriptor, `futimens`) and a writer
        /// elsewhere are left alone by a program that did not write.
        synced: std::cell::Cell<(usize, u64)>,
    },
}

/// The relay's descriptors, by key.
#[derive(Default)]
pub struct Files {
    next: u64,
    entries: HashMap<u64, Entry>,
    /// Files open for writing by normalized path: written back before the
    /// path is opened or looked at again (a descriptor replaced by `dup2`
    /// or left open by a process is not closed with a call the filter
    /// sees).
    writers: HashMap<Vec<u8>, Vec<u64>>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

pub fn cstr(p: &[u8]) -> Result<CString, i32> {
    CString::new(p).map_err(|_| libc::EINVAL)
}

/// `fstat` of a descriptor of the relay's.
pub fn fstat_fd(fd: i32) -> Result<libc::stat, i32> {
    // SAFETY: fstat fills a local struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

/// `stat`/`lstat` of a path, through the relay's own client.
pub fn stat_path(p: &[u8], nofollow: bool) -> Result<libc::stat, i32> {
    let c = cstr(p)?;
    // SAFETY: fstatat fills a local struct from a NUL-terminated path.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let fl = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    // SAFETY: as above.
    if unsafe { libc::fstatat(libc::AT_FDCWD, c.as_ptr(), &mut st, fl) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

/// Is there a FIFO at `p` (`nofollow`: not through a final symlink)?
pub fn is_fifo(p: &[u8], nofollow: bool) -> bool {
    stat_path(p, nofollow).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO)
}

impl Files {
    /// Open `abs` as the program asked (`flags`, `mode`), through the
    /// relay's client: the descriptor to install in the program. Outside
    /// the mount (a relative path from a cwd in it) that is the host file
    /// itself.
    pub fn open(
        &mut self,
        p: &mut paths::Paths,
        abs: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<OwnedFd, i32> {
        let c = cstr(abs)?;
        let norm = paths::normalize(abs);
        let inside = paths::under(&p.mount, &norm);
        // Never block the supervisor (a FIFO's open would): a FIFO in the
        // mount is opened by a thread of its own (`fifo`, before this), a
        // host one (reached from a tracked cwd) gets its blocking mode back.
        // SAFETY: open of a NUL-terminated path.
        let a = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NONBLOCK, mode) };
        if a < 0 {
            return Err(errno());
        }
        // SAFETY: a new descriptor this function owns.
        let a = unsafe { OwnedFd::from_raw_fd(a) };
        if !inside {
            if flags & libc::O_NONBLOCK == 0 {
                // SAFETY: flag change of a host descriptor this function owns.
                let fl = unsafe { libc::fcntl(a.as_raw_fd(), libc::F_GETFL) };
                // SAFETY: as above.
                unsafe { libc::fcntl(a.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK) };
            }
            return Ok(a);
        }
        let st = fstat_fd(a.as_raw_fd())?;
        let key = self.next;
        self.next += 1;
        let memfd = new_memfd(p.me(), key)?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let list = listing(&norm, &st)?;
                p.add_dir(key, norm);
                self.entries.insert(key, Entry::Dir { st, list });
                Ok(memfd)
            }
            libc::S_IFREG => {
                self.sync(&norm);
                let fd = self.open_file(key, memfd, a, abs, st, flags)?;
                if flags & libc::O_ACCMODE != libc::O_RDONLY {
                    self.writers.entry(norm).or_default().push(key);
                }
                Ok(fd)
            }
            _ => Err(libc::ENXIO),
        }
    }

    fn open_file(
        &mut self,
        key: u64,
        memfd: OwnedFd,
        a: OwnedFd,
        abs: &[u8],
        st: libc::stat,
        flags: i32,
    ) -> Result<OwnedFd, i32> {
        let acc = flags & libc::O_ACCMODE;
        let mut src = std::fs::File::from(a);
        let mut dst = std::fs::File::from(memfd.try_clone().map_err(|_| libc::EMFILE)?);
        if st.st_size > 0 && flags & libc::O_TRUNC == 0 {
            if acc == libc::O_WRONLY {
                // The bytes the program does not overwrite must survive the
                // write-back: read them through a reading descriptor.
                let c = cstr(abs)?;
                // SAFETY: open of a NUL-terminated path.
                let r = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if r < 0 {
                    return Err(errno());
                }
                // SAFETY: a new descriptor this function owns.
                let mut rd = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(r) });
                copy(&mut rd, &mut dst)?;
            } else {
                copy(&mut src, &mut dst)?;
            }
        }
        // The program's description: its access mode and O_APPEND, on the
        // same memfd (a new open of it, so an O_RDONLY one cannot write).
        let own = format!("/proc/self/fd/{}\0", memfd.as_raw_fd());
        let keep = flags & (libc::O_ACCMODE | libc::O_APPEND);
        // SAFETY: open of a NUL-terminated local path.
        let d = unsafe { libc::open(own.as_ptr().cast(), keep | libc::O_CLOEXEC) };
        if d < 0 {
            return Err(errno());
        }
        // SAFETY: a new descriptor this function owns.
        let desc = unsafe { OwnedFd::from_raw_fd(d) };
        let mut synced = (0, digest(&[]));
        let back = if acc == libc::O_RDONLY {
            None
        } else {
            // Write-back goes at offset 0 whatever the program's flags.
            // SAFETY: flag change of the relay's own descriptor.
            unsafe { libc::fcntl(src.as_raw_fd(), libc::F_SETFL, 0) };
            let mut data = Vec::new();
            // SAFETY: borrowed for this read; never closed here.
            let mut m = std::mem::ManuallyDrop::new(unsafe {
                std::fs::File::from_raw_fd(memfd.as_raw_fd())
            });
            m.read_to_end_at0(&mut data).map_err(|_| libc::EIO)?;
            synced = (data.len(), digest(&data));
            Some((memfd, src))
        };
        self.entries.insert(
            key,
            Entry::File {
                path: abs.to_vec(),
                st,
                back,
                synced: std::cell::Cell::new(synced),
            },
        );
        Ok(desc)
    }

    /// Is `key` a directory the relay gave out?
    pub fn is_dir(&self, key: u64) -> bool {
        matches!(self.entries.get(&key), Some(Entry::Dir { .. }))
    }

    /// The path of the file or directory `key` (for calls that name it by
    /// descriptor).
    pub fn path_of(&self, p: &paths::Paths, key: u64) -> Option<Vec<u8>> {
        match self.entries.get(&key)? {
            Entry::Dir { .. } => p.dir(key).map(<[u8]>::to_vec),
            Entry::File { path, .. } => Some(path.clone()),
        }
    }

    /// `fstat` of descriptor `fd` of `pid`, the relay's `key`: the atoll
    /// file's attributes with the size of the program's copy.
    pub fn fstat(&self, key: u64, pid: i32, fd: i32) -> Result<libc::stat, i32> {
        match self.entries.get(&key).ok_or(libc::EBADF)? {
            Entry::Dir { st, .. } => Ok(*st),
            Entry::File { st, back, .. } => {
                let mut st = match back {
                    Some((_, f)) => fstat_fd(f.as_raw_fd()).unwrap_or(*st),
                    None => *st,
                };
                let theirs = seccomp::take_fd(pid, fd)?;
                let mine = fstat_fd(theirs.as_raw_fd())?;
                st.st_size = mine.st_size;
                st.st_blocks = mine.st_blocks;
                Ok(st)
            }
        }
    }

    /// Size of the copy of file `key` held by descriptor `fd` of `pid`.
    pub fn copy_size(&self, pid: i32, fd: i32) -> Result<i64, i32> {
        let theirs = seccomp::take_fd(pid, fd)?;
        Ok(fstat_fd(theirs.as_raw_fd())?.st_size)
    }

    /// `getdents64` of directory `key` at descriptor `fd` of `pid`: the
    /// records that fit in `count` bytes from the descriptor's offset,
    /// which moves past them.
    pub fn getdents(&self, key: u64, pid: i32, fd: i32, count: usize) -> Result<Vec<u8>, i32> {
        let Some(Entry::Dir { list, .. }) = self.entries.get(&key) else {
            return Err(libc::ENOTDIR);
        };
        let theirs = seccomp::take_fd(pid, fd)?;
        // SAFETY: lseek of a descriptor this function owns.
        let at = unsafe { libc::lseek(theirs.as_raw_fd(), 0, libc::SEEK_CUR) };
        let at = usize::try_from(at).map_err(|_| libc::EINVAL)?;
        let (out, next) = encode(list, at, count)?;
        // SAFETY: as above.
        unsafe { libc::lseek(theirs.as_raw_fd(), next as i64, libc::SEEK_SET) };
        Ok(out)
    }

    /// Write file `key`'s copy back to the atoll file, if it was opened
    /// for writing and the copy changed since it was last read or
    /// written back. (A rewrite of the same bytes is thus not seen: the
    /// file's times stay.)
    pub fn write_back(&self, key: u64) {
        if let Some(Entry::File {
            back: Some((memfd, f)),
            synced,
            ..
        }) = self.entries.get(&key)
        {
            let mut data = Vec::new();
            let mut m = std::mem::ManuallyDrop::new(
                // SAFETY: borrowed for this read; never closed here.
                unsafe { std::fs::File::from_raw_fd(memfd.as_raw_fd()) },
            );
            if m.read_to_end_at0(&mut data).is_ok() {
                let now = (data.len(), digest(&data));
                if now == synced.get() {
                    return;
                }
                let _ = f.write_all_at(&data, 0);
                let _ = f.set_len(data.len() as u64);
                synced.set(now);
            }
        }
    }

    /// Write back the files open for writing at (normalized) `path`.
    pub fn sync(&self, path: &[u8]) {
        for &k in self.writers.get(path).into_iter().flatten() {
            self.write_back(k);
        }
    }

    /// Write back every file open for writing (the program ended).
    pub fn write_back_all(&self) {
        for &k in self.entries.keys() {
            self.write_back(k);
        }
    }
}

/// A 64-bit digest of a copy's bytes (SipHash with fixed keys).
fn digest(data: &[u8]) -> u64 {
    use std::hash::Hasher;
    #[allow(deprecated)] // SipHasher: fixed keys, stable within the relay
    let mut h = std::hash::SipHasher::new();
    h.write(data);
    h.finish()
}

/// Whole-file read from offset 0, leaving the shared offset alone.
trait ReadAt0 {
    fn read_to_end_at0(&mut self, out: &mut Vec<u8>) -> std::io::Result<()>;
}

impl ReadAt0 for std::fs::File {
    fn read_to_end_at0(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut at = 0u64;
        loop {
            let n = self.read_at(&mut buf, at)?;
            if n == 0 {
                return Ok(());
            }
            out.extend_from_slice(&buf[..n]);
            at += n as u64;
        }
    }
}

fn copy(src: &mut std::fs::File, dst: &mut std::fs::File) -> Result<(), i32> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => dst.write_all(&buf[..n]).map_err(|_| libc::EIO)?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
    // SAFETY: lseek of a descriptor `dst` owns.
    unsafe { libc::lseek(dst.as_raw_fd(), 0, libc::SEEK_SET) };
    Ok(())
}

fn new_memfd(me: i32, key: u64) -> Result<OwnedFd, i32> {
    let name = CString::new(format!("{MEMFD_PREFIX}{me}:{key}")).map_err(|_| libc::EINVAL)?;
    // SAFETY: memfd_create of a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a new descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The listing of directory `path` (whose attributes are `st`), with `.`
/// and `..` first, as the relay's client reads it.
fn listing(path: &[u8], st: &libc::stat) -> Result<Vec<Dirent>, i32> {
    use std::os::unix::ffi::OsStrExt;
    let parent = stat_path(&paths::join(path, b".."), false).map_or(st.st_ino, |s| s.st_ino);
    let mut list = vec![
        (st.st_ino, libc::DT_DIR, b".".to_vec()),
        (parent, libc::DT_DIR, b"..".to_vec()),
    ];
    let rd = std::fs::read_dir(std::ffi::OsStr::from_bytes(path))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    for e in rd.flatten() {
        let t = e.file_type().ok();
        let dt = match t {
            Some(t) if t.is_dir() => libc::DT_DIR,
            Some(t) if t.is_symlink() => libc::DT_LNK,
            Some(t) if t.is_file() => libc::DT_REG,
            _ => libc::DT_UNKNOWN,
        };
        list.push((e.ino(), dt, e.file_name().into_encoded_bytes()));
    }
    Ok(list)
}

/// `linux_dirent64` records for `list[at..]` that fit in `count` bytes,
/// and the index after the last; `EINVAL` when not even one fits.
fn encode(list: &[Dirent], at: usize, count: usize) -> Result<(Vec<u8>, usize), i32> {
    let mut out = Vec::new();
    let mut i = at;
    while let Some((ino, dt, name)) = list.get(i) {
        let len = (19 + name.len() + 1 + 7) & !7;
        if out.len() + len > count {
            if out.is_empty() {
                return Err(libc::EINVAL);
            }
            break;
        }
        out.extend_from_slice(&ino.to_ne_bytes());
        out.extend_from_slice(&((i + 1) as i64).to_ne_bytes());
        out.extend_from_slice(&(len as u16).to_ne_bytes());
        out.push(*dt);
        out.extend_from_slice(name);
        out.resize(out.len() + len - 19 - name.len(), 0);
        i += 1;
    }
    Ok((out, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirents_fill_what_fits_and_refuse_a_buffer_too_small_for_one() {
        let list: Vec<Dirent> = vec![
            (1, libc::DT_DIR, b".".to_vec()),
            (2, libc::DT_REG, b"a-long-name".to_vec()),
        ];
        let (all, next) = encode(&list, 0, 4096).unwrap();
        assert_eq!(next, 2);
        assert_eq!(all.len(), 24 + 32);
        assert_eq!(u16::from_ne_bytes([all[16], all[17]]), 24);
        assert_eq!(all[18], libc::DT_DIR);
        assert_eq!(&all[24 + 19..24 + 30], b"a-long-name");
        let (one, next) = encode(&list, 0, 30).unwrap();
        assert_eq!((one.len(), next), (24, 1));
        assert_eq!(encode(&list, 1, 30), Err(libc::EINVAL));
        assert_eq!(encode(&list, 2, 30), Ok((Vec::new(), 2)));
    }
}
