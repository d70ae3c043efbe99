//! Stub pages: the code a rewritten site jumps to.
//!
//! A rewritten site's `mov $nr,%eax` became `jmp rel32` to a stub of its
//! own, so the stub must lie within ±2 GiB of the site: stub pages are
//! mapped near the code they serve (a hint below or above it, with
//! `MAP_FIXED_NOREPLACE`), and each holds [`PER_PAGE`] stubs of
//! [`STUB_BYTES`] after a slot with the address of the common entry:
//!
//! ```text
//!  page + 0:        .quad atoll_rewritten_entry
//!  stub (64 bytes): <the moves between the site's mov and its syscall>
//!                   lea  -128(%rsp),%rsp     skip the red zone (SysV ABI)
//!                   mov  $nr,%eax            what the site's mov did
//!                   call *page+0(%rip)       the entry; returns RAX
//!                   lea  128(%rsp),%rsp
//!                   jmp  site_end            just after the `syscall`
//! ```
//!
//! The stub does what the replaced `mov` did and then what the `syscall`
//! did, and steps over the 128-byte red zone first: the site's function may
//! keep live data below its stack pointer, which the `call` would
//! otherwise overwrite (zpoline's `call *%rax` from the site itself cannot
//! avoid that). `lea` leaves the flags alone.
//!
//! Pages are written only while the rewrite lock is held (`rewrite`),
//! `PROT_READ|PROT_WRITE|PROT_EXEC` just for the write, so other threads
//! running other stubs of the page never fault; a stub is complete before
//! any site jumps to it. Pages are never unmapped: a stub may be running
//! at any time. A fork child inherits them with the rewritten code.

use core::cell::UnsafeCell;

use crate::raw;

pub const STUB_BYTES: usize = 64;
const PAGE: usize = 4096;
/// The first slot of a page holds the entry's address.
pub const PER_PAGE: usize = PAGE / STUB_BYTES - 1;
/// Most stub pages per process (8064 stubs; past that, sites trap).
const MAX_PAGES: usize = 128;
/// Room for the copied moves (`decode::MAX_GAP`) before the fixed part.
const FIXED_BYTES: usize = 29;
const _: () = assert!(FIXED_BYTES + super::decode::MAX_GAP <= STUB_BYTES);
/// `nopl 0x0(%rax,%rax,1)`.
const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// Keep every rel32 comfortably in range.
const REACH: usize = (1 << 31) - 2 * PAGE;

struct Pages {
    base: [usize; MAX_PAGES],
    used: [usize; MAX_PAGES],
    count: usize,
}

/// Written only under the rewrite lock.
struct Table(UnsafeCell<Pages>);
// SAFETY: every access goes through `with_table`, whose callers hold the
// process-wide rewrite lock (see `rewrite::Lock`).
unsafe impl Sync for Table {}

// With the other big zero tables after `.bss` (`fdtable::DESCS` says why).
#[cfg_attr(target_os = "linux", link_section = ".bss.atoll_tables")]
static TABLE: Table = Table(UnsafeCell::new(Pages {
    base: [0; MAX_PAGES],
    used: [0; MAX_PAGES],
    count: 0,
}));

/// The bytes of one stub at address `at` for system call `nr`, running
/// `moved` first and returning to `resume`; `slot` is the address of its
/// page's entry slot.
/// `nr` is `None` for a site whose number is in a register (`short`): its
/// copied `mov` sets EAX, and a five-byte no-op stands where the stub's
/// own `mov $nr,%eax` would, so that every stub's tail is where the entry
/// looks for it (`entry::Frame::resume`).
pub fn encode(
    at: usize,
    nr: Option<u32>,
    slot: usize,
    resume: usize,
    moved: &[u8],
) -> [u8; STUB_BYTES] {
    let mut out = [0xccu8; STUB_BYTES]; // int3 padding
    out[..moved.len()].copy_from_slice(moved);
    let at = at + moved.len();
    let s = &mut out[moved.len()..];
    s[..5].copy_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0x80]);
    match nr {
        Some(nr) => {
            s[5] = 0xb8;
            s[6..10].copy_from_slice(&nr.to_le_bytes());
        }
        None => s[5..10].copy_from_slice(&NOP5),
    }
    s[10..12].copy_from_slice(&[0xff, 0x15]);
    s[12..16].copy_from_slice(&rel32(at + 16, slot).to_le_bytes());
    s[16..24].copy_from_slice(&[0x48, 0x8d, 0xa4, 0x24, 0x80, 0, 0, 0]);
    s[24] = 0xe9;
    s[25..29].copy_from_slice(&rel32(at + 29, resume).to_le_bytes());
    out
}

/// `to - next_ip` as a rel32 (callers checked the reach).
pub fn rel32(next_ip: usize, to: usize) -> i32 {
    to.wrapping_sub(next_ip) as isize as i32
}

pub fn within_reach(a: usize, b: usize) -> bool {
    a.abs_diff(b) < REACH
}

/// A new stub for the site whose `syscall` ends at `resume`, for `nr`;
/// its address, or `None` (no page in reach could be mapped or written,
/// or the table is full). Caller holds the rewrite lock.
pub fn make(resume: usize, nr: Option<u32>, entry: usize, moved: &[u8]) -> Option<usize> {
    // SAFETY: the caller holds the rewrite lock, the table's only guard.
    let t = unsafe { &mut *TABLE.0.get() };
    let index =
        match (0..t.count).find(|&i| t.used[i] < PER_PAGE && within_reach(t.base[i], resume)) {
            Some(i) => i,
            None => {
                if t.count == MAX_PAGES {
                    return None;
                }
                let base = map_page_near(resume, entry)?;
                t.base[t.count] = base;
                t.used[t.count] = 0;
                t.count += 1;
                t.count - 1
            }
        };
    let base = t.base[index];
    let at = base + STUB_BYTES * (1 + t.used[index]);
    let bytes = encode(at, nr, base, resume, moved);
    if !write_code(base, at, &bytes) {
        return None;
    }
    t.used[index] += 1;
    Some(at)
}

/// Map a stub page within reach of `near`, its entry slot filled, ready
/// (read and execute).
fn map_page_near(near: usize, entry: usize) -> Option<usize> {
    const STEP: usize = 64 << 20;
    let page = near & !(PAGE - 1);
    for k in 1..=24usize {
        for hint in [page.checked_sub(k * STEP), page.checked_add(k * STEP)] {
            let Some(hint) = hint.filter(|&h| h >= 1 << 20) else {
                continue;
            };
            let r = raw::syscall(
                libc::SYS_mmap,
                &[
                    hint as u64,
                    PAGE as u64,
                    (libc::PROT_READ | libc::PROT_WRITE) as u64,
                    (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64,
                    u64::MAX,
                    0,
                ],
            );
            if r < 0 {
                continue;
            }
            let got = r as usize;
            if got != hint || !within_reach(got, near) {
                // A kernel without MAP_FIXED_NOREPLACE treats it as a hint.
                raw::syscall(libc::SYS_munmap, &[got as u64, PAGE as u64]);
                continue;
            }
            // SAFETY: a fresh private page, writable, owned by this table.
            unsafe { (got as *mut usize).write(entry) };
            let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
            if raw::syscall(libc::SYS_mprotect, &[got as u64, PAGE as u64, rx]) != 0 {
                raw::syscall(libc::SYS_munmap, &[got as u64, PAGE as u64]);
                return None;
            }
            return Some(got);
        }
    }
    None
}

/// Copy `bytes` to `at` in stub page `base`, briefly writable (and still
/// executable: other stubs of the page may be running).
fn write_code(base: usize, at: usize, bytes: &[u8]) -> bool {
    if super::batch::active() {
        // Writable until the batch ends (`batch`).
        if !super::batch::open(base) {
            return false;
        }
        // SAFETY: as below; the page stays executable meanwhile.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
        return true;
    }
    let rwx = (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64;
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
    if raw::syscall(libc::SYS_mprotect, &[base as u64, PAGE as u64, rwx]) != 0 {
        return false;
    }
    // SAFETY: `[at, at + len)` is an unused slot of our own stub page, now
    // writable; no site jumps there yet.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
    raw::syscall(libc::SYS_mprotect, &[base as u64, PAGE as u64, rx]) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stub_sets_the_number_calls_the_entry_and_jumps_back() {
        let at = 0x7000_0020;
        let s = encode(at, Some(0x1234), 0x7000_0000, 0x7100_0007, &[]);
        assert_eq!(&s[..5], &[0x48, 0x8d, 0x64, 0x24, 0x80]);
        assert_eq!(s[5], 0xb8);
        assert_eq!(u32::from_le_bytes(s[6..10].try_into().unwrap()), 0x1234);
        let disp = i32::from_le_bytes(s[12..16].try_into().unwrap());
        assert_eq!((at as i64 + 16 + disp as i64) as usize, 0x7000_0000);
        let back = i32::from_le_bytes(s[25..29].try_into().unwrap());
        assert_eq!((at as i64 + 29 + back as i64) as usize, 0x7100_0007);
        assert!(s[29..].iter().all(|&b| b == 0xcc));
    }

    #[test]
    fn moved_instructions_come_first_and_the_rest_shifts() {
        let at = 0x7000_0040;
        let moved = [0x4c, 0x89, 0xf7];
        let s = encode(at, Some(257), 0x7000_0000, 0x7100_0007, &moved);
        assert_eq!(&s[..3], &moved);
        assert_eq!(s[3 + 5], 0xb8);
        let disp = i32::from_le_bytes(s[3 + 12..3 + 16].try_into().unwrap());
        assert_eq!((at as i64 + 3 + 16 + disp as i64) as usize, 0x7000_0000);
        let back = i32::from_le_bytes(s[3 + 25..3 + 29].try_into().unwrap());
        assert_eq!((at as i64 + 3 + 29 + back as i64) as usize, 0x7100_0007);
    }

    #[test]
    fn a_register_site_s_stub_keeps_its_mov_and_the_tail_in_place() {
        let at = 0x7000_0080;
        let moved = [0x89, 0xf0]; // mov %esi,%eax
        let s = encode(at, None, 0x7000_0000, 0x7100_0007, &moved);
        assert_eq!(&s[..2], &moved);
        assert_eq!(&s[2 + 5..2 + 10], &NOP5);
        let tail = &s[2 + 16..];
        assert_eq!(&tail[..8], &[0x48, 0x8d, 0xa4, 0x24, 0x80, 0, 0, 0]);
        let back = i32::from_le_bytes(tail[9..13].try_into().unwrap());
        assert_eq!((at as i64 + 2 + 29 + back as i64) as usize, 0x7100_0007);
    }

    #[test]
    fn reach_is_a_signed_32_bit_displacement() {
        assert!(within_reach(0x7f00_0000_0000, 0x7f00_7000_0000));
        assert!(!within_reach(0x7f00_0000_0000, 0x7f00_8000_0000));
        assert!(!within_reach(0x1000, 0x7f00_0000_0000));
    }
}
