//! The atomics the pool's header and the polled channel are written
//! against, with a `loom` twin selected by `cfg(loom)` so the very same
//! code is model-checked (`loom_models.rs`; as in `atoll-co`'s `sync`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One round of a spin wait. Under loom it yields, so the model checker
/// schedules the thread being waited for.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Give the CPU away in a wait.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Shared memory of the model: what `sys::Words` and `sys::Map` are to
/// the pool's header and the channel, with every word a loom atomic and
/// the channel's message bytes a loom cell (so a read that races with
/// the write is reported).
#[cfg(loom)]
pub(crate) mod model {
    use super::{AtomicU32, AtomicU64};
    use loom::cell::UnsafeCell;

    #[derive(Debug)]
    pub struct Mem {
        w32: Box<[AtomicU32]>,
        w64: Box<[AtomicU64]>,
        bytes: UnsafeCell<Vec<u8>>,
    }

    // SAFETY: the words are atomics; the bytes are reached only through
    // loom's cell, which reports any two accesses that race.
    unsafe impl Sync for Mem {}

    impl Mem {
        /// `len` bytes; each word is either a `u32` or a `u64` in the
        /// code modelled, never both, so the two kinds live apart.
        pub fn new(len: usize) -> Mem {
            Mem {
                w32: (0..len / 4).map(|_| AtomicU32::new(0)).collect(),
                w64: (0..len / 8).map(|_| AtomicU64::new(0)).collect(),
                bytes: UnsafeCell::new(vec![0; len]),
            }
        }

        pub fn atomics32(&self, off: usize, n: usize) -> &[AtomicU32] {
            &self.w32[off / 4..off / 4 + n]
        }

        pub fn atomics64(&self, off: usize, n: usize) -> &[AtomicU64] {
            &self.w64[off / 8..off / 8 + n]
        }

        pub fn write_shared(&self, off: usize, data: &[u8]) {
            // SAFETY: loom's cell checks that no access races with this
            // one (the point of the model).
            self.bytes
                .with_mut(|b| unsafe { (&mut *b)[off..off + data.len()].copy_from_slice(data) });
        }

        pub fn read_shared(&self, off: usize, len: usize, out: &mut Vec<u8>) {
            // SAFETY: as in `write_shared`.
            self.bytes
                .with(|b| out.extend_from_slice(unsafe { &(&*b)[off..off + len] }));
        }
    }
}
