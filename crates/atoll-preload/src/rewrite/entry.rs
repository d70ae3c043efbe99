//! The entry of rewritten sites: a function call that behaves like the
//! `syscall` instruction it replaces.
//!
//! A `syscall` leaves every register but RAX (the result), RCX and R11
//! untouched, and so must the entry, although atoll's dispatch and the libc
//! functions it calls use vector registers freely (glibc's `memcpy` picks
//! AVX2 or AVX-512 at run time). So the entry saves the general registers
//! that carry arguments, the flags, and the extended state that compiled
//! code and libc may touch with `XSAVE` (x87, SSE, AVX, AVX-512 opmasks and
//! upper registers, as far as `XCR0` enables them; not AMX tiles, protection
//! keys or other state that neither atoll nor libc changes, which would
//! cost 8 KiB of stack more); then it runs the same routing as the SIGSYS
//! handler, and restores everything but RAX. The state (up to 2.7 KiB with
//! AVX-512) and the routing's frames go on atoll's own stack (`stack`):
//! the entry moves there after saving the argument registers and flags
//! (72 bytes below the program's red zone), as a system call costs the
//! program no stack on Linux and a Go goroutine's may have less than 1 KiB
//! left (Go's runtime makes calls through such sites). Where it does not
//! move (no atoll stack yet, or a program handler running on the program's
//! alternate stack, see `stack::ENTRY_TOP`), the state goes on the
//! program's stack below the red zone, as the kernel's signal frame would.
//!
//! ```text
//!  stub: lea -128(%rsp) ─ mov $nr,%eax ─ call entry
//!  atoll_rewritten_entry: save flags, args ─ move to atoll's stack ─
//!     XSAVE area ─ rewritten_syscall
//!     ├─ selector was ALLOW (atoll's own libc call): the raw system call,
//!     │  as SUD would have let it through
//!     └─ AtollGuard ─ save errno ─ sigsys::handle_without_context ─ errno
//!        back ─ guard drop (deferred program signals delivered there)
//!  XRSTOR ─ back to the program's stack ─ restore args and flags ─ ret to
//!  the stub ─ jmp after the site
//! ```

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::raw;
use crate::selector::{AtollGuard, ALLOW};

/// Bytes of the `XSAVE` area, plus alignment room (0: no `XSAVE`, the
/// entry must not be used).
pub(super) static ATOLL_XSAVE_BYTES: AtomicU64 = AtomicU64::new(0);
/// The state components saved: `XCR0` ∩ [`SAVED_COMPONENTS`].
static ATOLL_XSAVE_MASK: AtomicU64 = AtomicU64::new(0);

/// x87, SSE, AVX, AVX-512 opmask, ZMM_Hi256, Hi16_ZMM (bits 0-2, 5-7).
const SAVED_COMPONENTS: u64 = 0xe7;

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
    // The six arguments, as an array [rdi, rsi, rdx, r10, r8, r9] at rbp-48.
    "    push r9",
    "    push r8",
    "    push r10",
    "    push rdx",
    "    push rsi",
    "    push rdi",
    "    cld",
    "    mov r11, rax",
    // Onto atoll's stack (its top in `stack::ENTRY_TOP`, a thread-local at
    // a fixed offset from the thread pointer), unless that is unknown or 0,
    // or this already runs there (top - rsp below its size). RBP keeps the
    // program's frame: the way back is `lea rsp, [rbp - 48]`.
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
    "    lea rsi, [rbp - 48]",
    "    call {handler}",
    "    mov r11, rax",
    "    mov eax, dword ptr [rip + {xsave_mask}]",
    "    xor edx, edx",
    "    xrstor64 [rsp]",
    "    mov rax, r11",
    "    lea rsp, [rbp - 48]",
    "    pop rdi",
    "    pop rsi",
    "    pop rdx",
    "    pop r10",
    "    pop r8",
    "    pop r9",
    "    pop rbp",
    "    popfq",
    "    ret",
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
/// # Safety
/// Called only by `atoll_rewritten_entry`, with a pointer to the six
/// argument registers it saved.
unsafe extern "C" fn rewritten_syscall(nr: i64, args: *const [u64; 6]) -> i64 {
    // SAFETY: the entry passes its saved registers, alive until it returns.
    let args = unsafe { *args };
    // First thing, as in the SIGSYS handler.
    let guard = AtollGuard::enter();
    if guard.prev() == ALLOW {
        // atoll's own code reached a rewritten site in libc: SUD would
        // have let the call through.
        return raw::syscall6(nr, args);
    }
    let saved_errno = raw::errno();
    crate::stats::count_direct();
    let ret = crate::sigsys::handle_without_context(nr, args);
    raw::set_errno(saved_errno);
    drop(guard);
    ret
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
