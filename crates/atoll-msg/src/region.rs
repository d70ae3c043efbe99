//! Shared memory files: a sealed `memfd` mapped `MAP_SHARED`.
//!
//! Only raw system calls (through rustix's linux_raw backend) are used: this
//! code also runs inside the preload library, where libc's wrappers may be
//! interposed by atoll itself.
//!
//! Life cycle: the creator (`create`) makes the memfd, sizes it, seals its
//! size and maps it; the fd is passed to a peer (over the boot socket) which
//! `map`s it. Each side unmaps on drop; the memory goes away with the last
//! mapping and the last fd. Sealing against shrinking matters: a peer that
//! could `ftruncate` the file smaller would make our accesses fault with
//! SIGBUS.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// A shared memory file mapped into this process; unmapped on drop.
pub struct SharedRegion {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is plain shared memory; every access through it is
// atomic or volatile by the users in this crate, and the mapping itself is
// valid from any thread until drop.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// Create an anonymous shared memory file (`memfd`, sealed against
    /// shrinking and growing) of `len` bytes and map it. The memory is zeroed.
    pub fn create(name: &str, len: usize) -> io::Result<(OwnedFd, SharedRegion)> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let region = Self::map_len(&fd, len)?;
        Ok((fd, region))
    }

    /// Map an existing shared memory file received from a peer; its size is
    /// read with `fstat`.
    pub fn map(fd: BorrowedFd<'_>) -> io::Result<SharedRegion> {
        let st = rustix::fs::fstat(fd)?;
        Self::map_sized(fd, st.st_size)
    }

    /// Map an existing shared memory file whose size the caller has just
    /// read with its own `fstat` of `fd` (a new image checking the
    /// descriptors its old image handed over already has it: one system
    /// call less per start).
    pub fn map_sized(fd: BorrowedFd<'_>, size: i64) -> io::Result<SharedRegion> {
        let len = usize::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidData));
        }
        // Files made by `create` are sealed against shrinking, so the mapping
        // cannot turn into SIGBUS; atoll maps only files its servers made.
        Self::map_len(fd, len)
    }

    /// A region that maps nothing (length 0): what a process of a `copy`
    /// island holds in place of the buffer cache. Every bounds-checked
    /// access through it fails, so a path that would touch the cache
    /// there reports an error instead of reaching memory.
    pub fn none() -> SharedRegion {
        SharedRegion {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }

    fn map_len(fd: impl std::os::fd::AsFd, len: usize) -> io::Result<SharedRegion> {
        // SAFETY: a fresh mapping chosen by the kernel (null hint) aliases no
        // Rust object; the file is at least `len` bytes and cannot shrink.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        Ok(SharedRegion {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Start of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        if self.len == 0 {
            return; // `none`: nothing was mapped
        }
        // SAFETY: `ptr/len` is exactly the mapping made in `map_len`, and
        // nothing borrowed from it outlives `self` (borrows are tied to the
        // owners of the region).
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn two_mappings_of_one_memfd_share_bytes() {
        let (fd, a) = SharedRegion::create("atoll-test", 8192).unwrap();
        let b = SharedRegion::map(fd.as_fd()).unwrap();
        assert_eq!(b.len(), 8192);
        assert_ne!(a.as_ptr(), b.as_ptr());
        // SAFETY: both pointers map 8192 bytes of the same file.
        unsafe {
            a.as_ptr().add(4000).write_volatile(42);
            assert_eq!(b.as_ptr().add(4000).read_volatile(), 42);
            assert_eq!(b.as_ptr().add(4001).read_volatile(), 0);
        }
    }

    #[test]
    fn created_file_is_sealed_against_resizing() {
        let (fd, _a) = SharedRegion::create("atoll-test", 4096).unwrap();
        assert!(rustix::fs::ftruncate(&fd, 0).is_err());
        assert!(rustix::fs::ftruncate(&fd, 1 << 20).is_err());
    }
}
