//! `fsx`: a randomized file data test in the style of Apple's and Linux's
//! fsx. Random reads and writes (also vectored), holes, truncates,
//! `fallocate`s, shared mappings, appends, reopens and syncs run against a
//! file while an in-memory model says what the file must hold; the size is
//! checked after every step and the whole content periodically and at the
//! end.
//!
//! ```text
//! fsx [--seed N] [--ops N] [--procs N] [--mode own|append] [--max-size B]
//!     [--max-op B] [--max-record B] [--check-every N] [--no-mmap]
//!     [--keep-map] [--shared-fd] [--trace] PATH
//! ```
//!
//! * `--mode own` (default): each of `--procs` processes owns a file
//!   (`PATH` for one process, `PATH.<i>` for several) and runs `--ops`
//!   operations on it.
//! * `--mode append`: the processes share `PATH`, opened with `O_APPEND`,
//!   and append self-describing records (process, sequence number, length,
//!   payload derived from the seed). Each reads its own records back where
//!   the kernel put them; at the end the parent parses the whole file: every
//!   record intact, each process's records all there and in order, however
//!   the processes interleaved. With `--shared-fd` they share one
//!   description the parent opened before forking (a reopen becomes a
//!   `dup`), so nobody knows where a record landed and only the final
//!   check and the size are checked.
//!
//! Everything follows from the seed (printed at start, process `i` uses a
//! seed derived from it), so a failure is reproduced by the same command
//! line. On a mismatch the tool prints the first differing offset and the
//! last 20 operations and exits with status 1.
//!
//! In this file: arguments, the random generator and checks, then `Own`
//! (one process on its own file: the operation mix, one arm per kind
//! of step, the model), the appenders and the final parse of their file,
//! and `main`, which forks the processes and collects their verdicts.
//!
//! Only what a file system on one machine must do is checked, so the same
//! run passes on tmpfs: `fallocate` modes the file system refuses with
//! `EOPNOTSUPP` (tmpfs: zero-range) are skipped and listed in the summary,
//! and by default mappings are made and removed within one step.
//! `--no-mmap` is for atoll's `--incoherent` mode, which gives close-to-open
//! consistency and does not emulate shared mappings. `--keep-map` adds a
//! shared mapping of the whole file that lives across steps (remade now
//! and then at the file's current length) and is read and written within
//! the file's size while writes, truncates and punches change the file
//! underneath, as Linux's page cache keeps it coherent.

use std::collections::VecDeque;
use std::ffi::CString;
use std::fmt;
use std::time::Instant;

const PAGE: u64 = 4096;
/// Operations shown when a check fails.
const LOG_TAIL: usize = 20;

struct Config {
    path: String,
    seed: u64,
    ops: u64,
    procs: u32,
    append: bool,
    max_size: u64,
    max_op: u64,
    check_every: u64,
    mmap: bool,
    /// Keep a shared mapping across steps (`--keep-map`).
    keep_map: bool,
    /// `--mode append`: the processes inherit one description.
    shared_fd: bool,
    /// Print every operation to stderr as it starts.
    trace: bool,
    /// Longest payload of an appended record (`--mode append`).
    max_record: u64,
}

fn usage() -> ! {
    eprintln!(
        "usage: fsx [--seed N] [--ops N] [--procs N] [--mode own|append] [--max-size BYTES] \
         [--max-op BYTES] [--max-record BYTES] [--check-every N] [--no-mmap] [--keep-map] [--shared-fd] [--trace] PATH"
    );
    std::process::exit(2)
}

fn parse_args() -> Config {
    let mut cfg = Config {
        path: String::new(),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        ops: 10_000,
        procs: 1,
        append: false,
        max_size: 1 << 20,
        max_op: 64 << 10,
        check_every: 1000,
        mmap: true,
        keep_map: false,
        shared_fd: false,
        trace: false,
        max_record: 256,
    };
    let mut args = std::env::args().skip(1);
    let num =
        |v: Option<String>| -> u64 { v.and_then(|s| s.parse().ok()).unwrap_or_else(|| usage()) };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => cfg.seed = num(args.next()),
            "--ops" => cfg.ops = num(args.next()),
            "--procs" => cfg.procs = num(args.next()).clamp(1, 64) as u32,
            "--max-size" => cfg.max_size = num(args.next()).max(PAGE),
            "--max-op" => cfg.max_op = num(args.next()).max(1),
            "--check-every" => cfg.check_every = num(args.next()).max(1),
            "--max-record" => cfg.max_record = num(args.next()).clamp(1, 1 << 20),
            "--no-mmap" => cfg.mmap = false,
            "--keep-map" => cfg.keep_map = true,
            "--trace" => cfg.trace = true,
            "--shared-fd" => cfg.shared_fd = true,
            "--mode" => match args.next().as_deref() {
                Some("own") => cfg.append = false,
                Some("append") => cfg.append = true,
                _ => usage(),
            },
            p if !p.starts_with('-') && cfg.path.is_empty() => cfg.path = p.to_string(),
            _ => usage(),
        }
    }
    if cfg.path.is_empty() {
        usage();
    }
    cfg.max_op = cfg.max_op.min(cfg.max_size);
    cfg
}

/// splitmix64: small, fast, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, n)` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Process `proc`'s own seed: processes must not run the same sequence.
fn proc_seed(seed: u64, proc: u32) -> u64 {
    Rng(seed ^ (u64::from(proc) << 32 | 0x5157)).next()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn err_str(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

fn cstr(path: &str) -> CString {
    CString::new(path).expect("path without NUL")
}

/// One logged operation: what it was, where, how long, and a detail
/// (fallocate mode, pieces of a vectored transfer, …; a truncate's new
/// size is its `off`).
#[derive(Clone, Copy)]
struct Op {
    n: u64,
    kind: &'static str,
    off: u64,
    len: u64,
    detail: u64,
    /// The model's size after the step (before it, for a step that failed).
    size_after: u64,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{:<7} {:<12} off {:#9x} len {:#7x} detail {:#x} -> size {:#x}",
            self.n, self.kind, self.off, self.len, self.detail, self.size_after
        )
    }
}

/// A failed check, described (a content mismatch names the first differing
/// offset).
struct Failure(String);

type Res<T = ()> = Result<T, Failure>;

fn fail<T>(msg: impl Into<String>) -> Res<T> {
    Err(Failure(msg.into()))
}

/// A system call result that must not be an error.
fn ok(what: &str, r: isize) -> Res<u64> {
    if r < 0 {
        fail(format!("{what}: {}", err_str(errno())))
    } else {
        Ok(r as u64)
    }
}

fn pread_full(fd: i32, buf: &mut [u8], off: u64) -> Res<usize> {
    let mut done = 0;
    while done < buf.len() {
        let r = unsafe {
            libc::pread(
                fd,
                buf[done..].as_mut_ptr().cast(),
                buf.len() - done,
                (off + done as u64) as libc::off_t,
            )
        };
        let r = ok("pread", r)? as usize;
        if r == 0 {
            break;
        }
        done += r;
    }
    Ok(done)
}

/// The file's size according to `fstat`.
fn fsize(fd: i32) -> Res<u64> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    ok("fstat", unsafe { libc::fstat(fd, &mut st) } as isize)?;
    Ok(st.st_size as u64)
}

/// First offset where `got` differs from `want` (both starting at `base`).
fn compare(what: &str, base: u64, want: &[u8], got: &[u8]) -> Res {
    if let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) {
        return fail(format!(
            "{what}: data differs at offset {:#x} (file {:#04x}, model {:#04x}), \
             range {:#x}+{:#x}",
            base + i as u64,
            got[i],
            want[i],
            base,
            want.len()
        ));
    }
    if got.len() != want.len() {
        return fail(format!(
            "{what}: short: got {:#x} bytes of {:#x} at {:#x}",
            got.len(),
            want.len(),
            base
        ));
    }
    Ok(())
}

/// The kinds of step of `--mode own`, with their weights.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Write,
    PWrite,
    Read,
    PRead,
    ReadV,
    WriteV,
    MapRead,
    MapWrite,
    KeepMapRead,
    KeepMapWrite,
    Remap,
    Truncate,
    Fallocate,
    Append,
    Reopen,
    Fsync,
    SeekData,
}

const MIX: &[(Kind, u64)] = &[
    (Kind::Write, 12),
    (Kind::PWrite, 12),
    (Kind::Read, 10),
    (Kind::PRead, 10),
    (Kind::ReadV, 4),
    (Kind::WriteV, 4),
    (Kind::MapRead, 6),
    (Kind::MapWrite, 6),
    (Kind::KeepMapRead, 6),
    (Kind::KeepMapWrite, 6),
    (Kind::Remap, 1),
    (Kind::Truncate, 6),
    (Kind::Fallocate, 6),
    (Kind::Append, 6),
    (Kind::Reopen, 2),
    (Kind::Fsync, 2),
    (Kind::SeekData, 2),
];

/// `fallocate` modes tried; each is dropped after its first `EOPNOTSUPP`.
const FALLOC_MODES: &[(i32, &str)] = &[
    (0, "allocate"),
    (libc::FALLOC_FL_KEEP_SIZE, "keep-size"),
    (
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        "punch-hole",
    ),
    (libc::FALLOC_FL_ZERO_RANGE, "zero-range"),
    (
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        "zero-range-keep-size",
    ),
];

/// One process's run on its own file (`--mode own`).
struct Own<'c> {
    cfg: &'c Config,
    path: CString,
    rng: Rng,
    model: Vec<u8>,
    fd: i32,
    /// A second description with `O_APPEND`, opened on first use.
    afd: i32,
    log: VecDeque<Op>,
    n: u64,
    unsupported: [bool; FALLOC_MODES.len()],
    buf: Vec<u8>,
    /// `--keep-map`: a shared mapping of the file's first `len` bytes
    /// (whole pages, made when it was at least that long) kept across
    /// steps, through which the file is read and written.
    /// Read-only half of the time (`writable` false), as a program that
    /// only reads would map it.
    kept: Option<(*mut u8, usize, bool)>,
}

impl<'c> Own<'c> {
    fn open(&self, flags: i32) -> Res<i32> {
        let fd = unsafe { libc::open(self.path.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
        ok("open", fd as isize).map(|fd| fd as i32)
    }

    fn size(&self) -> u64 {
        self.model.len() as u64
    }

    /// An operation's range: mostly within or just past the file, sometimes
    /// far beyond its end (a hole), never past `--max-size`.
    fn range(&mut self, past_eof: bool) -> (u64, u64) {
        let max = self.cfg.max_size;
        let size = self.size();
        let off = if past_eof && self.rng.below(8) == 0 {
            size + self.rng.below(max - size.min(max) + 1)
        } else {
            self.rng.below(size + 1)
        }
        .min(max - 1);
        // Short operations are more frequent: they hit block edges more.
        let cap = if self.rng.below(4) == 0 {
            self.cfg.max_op
        } else {
            (self.cfg.max_op / 16).max(1)
        };
        let len = (1 + self.rng.below(cap)).min(max - off);
        (off, len)
    }

    fn set_len(&mut self, len: u64) {
        self.model.resize(len as usize, 0);
    }

    fn model_write(&mut self, off: u64, data: &[u8]) {
        let end = off as usize + data.len();
        if end > self.model.len() {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(data);
    }

    fn fresh_data(&mut self, len: u64) -> Vec<u8> {
        let mut d = vec![0u8; len as usize];
        self.rng.fill(&mut d);
        d
    }

    fn write_all(&self, fd: i32, data: &[u8], what: &str) -> Res {
        let r = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        let r = ok(what, r)?;
        if r != data.len() as u64 {
            return fail(format!("{what}: short write {r} of {}", data.len()));
        }
        Ok(())
    }

    /// Read `[off, off+len)` with `read` or `pread` and compare with the
    /// model (a range past the end must read short, as the model says).
    fn check_read(&mut self, off: u64, len: u64, positional: bool) -> Res {
        self.buf.resize(len as usize, 0);
        let got = if positional {
            let mut b = std::mem::take(&mut self.buf);
            let r = pread_full(self.fd, &mut b, off);
            self.buf = b;
            r?
        } else {
            let r = unsafe { libc::lseek(self.fd, off as libc::off_t, libc::SEEK_SET) };
            ok("lseek", r as isize)?;
            let r = unsafe { libc::read(self.fd, self.buf.as_mut_ptr().cast(), len as usize) };
            let r = ok("read", r)? as usize;
            // One read of a regular file returns everything up to the end.
            let pos = unsafe { libc::lseek(self.fd, 0, libc::SEEK_CUR) };
            if pos as u64 != off + r as u64 {
                return fail(format!(
                    "read: offset {pos:#x} after reading {r:#x} at {off:#x}"
                ));
            }
            r
        };
        let lo = (off as usize).min(self.model.len());
        let hi = (off + len).min(self.size()) as usize;
        compare(
            if positional { "pread" } else { "read" },
            off,
            &self.model[lo..hi],
            &self.buf[..got],
        )
    }

    fn check_all(&mut self, what: &str) -> Res {
        let size = fsize(self.fd)?;
        if size != self.size() {
            return fail(format!("{what}: size {size:#x}, model {:#x}", self.size()));
        }
        let mut b = vec![0u8; self.model.len()];
        let got = pread_full(self.fd, &mut b, 0)?;
        compare(what, 0, &self.model, &b[..got])
    }

    /// One random step of `kind`. The step is noted in the log (with its
    /// parameters) before its system calls run, so a failing step is the
    /// last line of the log tail.
    fn step(&mut self, kind: Kind) -> Res {
        match kind {
            Kind::Write | Kind::PWrite => {
                let (off, len) = self.range(true);
                let data = self.fresh_data(len);
                if kind == Kind::Write {
                    self.note("write", off, len, 0);
                    let r = unsafe { libc::lseek(self.fd, off as libc::off_t, libc::SEEK_SET) };
                    ok("lseek", r as isize)?;
                    self.write_all(self.fd, &data, "write")?;
                } else {
                    self.note("pwrite", off, len, 0);
                    let r = unsafe {
                        libc::pwrite(
                            self.fd,
                            data.as_ptr().cast(),
                            data.len(),
                            off as libc::off_t,
                        )
                    };
                    if ok("pwrite", r)? != len {
                        return fail(format!("pwrite: short write {r} of {len}"));
                    }
                }
                self.model_write(off, &data);
            }
            Kind::Read | Kind::PRead => {
                let (off, len) = self.range(true);
                let positional = kind == Kind::PRead;
                self.note(if positional { "pread" } else { "read" }, off, len, 0);
                self.check_read(off, len, positional)?;
            }
            Kind::WriteV => {
                let (off, len) = self.range(true);
                let data = self.fresh_data(len);
                let cuts = self.cuts(len);
                self.note("pwritev", off, len, cuts.len() as u64);
                let iov: Vec<libc::iovec> = cuts
                    .windows(2)
                    .map(|w| libc::iovec {
                        iov_base: data[w[0]..].as_ptr() as *mut libc::c_void,
                        iov_len: w[1] - w[0],
                    })
                    .collect();
                let r = unsafe {
                    libc::pwritev(self.fd, iov.as_ptr(), iov.len() as i32, off as libc::off_t)
                };
                if ok("pwritev", r)? != len {
                    return fail(format!("pwritev: short write {r} of {len}"));
                }
                self.model_write(off, &data);
            }
            Kind::ReadV => {
                let (off, len) = self.range(true);
                let cuts = self.cuts(len);
                self.note("preadv", off, len, cuts.len() as u64);
                let mut b = vec![0u8; len as usize];
                let iov: Vec<libc::iovec> = cuts
                    .windows(2)
                    .map(|w| libc::iovec {
                        iov_base: b[w[0]..].as_mut_ptr().cast(),
                        iov_len: w[1] - w[0],
                    })
                    .collect();
                let r = unsafe {
                    libc::preadv(self.fd, iov.as_ptr(), iov.len() as i32, off as libc::off_t)
                };
                let got = ok("preadv", r)? as usize;
                let lo = (off as usize).min(self.model.len());
                let hi = (off + len).min(self.size()) as usize;
                compare("preadv", off, &self.model[lo..hi], &b[..got])?;
            }
            Kind::MapRead => {
                if self.size() == 0 {
                    self.note("mapread-skip", 0, 0, 0);
                    return Ok(());
                }
                let off = self.rng.below(self.size());
                let len = (1 + self.rng.below(self.cfg.max_op)).min(self.size() - off);
                self.note("mapread", off, len, 0);
                self.map_read(off, len)?;
            }
            Kind::MapWrite => {
                let (off, len) = self.range(true);
                // A store cannot extend a file: grow it first, as fsx does.
                let grow = off + len > self.size();
                self.note("mapwrite", off, len, grow as u64);
                if grow {
                    let r = unsafe { libc::ftruncate(self.fd, (off + len) as libc::off_t) };
                    ok("ftruncate before mapwrite", r as isize)?;
                    self.set_len(off + len);
                }
                let data = self.fresh_data(len);
                self.map_write(off, &data)?;
                self.model_write(off, &data);
            }
            Kind::KeepMapRead | Kind::KeepMapWrite => {
                // Only bytes inside the file: past its last page a store or
                // load faults (SIGBUS), as on Linux.
                let Some((p, maplen, writable)) = self.kept else {
                    self.note("keepmap-none", 0, 0, 0);
                    return Ok(());
                };
                let limit = (maplen as u64).min(self.size());
                if limit == 0 {
                    self.note("keepmap-skip", 0, 0, 0);
                    return Ok(());
                }
                let off = self.rng.below(limit);
                let len = (1 + self.rng.below(self.cfg.max_op / 16 + 1)).min(limit - off);
                // SAFETY: `[off, off+len)` is inside the mapping and the file.
                let mapped =
                    unsafe { std::slice::from_raw_parts_mut(p.add(off as usize), len as usize) };
                if kind == Kind::KeepMapRead || !writable {
                    self.note("keepmapread", off, len, maplen as u64);
                    compare(
                        "keepmapread",
                        off,
                        &self.model[off as usize..(off + len) as usize],
                        mapped,
                    )?;
                } else {
                    self.note("keepmapwrite", off, len, maplen as u64);
                    let data = self.fresh_data(len);
                    mapped.copy_from_slice(&data);
                    self.model_write(off, &data);
                }
            }
            Kind::Remap => {
                self.note("remap", 0, self.size(), 0);
                self.remap()?;
            }
            Kind::Truncate => {
                let new = if self.rng.below(2) == 0 {
                    self.rng.below(self.size() + 1)
                } else {
                    self.rng.below(self.cfg.max_size + 1)
                };
                self.note("truncate", new, 0, 0);
                let r = unsafe { libc::ftruncate(self.fd, new as libc::off_t) };
                ok("ftruncate", r as isize)?;
                self.set_len(new);
            }
            Kind::Fallocate => {
                let i = self.rng.below(FALLOC_MODES.len() as u64) as usize;
                let (mode, name) = FALLOC_MODES[i];
                let (off, len) = self.range(true);
                if self.unsupported[i] {
                    self.note("falloc-skip", off, len, mode as u64);
                    return Ok(());
                }
                self.note(name, off, len, mode as u64);
                let r = unsafe {
                    libc::fallocate(self.fd, mode, off as libc::off_t, len as libc::off_t)
                };
                if r < 0 {
                    let e = errno();
                    if e == libc::EOPNOTSUPP {
                        self.unsupported[i] = true;
                        return Ok(());
                    }
                    return fail(format!("fallocate {name}: {}", err_str(e)));
                }
                let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
                let zero = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
                let end = off + len;
                if zero {
                    let hi = end.min(self.size());
                    if off < hi {
                        self.model[off as usize..hi as usize].fill(0);
                    }
                }
                if !keep && end > self.size() {
                    self.set_len(end);
                }
            }
            Kind::Append => {
                let len = (1 + self.rng.below((self.cfg.max_op / 16).max(1)))
                    .min(self.cfg.max_size.saturating_sub(self.size()));
                if len == 0 {
                    self.note("append-skip", 0, 0, 0);
                    return Ok(());
                }
                let off = self.size();
                let seek = self.rng.below(off + 1);
                let data = self.fresh_data(len);
                self.note("append", off, len, seek);
                if self.afd < 0 {
                    self.afd = self.open(libc::O_RDWR | libc::O_APPEND)?;
                }
                // O_APPEND writes at the end whatever the offset says.
                let r = unsafe { libc::lseek(self.afd, seek as libc::off_t, libc::SEEK_SET) };
                ok("lseek", r as isize)?;
                self.write_all(self.afd, &data, "append")?;
                let pos = unsafe { libc::lseek(self.afd, 0, libc::SEEK_CUR) } as u64;
                if pos != off + len {
                    return fail(format!(
                        "append: offset {pos:#x} after appending {len:#x} at {off:#x}"
                    ));
                }
                self.model_write(off, &data);
            }
            Kind::Reopen => {
                let trunc = self.rng.below(16) == 0;
                self.note("reopen", 0, 0, trunc as u64);
                unsafe { libc::close(self.fd) };
                if self.afd >= 0 {
                    unsafe { libc::close(self.afd) };
                    self.afd = -1;
                }
                self.fd = self.open(libc::O_RDWR | if trunc { libc::O_TRUNC } else { 0 })?;
                if trunc {
                    self.set_len(0);
                }
                if self.cfg.keep_map && self.rng.below(2) == 0 {
                    self.remap()?;
                }
            }
            Kind::Fsync => {
                let data_only = self.rng.below(2) == 0;
                self.note(if data_only { "fdatasync" } else { "fsync" }, 0, 0, 0);
                let r = unsafe {
                    if data_only {
                        libc::fdatasync(self.fd)
                    } else {
                        libc::fsync(self.fd)
                    }
                };
                ok("fsync", r as isize)?;
            }
            Kind::SeekData => {
                let off = self.rng.below(self.size() + 1);
                self.note("seekdata", off, 0, 0);
                self.check_seek(off)?;
            }
        }
        Ok(())
    }

    /// Split points of a vectored transfer of `len` bytes: `0`, up to three
    /// inner cuts (possibly empty pieces, which must be harmless), `len`.
    fn cuts(&mut self, len: u64) -> Vec<usize> {
        let mut c: Vec<usize> = (0..self.rng.below(4))
            .map(|_| self.rng.below(len + 1) as usize)
            .collect();
        c.push(0);
        c.push(len as usize);
        c.sort_unstable();
        c
    }

    /// `SEEK_DATA`/`SEEK_HOLE` may report holes at any granularity (or
    /// none), but what they skip must read as zeros and stay inside the
    /// file.
    fn check_seek(&mut self, off: u64) -> Res {
        let size = self.size();
        let data = unsafe { libc::lseek(self.fd, off as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let e = errno();
            if e != libc::ENXIO {
                return fail(format!("SEEK_DATA {off:#x}: {}", err_str(e)));
            }
            // No data from `off` on: all zeros up to the end.
            if let Some(i) = self.model[off as usize..].iter().position(|&b| b != 0) {
                return fail(format!(
                    "SEEK_DATA {off:#x}: ENXIO but the model holds data at {:#x}",
                    off + i as u64
                ));
            }
            return Ok(());
        }
        let data = data as u64;
        if data < off || data > size {
            return fail(format!(
                "SEEK_DATA {off:#x} gave {data:#x} (size {size:#x})"
            ));
        }
        if let Some(i) = self.model[off as usize..data as usize]
            .iter()
            .position(|&b| b != 0)
        {
            return fail(format!(
                "SEEK_DATA {off:#x} skipped to {data:#x} past data at {:#x}",
                off + i as u64
            ));
        }
        let hole = unsafe { libc::lseek(self.fd, data as libc::off_t, libc::SEEK_HOLE) };
        let hole = ok("SEEK_HOLE", hole as isize)?;
        if hole < data || hole > size {
            return fail(format!(
                "SEEK_HOLE {data:#x} gave {hole:#x} (size {size:#x})"
            ));
        }
        Ok(())
    }

    fn map_read(&mut self, off: u64, len: u64) -> Res {
        let pg = off & !(PAGE - 1);
        let maplen = (off + len - pg) as usize;
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                maplen,
                libc::PROT_READ,
                libc::MAP_SHARED,
                self.fd,
                pg as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return fail(format!("mmap read: {}", err_str(errno())));
        }
        let got = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), maplen) };
        let res = compare(
            "mapread",
            off,
            &self.model[off as usize..(off + len) as usize],
            &got[(off - pg) as usize..],
        )
        .and_then(|()| {
            // The end of the file's last page reads as zeros in a mapping.
            let size = self.size();
            let map_end = pg + maplen as u64;
            let last_page_end = (map_end + PAGE - 1) & !(PAGE - 1);
            if size < last_page_end && !size.is_multiple_of(PAGE) {
                let tail = unsafe {
                    std::slice::from_raw_parts(
                        p.cast::<u8>().add((size - pg) as usize),
                        (last_page_end - size) as usize,
                    )
                };
                if let Some(i) = tail.iter().position(|&b| b != 0) {
                    return fail(format!(
                        "mapread: byte {:#x} past the end ({size:#x}) of the last page is {:#04x}",
                        size + i as u64,
                        tail[i]
                    ));
                }
            }
            Ok(())
        });
        unsafe { libc::munmap(p, maplen) };
        res
    }

    fn map_write(&mut self, off: u64, data: &[u8]) -> Res {
        let pg = off & !(PAGE - 1);
        let maplen = (off - pg) as usize + data.len();
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                maplen,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd,
                pg as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return fail(format!("mmap write: {}", err_str(errno())));
        }
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                p.cast::<u8>().add((off - pg) as usize),
                data.len(),
            );
        }
        let flags = if self.rng.below(2) == 0 {
            libc::MS_SYNC
        } else {
            libc::MS_ASYNC
        };
        let r = unsafe { libc::msync(p, maplen, flags) };
        let e = errno();
        unsafe { libc::munmap(p, maplen) };
        if r < 0 {
            return fail(format!("msync: {}", err_str(e)));
        }
        Ok(())
    }

    /// Replace the kept mapping by one of the file as long as it is now
    /// (none for an empty file).
    fn remap(&mut self) -> Res {
        if let Some((p, len, _)) = self.kept.take() {
            unsafe { libc::munmap(p.cast(), len) };
        }
        let len = self.size().next_multiple_of(PAGE) as usize;
        if len == 0 {
            return Ok(());
        }
        let writable = self.rng.below(2) == 0;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                self.fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return fail(format!("mmap (kept): {}", err_str(errno())));
        }
        self.kept = Some((p.cast(), len, writable));
        Ok(())
    }

    fn pick(&mut self) -> Kind {
        let usable = |k: Kind| match k {
            Kind::MapRead | Kind::MapWrite => self.cfg.mmap,
            Kind::KeepMapRead | Kind::KeepMapWrite | Kind::Remap => self.cfg.keep_map,
            _ => true,
        };
        let total: u64 = MIX.iter().filter(|(k, _)| usable(*k)).map(|(_, w)| w).sum();
        let mut x = self.rng.below(total);
        for &(k, w) in MIX.iter().filter(|(k, _)| usable(*k)) {
            if x < w {
                return k;
            }
            x -= w;
        }
        unreachable!("weights cover the range")
    }

    fn run(&mut self) -> Res {
        self.fd = self.open(libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC)?;
        while self.n < self.cfg.ops {
            self.n += 1;
            let kind = self.pick();
            self.step(kind)?;
            let model_size = self.size();
            if let Some(op) = self.log.back_mut() {
                op.size_after = model_size;
            }
            let size = fsize(self.fd)?;
            if size != self.size() {
                return fail(format!(
                    "size {size:#x} after the step, model {:#x}",
                    self.size()
                ));
            }
            if self.n.is_multiple_of(self.cfg.check_every) {
                self.check_all("full check")?;
            }
        }
        self.check_all("final check")?;
        // Close-to-open: a new description sees the same bytes.
        unsafe { libc::close(self.fd) };
        if self.afd >= 0 {
            unsafe { libc::close(self.afd) };
            self.afd = -1;
        }
        self.fd = self.open(libc::O_RDONLY)?;
        self.check_all("check after reopen")?;
        unsafe { libc::close(self.fd) };
        Ok(())
    }

    fn note(&mut self, kind: &'static str, off: u64, len: u64, detail: u64) {
        if self.log.len() == LOG_TAIL {
            self.log.pop_front();
        }
        self.log.push_back(Op {
            n: self.n,
            kind,
            off,
            len,
            detail,
            size_after: self.size(),
        });
        if self.cfg.trace {
            eprintln!("{}", self.log.back().expect("just pushed"));
        }
    }
}

fn own_worker(cfg: &Config, proc: u32) -> bool {
    let path = if cfg.procs == 1 {
        cfg.path.clone()
    } else {
        format!("{}.{proc}", cfg.path)
    };
    let mut w = Own {
        cfg,
        path: cstr(&path),
        rng: Rng(proc_seed(cfg.seed, proc)),
        model: Vec::new(),
        fd: -1,
        afd: -1,
        log: VecDeque::new(),
        n: 0,
        unsupported: [false; FALLOC_MODES.len()],
        buf: Vec::new(),
        kept: None,
    };
    match w.run() {
        Ok(()) => {
            let nosup: Vec<&str> = FALLOC_MODES
                .iter()
                .zip(w.unsupported)
                .filter(|(_, u)| *u)
                .map(|((_, name), _)| *name)
                .collect();
            println!(
                "fsx[{proc}]: {path}: {} operations passed, final size {:#x}, \
                 fallocate modes refused: {}",
                cfg.ops,
                w.size(),
                if nosup.is_empty() {
                    "none".to_string()
                } else {
                    nosup.join(",")
                }
            );
            true
        }
        Err(Failure(msg)) => {
            eprintln!(
                "fsx[{proc}]: {path}: FAILED at operation {} (seed {}): {msg}",
                w.n, cfg.seed
            );
            eprintln!("fsx[{proc}]: last {} operations:", w.log.len());
            for op in &w.log {
                eprintln!("  {op}");
            }
            false
        }
    }
}

/// Record header of `--mode append`: magic, process, sequence, length.
const MAGIC: u32 = 0x4653_5841;
const HDR: usize = 16;

fn record(seed: u64, proc: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(HDR + len);
    r.extend_from_slice(&MAGIC.to_le_bytes());
    r.extend_from_slice(&proc.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&(len as u32).to_le_bytes());
    let mut payload = vec![0u8; len];
    Rng(proc_seed(seed, proc) ^ (u64::from(seq) << 20)).fill(&mut payload);
    r.extend_from_slice(&payload);
    r
}

/// One appending process: appends records, reads its own back where the
/// returned offset says they landed, checks that the size never shrinks.
fn append_worker(cfg: &Config, proc: u32, inherited: Option<i32>) -> bool {
    let path = cstr(&cfg.path);
    let mut rng = Rng(proc_seed(cfg.seed, proc));
    // (offset, sequence, length); the offset is unknown for records
    // appended through a description other processes share, whose offset
    // they move at any time.
    let mut mine: Vec<(Option<u64>, u32, usize)> = Vec::new();
    let mut last_known_end = 0;
    let mut log: VecDeque<Op> = VecDeque::new();
    let mut last_size = 0;
    let mut n = 0;
    let open = || -> Res<i32> {
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                0o644,
            )
        };
        ok("open", fd as isize).map(|f| f as i32)
    };
    let mut run = || -> Res {
        let mut fd = match inherited {
            Some(fd) => fd,
            None => open()?,
        };
        let shared = inherited.is_some();
        let max_len = cfg.max_record as usize;
        while n < cfg.ops {
            n += 1;
            let x = rng.below(100);
            let mut op = Op {
                n,
                kind: "append",
                off: 0,
                len: 0,
                detail: 0,
                size_after: 0,
            };
            if x < 70 {
                let seq = mine.len() as u32;
                let rec = record(cfg.seed, proc, seq, 1 + rng.below(max_len as u64) as usize);
                let r = unsafe { libc::write(fd, rec.as_ptr().cast(), rec.len()) };
                if ok("append", r)? != rec.len() as u64 {
                    return fail(format!("append: short write {r} of {}", rec.len()));
                }
                let start = if shared {
                    None
                } else {
                    let end = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) } as u64;
                    let start = end.wrapping_sub(rec.len() as u64);
                    if start < last_known_end {
                        return fail(format!(
                            "append: record {seq} at {start:#x} precedes the end \
                             {last_known_end:#x} of an earlier one"
                        ));
                    }
                    last_known_end = end;
                    Some(start)
                };
                mine.push((start, seq, rec.len()));
                op.off = start.unwrap_or(u64::MAX);
                op.len = rec.len() as u64;
                op.detail = u64::from(seq);
            } else if x < 85 && !mine.is_empty() {
                let (off, seq, len) = mine[rng.below(mine.len() as u64) as usize];
                op.kind = "readback-skip";
                op.len = len as u64;
                op.detail = u64::from(seq);
                if let Some(off) = off {
                    op.kind = "readback";
                    op.off = off;
                    let want = record(cfg.seed, proc, seq, len - HDR);
                    let mut got = vec![0u8; len];
                    let r = pread_full(fd, &mut got, off)?;
                    compare("read back own record", off, &want, &got[..r])?;
                }
            } else if x < 92 {
                ok("fsync", unsafe { libc::fsync(fd) } as isize)?;
                op.kind = "fsync";
            } else {
                if shared {
                    // Stay on the shared description: a new number for it.
                    let new = ok("dup", unsafe { libc::dup(fd) } as isize)? as i32;
                    unsafe { libc::close(fd) };
                    fd = new;
                    op.kind = "dup";
                } else {
                    unsafe { libc::close(fd) };
                    fd = open()?;
                    op.kind = "reopen";
                }
            }
            let size = fsize(fd)?;
            if size < last_size || size < last_known_end {
                return fail(format!(
                    "size {size:#x}: was {last_size:#x}, own records end at {last_known_end:#x}"
                ));
            }
            last_size = size;
            op.size_after = size;
            if log.len() == LOG_TAIL {
                log.pop_front();
            }
            log.push_back(op);
        }
        unsafe { libc::close(fd) };
        Ok(())
    };
    match run() {
        Ok(()) => {
            println!(
                "fsx[{proc}]: {}: {} operations passed, {} records appended",
                cfg.path,
                cfg.ops,
                mine.len()
            );
            true
        }
        Err(Failure(msg)) => {
            eprintln!(
                "fsx[{proc}]: {}: FAILED at operation {n} (seed {}): {msg}",
                cfg.path, cfg.seed
            );
            eprintln!("fsx[{proc}]: last {} operations:", log.len());
            for op in &log {
                eprintln!("  {op}");
            }
            false
        }
    }
}

/// After every appender exited: the file is exactly the records, each
/// intact, every process's in order and none missing. The processes'
/// record counts are recomputed from the seed.
fn verify_appends(cfg: &Config) -> Res {
    let expected: Vec<u32> = (0..cfg.procs)
        .map(|p| {
            // Replay each worker's choices to know how many records it made.
            let mut rng = Rng(proc_seed(cfg.seed, p));
            let max_len = cfg.max_record;
            let mut count = 0u32;
            for _ in 0..cfg.ops {
                let x = rng.below(100);
                if x < 70 {
                    rng.below(max_len);
                    count += 1;
                } else if x < 85 && count > 0 {
                    rng.below(u64::from(count));
                }
            }
            count
        })
        .collect();
    let fd = unsafe { libc::open(cstr(&cfg.path).as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let fd = ok("open for verification", fd as isize)? as i32;
    let size = fsize(fd)?;
    let mut data = vec![0u8; size as usize];
    let got = pread_full(fd, &mut data, 0)?;
    unsafe { libc::close(fd) };
    if got as u64 != size {
        return fail(format!("verification read {got:#x} of {size:#x} bytes"));
    }
    let mut next = vec![0u32; cfg.procs as usize];
    let mut at = 0usize;
    let word = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes"));
    while at < data.len() {
        if data.len() - at < HDR || word(at) != MAGIC {
            return fail(format!("no record header at offset {at:#x}"));
        }
        let (proc, seq, len) = (word(at + 4), word(at + 8), word(at + 12) as usize);
        if proc >= cfg.procs || seq != next[proc as usize] || at + HDR + len > data.len() {
            return fail(format!(
                "record at {at:#x}: process {proc} sequence {seq} length {len:#x} unexpected"
            ));
        }
        compare(
            "appended record",
            at as u64,
            &record(cfg.seed, proc, seq, len),
            &data[at..at + HDR + len],
        )?;
        next[proc as usize] += 1;
        at += HDR + len;
    }
    if next != expected {
        return fail(format!(
            "records per process {next:?}, expected {expected:?}"
        ));
    }
    println!(
        "fsx: {}: {size:#x} bytes hold {} records of {} processes, all intact and in order",
        cfg.path,
        expected.iter().sum::<u32>(),
        cfg.procs
    );
    Ok(())
}

fn main() {
    let cfg = parse_args();
    println!(
        "fsx: seed {} ops {} procs {} mode {} max-size {:#x} max-op {:#x}{}",
        cfg.seed,
        cfg.ops,
        cfg.procs,
        if cfg.append { "append" } else { "own" },
        cfg.max_size,
        cfg.max_op,
        if cfg.mmap { "" } else { " no-mmap" }
    );
    if cfg.append {
        // The appenders open with O_CREAT and no O_TRUNC: start empty.
        let _ = std::fs::remove_file(&cfg.path);
    }
    let start = Instant::now();
    // With --shared-fd the appenders share one description opened here,
    // as processes forked after an open do.
    let inherited = if cfg.append && cfg.shared_fd {
        let fd = unsafe {
            libc::open(
                cstr(&cfg.path).as_ptr(),
                libc::O_RDWR | libc::O_APPEND | libc::O_CREAT,
                0o644,
            )
        };
        if fd < 0 {
            eprintln!("fsx: open {}: {}", cfg.path, err_str(errno()));
            std::process::exit(1);
        }
        Some(fd)
    } else {
        None
    };
    let work = |proc: u32| {
        if cfg.append {
            append_worker(&cfg, proc, inherited)
        } else {
            own_worker(&cfg, proc)
        }
    };
    let mut passed = true;
    if cfg.procs == 1 {
        passed = work(0);
    } else {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let mut children = Vec::new();
        for proc in 0..cfg.procs {
            // Single-threaded here, so the child may run Rust code freely.
            match unsafe { libc::fork() } {
                0 => {
                    let good = work(proc);
                    let _ = std::io::stdout().flush();
                    std::process::exit(if good { 0 } else { 1 });
                }
                -1 => {
                    eprintln!("fsx: fork: {}", err_str(errno()));
                    passed = false;
                    break;
                }
                pid => children.push(pid),
            }
        }
        for pid in children {
            let mut status = 0;
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                eprintln!("fsx: process {pid} failed (status {status:#x})");
                passed = false;
            }
        }
    }
    if passed && cfg.append {
        if let Err(Failure(msg)) = verify_appends(&cfg) {
            eprintln!(
                "fsx: {}: FAILED final check (seed {}): {msg}",
                cfg.path, cfg.seed
            );
            passed = false;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if passed {
        println!(
            "fsx: passed in {secs:.1} s ({:.0} operations/s)",
            (cfg.ops * u64::from(cfg.procs)) as f64 / secs
        );
    } else {
        println!("fsx: FAILED after {secs:.1} s (seed {})", cfg.seed);
    }
    std::process::exit(if passed { 0 } else { 1 });
}
