//! Sites whose number is set by a two-byte `xor %eax,%eax`: glibc's
//! `read` (system call 0), which stdio calls internally for every buffer it
//! fills, so a `read` site that keeps trapping costs a trap per `fread`:
//!
//! ```text
//!  31 c0             xor  %eax,%eax        ← becomes  eb XX  jmp pad
//!  0f 05             syscall
//!  48 3d 00 f0 ff ff cmp  $-4096,%rax
//!  77 5b             ja   error
//!  c3                ret
//!  2e 66 0f 1f 84 00 00 00 00 00           ← pad: e9 rel32  jmp stub
//! ```
//!
//! Two bytes hold no `jmp rel32`, so the `xor` becomes a `jmp rel8` to the
//! alignment padding after the function's next `ret` (or `jmp`), where a
//! `jmp rel32` to the site's stub is written first. The padding is dead
//! code: decoding runs forward from the end of the `syscall`, a boundary
//! known to be an instruction's, through instructions this decoder knows,
//! to an unconditional `ret`/`jmp`; what follows it up to the next 16-byte
//! boundary must be nothing but the no-op encodings compilers pad with,
//! which nothing jumps into (jumps go to the aligned label after them).
//! Padding under 5 bytes is passed over: the aligned label after it starts
//! an instruction (a jump target, as glibc's `__read_nocancel` has its
//! error path there), from which decoding goes on to the next `ret` or
//! `jmp`. Anything unknown on the way, or padding out of the `rel8`'s
//! reach, and the site keeps trapping. The `syscall` bytes stay,
//! as for the five-byte sites (`decode.rs`): a thread past the `xor`, or a
//! jump straight to the `syscall`, traps as before.

/// Bytes of a `jmp rel32` written into the padding.
pub const PAD_BYTES: usize = 5;
/// Furthest a `jmp rel8` reaches forward from the end of the `xor`.
pub const REL8_REACH: usize = 127;
/// Bytes read after the `syscall` to find the padding: its reach and the
/// padding's own bytes.
pub const LOOK_AHEAD: usize = REL8_REACH + 2 + PAD_BYTES;

/// Does `before` (the bytes just before a trapped `syscall`, at least 3)
/// end with `xor %eax,%eax` (`31 c0` or `33 c0`) not preceded by a REX
/// prefix, for a trap of number 0?
pub fn is_xor_site(before: &[u8], nr: u32) -> bool {
    let n = before.len();
    n >= 3
        && nr == 0
        && matches!(before[n - 2..], [0x31, 0xc0] | [0x33, 0xc0])
        && !(0x40..=0x4f).contains(&before[n - 3])
}

/// Does `before` (the bytes just before a trapped `syscall`, at least 3)
/// end with a two-byte `mov %r32,%eax` from another of the first eight
/// registers (`89 /r` or `8b /r`, register form, no prefix before it)?
/// Its source register (x86 numbering: 1 RCX … 7 RDI), if so. glibc's
/// `_exit` sets its numbers so, `mov $0xe7,%esi … mov %esi,%eax; syscall`
/// for `exit_group`: the number is not a constant beside the `syscall`,
/// and the site's stub runs the `mov` itself (`stubs::encode`).
pub fn reg_site_source(before: &[u8]) -> Option<u8> {
    let n = before.len();
    if n < 3 || is_prefix(before[n - 3]) {
        return None;
    }
    let (op, modrm) = (before[n - 2], before[n - 1]);
    if modrm >> 6 != 3 {
        return None;
    }
    let (reg, rm) = ((modrm >> 3) & 7, modrm & 7);
    let src = match op {
        0x89 if rm == 0 => reg,
        0x8b if reg == 0 => rm,
        _ => return None,
    };
    // Not EAX itself, nor the stack pointer.
    (src != 0 && src != 4).then_some(src)
}

/// REX, operand- and address-size, lock, repeat and segment prefixes.
fn is_prefix(b: u8) -> bool {
    matches!(
        b,
        0x40..=0x4f | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65
    )
}

/// Offset in `after` (the bytes from the end of the `syscall` on) of dead
/// padding of at least [`PAD_BYTES`] that a `jmp rel8` at the `xor` can
/// reach; `base` is the address of `after[0]`, for the alignment.
pub fn find_padding(after: &[u8], base: usize) -> Option<usize> {
    let mut at = 0;
    loop {
        loop {
            let (len, ends) = insn_len(&after[at..])?;
            at += len;
            if ends {
                break;
            }
        }
        let mut aligned = (base + at).next_multiple_of(16) - base;
        if aligned > after.len() || !nops_fill(&after[at..aligned]) {
            // Not padding to a 16-byte boundary: padding to a label at an
            // 8-byte one (ld.so's `__pread64_nocancel`: `ret`, a 5-byte
            // `nopl`, its error path at 8 mod 16, which its `ja` targets).
            aligned = at + nop_run(&after[at..])?;
            if !(base + aligned).is_multiple_of(8) || aligned == after.len() {
                return None;
            }
        }
        // The jmp rel8 sits 2 bytes before the syscall: its next
        // instruction is the syscall, 2 bytes before `after[0]`.
        if at + 2 > REL8_REACH {
            return None;
        }
        if aligned - at >= PAD_BYTES {
            return Some(at);
        }
        // Too little padding (glibc's `__read_nocancel`: 3 bytes after its
        // `ret`, then its error path). What starts at the aligned boundary
        // is a jump target, an instruction's start: go on from there to
        // the next `ret` or `jmp` and its padding.
        at = aligned;
    }
}

/// Length of the instruction at the start of `code`, and whether it ends
/// the straight-line path (`ret`, `jmp`), or `None` for anything this
/// decoder does not know: general moves, arithmetic, compares and tests,
/// `lea`, conditional jumps, `call rel32`, `neg`, with REX, operand-size
/// and `%fs` prefixes.
fn insn_len(code: &[u8]) -> Option<(usize, bool)> {
    let mut i = 0;
    let mut opsize16 = false;
    while let Some(&p) = code.get(i) {
        match p {
            0x66 => opsize16 = true,
            0x64 => {}
            _ => break,
        }
        i += 1;
    }
    let mut rex_w = false;
    if let Some(&b) = code.get(i) {
        if (0x40..=0x4f).contains(&b) {
            rex_w = b & 8 != 0;
            i += 1;
        }
    }
    let op = *code.get(i)?;
    i += 1;
    let imm_z = if opsize16 { 2 } else { 4 };
    let len = match op {
        0xc3 => return Some((i, true)),
        0xeb => return (code.len() > i).then_some((i + 1, true)),
        0xe9 => return (code.len() >= i + 4).then_some((i + 4, true)),
        0xe8 => i + 4,
        0x70..=0x7f => i + 1,
        0x0f => {
            let op2 = *code.get(i)?;
            i += 1;
            match op2 {
                0x80..=0x8f => i + 4,
                // `syscall`: the next function's own (ld.so's system-call
                // stubs stand one after the other, without padding).
                0x05 => i,
                // movzx/movsx, cmovcc, setcc: a ModRM operand.
                0xb6 | 0xb7 | 0xbe | 0xbf | 0x40..=0x4f | 0x90..=0x9f => {
                    i + modrm_operand(code.get(i..)?)?
                }
                _ => return None,
            }
        }
        // ALU forms with a ModRM byte: add, or, and, sub, xor, cmp, test,
        // mov both ways, lea, movsxd.
        0x00..=0x03
        | 0x08..=0x0b
        | 0x20..=0x23
        | 0x28..=0x2b
        | 0x30..=0x33
        | 0x38..=0x3b
        | 0x84
        | 0x85
        | 0x88..=0x8b
        | 0x8d
        | 0x63 => i + modrm_operand(code.get(i..)?)?,
        // The same with an immediate: imm8, or imm16/32.
        0x83 | 0xc6 => i + modrm_operand(code.get(i..)?)? + 1,
        0x81 | 0xc7 => i + modrm_operand(code.get(i..)?)? + imm_z,
        // test/not/neg (/0, /2, /3) of group 3; /0 has an immediate.
        0xf6 | 0xf7 => {
            let reg = (*code.get(i)? >> 3) & 7;
            let imm = match (reg, op) {
                (0, 0xf6) => 1,
                (0, _) => imm_z,
                (2 | 3, _) => 0,
                _ => return None,
            };
            i + modrm_operand(code.get(i..)?)? + imm
        }
        // add/or/and/sub/xor/cmp/test with the accumulator and imm32.
        0x05 | 0x0d | 0x25 | 0x2d | 0x35 | 0x3d | 0xa9 => i + imm_z,
        0x04 | 0x0c | 0x24 | 0x2c | 0x34 | 0x3c | 0xa8 => i + 1,
        // mov $imm,%reg: imm32, or imm64 with REX.W.
        0xb8..=0xbf => i + if rex_w { 8 } else { imm_z },
        // push/pop of a register.
        0x50..=0x5f => i,
        _ => return None,
    };
    (code.len() >= len).then_some((len, false))
}

/// Bytes of a ModRM operand (ModRM, SIB, displacement), no immediate.
fn modrm_operand(code: &[u8]) -> Option<usize> {
    let b = *code.first()?;
    let (md, rm) = (b >> 6, b & 7);
    if md == 3 {
        return Some(1);
    }
    let mut n = 1;
    if rm == 4 {
        let sib = *code.get(1)?;
        n += 1;
        if md == 0 && sib & 7 == 5 {
            n += 4;
        }
    } else if md == 0 && rm == 5 {
        n += 4; // RIP-relative
    }
    n += match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    (code.len() >= n).then_some(n)
}

/// Bytes of the run of no-op instructions at the start of `code` (see
/// [`nops_fill`]), or `None` when one is cut off by its end.
fn nop_run(code: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < code.len() {
        match nop_len(&code[at..]) {
            NopLen::Nop(n) => at += n,
            NopLen::NotANop => return Some(at),
            NopLen::CutOff => return None,
        }
    }
    Some(at)
}

enum NopLen {
    Nop(usize),
    NotANop,
    CutOff,
}

/// The no-op instruction at the start of `code`, if it is one.
fn nop_len(code: &[u8]) -> NopLen {
    let mut i = 0;
    while matches!(code.get(i), Some(0x66 | 0x2e)) {
        i += 1;
    }
    match code.get(i..) {
        Some([0x90, ..]) | Some([0xcc, ..]) => NopLen::Nop(i + 1),
        Some([0x0f]) => NopLen::CutOff,
        Some([0x0f, 0x1f]) => NopLen::CutOff,
        Some([0x0f, 0x1f, rest @ ..]) if rest.first().is_some_and(|m| (m >> 3) & 7 == 0) => {
            match modrm_operand(rest) {
                Some(m) => NopLen::Nop(i + 2 + m),
                None => NopLen::CutOff,
            }
        }
        Some([]) if i > 0 => NopLen::CutOff,
        _ => NopLen::NotANop,
    }
}

/// Is `pad` made only of the no-op encodings compilers pad with: `90`,
/// `0f 1f /0` with any ModRM operand, each after `66`/`2e` prefixes, or
/// `int3` (`cc`)?
fn nops_fill(pad: &[u8]) -> bool {
    let mut at = 0;
    while at < pad.len() {
        let mut i = at;
        while matches!(pad.get(i), Some(0x66 | 0x2e)) {
            i += 1;
        }
        let len = match pad.get(i..) {
            Some([0x90, ..]) | Some([0xcc, ..]) => 1,
            Some([0x0f, 0x1f, rest @ ..]) if rest.first().is_some_and(|m| (m >> 3) & 7 == 0) => {
                match modrm_operand(rest) {
                    Some(m) => 2 + m,
                    None => return false,
                }
            }
            _ => return false,
        };
        at = i + len;
    }
    at == pad.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc 2.36's `read`, single-threaded path: the bytes after the
    /// `syscall` at 0xf82ab, up to the next function's first bytes.
    const READ_AFTER: &[u8] = &[
        0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, // cmp $-4096,%rax
        0x77, 0x5b, // ja
        0xc3, // ret
        0x2e, 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, // cs nopw
        0x48, 0x83, 0xec, 0x28, // sub $0x28,%rsp (the next code)
    ];

    /// Its cancellable path: after the `syscall` at 0xf82ea.
    const READ_CANCEL_AFTER: &[u8] = &[
        0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, // cmp
        0x77, 0x34, // ja
        0x44, 0x89, 0xc7, // mov %r8d,%edi
        0x48, 0x89, 0x44, 0x24, 0x08, // mov %rax,0x8(%rsp)
        0xe8, 0x9f, 0xd5, 0xf8, 0xff, // call
        0x48, 0x8b, 0x44, 0x24, 0x08, // mov 0x8(%rsp),%rax
        0x48, 0x83, 0xc4, 0x28, // add $0x28,%rsp
        0xc3, // ret
        0x0f, 0x1f, 0x44, 0x00, 0x00, // nopl 0x0(%rax,%rax,1)
        0x48, 0x8b, 0x15, 0xc9, 0xaa, 0x0d, 0x00, // the next code
    ];

    /// glibc 2.36's `__read_nocancel` (at 0xfd100), after its `syscall`:
    /// three bytes of padding after the first `ret`, twelve after the
    /// error path's.
    const READ_NOCANCEL_AFTER: &[u8] = &[
        0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, // cmp
        0x77, 0x04, // ja 0xfd110
        0xc3, // ret
        0x0f, 0x1f, 0x00, // nopl (%rax)
        0x48, 0x8b, 0x15, 0xc9, 0x5c, 0x0d, 0x00, // mov x(%rip),%rdx
        0xf7, 0xd8, // neg %eax
        0x64, 0x89, 0x02, // mov %eax,%fs:(%rdx)
        0x48, 0xc7, 0xc0, 0xff, 0xff, 0xff, 0xff, // mov $-1,%rax
        0xc3, // ret
        0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, 0x66, 0x90, // padding
        0x49, 0x89, 0xca, // the next function
    ];

    #[test]
    fn glibc_reads_find_the_padding_after_their_ret() {
        assert_eq!(find_padding(READ_AFTER, 0xf82ad), Some(9));
        assert_eq!(find_padding(READ_CANCEL_AFTER, 0xf82ec), Some(31));
        // Past the first ret's three bytes, to the error path's padding.
        assert_eq!(find_padding(READ_NOCANCEL_AFTER, 0xfd104), Some(32));
    }

    #[test]
    fn padding_that_is_short_unaligned_or_not_nops_is_refused() {
        // Four bytes of padding hold no jmp rel32.
        let short = [0xc3, 0x0f, 0x1f, 0x40, 0x00];
        assert_eq!(find_padding(&short, 0x100b), None);
        // The next function starts right after the ret.
        assert_eq!(
            find_padding(&[0xc3, 0x48, 0x83, 0xec, 0x28], 0x1000 - 1),
            None
        );
        // Live code after the ret is not padding.
        let live = [0xc3, 0x48, 0x89, 0xc7, 0x90, 0x90, 0x90, 0x90, 0x90];
        assert_eq!(find_padding(&live, 0x1000 - 9), None);
        // An instruction the decoder does not know ends the search.
        let unknown = [0xf3, 0x0f, 0x1e, 0xfa, 0xc3, 0x90, 0x90, 0x90, 0x90, 0x90];
        assert_eq!(find_padding(&unknown, 0x1000 - 10), None);
        // Truncated code.
        assert_eq!(find_padding(&[0x48, 0x3d, 0x00], 0x1000), None);
    }

    #[test]
    fn padding_out_of_the_rel8_reach_is_refused() {
        let mut far = vec![0x48, 0x89, 0xc7]; // mov %rax,%rdi
        far = far.repeat(44); // 132 bytes of straight-line code
        far.push(0xc3);
        far.extend([0x90; 16]);
        let base = 0x2000 - far.len() + 16 - 1;
        assert_eq!(find_padding(&far, base), None);
    }

    #[test]
    fn only_a_plain_xor_of_eax_for_call_zero_is_a_short_site() {
        assert!(is_xor_site(&[0x17, 0x31, 0xc0], 0));
        assert!(is_xor_site(&[0x08, 0x33, 0xc0], 0));
        // REX.W xor, another number, another register.
        assert!(!is_xor_site(&[0x48, 0x31, 0xc0], 0));
        assert!(!is_xor_site(&[0x17, 0x31, 0xc0], 1));
        assert!(!is_xor_site(&[0x17, 0x31, 0xc9], 0));
        assert!(!is_xor_site(&[0x31, 0xc0], 0));
    }

    /// glibc 2.36's `_exit` (at 0xd43e0), its `exit_group` site at +37
    /// and what follows, to the padding after the error path's `jmp`.
    const EXIT_AFTER: &[u8] = &[
        0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, // cmp $-4096,%rax
        0x76, 0xe7, // jbe
        0xf7, 0xd8, // neg %eax
        0x64, 0x41, 0x89, 0x00, // mov %eax,%fs:(%r8)
        0xeb, 0xdf, // jmp
        0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00, // nopl 0x0(%rax)
        0xf7, 0xd8, // the error path at +64
    ];

    /// ld.so 2.36's `__read_nocancel` (at 0x20b70), after its `syscall`:
    /// 3 bytes of padding after its `ret`, its error path, then the next
    /// function (`__pread64_nocancel`) with no padding at all, whose `ret`
    /// is followed by a 5-byte `nopl` up to its error path at 8 mod 16.
    const LD_READ_AFTER: &[u8] = &[
        0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, // cmp
        0x77, 0x04, // ja
        0xc3, // ret
        0x0f, 0x1f, 0x00, // nopl (%rax)
        0xf7, 0xd8, // neg %eax
        0x89, 0x05, 0x18, 0x37, 0x01, 0x00, // mov %eax,x(%rip)
        0x48, 0xc7, 0xc0, 0xff, 0xff, 0xff, 0xff, // mov $-1,%rax
        0xc3, // ret (0x20b8f)
        0x49, 0x89, 0xca, // mov %rcx,%r10 (0x20b90)
        0xb8, 0x11, 0x00, 0x00, 0x00, // mov $0x11,%eax
        0x0f, 0x05, // syscall
        0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, // cmp
        0x77, 0x06, // ja 0x20ba8
        0xc3, // ret
        0x0f, 0x1f, 0x44, 0x00, 0x00, // nopl (0x20ba3)
        0xf7, 0xd8, // neg %eax (0x20ba8)
    ];

    #[test]
    fn ld_so_s_read_finds_padding_before_a_label_at_8_mod_16() {
        assert_eq!(
            find_padding(LD_READ_AFTER, 0x20b74),
            Some(0x20ba3 - 0x20b74)
        );
        // The same bytes shifted by 4: the nops end at 4 mod 8, no label.
        assert_eq!(find_padding(LD_READ_AFTER, 0x20b78), None);
        assert_eq!(nop_run(&[0x0f, 0x1f, 0x44, 0x00, 0x00, 0xf7]), Some(5));
        assert_eq!(nop_run(&[0x0f, 0x1f, 0x44]), None);
        assert_eq!(nop_run(&[0xf7, 0xd8]), Some(0));
    }

    #[test]
    fn glibc_exit_s_register_site_is_found_with_its_padding() {
        assert_eq!(reg_site_source(&[0x3c, 0x89, 0xf0]), Some(6)); // %esi
        assert_eq!(find_padding(EXIT_AFTER, 0xd4409), Some(16));
        assert_eq!(reg_site_source(&[0x90, 0x8b, 0xc6]), Some(6));
        assert_eq!(reg_site_source(&[0x90, 0x89, 0xd0]), Some(2)); // %edx
                                                                   // A REX or operand-size prefix makes it another instruction; a
                                                                   // move into another register, from memory, or from EAX or ESP
                                                                   // sets no number.
        assert_eq!(reg_site_source(&[0x48, 0x89, 0xf0]), None);
        assert_eq!(reg_site_source(&[0x66, 0x89, 0xf0]), None);
        assert_eq!(reg_site_source(&[0x90, 0x89, 0xf1]), None);
        assert_eq!(reg_site_source(&[0x90, 0x8b, 0x06]), None);
        assert_eq!(reg_site_source(&[0x90, 0x89, 0xc0]), None);
        assert_eq!(reg_site_source(&[0x90, 0x89, 0xe0]), None);
        assert_eq!(reg_site_source(&[0x89, 0xf0]), None);
    }

    #[test]
    fn the_nop_encodings_compilers_pad_with_are_known() {
        assert!(nops_fill(&[
            0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
        ]));
        assert!(nops_fill(&[0x0f, 0x1f, 0x80, 0, 0, 0, 0, 0x66, 0x90]));
        assert!(nops_fill(&[0xcc; 7]));
        assert!(!nops_fill(&[0x0f, 0x1f, 0x48, 0x00])); // /1 is not a nop
        assert!(!nops_fill(&[0x0f, 0x1f, 0x84, 0x00])); // truncated
    }
}
