//! Lazy rewriting of trapped system-call sites (after zpoline and
//! lazypoline): a `syscall` instruction that traps through Syscall User
//! Dispatch is rewritten, the first time it traps, so that later runs call
//! atoll's entry directly, without a signal (a call passed on to Linux:
//! 973 ns trapped, 193 ns rewritten, 73 ns natively; docs/BENCHMARKS.md).
//!
//! The layout. A site is rewritten only when its number is a constant set
//! shortly before it, `b8 imm32` (`mov $nr,%eax`) followed by at most a
//! few argument moves (`decode`) and `0f 05` (`syscall`): glibc's inline
//! system calls. The `mov` (5 bytes) becomes `jmp rel32` to a stub of that
//! site (`stubs`), which runs a copy of the moves in between, skips the
//! red zone, sets EAX, calls the entry (`entry`) and jumps back past the
//! `syscall`; every byte but the `mov`'s stays, so code that jumps
//! straight to the `syscall` with another number in EAX (a tail shared by
//! two paths) still traps and is still right. No
//! page 0 is mapped (zpoline's `call *%rax` needs a nop sled at address 0,
//! which only `CAP_SYS_RAWIO` or `vm.mmap_min_addr=0` allow, and which
//! makes NULL reads succeed), no number is out of a sled's range, and the
//! `call` pushes below the red zone rather than into it.
//!
//! Rules (a site that breaks one keeps trapping, which is always right):
//! * the number is not one whose call needs the signal frame or changes
//!   what the entry stands on: `rt_sigreturn`, signals sent to oneself,
//!   `arch_prctl`, `prctl`, `seccomp` ([`keeps_trapping`]);
//!   clones and `vfork` are rewritten and made by atoll's clone handling
//!   with the registers the entry saved ([`moves_stacks`]), `sigaltstack`
//!   with the stack pointer it saw; masks (`rt_sigprocmask`) are
//!   rewritten: a trap must edit the frame's mask, which sigreturn
//!   installs, but the entry has no frame and changes the thread's own
//!   (`sigsys::handle_from_entry`);
//! * one that ends the image when it succeeds, `execve`, `execveat`,
//!   `exit_group`, only with the table of remembered sites
//!   ([`ends_the_image`]);
//! * a thread that switched Syscall User Dispatch off runs every rewritten
//!   site as the site's own `syscall`, as the unrewritten code would
//!   (`entry`);
//! * the byte before the `mov` is not a REX prefix (then it would be a
//!   `mov` to R8D…R15D), the immediate equals the trapped number, and the
//!   bytes up to the `syscall` decode as instructions that neither name
//!   RAX or RIP nor change the flow of control;
//! * the five bytes lie in one cache line, so one locked 8-byte
//!   `cmpxchg` replaces them at once: another thread running the same
//!   code sees either the old `mov` or the new `jmp`, never a mix; a thread
//!   already past the `mov` runs the untouched `syscall` and traps. A `mov`
//!   that crosses a line (about one site in sixteen) is rewritten only
//!   while the process has a single thread: no other code runs then (this
//!   thread's program handlers are deferred while atoll code runs, and no
//!   thread can appear meanwhile), so two stores are as good as one (a
//!   process sharing memory without being a thread, `CLONE_VM` without
//!   `CLONE_THREAD`, is not counted: glibc never makes one, and SUD does
//!   not watch it anyway, see `sigsys::clone::CloneKind::Unmonitored`);
//! * the code is in a private, file-backed, read-and-execute mapping (a
//!   library or program text): never a JIT's anonymous or writable code,
//!   which it may rewrite or free; during the store the page is
//!   read-write-execute (never non-executable, so no thread running it
//!   faults) and goes back to read-execute; if `mprotect` fails (sealed
//!   mappings, a W^X policy) the site keeps trapping.
//!
//! One process-wide lock serialises rewriting; only the SIGSYS handler
//! takes it, with the selector at ALLOW, and a fork child, in which the
//! holder may not exist, starts with it free ([`after_fork_in_child`]).
//! Threads: a thread in the SIGSYS handler of a site that another thread
//! rewrites returns past the `syscall` as before. Fork: the child inherits
//! the rewritten text and the stubs. `execve`: a new image, nothing kept
//! in memory; but the instance remembers where sites were rewritten
//! (`remember`), and the new image rewrites those of its files as it
//! starts (`eager`), checking each by the rules here first.
//! Signals: the entry runs as atoll code (selector ALLOW) exactly as the
//! SIGSYS handler did, so program signals that arrive meanwhile are
//! deferred or run in host calls by `sigdefer`.
//!
//! Short sites (`short`): glibc's `read` sets its number with the two-byte
//! `xor %eax,%eax`, too short for a `jmp rel32`; its `xor` becomes a `jmp
//! rel8` to dead alignment padding after the function's next `ret`, where
//! a `jmp rel32` to the site's stub is written first.
//!
//! Remembered sites (`remember`, `eager`, `batch`): a site rewritten here
//! is recorded in the instance's table (file identity, offset, number,
//! kind, a hash of its bytes); a new image rewrites the remembered sites of
//! each file it maps, at the constructor (or at the first trap in a file
//! mapped later), in one batch per file, so that a build's hundreds of
//! images do not each trap once at every glibc site (`--without
//! remembered-sites` switches it off).
//!
//! Switched on per process by the constructor ([`configure`]): the
//! instance's `--syscall-sites` (`rewrite` by default), and
//! `ATOLL_SYSCALL_REWRITE=off` for one program.

mod batch;
mod decode;
mod eager;
mod entry;
mod maps;
mod remember;
mod short;
pub(crate) mod site_end;
mod stubs;

pub use eager::{at_start, before_fork};
pub use entry::Frame;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::raw;
use crate::sigsys;

/// `ATOLL_SYSCALL_REWRITE=auto|off`: `off` keeps every site trapping in
/// this process (and the programs it starts); `auto` follows the instance.
pub const ENV_REWRITE: &str = "ATOLL_SYSCALL_REWRITE";

static ENABLED: AtomicBool = AtomicBool::new(false);

const PAGE: usize = 4096;
const LINE: usize = 64;
const JMP_REL32: u8 = 0xe9;
const JMP_REL8: u8 = 0xeb;

/// Switch rewriting on (or leave it off) for this process. Returns whether
/// it is on. What the entry saves (`entry::init`, a `CPUID`, a trap to the
/// hypervisor in a virtual machine) is found when the first site is about
/// to be rewritten, not here: a program none of whose sites trap (`true`,
/// most short-lived helpers of a build) never asks; a CPU without `XSAVE`
/// switches rewriting off then.
pub fn configure(want: bool) -> bool {
    ENABLED.store(want, Ordering::Relaxed);
    want
}

/// Share rewritten sites through the instance's table of remembered sites
/// beside its boot socket `socket` (`remember`); call [`at_start`] next.
pub fn remember_beside(socket: &[u8]) -> bool {
    remember::set_table_beside(socket)
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// System calls whose sites are never rewritten: their handling needs the
/// SIGSYS frame (`rt_sigreturn` returns through it; a signal sent to
/// oneself is delivered as the handler's sigreturn puts the program's
/// mask back) or they change what the entry stands on (`arch_prctl`,
/// `prctl`, `seccomp` change the thread's base, dispatch or filters).
/// `exit` is rewritten: it ends the thread from the entry as from the
/// SIGSYS handler, both on atoll's stack (`stack::exit_thread`). A rewritten
/// site reached with one of these numbers anyway (a site whose number is
/// in a register, `short`) runs its own `syscall`, which traps
/// (`entry::rewritten_syscall`).
///
/// Clones and `vfork` are rewritten ([`moves_stacks`]), and so are
/// `sigaltstack` (the entry knows the program's stack pointer) and masks
/// (`rt_sigprocmask`: the entry changes the thread's own mask, see
/// `sigsys::handle_from_entry`).
pub const fn keeps_trapping(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_rt_sigreturn
            | libc::SYS_kill
            | libc::SYS_tkill
            | libc::SYS_tgkill
            | libc::SYS_rt_sigqueueinfo
            | libc::SYS_rt_tgsigqueueinfo
            | libc::SYS_arch_prctl
            | libc::SYS_prctl
            | libc::SYS_seccomp
    )
}

/// Calls whose child starts on another stack or shares this one: the
/// entry makes them through atoll's clone handling
/// (`sigsys::handle_from_entry`), never as a raw call from its own frames.
/// A `vfork` is a fork there (`sigsys::clone::classify`): its child runs
/// in its own copy of memory and returns through the entry's frames as
/// the parent does, so the parent's stack is never the child's. A child
/// on a new stack (threads, `posix_spawn`'s) starts at the site's
/// continuation with the registers the entry saved, as a trapped clone's
/// starts from the signal frame's. With dispatch off, or from atoll's
/// own code, these run as the site's own `syscall`, as Linux would.
pub const fn moves_stacks(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_clone | libc::SYS_clone3 | libc::SYS_fork | libc::SYS_vfork
    )
}

/// Calls that end the program image when they succeed. Their site runs
/// once per image, so rewriting it lazily (a read of `/proc/self/maps`,
/// four `mprotect`s: about 100 µs of CPU) costs far more than the ~1 µs
/// trap it saves; it was paid by every forked child that execs (a
/// shell's, too), whose `execve` site is fresh in each child since the
/// parent never execs. So they are rewritten only with a table of
/// remembered sites (`remember`): once per instance, then in each new
/// image's start-up batch (`eager::at_start`, which reads the maps and
/// opens the pages anyway), and in a parent before it forks
/// (`eager::before_fork`), so its children exec and exit without a trap.
/// A thread that switched Syscall User Dispatch off (atoll's relay for
/// static programs does, in the child it execs the program from) runs
/// them, as every call, as the site's own `syscall`: straight to Linux.
pub const fn ends_the_image(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_execve | libc::SYS_execveat | libc::SYS_exit_group
    )
}

/// The 8-byte window, inside the cache line of `mov`, that covers the five
/// bytes `[mov, mov + 5)`; `None` when those cross a line.
pub fn window(mov: usize) -> Option<usize> {
    let line_end = (mov / LINE + 1) * LINE;
    if mov + 5 > line_end {
        return None;
    }
    Some(mov.min(line_end - 8))
}

/// Bytes read before a trapped `syscall`'s end: the `mov`, the moves after
/// it, and the byte before it.
const LOOK_BACK: usize = 1 + 5 + decode::MAX_GAP + 2;

/// A candidate site: where its `mov` is, and the moves between it and the
/// `syscall` (copied into the stub).
struct Candidate {
    mov: usize,
    moved: [u8; decode::MAX_GAP],
    moved_len: usize,
}

/// Look at the code before `resume` for a `mov $nr,%eax` this layout can
/// rewrite. Reads only the page of the `syscall`, which just ran.
fn candidate(resume: usize, nr: u32) -> Option<Candidate> {
    let site_page = (resume - 2) & !(PAGE - 1);
    let from = resume.saturating_sub(LOOK_BACK).max(site_page);
    let mut code = [0u8; LOOK_BACK];
    let len = resume - from;
    // SAFETY: `[from, resume)` lies on the page of the `syscall` that just
    // executed (and, for its last byte, on the page after), both mapped
    // and readable: x86-64 has no execute-only pages without protection
    // keys, which atoll does not use.
    unsafe { core::ptr::copy_nonoverlapping(from as *const u8, code.as_mut_ptr(), len) };
    let off = decode::find_mov(&code[..len], nr)?;
    let between = &code[off + 5..len - 2];
    let mut moved = [0u8; decode::MAX_GAP];
    moved[..between.len()].copy_from_slice(between);
    Some(Candidate {
        mov: from + off,
        moved,
        moved_len: between.len(),
    })
}

/// A trap of `nr` whose `syscall` instruction ends at `resume`, with the
/// trapped registers `gregs`: rewrite its site if the rules allow. Cheap
/// when they do not (a few byte reads). Called by the SIGSYS handler with
/// the selector at ALLOW.
pub fn on_trap(nr: i64, resume: usize, gregs: &[i64; 23]) {
    if !enabled()
        || keeps_trapping(nr)
        || (ends_the_image(nr) && !remember::enabled())
        || !(0..=u32::MAX as i64).contains(&nr)
    {
        return;
    }
    if resume < PAGE || refused(resume) {
        return;
    }
    let nr = nr as u32;
    if candidate(resume, nr).is_some() {
        rewrite_locked(
            resume,
            nr,
            remember::Kind::Mov,
            || candidate(resume, nr).map(|c| (c.mov, c)),
            |c| rewrite(&c, resume, nr),
        );
    } else if short_candidate(resume, nr).is_some() {
        // Set by `xor %eax,%eax` (`short`): the `xor` becomes a `jmp rel8`
        // to a `jmp rel32` in the dead padding after the function's next
        // `ret`, which leads to the site's stub.
        rewrite_locked(
            resume,
            nr,
            remember::Kind::Xor,
            || short_candidate(resume, nr).map(|pad| (resume - 4, pad)),
            |pad| rewrite_short(resume, pad, nr, ShortKind::Xor),
        );
    } else if reg_candidate(resume, |src| reg_value(gregs, src) == nr as i64).is_some() {
        // Set by `mov %r32,%eax` (`short`), whose register held this
        // number at the trap: the same layout, the stub running the `mov`.
        rewrite_locked(
            resume,
            nr,
            remember::Kind::Reg,
            || reg_candidate(resume, |_| true).map(|pad| (resume - 4, pad)),
            |pad| rewrite_short(resume, pad, nr, ShortKind::Reg),
        );
    }
}

/// The low 32 bits of x86 register `src` (1 RCX … 7 RDI) in a signal
/// frame's `gregs`, as `mov %r32,%eax` would copy them.
fn reg_value(gregs: &[i64; 23], src: u8) -> i64 {
    let at = match src {
        1 => libc::REG_RCX,
        2 => libc::REG_RDX,
        3 => libc::REG_RBX,
        5 => libc::REG_RBP,
        6 => libc::REG_RSI,
        7 => libc::REG_RDI,
        _ => return -1,
    };
    gregs[at as usize] as u32 as i64
}

/// How a two-byte short site sets its number.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ShortKind {
    /// `xor %eax,%eax`: the stub sets the number.
    Xor,
    /// `mov %r32,%eax`: the stub runs the `mov`.
    Reg,
}

/// Under the rewrite lock, find the site again (another thread may have
/// rewritten it meanwhile) and rewrite it; count it, or remember that it
/// keeps trapping. `find` gives the site and the address of its `mov` or
/// `xor`. With a table of remembered sites, the remembered sites of the
/// site's file go first if no one looked at them yet in this process
/// (a library mapped after the constructor), and a site rewritten here is
/// remembered.
fn rewrite_locked<C>(
    resume: usize,
    nr: u32,
    kind: remember::Kind,
    find: impl FnOnce() -> Option<(usize, C)>,
    apply: impl FnOnce(C) -> Result<(), &'static str>,
) {
    let lock = Lock::take();
    if !entry::ready() {
        ENABLED.store(false, Ordering::Relaxed);
        return;
    }
    let file = remember::enabled()
        .then(|| eager::file_of(resume - 2))
        .flatten();
    if let Some(f) = &file {
        eager::at_trap(f, &lock);
    }
    let Some((start, site)) = find() else {
        return;
    };
    let code = eager::code_at(start, resume);
    match apply(site) {
        Ok(()) => {
            crate::stats::count_site();
            sigsys::debug(&[b"rewrote site of"], &[nr as i64, resume as i64]);
            if let Some(f) = &file {
                eager::record(f, start, resume, nr, kind, code);
            }
        }
        Err(why) => {
            remember_refused(resume);
            sigsys::debug(
                &[b"site kept trapping:", why.as_bytes()],
                &[nr as i64, resume as i64],
            );
        }
    }
}

/// The padding address for a short `xor` site ending at `resume`, if the
/// bytes around it allow one.
fn short_candidate(resume: usize, nr: u32) -> Option<usize> {
    padded_site(resume, |before| short::is_xor_site(before, nr))
}

/// The padding address for a short `mov %r32,%eax` site ending at
/// `resume` whose source register passes `check`, if the bytes allow one.
fn reg_candidate(resume: usize, check: impl Fn(u8) -> bool) -> Option<usize> {
    padded_site(resume, |before| {
        short::reg_site_source(before).is_some_and(&check)
    })
}

/// The padding address for a two-byte short site ending at `resume` whose
/// three bytes before the `syscall` pass `is_site`. Reads only the page
/// of the `syscall`, which just ran: a site or padding across a page
/// boundary keeps trapping.
fn padded_site(resume: usize, is_site: impl Fn(&[u8]) -> bool) -> Option<usize> {
    let syscall = resume - 2;
    let page = syscall & !(PAGE - 1);
    if syscall < page + 3 || resume >= page + PAGE {
        return None;
    }
    let mut before = [0u8; 3];
    // SAFETY: the three bytes before the `syscall` lie in its page, which
    // the trapped thread just executed, so it is mapped and readable.
    unsafe { core::ptr::copy_nonoverlapping((syscall - 3) as *const u8, before.as_mut_ptr(), 3) };
    if !is_site(&before) {
        return None;
    }
    let len = short::LOOK_AHEAD.min(page + PAGE - resume);
    let mut after = [0u8; short::LOOK_AHEAD];
    // SAFETY: `resume..resume + len` lies in the same page, as above.
    unsafe { core::ptr::copy_nonoverlapping(resume as *const u8, after.as_mut_ptr(), len) };
    short::find_padding(&after[..len], resume).map(|at| resume + at)
}

/// Rewrite a short site: the padding's `jmp rel32` first (dead code, so a
/// plain store), then the `xor` or `mov` by one locked `cmpxchg` in its
/// cache line (or plain stores while single-threaded, as for a `mov`
/// across lines).
fn rewrite_short(resume: usize, pad: usize, nr: u32, kind: ShortKind) -> Result<(), &'static str> {
    let m = maps::mapping_of(resume - 4).ok_or("no mapping")?;
    rewrite_short_in(resume, pad, nr, kind, &m)
}

/// [`rewrite_short`] in mapping `m`, which holds the `xor` or `mov`.
fn rewrite_short_in(
    resume: usize,
    pad: usize,
    nr: u32,
    kind: ShortKind,
    m: &maps::Mapping,
) -> Result<(), &'static str> {
    let xor = resume - 4;
    if !is_text(m) || pad + 5 > m.end {
        return Err("not read-execute file-backed text");
    }
    let window = short_window(xor);
    if window.is_none() && !alone() {
        return Err("a short site across cache lines, and other threads");
    }
    // SAFETY: the two bytes before the `syscall`, on its page (checked by
    // `padded_site`), mapped and readable.
    let mov = unsafe { core::ptr::read_unaligned(xor as *const [u8; 2]) };
    let (stub_nr, moved): (Option<u32>, &[u8]) = match kind {
        ShortKind::Xor => (Some(nr), &[]),
        ShortKind::Reg => (None, &mov),
    };
    let stored = with_page_writable(xor, || {
        let Some(stub) = stubs::make(resume, stub_nr, entry::address(), moved) else {
            return false;
        };
        let far = jmp_rel32(pad + 5, stub);
        // SAFETY: `pad..pad + 5` is dead padding on the page made writable
        // for this closure (`short::find_padding`, `short_candidate`).
        unsafe { core::ptr::copy_nonoverlapping(far.as_ptr(), pad as *mut u8, 5) };
        let near = [JMP_REL8, (pad - (xor + 2)) as u8];
        match window {
            Some(w) => store_in_window(w, xor, &near),
            None => store_alone(xor, &near),
        }
    })?;
    if stored {
        Ok(())
    } else {
        Err("no stub in reach, or the code changed under us")
    }
}

/// Program or library text: a private, file-backed, read-execute mapping
/// (never a JIT's anonymous or writable code).
fn is_text(m: &maps::Mapping) -> bool {
    m.read && m.exec && !m.write && m.private && m.inode != 0
}

/// The 8-byte window, inside one cache line, that holds the two bytes at
/// `at`, if one does.
fn short_window(at: usize) -> Option<usize> {
    let line_end = (at / LINE + 1) * LINE;
    (at + 2 <= line_end).then(|| at.min(line_end - 8))
}

/// Read 8 code bytes (the caller checked they lie on a mapped page).
fn read8(at: usize) -> [u8; 8] {
    // SAFETY: `at` is a window of a candidate `mov` inside its cache line,
    // on the page of the `syscall` that just ran (see `candidate`).
    unsafe { core::ptr::read_unaligned(at as *const [u8; 8]) }
}

/// Rewrite one candidate site. Caller holds the lock.
fn rewrite(c: &Candidate, resume: usize, nr: u32) -> Result<(), &'static str> {
    let m = maps::mapping_of(c.mov).ok_or("no mapping")?;
    rewrite_in(c, resume, nr, &m)
}

/// [`rewrite`] in mapping `m`, which holds the `mov`.
fn rewrite_in(
    c: &Candidate,
    resume: usize,
    nr: u32,
    m: &maps::Mapping,
) -> Result<(), &'static str> {
    let mov = c.mov;
    if !is_text(m) {
        return Err("not read-execute file-backed text");
    }
    if resume > m.end {
        // The `syscall` runs on into the next page, which an earlier
        // rewrite may have split off as a mapping of its own (each
        // `mprotect` of one page makes one): the same file's text too?
        let next = maps::mapping_of(resume - 1).ok_or("no mapping")?;
        if !is_text(&next) || next.inode != m.inode || next.start != m.end {
            return Err("the syscall is in another mapping");
        }
    }
    let window = window(mov);
    if window.is_none() && !alone() {
        return Err("a mov across cache lines, and other threads");
    }
    let stored = with_page_writable(mov, || {
        let Some(stub) = stubs::make(resume, Some(nr), entry::address(), &c.moved[..c.moved_len])
        else {
            return false;
        };
        let jmp = jmp_rel32(mov + 5, stub);
        match window {
            Some(w) => store_in_window(w, mov, &jmp),
            None => store_alone(mov, &jmp),
        }
    })?;
    if stored {
        Ok(())
    } else {
        Err("no stub in reach, or the code changed under us")
    }
}

/// Run `store` with the page of `at` briefly read-write-execute (never
/// non-executable, so threads running it do not fault), then make it
/// read-execute again; what `store` says, or an error if the page cannot
/// be made writable (sealed mappings, a W^X policy).
fn with_page_writable(at: usize, store: impl FnOnce() -> bool) -> Result<bool, &'static str> {
    if batch::active() {
        // Made read-execute again at the batch's end.
        return if batch::open(at & !(PAGE - 1)) {
            Ok(store())
        } else {
            Err("mprotect refused")
        };
    }
    let page = (at & !(PAGE - 1)) as u64;
    let rwx = (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64;
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
    if raw::syscall(libc::SYS_mprotect, &[page, PAGE as u64, rwx]) != 0 {
        return Err("mprotect refused");
    }
    let stored = store();
    raw::syscall(libc::SYS_mprotect, &[page, PAGE as u64, rx]);
    Ok(stored)
}

/// `jmp rel32` to `to`, for an instruction whose next one is at `next_ip`
/// (the caller checked the reach).
fn jmp_rel32(next_ip: usize, to: usize) -> [u8; 5] {
    let mut jmp = [0u8; 5];
    jmp[0] = JMP_REL32;
    jmp[1..].copy_from_slice(&stubs::rel32(next_ip, to).to_le_bytes());
    jmp
}

/// Replace the bytes at `at` with `new` (all inside the 8-byte window `w`,
/// within a cache line: one atomic access, and no split lock) in one
/// locked `cmpxchg`. False when the window no longer holds what was read.
fn store_in_window(w: usize, at: usize, new: &[u8]) -> bool {
    let old = read8(w);
    let mut next = old;
    let off = at - w;
    next[off..off + new.len()].copy_from_slice(new);
    let old = u64::from_le_bytes(old);
    let next = u64::from_le_bytes(next);
    let seen: u64;
    // SAFETY: `w` is a writable (just made so) 8-byte window of our own
    // process's code page inside one cache line; `lock cmpxchg` on it is
    // atomic for other CPUs fetching from it.
    unsafe {
        core::arch::asm!(
            "lock cmpxchg qword ptr [{w}], {next}",
            w = in(reg) w,
            next = in(reg) next,
            inout("rax") old => seen,
            options(nostack),
        );
    }
    seen == old
}

/// Replace the bytes at `at` with plain stores: only while no other
/// thread exists (see the rules above).
fn store_alone(at: usize, new: &[u8]) -> bool {
    // SAFETY: `[at, at + new.len())` is on the page just made writable; no
    // other thread runs (checked by the caller), and this one runs atoll
    // code.
    unsafe { core::ptr::copy_nonoverlapping(new.as_ptr(), at as *mut u8, new.len()) };
    true
}

/// Does this process have one thread (asked once per batch)?
fn alone() -> bool {
    if batch::active() {
        batch::alone(single_threaded)
    } else {
        single_threaded()
    }
}

/// Does this process have one thread? Field 20 of `/proc/self/stat`
/// (after the command name, which may hold spaces and parentheses).
fn single_threaded() -> bool {
    let Some(fd) = maps::open_read_only(b"/proc/self/stat\0") else {
        return false;
    };
    let mut buf = [0u8; 1024];
    let n = raw::syscall(
        libc::SYS_read,
        &[fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64],
    );
    raw::syscall(libc::SYS_close, &[fd as u64]);
    n > 0 && threads_in_stat(&buf[..n as usize]) == Some(1)
}

/// The thread count in a `/proc/PID/stat` line.
pub fn threads_in_stat(stat: &[u8]) -> Option<u64> {
    let after_name = stat.iter().rposition(|&b| b == b')')? + 1;
    // Fields 3.. follow the name; the thread count is field 20.
    let field = stat[after_name..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(20 - 3)?;
    core::str::from_utf8(field).ok()?.parse().ok()
}

/// Sites that passed the byte checks but could not be rewritten: not
/// looked at again (a small ring; forgetting one costs one more look).
static REFUSED: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];
static REFUSED_NEXT: AtomicUsize = AtomicUsize::new(0);

fn refused(site: usize) -> bool {
    REFUSED.iter().any(|r| r.load(Ordering::Relaxed) == site)
}

fn remember_refused(site: usize) {
    let i = REFUSED_NEXT.fetch_add(1, Ordering::Relaxed) % REFUSED.len();
    REFUSED[i].store(site, Ordering::Relaxed);
}

/// The process-wide rewrite lock (a spin lock: it is taken inside a signal
/// handler, held for a few system calls, never while waiting on anything).
static LOCKED: AtomicBool = AtomicBool::new(false);

struct Lock;

impl Lock {
    fn take() -> Lock {
        while LOCKED
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            raw::syscall(libc::SYS_sched_yield, &[]);
        }
        Lock
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        LOCKED.store(false, Ordering::Release);
    }
}

/// In a fork child: only the forking thread exists, so a lock another
/// thread held at the fork is free now. What it guarded is whole: a stub
/// is complete before it is counted, and the 8-byte store is atomic (a
/// page left read-write-execute by an unfinished rewrite stays so).
/// The refused sites are forgotten too: a `mov` across cache lines refused
/// for the parent's threads may be rewritten in the child, alone.
pub fn after_fork_in_child() {
    LOCKED.store(false, Ordering::Release);
    for r in REFUSED.iter() {
        r.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_stays_in_one_cache_line() {
        assert_eq!(window(0x1000), Some(0x1000));
        assert_eq!(window(0x1000 + 58), Some(0x1000 + 56));
        assert_eq!(window(0x1000 + 59), Some(0x1000 + 56));
        assert_eq!(window(0x1000 + 60), None);
    }

    #[test]
    fn the_thread_count_is_read_past_a_command_name_with_spaces() {
        let line = b"42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 99 1000 10";
        assert_eq!(threads_in_stat(line), Some(3));
        assert_eq!(threads_in_stat(b"garbage"), None);
        let mut own = [0u8; 1024];
        let s = std::fs::read("/proc/self/stat").unwrap();
        own[..s.len()].copy_from_slice(&s);
        let threads = threads_in_stat(&own[..s.len()]).unwrap();
        assert!(threads >= 1);
    }

    #[test]
    fn calls_that_need_the_signal_frame_keep_trapping_and_clones_do_not() {
        for nr in [libc::SYS_rt_sigreturn, libc::SYS_tgkill, libc::SYS_prctl] {
            assert!(keeps_trapping(nr) && !moves_stacks(nr), "{nr}");
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_openat,
            libc::SYS_newfstatat,
            libc::SYS_rt_sigprocmask,
            libc::SYS_sigaltstack,
            libc::SYS_exit,
        ] {
            assert!(!keeps_trapping(nr) && !ends_the_image(nr), "{nr}");
        }
        for nr in [
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_fork,
            libc::SYS_vfork,
        ] {
            assert!(!keeps_trapping(nr) && moves_stacks(nr), "{nr}");
        }
        for nr in [libc::SYS_execve, libc::SYS_execveat, libc::SYS_exit_group] {
            assert!(!keeps_trapping(nr) && ends_the_image(nr), "{nr}");
        }
    }

    #[test]
    fn the_entry_finds_an_xsave_area_on_this_machine() {
        assert!(entry::init());
        let bytes = entry::ATOLL_XSAVE_BYTES.load(Ordering::Relaxed);
        // SSE at least; AVX-512 at most (no AMX tiles).
        assert!((576 + 64..=2688 + 64).contains(&bytes), "{bytes}");
    }
}
