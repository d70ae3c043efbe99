//! The instance's table of remembered sites: where, in which file, a site
//! was rewritten once, so that every later program image mapping the same
//! file rewrites it at start (`eager`) instead of trapping there first.
//!
//! A build starts hundreds of images (`sh`, `cc1`, `as`), and each one
//! passes through the same few glibc sites (`read`, `mmap`, `openat`,
//! `newfstatat`, …) once on its way: lazily, each image trapped at each of
//! them (10 to 24 traps per process, docs/BENCHMARKS.md).
//!
//! The table is the file `sites` in the instance's runtime directory (mode
//! 0700, beside `boot.sock`), of a fixed size: a header (a magic word, and
//! a generation bumped by every new slot, which tells a process before a
//! fork whether anything was remembered since it looked), then
//! [`SLOTS`] slots of four 64-bit words:
//!
//! ```text
//!  file   the file's identity: a hash of its device, inode, size and
//!         modification time (`stat` of the mapping's path, checked to be
//!         the mapped inode), never 0
//!  site   the offset in the file of the end of the site's `syscall`
//!         (40 bits), the number (12), the site's length from its `mov`
//!         or `xor` to that end (6), its kind (2)
//!  code   a hash of the site's bytes, from its `mov` or `xor` to the end
//!         of its `syscall`, before it was rewritten
//!  check  a hash of the three words above, never 0
//! ```
//!
//! The sites of one file sit from its home slot (a hash of `file`) on, in
//! linear probing, up to the first empty slot: a new image reads only its
//! files' runs. Written and read with raw system calls only (`pread`,
//! `pwrite`: this runs in the SIGSYS handler and in the constructor, and
//! never re-enters atoll, nor can a table cut short by someone raise
//! `SIGBUS` as a shared mapping of it would). Writers take `flock` on it
//! (never waiting long: a stopped holder makes them give up), so two never
//! pick the same empty slot; readers take no lock and drop a
//! slot whose `check` does not match (a write they saw half done). Slots
//! are never freed: a full run ([`MAX_PROBE`]) or table remembers no more.
//!
//! Nothing in the table is trusted: an entry only says where to look.
//! The site's bytes must hash to `code` and then pass every rule of the
//! lazy path (`candidate`, `short_candidate`, the mapping's checks) before
//! they are rewritten; a stale or forged entry costs at most the trap it
//! meant to save.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::raw;

/// The table's name in the runtime directory.
pub const TABLE_NAME: &[u8] = b"sites";
/// Slots in the table.
pub const SLOTS: usize = 4096;
const SLOT_BYTES: usize = 32;
const HEADER_BYTES: usize = 64;
/// Size of the table file (132 KiB).
pub const FILE_BYTES: usize = HEADER_BYTES + SLOTS * SLOT_BYTES;
/// Most slots looked at from a file's home slot.
pub const MAX_PROBE: usize = 512;
/// The header's first word: the layout above.
const MAGIC: u64 = u64::from_le_bytes(*b"atsites1");

/// What sets a site's number (see `decode` and `short`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `mov $nr,%eax`, maybe moves, `syscall`.
    Mov = 1,
    /// `xor %eax,%eax; syscall` (number 0).
    Xor = 2,
    /// `mov %r32,%eax; syscall`, the register holding the number.
    Reg = 3,
}

/// One remembered site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// [`file_key`] of the file.
    pub file: u64,
    /// Offset in the file of the end of the `syscall`.
    pub end: u64,
    pub nr: u32,
    /// Bytes from the `mov` or `xor` to the end of the `syscall`.
    pub len: u8,
    pub kind: Kind,
    /// [`code_hash`] of those bytes.
    pub code: u64,
}

const END_BITS: u32 = 40;
const NR_BITS: u32 = 12;
const LEN_BITS: u32 = 6;

impl Site {
    /// A placeholder (file 0 is no file).
    pub const EMPTY: Site = Site {
        file: 0,
        end: 0,
        nr: 0,
        len: 0,
        kind: Kind::Mov,
        code: 0,
    };

    /// Can this site be written in a slot?
    pub fn fits(&self) -> bool {
        self.file != 0
            && self.end < 1 << END_BITS
            && self.nr < 1 << NR_BITS
            && (self.len as u32) < 1 << LEN_BITS
    }

    /// The slot's four words (the caller checked [`Site::fits`]).
    pub fn encode(&self) -> [u64; 4] {
        let site = self.end
            | (self.nr as u64) << END_BITS
            | (self.len as u64) << (END_BITS + NR_BITS)
            | (self.kind as u64) << (END_BITS + NR_BITS + LEN_BITS);
        [
            self.file,
            site,
            self.code,
            check(self.file, site, self.code),
        ]
    }

    /// The site in a slot, or `None` for an empty slot, one written half
    /// (its check does not match) or one of an unknown kind.
    pub fn decode(w: [u64; 4]) -> Option<Site> {
        if w[0] == 0 || w[3] != check(w[0], w[1], w[2]) {
            return None;
        }
        let field = |shift: u32, bits: u32| (w[1] >> shift) & ((1 << bits) - 1);
        let kind = match field(END_BITS + NR_BITS + LEN_BITS, 2) {
            1 => Kind::Mov,
            2 => Kind::Xor,
            3 => Kind::Reg,
            _ => return None,
        };
        Some(Site {
            file: w[0],
            end: field(0, END_BITS),
            nr: field(END_BITS, NR_BITS) as u32,
            len: field(END_BITS + NR_BITS, LEN_BITS) as u8,
            kind,
            code: w[2],
        })
    }
}

/// The finaliser of SplitMix64: every input bit moves every output bit.
pub const fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn check(file: u64, site: u64, code: u64) -> u64 {
    mix(mix(mix(file) ^ site) ^ code) | 1
}

/// A file's identity as the table keys it: its device and inode, and its
/// size and modification time (a file rewritten in place, or an inode
/// number reused, gives another key). Never 0.
pub fn file_key(dev: u64, ino: u64, size: i64, mtime: i64, mtime_ns: i64) -> u64 {
    let mut h = mix(dev ^ 0x6174_6f6c_6c00_0001);
    for w in [ino, size as u64, mtime as u64, mtime_ns as u64] {
        h = mix(h ^ w);
    }
    h | 1
}

/// FNV-1a of a site's bytes, mixed.
pub fn code_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

fn home(file: u64) -> usize {
    (mix(file ^ 0x5bd1_e995) % SLOTS as u64) as usize
}

/// The table's path, NUL-terminated, set by the constructor.
static mut PATH: [u8; 512] = [0; 512];
static PATH_SET: AtomicBool = AtomicBool::new(false);

/// Use the table beside the boot socket `socket` (`ATOLL_SOCKET`). Called
/// once, by the constructor, before any other thread exists.
pub fn set_table_beside(socket: &[u8]) -> bool {
    let Some(slash) = socket.iter().rposition(|&b| b == b'/') else {
        return false;
    };
    let dir = &socket[..=slash];
    if dir.len() + TABLE_NAME.len() + 1 > 512 {
        return false;
    }
    // SAFETY: written once by the constructor while no other thread exists,
    // before `PATH_SET` publishes it; read-only afterwards.
    unsafe {
        let p = &mut *core::ptr::addr_of_mut!(PATH);
        p[..dir.len()].copy_from_slice(dir);
        p[dir.len()..dir.len() + TABLE_NAME.len()].copy_from_slice(TABLE_NAME);
        p[dir.len() + TABLE_NAME.len()] = 0;
    }
    PATH_SET.store(true, Ordering::Release);
    true
}

/// Is there a table to use (the constructor found the instance's)?
pub fn enabled() -> bool {
    PATH_SET.load(Ordering::Acquire)
}

/// How many sites the table has remembered (its header's second word,
/// bumped by each new slot), or `None` without a table: the test of
/// whether anything new was remembered since a process last looked.
pub fn generation() -> Option<u64> {
    let t = Table::open(libc::O_RDONLY)?;
    let mut b = [0u8; 16];
    (t.pread(&mut b, 0) == 16 && b[..8] == MAGIC.to_le_bytes())
        .then(|| u64::from_le_bytes(b[8..].try_into().unwrap()))
}

/// An open table: closed when dropped.
pub struct Table(i32);

impl Drop for Table {
    fn drop(&mut self) {
        raw::syscall(libc::SYS_close, &[self.0 as u64]);
    }
}

impl Table {
    /// Open the table to read its sites: `None` when there is none yet, or
    /// it is not one (another size, another layout).
    pub fn for_reading() -> Option<Table> {
        let t = Table::open(libc::O_RDONLY)?;
        (t.size()? == FILE_BYTES as i64 && t.word(0)? == MAGIC).then_some(t)
    }

    /// The table's generation (see [`generation`]).
    pub fn generation(&self) -> Option<u64> {
        self.word(8)
    }

    /// Open (or create) the table, locked for writing until dropped.
    /// Not under a file-size limit below the table's size (`ulimit -f`):
    /// sizing it, or a write past the limit, would fail with `EFBIG` and
    /// raise `SIGXFSZ`, which ends the program. Its sites just trap.
    fn for_writing() -> Option<Table> {
        if !file_size_limit_allows(FILE_BYTES as u64) {
            return None;
        }
        let t = Table::open(libc::O_RDWR | libc::O_CREAT)?;
        if !t.lock() {
            return None;
        }
        match t.size()? {
            0 => {
                // New: sized, then marked (under the lock, so once).
                let size = FILE_BYTES as u64;
                if raw::syscall(libc::SYS_ftruncate, &[t.0 as u64, size]) != 0 {
                    return None;
                }
                let magic = MAGIC.to_le_bytes();
                t.pwrite(&magic, 0).then_some(())?;
            }
            s if s != FILE_BYTES as i64 => return None,
            _ => {}
        }
        (t.word(0)? == MAGIC).then_some(t)
    }

    /// Take the writers' lock, without waiting on it: a holder stopped
    /// (a debugger, `SIGSTOP`) must not stop every other program's trap
    /// handler. It is held for a few system calls, so a busy lock is
    /// tried again a while, then given up (the site is not remembered).
    fn lock(&self) -> bool {
        let how = (libc::LOCK_EX | libc::LOCK_NB) as u64;
        for _ in 0..1000 {
            match raw::syscall(libc::SYS_flock, &[self.0 as u64, how]) {
                0 => return true,
                e if e == -(libc::EWOULDBLOCK as i64) || e == -(libc::EINTR as i64) => {
                    raw::syscall(libc::SYS_sched_yield, &[]);
                }
                _ => return false,
            }
        }
        false
    }

    fn open(flags: i32) -> Option<Table> {
        if !enabled() {
            return None;
        }
        let path = core::ptr::addr_of!(PATH) as u64;
        let flags = flags | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        let fd = raw::syscall(libc::SYS_open, &[path, flags as u64, 0o600]);
        (fd >= 0).then_some(Table(fd as i32))
    }

    fn size(&self) -> Option<i64> {
        // SAFETY: `stat` is plain data; the kernel fills it in.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        let st_ptr = &mut st as *mut libc::stat as u64;
        (raw::syscall(libc::SYS_fstat, &[self.0 as u64, st_ptr]) == 0).then_some(st.st_size)
    }

    fn word(&self, at: usize) -> Option<u64> {
        let mut b = [0u8; 8];
        (self.pread(&mut b, at) == 8).then(|| u64::from_le_bytes(b))
    }

    fn pread(&self, buf: &mut [u8], at: usize) -> usize {
        let n = raw::syscall(
            libc::SYS_pread64,
            &[
                self.0 as u64,
                buf.as_mut_ptr() as u64,
                buf.len() as u64,
                at as u64,
            ],
        );
        n.max(0) as usize
    }

    fn pwrite(&self, buf: &[u8], at: usize) -> bool {
        let n = raw::syscall(
            libc::SYS_pwrite64,
            &[
                self.0 as u64,
                buf.as_ptr() as u64,
                buf.len() as u64,
                at as u64,
            ],
        );
        n == buf.len() as i64
    }

    /// Call `each` on the slots of `file`'s run, from its home slot to the
    /// first empty one (included) or [`MAX_PROBE`] slots, until it says
    /// stop (false).
    fn walk(&self, file: u64, mut each: impl FnMut(usize, [u64; 4]) -> bool) {
        const CHUNK: usize = 32;
        let mut buf = [0u8; CHUNK * SLOT_BYTES];
        let mut slot = home(file);
        let mut seen = 0;
        while seen < MAX_PROBE {
            let n = CHUNK.min(SLOTS - slot).min(MAX_PROBE - seen);
            let bytes = n * SLOT_BYTES;
            if self.pread(&mut buf[..bytes], HEADER_BYTES + slot * SLOT_BYTES) != bytes {
                return;
            }
            for (i, s) in buf[..bytes].chunks_exact(SLOT_BYTES).enumerate() {
                let w = core::array::from_fn(|k| {
                    u64::from_le_bytes(s[k * 8..k * 8 + 8].try_into().unwrap())
                });
                if !each(slot + i, w) || w == [0; 4] {
                    return;
                }
            }
            seen += n;
            slot = (slot + n) % SLOTS;
        }
    }

    /// The sites remembered for `file`, into `out`; how many.
    pub fn sites_of(&self, file: u64, out: &mut [Site]) -> usize {
        let mut n = 0;
        self.walk(file, |_, w| {
            if let Some(s) = Site::decode(w).filter(|s| s.file == file) {
                out[n] = s;
                n += 1;
            }
            n < out.len()
        });
        n
    }
}

/// Does this process's `RLIMIT_FSIZE` let it write a file up to `bytes`?
fn file_size_limit_allows(bytes: u64) -> bool {
    let mut limit = [0u64; 2]; // rlim_cur, rlim_max
    let r = raw::syscall(
        libc::SYS_prlimit64,
        &[0, libc::RLIMIT_FSIZE as u64, 0, limit.as_mut_ptr() as u64],
    );
    r == 0 && limit[0] >= bytes
}

/// Remember `site`, unless it is already; false if there was no room (or
/// no table).
pub fn record(site: &Site) -> bool {
    if !site.fits() {
        return false;
    }
    let Some(t) = Table::for_writing() else {
        return false;
    };
    let mut free = None;
    let mut known = false;
    t.walk(site.file, |slot, w| {
        if w == [0; 4] {
            free = Some(slot);
        }
        known |= Site::decode(w) == Some(*site);
        !known
    });
    if known {
        return true;
    }
    let Some(slot) = free else {
        return false;
    };
    let mut bytes = [0u8; SLOT_BYTES];
    for (k, w) in site.encode().iter().enumerate() {
        bytes[k * 8..k * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    if !t.pwrite(&bytes, HEADER_BYTES + slot * SLOT_BYTES) {
        return false;
    }
    let generation = t.word(8).unwrap_or(0).wrapping_add(1);
    t.pwrite(&generation.to_le_bytes(), 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(file: u64, end: u64) -> Site {
        Site {
            file,
            end,
            nr: 257,
            len: 17,
            kind: Kind::Mov,
            code: code_hash(b"\xb8\x01\x01\x00\x00\x0f\x05"),
        }
    }

    #[test]
    fn a_slot_holds_a_site_and_a_torn_or_empty_one_none() {
        let s = site(file_key(0xfd01, 1318, 2_000_000, 1_700_000_000, 5), 0xf82ad);
        assert!(s.fits());
        let w = s.encode();
        assert_eq!(Site::decode(w), Some(s));
        let x = Site {
            kind: Kind::Xor,
            nr: 0,
            len: 4,
            ..s
        };
        assert_eq!(Site::decode(x.encode()), Some(x));
        let r = Site {
            kind: Kind::Reg,
            nr: 231,
            len: 4,
            ..s
        };
        assert_eq!(Site::decode(r.encode()), Some(r));
        for k in 0..4 {
            let mut torn = w;
            torn[k] ^= 1 << 7;
            assert_eq!(Site::decode(torn), None, "word {k}");
        }
        assert_eq!(Site::decode([0; 4]), None);
        assert!(!Site { nr: 4096, ..s }.fits());
        assert!(!Site { end: 1 << 40, ..s }.fits());
        assert!(!Site { len: 64, ..s }.fits());
    }

    #[test]
    fn a_changed_size_or_time_is_another_file() {
        let k = file_key(1, 2, 3, 4, 5);
        assert_ne!(k, 0);
        for other in [
            file_key(9, 2, 3, 4, 5),
            file_key(1, 9, 3, 4, 5),
            file_key(1, 2, 9, 4, 5),
            file_key(1, 2, 3, 9, 5),
            file_key(1, 2, 3, 4, 9),
        ] {
            assert_ne!(k, other);
        }
    }

    /// One table for the tests of this module (the path is process-wide),
    /// in a fresh directory; each test uses files of its own.
    fn table() {
        use std::sync::OnceLock;
        static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
        DIR.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let sock = dir.path().join("boot.sock");
            assert!(set_table_beside(sock.as_os_str().as_encoded_bytes()));
            dir
        });
    }

    /// [`record`], tried again while the writers' lock is busy: under a
    /// loaded machine (tests run in parallel) it may give up, by design.
    fn recorded(site: &Site) -> bool {
        (0..200).any(|_| {
            record(site) || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                false
            }
        })
    }

    fn read(file: u64) -> Vec<Site> {
        let t = Table::for_reading().unwrap();
        let mut out = [site(0, 0); 600];
        let n = t.sites_of(file, &mut out);
        out[..n].to_vec()
    }

    #[test]
    fn sites_recorded_by_racing_threads_are_all_read_back_once() {
        table();
        let file = file_key(7, 7, 7, 7, 7);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for i in 0..50u64 {
                        // Each site twice: the second finds the first.
                        assert!(recorded(&site(file, 1000 * t + i)));
                        assert!(recorded(&site(file, 1000 * t + i)));
                    }
                });
            }
        });
        let mut ends: Vec<u64> = read(file).iter().map(|s| s.end).collect();
        ends.sort();
        let want: Vec<u64> = (0..4u64)
            .flat_map(|t| (0..50).map(move |i| 1000 * t + i))
            .collect();
        assert_eq!(ends, want);
        let size = std::fs::metadata(unsafe_path()).unwrap().len();
        assert_eq!(size, FILE_BYTES as u64);
    }

    #[test]
    fn each_new_site_moves_the_generation_and_a_known_one_does_not() {
        table();
        let file = file_key(11, 11, 11, 11, 11);
        assert!(recorded(&site(file, 1)));
        let g = generation().unwrap();
        assert!(recorded(&site(file, 1)));
        // Other tests may record meanwhile: never backwards, and a new
        // site of this file moves it.
        assert!(generation().unwrap() >= g);
        assert!(recorded(&site(file, 2)));
        assert!(generation().unwrap() > g);
    }

    #[test]
    fn a_run_is_bounded_and_other_files_keep_their_own() {
        table();
        let big = file_key(8, 8, 8, 8, 8);
        let small = file_key(9, 9, 9, 9, 9);
        let mut kept = 0;
        for i in 0..MAX_PROBE as u64 + 10 {
            kept += record(&site(big, i)) as usize;
        }
        assert!(recorded(&site(small, 42)));
        // The probe limit, less what other tests' files took in the run.
        assert!((MAX_PROBE - 250..=MAX_PROBE).contains(&kept), "{kept}");
        assert_eq!(read(big).len(), kept);
        assert_eq!(read(small), vec![site(small, 42)]);
    }

    #[test]
    fn a_slot_overwritten_by_hand_is_skipped_and_the_rest_still_read() {
        table();
        let file = file_key(10, 10, 10, 10, 10);
        for i in 0..3 {
            assert!(recorded(&site(file, i)));
        }
        // Scribble over the middle slot's code word.
        let path = unsafe_path();
        let bytes = std::fs::read(&path).unwrap();
        let mut slot = home(file);
        let mut found = 0;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::os::unix::fs::FileExt;
        while found < 2 {
            let at = HEADER_BYTES + slot * SLOT_BYTES;
            let w: [u64; 4] = core::array::from_fn(|k| {
                u64::from_le_bytes(bytes[at + 8 * k..at + 8 * k + 8].try_into().unwrap())
            });
            if Site::decode(w).is_some_and(|s| s.file == file) {
                found += 1;
                if found == 2 {
                    f.write_all_at(&[0xee; 8], (at + 16) as u64).unwrap();
                }
            }
            slot = (slot + 1) % SLOTS;
        }
        drop(f);
        assert_eq!(read(file).len(), 2);
    }

    fn unsafe_path() -> std::path::PathBuf {
        // SAFETY: set once before the tests read it (`table`).
        let p = unsafe { &*core::ptr::addr_of!(PATH) };
        let len = p.iter().position(|&b| b == 0).unwrap();
        std::path::PathBuf::from(std::str::from_utf8(&p[..len]).unwrap())
    }
}
