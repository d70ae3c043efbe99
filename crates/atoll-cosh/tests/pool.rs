//! Transfers between two processes that share a block pool, over the
//! polled channel (`atoll_cosh::pool`, `atoll_cosh::chan`):
//!
//! * a strong share: the receiver's view is read-only, so a store into it
//!   kills the receiver with SIGSEGV, and the sender's bytes are
//!   unchanged;
//! * a strong move: the sender's view is gone (hidden), so a read through
//!   a pointer it kept kills it with SIGSEGV, and the receiver has the
//!   bytes read/write — also when the sender hides its view only after
//!   the ticket left (`transfer_pooled`);
//! * the channel carries messages in order, and a dead peer is an error,
//!   not a hang;
//! * a peer killed while it holds the pool's lock leaves a pool the
//!   others go on using;
//! * a large freed block gives its memory back to the kernel.
//!
//! Unlike a share of a sealed memfd (`tests/fault.rs`), a pool share is
//! enforced by the mappings the library makes, not by a seal: a process
//! that ignores the library could `mprotect` its view writable. Pool
//! domains trust each other's library, as Cosh's trust their block
//! manager (docs/ARCHITECTURE.md, "Cosh transfers").
//!
//! One `#[test]` in this file: it forks, which wants no other test thread
//! running at the time.

mod common;

use std::sync::Arc;

use atoll_cosh::chan::Channel;
use atoll_cosh::sys::{self, fork_domain, Exit};
use atoll_cosh::{Agg, Config, Cosh, Mode, Pool, PoolDomain, PoolTicket, Rights, Strength};

const LEN: usize = 16 * 1024;

fn cosh(pool: &Arc<Pool>, me: PoolDomain) -> Cosh {
    Cosh::with_pool(
        Config {
            remap_threshold: 0,
            ..Config::default()
        },
        pool.clone(),
        me,
    )
}

/// In a forked sender: a block of `LEN` bytes of `byte` in this domain,
/// or the exit code naming the step that failed.
fn filled_block(c: &mut Cosh, byte: u8) -> Result<Agg, i32> {
    let d = c.domain();
    let x = c.alloc(d, LEN).map_err(|_| 2)?;
    c.write(x, 0, &[byte; LEN]).map_err(|_| 3)?;
    Ok(x)
}

/// A strong share to a forked receiver that then writes what it got.
fn share_faults_a_writing_receiver() {
    let pool = Arc::new(Pool::create(1 << 20).unwrap());
    let (ours, theirs) = (pool.join(), pool.join());
    let chan = Channel::new().unwrap();
    let parent = std::process::id() as i32;
    let child = fork_domain(|_| {
        let end = chan.end(false, || sys::parent_pid() == parent);
        let mut c = cosh(&pool, theirs);
        let d = c.domain();
        let mut buf = Vec::new();
        let Ok(t) = end.recv(&mut buf).and_then(|()| PoolTicket::decode(&buf)) else {
            return 2;
        };
        let Ok(got) = c.recv_pooled(d, t) else {
            return 3;
        };
        let ptr = match common::read_only_share_of(&mut c, got.agg, 0xab, LEN) {
            Ok(ptr) => ptr,
            Err(code) => return code,
        };
        // SAFETY: deliberately a store to memory we were given read-only:
        // the mapping is read-only, so this faults and the process dies
        // with SIGSEGV (the point of the test).
        unsafe { std::ptr::write_volatile(ptr, 0x55) };
        0
    })
    .unwrap();
    let pid = child.pid;
    let end = chan.end(true, move || !sys::child_ended(pid));
    let mut c = cosh(&pool, ours);
    let d = c.domain();
    let x = c.alloc(d, LEN).unwrap();
    c.write(x, 0, &[0xab; LEN]).unwrap();
    let p = c
        .attach_transfer_pooled(x, Mode::Share, Strength::Strong)
        .unwrap();
    assert_eq!(p.blocks.len(), 1, "remapped, not copied");
    let t = c.send_pooled(p, theirs).unwrap();
    end.send(&t.encode()).unwrap();
    assert_eq!(
        child.wait().unwrap(),
        Exit::Signal(libc::SIGSEGV),
        "the receiver's write must fault"
    );
    assert!(c.write(x, 0, b"y").is_err(), "the sender kept read-only");
    assert_eq!(c.to_vec(x).unwrap(), vec![0xab; LEN], "unchanged");
}

/// A strong move from a forked sender that then reads through a pointer
/// into what it gave away; `overlapped`: by `transfer_pooled`, which
/// hides the sender's view after the ticket left.
fn move_takes_the_senders_view(overlapped: bool) {
    let pool = Arc::new(Pool::create(1 << 20).unwrap());
    let (ours, theirs) = (pool.join(), pool.join());
    let chan = Channel::new().unwrap();
    let parent = std::process::id() as i32;
    let child = fork_domain(|_| {
        let end = chan.end(false, || sys::parent_pid() == parent);
        let mut c = cosh(&pool, theirs);
        let x = match filled_block(&mut c, 0xcd) {
            Ok(x) => x,
            Err(code) => return code,
        };
        let Ok(ptr) = c.iter(x, 0).map(|r| r[0].as_ptr()) else {
            return 4;
        };
        let sent = if overlapped {
            c.transfer_pooled(x, Mode::Move, Strength::Strong, ours, |t| {
                end.send(&t.encode())
            })
        } else {
            c.attach_transfer_pooled(x, Mode::Move, Strength::Strong)
                .and_then(|p| c.send_pooled(p, ours))
                .and_then(|t| end.send(&t.encode()))
        };
        if sent.is_err() {
            return 5;
        }
        // Wait for the receiver's word that it has the bytes.
        let mut buf = Vec::new();
        if end.recv(&mut buf).is_err() {
            return 6;
        }
        // SAFETY: deliberately a read of memory we moved away: the view
        // is hidden (`PROT_NONE`), so this faults (the point of the test).
        unsafe { std::ptr::read_volatile(ptr) };
        0
    })
    .unwrap();
    let pid = child.pid;
    let end = chan.end(true, move || !sys::child_ended(pid));
    let mut c = cosh(&pool, ours);
    let d = c.domain();
    let mut buf = Vec::new();
    end.recv(&mut buf).unwrap();
    let got = c.recv_pooled(d, PoolTicket::decode(&buf).unwrap()).unwrap();
    assert_eq!(c.rights(got.agg).unwrap(), Rights::Rw);
    assert_eq!(c.to_vec(got.agg).unwrap(), vec![0xcd; LEN]);
    c.write(got.agg, 0, b"mine").unwrap();
    end.send(b"got it").unwrap();
    assert_eq!(
        child.wait().unwrap(),
        Exit::Signal(libc::SIGSEGV),
        "the sender's read must fault"
    );
}

fn channel_carries_messages_in_order() {
    let ch = Channel::new().unwrap();
    let parent = std::process::id() as i32;
    let child = fork_domain(|_| {
        let end = ch.end(false, || sys::parent_pid() == parent);
        let mut buf = Vec::new();
        for _ in 0..1000 {
            if end.recv(&mut buf).is_err() || end.send(&buf).is_err() {
                return 1;
            }
        }
        0
    })
    .unwrap();
    let pid = child.pid;
    let end = ch.end(true, move || !sys::child_ended(pid));
    let mut buf = Vec::new();
    for i in 0..1000u32 {
        let msg = i.to_le_bytes().repeat(1 + i as usize % 50);
        end.send(&msg).unwrap();
        end.recv(&mut buf).unwrap();
        assert_eq!(buf, msg);
    }
    assert_eq!(child.wait().unwrap(), Exit::Code(0));
}

fn a_dead_peer_is_an_error_not_a_hang() {
    let ch = Channel::new().unwrap();
    let child = fork_domain(|_| 0).unwrap();
    let pid = child.pid;
    let end = ch.end(true, move || !sys::child_ended(pid));
    let mut buf = Vec::new();
    assert!(end.recv(&mut buf).is_err());
    child.wait().unwrap();
}

/// A forked domain killed (SIGKILL) while it holds the pool's lock half
/// way through an allocation: the lock is taken back, the half-made
/// allocation undone, and the survivors allocate and transfer. (Before
/// the lock named its holder, the first `free_units` here spun for ever.)
fn a_holder_killed_inside_the_lock_is_recovered_from() {
    let pool = Arc::new(Pool::create(1 << 20).unwrap());
    let (ours, theirs) = (pool.join(), pool.join());
    let free = pool.free_units();
    let chan = Channel::new().unwrap();
    let parent = std::process::id() as i32;
    let child = fork_domain(|_| {
        let end = chan.end(false, || sys::parent_pid() == parent);
        let _ = pool.alloc_stopping_inside(16 * LEN, &|| {
            let _ = end.send(b"inside");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        });
        1
    })
    .unwrap();
    let pid = child.pid;
    let end = chan.end(true, move || !sys::child_ended(pid));
    let mut buf = Vec::new();
    end.recv(&mut buf).unwrap();
    assert_eq!(buf, b"inside");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert_eq!(child.wait().unwrap(), Exit::Signal(libc::SIGKILL));
    assert_eq!(
        pool.free_units(),
        free,
        "the half-made allocation is undone"
    );
    let (mut a, mut b) = (cosh(&pool, ours), cosh(&pool, theirs));
    let (da, db) = (a.domain(), b.domain());
    let x = a.alloc(da, LEN).unwrap();
    a.write(x, 0, &[0x5a; LEN]).unwrap();
    let mut sent = None;
    a.transfer_pooled(x, Mode::Move, Strength::Strong, theirs, |t| {
        sent = Some(t.clone());
        Ok(())
    })
    .unwrap();
    let got = b.recv_pooled(db, sent.unwrap()).unwrap();
    assert_eq!(b.to_vec(got.agg).unwrap(), vec![0x5a; LEN]);
}

/// A sender killed after its ticket left but before it hid its view
/// (`transfer_pooled`): the receiver, which waits for that view to go,
/// finds its process gone and takes the block.
fn a_sender_killed_before_hiding_its_view_does_not_hang_the_receiver() {
    let pool = Arc::new(Pool::create(1 << 20).unwrap());
    let (ours, theirs) = (pool.join(), pool.join());
    let chan = Channel::new().unwrap();
    let parent = std::process::id() as i32;
    let child = fork_domain(|_| {
        let end = chan.end(false, || sys::parent_pid() == parent);
        let mut c = cosh(&pool, theirs);
        let x = match filled_block(&mut c, 0x3c) {
            Ok(x) => x,
            Err(code) => return code,
        };
        let _ = c.transfer_pooled(x, Mode::Move, Strength::Strong, ours, |t| {
            end.send(&t.encode())?;
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        });
        4
    })
    .unwrap();
    let pid = child.pid;
    let end = chan.end(true, move || !sys::child_ended(pid));
    let mut buf = Vec::new();
    end.recv(&mut buf).unwrap();
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert_eq!(child.wait().unwrap(), Exit::Signal(libc::SIGKILL));
    let mut c = cosh(&pool, ours);
    let d = c.domain();
    let got = c.recv_pooled(d, PoolTicket::decode(&buf).unwrap()).unwrap();
    assert_eq!(c.to_vec(got.agg).unwrap(), vec![0x3c; LEN]);
}

/// A large block freed gives its pages back to the kernel: the memfd's
/// allocated blocks drop (before, a pool kept the most it ever held).
fn a_large_freed_block_gives_its_memory_back() {
    let pool = Arc::new(Pool::create(8 << 20).unwrap());
    let me = pool.join();
    let mut c = cosh(&pool, me);
    let d = c.domain();
    let allocated = || {
        // SAFETY: `st` is a valid out pointer for fstat of our memfd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&pool.fd());
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        st.st_blocks as u64 * 512
    };
    let before = allocated();
    let big = 4 << 20;
    let x = c.alloc(d, big).unwrap();
    c.write(x, 0, &vec![0x77; big]).unwrap();
    assert!(
        allocated() >= before + big as u64,
        "written pages cost memory"
    );
    c.decref(x).unwrap();
    assert!(
        allocated() < before + (big as u64) / 4,
        "{} bytes still allocated after the free",
        allocated() - before
    );
    // The range reads as zeros when handed out again.
    let y = c.alloc(d, big).unwrap();
    assert_eq!(c.to_vec(y).unwrap(), vec![0; big]);
}

#[test]
fn pool_transfers_between_processes_enforce_the_rights() {
    share_faults_a_writing_receiver();
    move_takes_the_senders_view(false);
    move_takes_the_senders_view(true);
    channel_carries_messages_in_order();
    a_dead_peer_is_an_error_not_a_hang();
    a_holder_killed_inside_the_lock_is_recovered_from();
    a_sender_killed_before_hiding_its_view_does_not_hang_the_receiver();
    a_large_freed_block_gives_its_memory_back();
}
