//! The entry of rewritten sites: a function call that behaves like the
//! `syscall` instruction it replaces.
//!
//! A `syscall` leaves every register but RAX (the result), RCX and R11
//! untouched, and so must the entry, although atoll's dispatch and the libc
//! functions it calls use vector registers freely (glibc's `memcpy` picks
//! AVX2 or AVX-512 at run time). So the entry saves the general registers
//! (all of them, as a signal frame holds them: a clone's child on a new
//! stack starts from them), the flags, and the extended state that compiled
//! code and libc may touch with `XSAVE` (x87, SSE, AVX, AVX-512 opmasks and
//! upper registers, as far as `XCR0` enables them; not AMX tiles, protection
//! keys or other state that neither atoll nor libc changes, which would
//! cost 8 KiB of stack more); then it runs the same routing as the SIGSYS
//! handler, and restores everything but RAX. The state (up to 2.7 KiB with
//! AVX-512) and the routing's frames go on atoll's own stack (`stack`):
//! the entry moves there after saving the general registers and flags
//! (168 bytes below the program's red zone), as a system call costs the
//! program no stack on Linux and a Go goroutine's may have less than 1 KiB
//! left (Go's runtime makes calls through such sites). Where it does not
//! move (no atoll stack yet, or a program handler running on the program's
//! alternate stack, see `stack::ENTRY_TOP`), the state goes on the
//! program's stack below the red zone, as the kernel's signal frame would.
//!
//! ```text
//!  stub: lea -128(%rsp) ─ mov $nr,%eax ─ call entry
//!  atoll_rewritten_entry: save flags, registers (a `Frame`) ─ move to
//!     atoll's stack ─ XSAVE area ─ rewritten_syscall
//!     ├─ dispatch off on this thread: run the site's own syscall (below)
//!     ├─ selector was ALLOW (atoll's own libc call): the raw system call,
//!     │  as SUD would have let it through (a clone: the site's own)
//!     └─ AtollGuard ─ save errno ─ sigsys::handle_from_entry ─ errno
//!        back ─ guard drop; a call that needs a signal frame, or that
//!        has deferred program signals to deliver (`site_end`): the
//!        site's own syscall
//!  XRSTOR ─ back to the program's stack ─ restore args and flags ─ ret to
//!  the stub ─ jmp after the site
//!  or, the site's own: RAX = nr, flags and RSP as at the site ─ jmp to
//!  the site's `syscall` (which traps, or goes to Linux with dispatch off)
//! ```

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::raw;
use crate::selector::{AtollGuard, ALLOW};
use crate::sigdefer::{FrameDelivery, FrameMode};

/// Bytes of the `XSAVE` area, plus alignment room (0: no `XSAVE`, the
/// entry must not be used).
pub(super) static ATOLL_XSAVE_BYTES: AtomicU64 = AtomicU64::new(0);
/// The state components saved: `XCR0` ∩ [`SAVED_COMPONENTS`].
static ATOLL_XSAVE_MASK: AtomicU64 = AtomicU64::new(0);

/// x87, SSE, AVX, AVX-512 opmask, ZMM_Hi256, Hi16_ZMM (bits 0-2, 5-7).
const SAVED_COMPONENTS: u64 = 0xe7;

/// What the entry saves of the program's registers, in the order of the
/// first 17 `gregs` of a signal frame's `mcontext_t` (r8 … r15, rdi, rsi,
/// rbp, rbx, rdx, rax, rcx, rsp, rip), so that the clone handling, which
/// reads a trapped call's registers from its frame, reads these alike:
/// `rsp` is the program's at the site, `rip` the stub's return address
/// ([`Frame::resume`] finds the site's from it). `native` is the routing's
/// answer: nonzero when the call must run as the site's own `syscall`.
#[repr(C)]
pub struct Frame {
    pub regs: [i64; 17],
    native: u64,
}

const FRAME_BYTES: usize = core::mem::size_of::<Frame>();
const _: () = assert!(FRAME_BYTES == 144);

impl Frame {
    /// The six argument registers, in system-call order.
    fn args(&self) -> [u64; 6] {
        let g = |r: i32| self.regs[r as usize] as u64;
        [
            g(libc::REG_RDI),
            g(libc::REG_RSI),
            g(libc::REG_RDX),
            g(libc::REG_R10),
            g(libc::REG_R8),
            g(libc::REG_R9),
        ]
    }

    /// Where the site continues after its `syscall`: every stub ends with
    /// `lea 128(%rsp),%rsp` (8 bytes) and `jmp rel32` to it, right where
    /// the entry returns (`stubs::encode`).
    pub fn resume(&self) -> usize {
        let ret = self.regs[libc::REG_RIP as usize] as usize;
        // SAFETY: `ret` is the return address of a stub's `call`, in a
        // mapped stub page, followed by the stub's 13-byte tail.
        let rel = unsafe { core::ptr::read_unaligned((ret + 9) as *const i32) };
        (ret + 13).wrapping_add(rel as isize as usize)
    }
}

core::arch::global_asm!(
    ".text",
    ".globl atoll_rewritten_entry",
    ".hidden atoll_rewritten_entry",
    ".type atoll_rewritten_entry,@function",
    ".p2align 4",
    "atoll_rewritten_entry:",
    "    pushfq",
    "    push rbp",
    "    mov rbp, rsp",
    // The registers as a `Frame` at rbp-144 (`gregs` order).
    "    sub rsp, 144",
    "    mov qword ptr [rsp + 0], r8",
    "    mov qword ptr [rsp + 8], r9",
    "    mov qword ptr [rsp + 16], r10",
    "    mov qword ptr [rsp + 24], r11",
    "    mov qword ptr [rsp + 32], r12",
    "    mov qword ptr [rsp + 40], r13",
    "    mov qword ptr [rsp + 48], r14",
    "    mov qword ptr [rsp + 56], r15",
    "    mov qword ptr [rsp + 64], rdi",
    "    mov qword ptr [rsp + 72], rsi",
    "    mov rcx, qword ptr [rbp]",
    "    mov qword ptr [rsp + 80], rcx",
    "    mov qword ptr [rsp + 88], rbx",
    "    mov qword ptr [rsp + 96], rdx",
    "    mov qword ptr [rsp + 104], rax",
    "    mov qword ptr [rsp + 112], 0",
    // The program's stack pointer at the site: above the return address
    // and the 128 bytes the stub stepped over.
    "    lea rcx, [rbp + 16 + 8 + 128]",
    "    mov qword ptr [rsp + 120], rcx",
    "    mov rcx, qword ptr [rbp + 16]",
    "    mov qword ptr [rsp + 128], rcx",
    "    mov qword ptr [rsp + 136], 0",
    "    cld",
    "    mov r11, rax",
    // Onto atoll's stack (its top in `stack::ENTRY_TOP`, a thread-local at
    // a fixed offset from the thread pointer), unless that is unknown or 0,
    // or this already runs there (top - rsp below its size). RBP keeps the
    // program's frame: the way back is `lea rsp, [rbp - 144]`.
    "    mov rcx, qword ptr [rip + {entry_top_offset}]",
    "    test rcx, rcx",
    "    jz 2f",
    "    mov rcx, qword ptr fs:[rcx]",
    "    test rcx, rcx",
    "    jz 2f",
    "    mov rdx, rcx",
    "    sub rdx, rsp",
    "    cmp rdx, {stack_bytes}",
    "    jb 2f",
    "    mov rsp, rcx",
    "2:",
    "    mov rcx, qword ptr [rip + {xsave_bytes}]",
    "    sub rsp, rcx",
    "    and rsp, -64",
    // XRSTOR faults unless the XSAVE header's reserved bytes are zero,
    // and XSAVE writes only its first word.
    "    xor eax, eax",
    "    mov qword ptr [rsp + 512], rax",
    "    mov qword ptr [rsp + 520], rax",
    "    mov qword ptr [rsp + 528], rax",
    "    mov qword ptr [rsp + 536], rax",
    "    mov qword ptr [rsp + 544], rax",
    "    mov qword ptr [rsp + 552], rax",
    "    mov qword ptr [rsp + 560], rax",
    "    mov qword ptr [rsp + 568], rax",
    "    mov eax, dword ptr [rip + {xsave_mask}]",
    "    xor edx, edx",
    "    xsave64 [rsp]",
    "    mov rdi, r11",
    "    lea rsi, [rbp - 144]",
    "    call {handler}",
    "    mov r11, rax",
    "    mov eax, dword ptr [rip + {xsave_mask}]",
    "    xor edx, edx",
    "    xrstor64 [rsp]",
    "    mov rax, r11",
    "    lea rsp, [rbp - 144]",
    // The argument registers back (the others are callee-saved).
    "    mov r8, qword ptr [rsp + 0]",
    "    mov r9, qword ptr [rsp + 8]",
    "    mov r10, qword ptr [rsp + 16]",
    "    mov rdi, qword ptr [rsp + 64]",
    "    mov rsi, qword ptr [rsp + 72]",
    "    mov rdx, qword ptr [rsp + 96]",
    "    cmp qword ptr [rsp + 136], 0",
    "    jne 3f",
    "    mov rsp, rbp",
    "    pop rbp",
    "    popfq",
    "    ret",
    // The call runs as the site's own `syscall` (see `Frame`): the number
    // back in RAX, the flags and stack pointer as they were at the site,
    // and a jump to the `syscall` instruction, two bytes before where the
    // stub's tail would have gone on. RCX and R11, which a `syscall`
    // overwrites anyway, carry the way there.
    "3:",
    "    mov rax, qword ptr [rsp + 104]",
    "    mov rsp, rbp",
    "    pop rbp",
    "    popfq",
    "    pop r11",
    "    lea rsp, [rsp + 128]",
    "    movsxd rcx, dword ptr [r11 + 9]",
    "    lea r11, [r11 + rcx + 11]",
    "    jmp r11",
    ".size atoll_rewritten_entry, .-atoll_rewritten_entry",
    xsave_bytes = sym ATOLL_XSAVE_BYTES,
    entry_top_offset = sym crate::stack::ENTRY_TOP_OFFSET,
    stack_bytes = const crate::stack::STACK_BYTES,
    xsave_mask = sym ATOLL_XSAVE_MASK,
    handler = sym rewritten_syscall,
);

extern "C" {
    fn atoll_rewritten_entry();
}

/// Address the stubs call.
pub fn address() -> usize {
    atoll_rewritten_entry as *const () as usize
}

/// Whether the entry knows what to save (`init`, run the first time it is
/// asked; the caller holds the rewrite lock, so it runs once): false when
/// the CPU or the kernel does not offer `XSAVE`.
pub fn ready() -> bool {
    const UNKNOWN: u8 = 0;
    const READY: u8 = 1;
    const NEVER: u8 = 2;
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
    match STATE.load(Ordering::Acquire) {
        READY => true,
        NEVER => false,
        _ => {
            let ok = init();
            STATE.store(if ok { READY } else { NEVER }, Ordering::Release);
            ok
        }
    }
}

/// Find which state to save and the size of its `XSAVE` area; false when
/// the CPU or the kernel does not offer `XSAVE` (then sites are never
/// rewritten).
///
/// This runs as every program starts, and in a virtual machine each
/// `CPUID` is a trap to the hypervisor (several µs here): the `OSXSAVE`
/// bit comes from glibc's copy of leaf 1 when glibc offers it, and the
/// area's size from one leaf 0xD query, sub-leaf 0, whose `EBX` is the
/// size for every component `XCR0` enables, a bound on the components
/// saved here (asking the offset of each one cost four more traps).
pub fn init() -> bool {
    use core::arch::x86_64::__cpuid_count;
    let osxsave = leaf1_ecx_from_glibc().unwrap_or_else(|| __cpuid_count(1, 0).ecx) & (1 << 27);
    if osxsave == 0 {
        return false;
    }
    let mask = xcr0() & SAVED_COMPONENTS;
    // At least the legacy area and the header (576 bytes).
    let end = (__cpuid_count(0xd, 0).ebx as u64).max(576);
    ATOLL_XSAVE_MASK.store(mask, Ordering::Relaxed);
    ATOLL_XSAVE_BYTES.store(end + 64, Ordering::Relaxed);
    crate::stack::check_entry_offset();
    true
}

/// `ECX` of `CPUID` leaf 1 as glibc read it at start-up
/// (`__x86_get_cpuid_feature_leaf`, glibc 2.33 and later), found at run
/// time so that an older glibc still loads the library.
fn leaf1_ecx_from_glibc() -> Option<u32> {
    /// glibc's `struct cpuid_feature`: the registers `CPUID` returned,
    /// then which of their features are usable.
    #[repr(C)]
    struct CpuidFeature {
        cpuid: [u32; 4],
        active: [u32; 4],
    }
    /// `CPUID_INDEX_1` in `<sys/platform/x86.h>`.
    const CPUID_INDEX_1: u32 = 0;
    // SAFETY: dlsym with a NUL-terminated name; a null result is checked.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__x86_get_cpuid_feature_leaf".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: the symbol is glibc's `const struct cpuid_feature
    // *__x86_get_cpuid_feature_leaf(unsigned int)`, which returns a
    // pointer to static data (a zeroed entry for an unknown index).
    let leaf = unsafe {
        let get: extern "C" fn(u32) -> *const CpuidFeature = core::mem::transmute(sym);
        get(CPUID_INDEX_1).as_ref()?.cpuid
    };
    // eax, ebx, ecx, edx; a zeroed leaf (not filled in) says nothing.
    (leaf[0] != 0).then_some(leaf[2])
}

/// The state components the kernel enabled (`XGETBV` of `XCR0`).
fn xcr0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: XGETBV with ECX = 0 reads XCR0; callers checked OSXSAVE,
    // without which it would fault.
    unsafe {
        core::arch::asm!(
            "xgetbv",
            in("ecx") 0,
            out("eax") lo,
            out("edx") hi,
            options(nomem, nostack, preserves_flags),
        );
    }
    (hi as u64) << 32 | lo as u64
}

/// The routing behind the entry. Hot path for every rewritten site.
///
/// Three ways out: the result of atoll's routing (the thread's dispatch
/// on, program code); the raw call (atoll's own code, whose calls SUD
/// would have let through); or the site's own `syscall` (`Frame::native`
/// set), for a thread that switched dispatch off, which the unrewritten
/// code would not have brought into atoll, and for calls that need the
/// signal frame (`sigsys::handle_from_entry`), which then trap there as
/// before with the program's registers. A clone's or vfork's child in its
/// own copy of memory returns through here as its parent does; a child on
/// a new stack does not come back (`sigsys::clone`).
///
/// # Safety
/// Called only by `atoll_rewritten_entry`, with the frame it saved.
unsafe extern "C" fn rewritten_syscall(nr: i64, frame: *mut Frame) -> i64 {
    // SAFETY: the entry passes its saved registers, alive until it returns.
    let frame = unsafe { &mut *frame };
    if !crate::selector::dispatch_on() {
        frame.native = 1;
        return 0;
    }
    let args = frame.args();
    // First thing, as in the SIGSYS handler.
    let guard = AtollGuard::enter();
    if guard.prev() == ALLOW {
        // atoll's own code reached a rewritten site in libc: SUD would
        // have let the call through. Calls that move stacks run at the
        // site itself, where SUD lets them through.
        if super::keeps_trapping(nr) || super::moves_stacks(nr) {
            frame.native = 1;
            return 0;
        }
        return raw::syscall6(nr, args);
    }
    let saved_errno = raw::errno();
    // Signals deferred meanwhile go into the program's own frame at the
    // site (`SiteEnd`), as for a trapped call; not around a temporary
    // mask, which must be in force while they run, nor for the calls that
    // make a child, which returns through here too.
    let in_frame = !makes_a_child(nr) && crate::sigdefer::temporary_mask(nr, &args).is_none();
    let mode = in_frame.then(|| FrameDelivery::enter(FrameMode::Trap));
    let ret = crate::sigsys::handle_from_entry(nr, args, frame);
    raw::set_errno(saved_errno);
    let Some(r) = ret else {
        drop(guard);
        drop(mode);
        frame.native = 1;
        return 0;
    };
    crate::stats::count_direct();
    if in_frame && (crate::sigdefer::any_pending() || crate::sigdefer::is_restart_code(r)) {
        // The mode still says the signals are ours: the guard's drop
        // leaves them pending for the site's trap.
        super::site_end::hold(frame, nr, r);
        drop(guard);
        drop(mode);
        frame.native = 1;
        return 0;
    }
    drop(mode);
    drop(guard);
    r
}

/// Calls whose child returns through the entry as its parent does.
fn makes_a_child(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_clone | libc::SYS_clone3 | libc::SYS_fork | libc::SYS_vfork
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::arch::x86_64::__cpuid_count;

    #[test]
    fn glibc_leaf_1_is_the_cpu_s_and_the_area_holds_every_component_saved() {
        if let Some(ecx) = leaf1_ecx_from_glibc() {
            // glibc may clear bits it does not use; OSXSAVE is one it reads.
            let cpu = __cpuid_count(1, 0).ecx;
            assert_eq!(ecx & (1 << 27), cpu & (1 << 27));
        }
        if !init() {
            return; // no XSAVE: sites are never rewritten
        }
        let mask = ATOLL_XSAVE_MASK.load(Ordering::Relaxed);
        let bytes = ATOLL_XSAVE_BYTES.load(Ordering::Relaxed);
        // Each saved component ends inside the area (standard form).
        for i in 2..64 {
            if mask & (1 << i) != 0 {
                let leaf = __cpuid_count(0xd, i);
                assert!(
                    u64::from(leaf.ebx + leaf.eax) + 64 <= bytes,
                    "component {i}"
                );
            }
        }
        assert!(bytes >= 576 + 64);
    }
}
