//! Access to the shared buffer cache from a file server.
//!
//! Clients copy file bytes straight into and out of the buffer cache (Hare
//! §3.3); the server touches block contents only to zero blocks it hands
//! out, to zero the parts of blocks a truncate or hole punch exposes, and to
//! serve `ReadData`/`WriteData` in the direct-cache ablation. [`BlockStore`]
//! is that narrow interface: [`MemStore`] backs it with a private vector (unit
//! tests), `crate::sys::SharedStore` with the instance's memfd mapping.
//!
//! Block indices passed in always come from the server's own partition, so
//! they are in range by construction; implementations still ignore indices
//! out of range rather than panic.

use atoll_proto::BLOCK_SIZE;

/// Byte-level access to buffer-cache blocks (one server's view).
pub trait BlockStore {
    /// Zero bytes `[from, to)` of `block`.
    fn zero(&mut self, block: u32, from: usize, to: usize);
    /// Copy `buf.len()` bytes starting at byte `off` of `block` into `buf`.
    fn read(&self, block: u32, off: usize, buf: &mut [u8]);
    /// Copy `data` into `block` starting at byte `off`.
    fn write(&mut self, block: u32, off: usize, data: &[u8]);

    // Words of a pipe header block (`atoll_proto::pipe`), which clients
    // use concurrently with atomics and futexes. The defaults suit private
    // stores; the shared store uses atomics and wakes sleepers.

    /// The `u32` at byte `off` (a multiple of 4) of `block`.
    fn get_u32(&self, block: u32, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(block, off, &mut b);
        u32::from_le_bytes(b)
    }
    /// The `u64` at byte `off` (a multiple of 8) of `block`.
    fn get_u64(&self, block: u32, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(block, off, &mut b);
        u64::from_le_bytes(b)
    }
    /// Store the `u32` at byte `off` of `block`.
    fn put_u32(&mut self, block: u32, off: usize, v: u32) {
        self.write(block, off, &v.to_le_bytes());
    }
    /// Add `delta` (wrapping) to the `u32` at byte `off` of `block`; with
    /// `wake`, wake every futex sleeper on that word.
    fn add_u32(&mut self, block: u32, off: usize, delta: u32, wake: bool) {
        let _ = wake;
        let v = self.get_u32(block, off).wrapping_add(delta);
        self.put_u32(block, off, v);
    }
    /// Store the `u64` at byte `off` (a multiple of 8) of `block`.
    fn put_u64(&mut self, block: u32, off: usize, v: u64) {
        self.write(block, off, &v.to_le_bytes());
    }
    /// Set the `u32` at byte `off` of `block` to `new` if it is `old`;
    /// whether it was (a try-lock of a ring that never waits).
    fn cas_u32(&mut self, block: u32, off: usize, old: u32, new: u32) -> bool {
        if self.get_u32(block, off) != old {
            return false;
        }
        self.put_u32(block, off, new);
        true
    }
    /// Store `v` in the `u32` at byte `off` of `block`; the old value.
    fn swap_u32(&mut self, block: u32, off: usize, v: u32) -> u32 {
        let old = self.get_u32(block, off);
        self.put_u32(block, off, v);
        old
    }
    /// Wake every futex sleeper on the `u32` at byte `off` of `block`.
    fn wake(&mut self, block: u32, off: usize) {
        let _ = (block, off);
    }
}

/// A private, heap-backed buffer cache (tests and tools).
pub struct MemStore {
    bytes: Vec<u8>,
}

impl MemStore {
    pub fn new(blocks: usize) -> MemStore {
        MemStore {
            bytes: vec![0; blocks * BLOCK_SIZE],
        }
    }
    /// Fill a whole block with `byte` (tests use this to catch missing zeroing).
    pub fn fill(&mut self, block: u32, byte: u8) {
        if let Some(r) = self.range(block, 0, BLOCK_SIZE) {
            self.bytes[r].fill(byte);
        }
    }
    fn range(&self, block: u32, from: usize, to: usize) -> Option<std::ops::Range<usize>> {
        let base = block as usize * BLOCK_SIZE;
        (from <= to && to <= BLOCK_SIZE && base + to <= self.bytes.len())
            .then_some(base + from..base + to)
    }
}

impl BlockStore for MemStore {
    fn zero(&mut self, block: u32, from: usize, to: usize) {
        if let Some(r) = self.range(block, from, to) {
            self.bytes[r].fill(0);
        }
    }
    fn read(&self, block: u32, off: usize, buf: &mut [u8]) {
        if let Some(r) = self.range(block, off, off + buf.len()) {
            buf.copy_from_slice(&self.bytes[r]);
        }
    }
    fn write(&mut self, block: u32, off: usize, data: &[u8]) {
        if let Some(r) = self.range(block, off, off + data.len()) {
            self.bytes[r].copy_from_slice(data);
        }
    }
}
