//! Multi-process stress test: a forked child serves a channel it maps from
//! the memfd, the parent exchanges many frames of random sizes with it, and
//! both sides check order and content, in each waiting mode.
//!
//! The child runs after `fork` in a multi-threaded test binary, so it must
//! not allocate, lock or panic: it only uses the channel (raw system calls,
//! atomics) and reports failure through its exit status.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Mutex;

use atoll_msg::{ClientChannel, Control, MsgError, PollMode, ServerChannel, MAX_FRAME};

/// The tests spin: run one at a time so they do not fight for cores.
static SERIAL: Mutex<()> = Mutex::new(());

const STOP: [u8; 8] = [0xff; 8];
/// Requests in flight: few enough that their replies always fit in the reply
/// ring (4 × 33 KiB < 256 KiB), so parent and child can never both be
/// blocked on full rings.
const WINDOW: u64 = 4;

fn frames() -> u64 {
    std::env::var("ATOLL_STRESS_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// Length of frame `seq`: mostly small, like real requests, sometimes up to
/// the largest frame, to force wrap-arounds at every offset.
fn frame_len(seq: u64) -> usize {
    let r = xorshift(seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    if r.is_multiple_of(10) {
        16 + (r >> 8) as usize % (MAX_FRAME - 16 + 1)
    } else {
        16 + (r >> 8) as usize % 200
    }
}

fn payload_byte(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(31).wrapping_add(i as u64 * 7) ^ (i as u64 >> 3)) as u8
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// `[seq u64][fnv of payload u64][payload]`.
fn build(seq: u64, buf: &mut Vec<u8>) {
    let len = frame_len(seq);
    buf.clear();
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&[0; 8]);
    buf.extend((0..len - 16).map(|i| payload_byte(seq, i)));
    let sum = fnv(&buf[16..]);
    buf[8..16].copy_from_slice(&sum.to_le_bytes());
}

/// Allocation-free check of a frame built by `build(expected_seq)`.
fn check(frame: &[u8], expected_seq: u64) -> bool {
    if frame.len() != frame_len(expected_seq) || frame.len() < 16 {
        return false;
    }
    let seq = u64::from_le_bytes(frame[0..8].try_into().unwrap());
    let sum = u64::from_le_bytes(frame[8..16].try_into().unwrap());
    seq == expected_seq
        && sum == fnv(&frame[16..])
        && frame[16..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == payload_byte(seq, i))
}

/// The child: map the channel afresh and echo every request, checking
/// order and content; every 8th request also gets an inbox message.
fn child(channel: BorrowedFd<'_>, control: BorrowedFd<'_>, mode: PollMode) -> i32 {
    let Ok(server) = ServerChannel::map(channel) else {
        return 10;
    };
    let Ok(control) = Control::map(control) else {
        return 11;
    };
    let doorbell = control.doorbell(0);
    let mut next = 0u64;
    loop {
        let got = server.try_recv(|req| {
            if req == STOP {
                return Some(0);
            }
            if !check(req, next) {
                return Some(12);
            }
            // Echo in place: the request stays in its ring until we return.
            if server.reply(req).is_err() {
                return Some(13);
            }
            if next.is_multiple_of(8) && server.notify(&next.to_le_bytes()).is_err() {
                return Some(14);
            }
            None
        });
        match got {
            Ok(Some(Some(code))) => return code,
            Ok(Some(None)) => next += 1,
            Ok(None) => doorbell.wait(mode),
            Err(_) => return 15,
        }
    }
}

fn run(mode: PollMode) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = frames();
    let (control_fd, control) = Control::create(1).unwrap();
    let (channel_fd, client) = {
        let (fd, _server_end) = ServerChannel::create(atoll_msg::RingSize::Large).unwrap();
        let client = ClientChannel::map(fd.as_fd()).unwrap();
        (fd, client)
    };
    let doorbell = control.doorbell(0);

    // SAFETY: the child only runs `child`, which neither allocates nor
    // takes locks, then leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child(channel_fd.as_fd(), control_fd.as_fd(), mode);
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }

    let status = std::thread::scope(|s| {
        // Watchdog: if the child dies early, close the channel so that the
        // parent's waits fail instead of hanging.
        let watchdog = s.spawn(|| {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            client.close();
            status
        });

        let mut buf = Vec::with_capacity(MAX_FRAME);
        let mut replies = 0u64;
        let mut inbox = 0u64;
        let mut recv_one = |replies: &mut u64| -> Result<(), MsgError> {
            let ok = client.recv(mode, |rep| check(rep, *replies))?;
            assert!(ok, "{mode:?}: reply {replies} out of order or damaged");
            *replies += 1;
            client.drain_inbox(|msg| {
                let seq = u64::from_le_bytes(msg.try_into().unwrap());
                assert_eq!(seq, inbox * 8, "{mode:?}: inbox out of order");
                inbox += 1;
            })?;
            Ok(())
        };
        let mut result = Ok(());
        for seq in 0..n {
            build(seq, &mut buf);
            if let Err(e) = client.send(&buf, doorbell) {
                result = Err(e);
                break;
            }
            if seq + 1 - replies >= WINDOW {
                if let Err(e) = recv_one(&mut replies) {
                    result = Err(e);
                    break;
                }
            }
        }
        while result.is_ok() && replies < n {
            result = recv_one(&mut replies);
        }
        if result.is_ok() {
            client.send(&STOP, doorbell).unwrap();
        }
        let status = watchdog.join().unwrap();
        if let Err(e) = result {
            panic!(
                "{mode:?}: parent failed after {replies} replies: {e}; child status {status:#x}"
            );
        }
        assert_eq!(replies, n);
        assert!(!client.take_inbox_overflow());
        status
    });
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{mode:?}: child failed, status {status:#x}"
    );
}

#[test]
fn two_processes_exchange_frames_in_order_spinning() {
    run(PollMode::Spin);
}

#[test]
fn two_processes_exchange_frames_in_order_blocking() {
    run(PollMode::Block);
}

#[test]
fn two_processes_exchange_frames_in_order_adaptive() {
    run(PollMode::Adaptive);
}
