//! Finding the `mov $nr,%eax` of a trapped `syscall` when the compiler put
//! other instructions between them, as glibc's own code often has it:
//!
//! ```text
//!  b8 01 01 00 00    mov  $0x101,%eax
//!  4c 89 f7          mov  %r14,%rdi        ← moved into the stub
//!  0f 05             syscall
//! ```
//!
//! The instructions in between are copied into the site's stub, before the
//! stub's own `mov $nr,%eax`, so they may be only instructions whose effect
//! is the same there and in either order with that `mov`: a small set of
//! register and memory moves, `lea`, `xor`/`add`/`sub`/`and`/`or`/`cmp`/
//! `test`, `cmovcc` that name neither RAX nor RIP, and no control flow. Anything this
//! decoder does not know ends the search: the site keeps trapping.
//! Decoding runs forward from just after the `mov` and must land exactly on
//! the `syscall`; the original bytes stay, so a jump into the middle of the
//! sequence still runs the original code (and traps).

/// Most bytes between the `mov` and the `syscall`.
pub const MAX_GAP: usize = 24;

/// Length of the movable instruction at the start of `code`, or `None`.
pub fn movable_len(code: &[u8]) -> Option<usize> {
    let mut i = 0;
    let mut rex = 0u8;
    if let Some(&b) = code.first() {
        if (0x40..=0x4f).contains(&b) {
            rex = b;
            i = 1;
        }
    }
    let rex_w = rex & 8 != 0;
    let rex_r = rex & 4 != 0;
    let rex_x = rex & 2 != 0;
    let rex_b = rex & 1 != 0;
    let op = *code.get(i)?;
    i += 1;
    match op {
        // mov $imm,%reg (not RAX): imm32, or imm64 with REX.W.
        0xb8..=0xbf if op != 0xb8 || rex_b => {
            let imm = if rex_w { 8 } else { 4 };
            (code.len() >= i + imm).then_some(i + imm)
        }
        // Two-operand forms with a ModRM byte: add, or, and, sub, xor,
        // cmp, test, mov (both directions), lea.
        0x01 | 0x03 | 0x09 | 0x0b | 0x21 | 0x23 | 0x29 | 0x2b | 0x31 | 0x33 | 0x39 | 0x3b
        | 0x85 | 0x89 | 0x8b | 0x8d => {
            let m = modrm(&code[i..], rex_r, rex_x, rex_b, op == 0x8d)?;
            Some(i + m)
        }
        // cmovcc r, r/m: glibc's `sched_getaffinity` clamps its size so
        // (`cmp %rsi,%r8; cmovbe %r8,%rsi`). The flags it reads are set by
        // what runs before it, in the stub as at the site.
        0x0f if matches!(code.get(i), Some(0x40..=0x4f)) => {
            let m = modrm(&code[i + 1..], rex_r, rex_x, rex_b, false)?;
            Some(i + 1 + m)
        }
        // mov $imm32,r/m (/0).
        0xc7 => {
            let b = *code.get(i)?;
            if (b >> 3) & 7 != 0 {
                return None;
            }
            let m = modrm_operand(&code[i..], rex_x, rex_b)?;
            (code.len() >= i + m + 4).then_some(i + m + 4)
        }
        // add/or/and/sub/xor/cmp $imm8,r/m.
        0x83 => {
            let m = modrm_operand(&code[i..], rex_x, rex_b)?;
            (code.len() > i + m).then_some(i + m + 1)
        }
        _ => None,
    }
}

/// Bytes of a ModRM operand pair (ModRM, SIB, displacement) whose register
/// operand is not RAX (it is, for `lea`, only written, but then the stub's
/// own `mov` would undo it: refused too).
fn modrm(code: &[u8], rex_r: bool, rex_x: bool, rex_b: bool, _lea: bool) -> Option<usize> {
    let b = *code.first()?;
    let reg = (b >> 3) & 7;
    if reg == 0 && !rex_r {
        return None;
    }
    modrm_operand(code, rex_x, rex_b)
}

/// Bytes of the r/m side: a register other than RAX, or memory addressed
/// without RIP and without RAX.
fn modrm_operand(code: &[u8], rex_x: bool, rex_b: bool) -> Option<usize> {
    let b = *code.first()?;
    let (md, rm) = (b >> 6, b & 7);
    if md == 3 {
        return (rm != 0 || rex_b).then_some(1);
    }
    let mut len = 1;
    let mut disp32_base = false;
    if rm == 4 {
        let sib = *code.get(1)?;
        len += 1;
        let (index, base) = ((sib >> 3) & 7, sib & 7);
        // Index 4 without REX.X means none.
        if index == 0 && !rex_x {
            return None;
        }
        if base == 5 && md == 0 {
            disp32_base = true;
        } else if base == 0 && !rex_b {
            return None;
        }
    } else if rm == 5 && md == 0 {
        return None; // RIP-relative
    } else if rm == 0 && !rex_b {
        return None;
    }
    len += match md {
        1 => 1,
        2 => 4,
        _ if disp32_base => 4,
        _ => 0,
    };
    (code.len() >= len).then_some(len)
}

/// In `code`, which ends with the trapped `syscall` (its last two bytes),
/// find `b8 imm32` with `imm32 == nr` followed only by movable
/// instructions; returns the offset of the `mov`. The byte before the `mov`
/// must be in `code` and must not be a REX prefix.
pub fn find_mov(code: &[u8], nr: u32) -> Option<usize> {
    let site = code.len().checked_sub(2)?;
    if code[site..] != [0x0f, 0x05] {
        return None;
    }
    for gap in 0..=MAX_GAP {
        let Some(mov) = site.checked_sub(5 + gap) else {
            break;
        };
        if mov == 0 {
            break;
        }
        let imm = u32::from_le_bytes([code[mov + 1], code[mov + 2], code[mov + 3], code[mov + 4]]);
        if code[mov] != 0xb8 || imm != nr || (0x40..=0x4f).contains(&code[mov - 1]) {
            continue;
        }
        if runs_to(&code[mov + 5..site]) {
            return Some(mov);
        }
    }
    None
}

/// Do movable instructions fill `code` exactly?
fn runs_to(code: &[u8]) -> bool {
    let mut at = 0;
    while at < code.len() {
        match movable_len(&code[at..]) {
            Some(n) => at += n,
            None => return false,
        }
    }
    at == code.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_mov_and_syscall_are_found() {
        let code = [0x90, 0xb8, 0x27, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(find_mov(&code, 39), Some(1));
        assert_eq!(find_mov(&code, 40), None);
    }

    #[test]
    fn glibc_argument_moves_between_are_skipped() {
        // mov $0x101,%eax; mov %r14,%rdi; mov $0xffffff9c,%edi(bf);
        // mov %rbp,%rsi; syscall
        let code = [
            0x72, 0xd2, 0xb8, 0x01, 0x01, 0, 0, 0x4c, 0x89, 0xf7, 0xbf, 0x9c, 0xff, 0xff, 0xff,
            0x48, 0x89, 0xee, 0x0f, 0x05,
        ];
        assert_eq!(find_mov(&code, 0x101), Some(2));
    }

    #[test]
    fn stack_loads_leas_and_zeroing_are_movable() {
        assert_eq!(movable_len(&[0x8b, 0x7c, 0x24, 0x08]), Some(4)); // mov 0x8(%rsp),%edi
        assert_eq!(movable_len(&[0x48, 0x8d, 0x74, 0x24, 0x10]), Some(5)); // lea 0x10(%rsp),%rsi
        assert_eq!(movable_len(&[0x31, 0xff]), Some(2)); // xor %edi,%edi
        assert_eq!(movable_len(&[0x45, 0x31, 0xd2]), Some(3)); // xor %r10d,%r10d
        assert_eq!(movable_len(&[0x41, 0xba, 8, 0, 0, 0]), Some(6)); // mov $8,%r10d
    }

    #[test]
    fn glibc_sched_getaffinity_s_clamp_is_movable() {
        // mov $0xcc,%eax; cmp %rsi,%r8; cmovbe %r8,%rsi; syscall
        let code = [
            0xff, 0x7f, 0xb8, 0xcc, 0, 0, 0, 0x49, 0x39, 0xf0, 0x49, 0x0f, 0x46, 0xf0, 0x0f, 0x05,
        ];
        assert_eq!(find_mov(&code, 0xcc), Some(2));
        // A cmov into RAX, or another two-byte opcode, is not.
        assert_eq!(movable_len(&[0x48, 0x0f, 0x46, 0xc6]), None);
        assert_eq!(movable_len(&[0x0f, 0xaf, 0xf7]), None);
    }

    #[test]
    fn anything_touching_rax_or_rip_or_flow_is_not() {
        assert_eq!(movable_len(&[0x48, 0x89, 0xc7]), None); // mov %rax,%rdi
        assert_eq!(movable_len(&[0x89, 0xc0]), None); // mov %eax,%eax
        assert_eq!(movable_len(&[0x48, 0x8b, 0x38]), None); // mov (%rax),%rdi
        assert_eq!(
            movable_len(&[0x48, 0x8d, 0x3d, 1, 2, 3, 4]), // lea x(%rip),%rdi
            None
        );
        assert_eq!(movable_len(&[0xeb, 0x02]), None); // jmp
        assert_eq!(movable_len(&[0xe8, 0, 0, 0, 0]), None); // call
        assert_eq!(movable_len(&[0x50]), None); // push %rax
        assert_eq!(movable_len(&[0xb8, 1, 0, 0, 0]), None); // mov $1,%eax
    }

    #[test]
    fn an_unknown_instruction_in_between_keeps_the_site_trapping() {
        // mov $0x101,%eax; mov %ax,0x11(%r12); syscall — 66 prefix unknown.
        let code = [
            0x90, 0xb8, 1, 1, 0, 0, 0x66, 0x41, 0x89, 0x44, 0x24, 0x11, 0x0f, 0x05,
        ];
        assert_eq!(find_mov(&code, 0x101), None);
    }
}
