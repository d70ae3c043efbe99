//! Strong and weak shares between two processes (Cosh §3.3): a forked
//! receiver gets the block's descriptor over a socket and tries to write
//! to what it was given read-only.
//!
//! * Strong share: the block is write-sealed, so `mprotect` to writable
//!   fails (`EACCES`), `pwrite` on the descriptor fails (`EPERM`), and a
//!   store into the mapping kills the receiver with SIGSEGV; the sender's
//!   bytes are unchanged.
//! * Weak share: the downgrade is skipped, so a receiver that breaks its
//!   promise *can* write — `mprotect` succeeds and the sender sees the
//!   change. This is what "weak" means; peers that use it trust each other.
//!
//! One `#[test]` in this file: it forks, which wants no other test thread
//! running at the time.

mod common;

use std::os::fd::AsRawFd;

use atoll_cosh::sys::{fork_domain, Exit};
use atoll_cosh::{recv_parcel, send_parcel, Config, Cosh, Mode, Strength};

const LEN: usize = 16 * 1024;

fn cosh() -> Cosh {
    // Remap everything, so the receiver maps the sender's block.
    Cosh::new(Config {
        remap_threshold: 0,
        ..Config::default()
    })
}

/// The receiver: take one parcel, check it, then try to write into it.
/// Exit codes other than 0 name the check that failed.
fn receiver(sock: std::os::unix::net::UnixStream, strong: bool) -> i32 {
    let mut c = cosh();
    let d = c.domain();
    let Ok(p) = recv_parcel(&sock) else { return 2 };
    let Ok(got) = c.attach_recv(d, p) else {
        return 3;
    };
    let ptr = match common::read_only_share_of(&mut c, got.agg, 0xab, LEN) {
        Ok(ptr) => ptr,
        Err(code) => return code,
    };
    let fd = c
        .manager()
        .blocks()
        .next()
        .expect("one block")
        .fd()
        .expect("a block of its own")
        .as_raw_fd();
    // SAFETY: `ptr..ptr + LEN` is one whole mapping of ours (offset 0 of a
    // page-aligned block); asking for write permission touches no memory.
    let mprotect = unsafe { libc::mprotect(ptr.cast(), LEN, libc::PROT_READ | libc::PROT_WRITE) };
    // SAFETY: a one-byte write from a live buffer to a descriptor we hold.
    let pwrite = unsafe { libc::pwrite(fd, b"y".as_ptr().cast(), 1, 1) };
    if strong {
        let e = std::io::Error::last_os_error().raw_os_error();
        if mprotect == 0 {
            return 7;
        }
        if pwrite != -1 || e != Some(libc::EPERM) {
            return 8;
        }
    } else if mprotect != 0 {
        return 9;
    }
    // SAFETY: deliberately a store to memory we were given read-only.
    // After a strong share the page is read-only and the kernel refused to
    // make it writable, so this faults and the process dies with SIGSEGV
    // (the point of the test); after a weak share `mprotect` made it
    // writable and the store lands in the shared block.
    unsafe { std::ptr::write_volatile(ptr, 0x55) };
    0
}

fn share_to_a_forked_receiver(strength: Strength) -> (Exit, Vec<u8>) {
    // Fork first: a child forked while we map the block would inherit the
    // mapping, the kernel would refuse the seal, and the share would
    // (correctly) fall back to a copy.
    let strong = strength == Strength::Strong;
    let child = fork_domain(move |sock| receiver(sock, strong)).unwrap();
    let mut c = cosh();
    let d = c.domain();
    let x = c.alloc(d, LEN).unwrap();
    c.write(x, 0, &[0xab; LEN]).unwrap();
    let p = c.attach_transfer(x, Mode::Share, strength).unwrap();
    assert_eq!(p.blocks.len(), 1, "remapped, not copied");
    assert_eq!(c.stats().seal_fallbacks, 0);
    send_parcel(&child.sock, &p).unwrap();
    c.discard(p);
    let exit = child.wait().unwrap();
    (exit, c.to_vec(x).unwrap())
}

/// A share seals the block only if no other process maps it; a child
/// forked while the block was mapped has a mapping, so the share copies
/// (Cosh §3.2 invariant 3) and the child's inherited mapping never sees
/// the shared bytes change.
fn share_after_fork_copies() {
    let mut c = cosh();
    let d = c.domain();
    let x = c.alloc(d, LEN).unwrap();
    let child = fork_domain(|sock| {
        let mut b = [0u8; 1];
        let _ = atoll_cosh::sys::read_exact(&sock, &mut b);
        0
    })
    .unwrap();
    let p = c.attach_transfer(x, Mode::Share, Strength::Strong).unwrap();
    assert!(p.blocks.is_empty(), "copied");
    assert_eq!(c.stats().seal_fallbacks, 1);
    c.discard(p);
    atoll_cosh::sys::write_all(&child.sock, b"!").unwrap();
    assert_eq!(child.wait().unwrap(), Exit::Code(0));
}

#[test]
fn strong_share_faults_a_writing_receiver_and_weak_share_does_not() {
    let (exit, bytes) = share_to_a_forked_receiver(Strength::Strong);
    assert_eq!(
        exit,
        Exit::Signal(libc::SIGSEGV),
        "the receiver's write must fault"
    );
    assert_eq!(bytes, vec![0xab; LEN], "the sender's data is unchanged");

    let (exit, bytes) = share_to_a_forked_receiver(Strength::Weak);
    assert_eq!(exit, Exit::Code(0), "weak: the receiver could write");
    assert_eq!(bytes[0], 0x55, "weak: and the sender sees it");

    share_after_fork_copies();
}
