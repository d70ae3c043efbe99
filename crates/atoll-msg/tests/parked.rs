//! A reply parked for room outlives the server process that parked it: a
//! forked child serves a channel until its reply ring is full, parks the
//! next reply (`ServerChannel::park_reply`) and is killed with `SIGKILL`;
//! a new mapping of the channel — what a successor process makes — finds
//! the reply, delivers it once the client makes room, and serves on.
//!
//! The child runs after `fork` in a multi-threaded test binary, so it must
//! not allocate, lock or panic (as in `multiprocess.rs`).

use std::os::fd::{AsFd, BorrowedFd};

use atoll_msg::{ClientChannel, MsgError, RingSize, ServerChannel};

/// Requests the client sends before reading any reply: more replies than
/// the reply ring holds at `REPLY_BYTES` each (eight more than fit it
/// without their frame headers).
const REQUESTS: u64 = (RingSize::Large.ring_bytes() / REPLY_BYTES) as u64 + 8;
const REPLY_BYTES: usize = 4000;

/// A reply to request `id`: the id, then filler.
fn reply_to(id: u64, buf: &mut [u8; REPLY_BYTES]) {
    buf.fill(id as u8 ^ 0x5a);
    buf[..8].copy_from_slice(&id.to_le_bytes());
}

/// Serve until a reply finds the ring full; park it, tell the parent
/// (one byte on `parked`), and wait to be killed.
fn child(channel: BorrowedFd<'_>, parked: i32) -> i32 {
    let Ok(server) = ServerChannel::map(channel) else {
        return 10;
    };
    let mut buf = [0u8; REPLY_BYTES];
    loop {
        let got = server.try_recv(|req| {
            let id = u64::from_le_bytes(req[..8].try_into().unwrap_or([0; 8]));
            reply_to(id, &mut buf);
            match server.try_reply(&buf) {
                Ok(()) => false,
                Err(MsgError::Full) => {
                    server.park_reply(&buf);
                    true
                }
                Err(_) => false,
            }
        });
        match got {
            Ok(Some(true)) => break,
            Ok(_) => std::thread::yield_now(),
            Err(_) => return 11,
        }
    }
    // SAFETY: writes one byte from a live local to our own pipe.
    unsafe { libc::write(parked, [1u8].as_ptr().cast(), 1) };
    loop {
        // SAFETY: waits for the signal that ends this process.
        unsafe { libc::pause() };
    }
}

fn next_id(client: &ClientChannel) -> Option<u64> {
    client
        .try_recv(|b| {
            let mut want = [0u8; REPLY_BYTES];
            let id = u64::from_le_bytes(b[..8].try_into().unwrap());
            reply_to(id, &mut want);
            assert_eq!(b, &want[..], "reply {id} intact");
            id
        })
        .unwrap()
}

#[test]
fn a_parked_reply_survives_the_sigkill_of_its_server_process() {
    let (fd, _creator) = ServerChannel::create(RingSize::Large).unwrap();
    let client = ClientChannel::map(fd.as_fd()).unwrap();
    for id in 0..REQUESTS {
        client.send_unrung(&id.to_le_bytes()).unwrap();
    }
    let mut pipe = [0i32; 2];
    // SAFETY: `pipe` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);

    // SAFETY: the child only runs `child`, which neither allocates nor
    // takes locks, and never returns but to `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child(fd.as_fd(), pipe[1]);
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closing our copy of the write end, which we own.
    unsafe { libc::close(pipe[1]) };
    let mut byte = [0u8; 1];
    // SAFETY: reads into a live local from our own pipe; returns 0 if
    // the child exited without parking.
    let n = unsafe { libc::read(pipe[0], byte.as_mut_ptr().cast(), 1) };
    let mut status = 0;
    if n == 1 {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    // SAFETY: our own descriptor.
    unsafe { libc::close(pipe[0]) };
    assert_eq!(n, 1, "child parked nothing (status {status:#x})");
    assert!(libc::WIFSIGNALED(status), "killed, status {status:#x}");

    // The successor's mapping.
    let successor = ServerChannel::map(fd.as_fd()).unwrap();
    let parked = successor.parked_reply().expect("the parked reply survived");
    let mut got = 0u64;
    while let Some(id) = next_id(&client) {
        assert_eq!(id, got, "replies in order");
        got += 1;
    }
    assert!(got > 0 && got < REQUESTS, "the ring filled after {got}");
    successor.try_reply(&parked).unwrap();
    successor.unpark_reply();
    assert_eq!(next_id(&client), Some(got), "the parked reply, delivered");
    assert_eq!(successor.parked_reply(), None);
    // The channel serves on: the requests left in its ring.
    let mut buf = [0u8; REPLY_BYTES];
    while let Some(id) = successor
        .try_recv(|req| u64::from_le_bytes(req[..8].try_into().unwrap()))
        .unwrap()
    {
        reply_to(id, &mut buf);
        successor.try_reply(&buf).unwrap();
        assert_eq!(next_id(&client), Some(id));
        got = id;
    }
    assert_eq!(got, REQUESTS - 1, "every request answered");
}
