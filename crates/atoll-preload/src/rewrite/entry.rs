//! The entry of rewritten sites: a function call that behaves like the
//! `syscall` instruction it replaces.
//!
//! A `syscall` leaves every register but RAX (the result), RCX and R11
//! untouched, and so must the entry, although atoll's dispatch and the libc
//! functions it calls use vector registers freely (glibc's `memcpy` picks
//! AVX2 or AVX-512 at run time). So the entry saves the general registers
//! that carry arguments, the flags, and the whole extended state with
//! `XSAVE` (x87, SSE, AVX, AVX-512, whatever `XCR0` enables: the size comes
//! from CPUID leaf 0xD), on the program's stack below the red zone, as the
//! kernel does for a signal frame; then it runs the same routing as the
//! SIGSYS handler, and restores everything but RAX.
//!
//! ```text
//!  stub: lea -128(%rsp) ─ mov $nr,%eax ─ call entry
//!  atoll_rewritten_entry: save flags, args, XSAVE area ─ rewritten_syscall
//!     ├─ selector was ALLOW (atoll's own libc call): the raw system call,
//!     │  as SUD would have let it through
//!     └─ AtollGuard ─ save errno ─ sigsys::handle_without_context ─ errno
//!        back ─ guard drop (deferred program signals delivered there)
//!  XRSTOR ─ restore args and flags ─ ret to the stub ─ jmp after the site
//! ```

use core::sync::atomic::{AtomicU64, Ordering};

use crate::raw;
use crate::selector::{AtollGuard, ALLOW};

/// Bytes of the `XSAVE` area, plus alignment room (0: no `XSAVE`, the
/// entry must not be used).
pub(super) static ATOLL_XSAVE_BYTES: AtomicU64 = AtomicU64::new(0);

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
    "    mov eax, -1",
    "    mov edx, -1",
    "    xsave64 [rsp]",
    "    mov rdi, r11",
    "    lea rsi, [rbp - 48]",
    "    call {handler}",
    "    mov r11, rax",
    "    mov eax, -1",
    "    mov edx, -1",
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
    handler = sym rewritten_syscall,
);

extern "C" {
    fn atoll_rewritten_entry();
}

/// Address the stubs call.
pub fn address() -> usize {
    atoll_rewritten_entry as *const () as usize
}

/// Find the `XSAVE` area's size; false when the CPU or the kernel does not
/// offer `XSAVE` (then sites are never rewritten).
pub fn init() -> bool {
    use core::arch::x86_64::__cpuid_count;
    let leaf1 = __cpuid_count(1, 0);
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    if !osxsave {
        return false;
    }
    // EBX of leaf 0xD, sub-leaf 0: bytes for the features XCR0 enables.
    let size = __cpuid_count(0xd, 0).ebx as u64;
    if size < 576 {
        return false;
    }
    ATOLL_XSAVE_BYTES.store(size + 64, Ordering::Relaxed);
    true
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
