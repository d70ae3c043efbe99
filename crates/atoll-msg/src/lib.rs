//! atoll's messaging layer (Popcorn ch. 5, fos §3.2, Hare §3.7.2).
//!
//! Layer map:
//! * **this crate** moves opaque frames of bytes (at most [`MAX_FRAME`])
//!   between a client and a file server through shared memory, and lets
//!   either side wait for the other by spinning, sleeping, or both;
//! * **below** it there is only Linux: `memfd`, `mmap` and `futex`, called
//!   as raw system calls through rustix (this code also runs inside the
//!   preload library, where libc's wrappers are interposed);
//! * **above** it `atoll-proto` gives frames a meaning; `atoll-server` serves
//!   [`ServerChannel`]s and waits on its [`Doorbell`]; `atoll-client` sends
//!   on [`ClientChannel`]s; `atoll bench rpc` measures it through [`bench`](mod@bench).
//!
//! Modules: [`region`](SharedRegion) (sealed memfd mappings), `ring` (SPSC
//! frame rings), `wait` (spin/futex waiting and the wake-up rule),
//! `control` ([`Control`], [`Doorbell`]), `channel` ([`ClientChannel`],
//! [`ServerChannel`]), `pool` ([`BlockPool`]: the root of the buffer
//! cache's clustered block allocator, K42 §4.1.2), [`sizes`] (the size
//! board: file sizes servers publish for `SEEK_END` without a message),
//! [`bench`](mod@bench).
//!
//! # How a frame travels
//!
//! A *channel* is one memfd holding three single-producer/single-consumer
//! rings: requests (client → server), replies (server → client) and an
//! *inbox* (server → client messages nobody asked for, such as directory
//! cache invalidations). A ring is a data area of 64 KiB and two indices
//! counting bytes ever written (`head`, written only by the producer) and
//! bytes ever consumed (`tail`, written only by the consumer), each on its
//! own cache line. Frames start on 64-byte boundaries with an 8-byte length
//! header; a frame that does not fit before the end of the data area leaves
//! a *wrap marker* and starts again at offset 0.
//!
//! To send, the producer checks `head - tail` leaves room, copies the frame
//! in, and publishes the new `head` with release ordering. If there is no
//! room it waits until there is: `send` returns only once the frame is in
//! the receiver's ring (*atomic delivery*, Hare §3.7.2: servers send
//! invalidations without waiting for acknowledgements, and a client drains
//! its inbox before trusting its cache). The frame header carries a `seq`
//! word (the frame's index), stored last with release: the consumer polls
//! that word in the frame's own cache line (acquire), so a small message
//! costs one cross-core line transfer. It validates the frame, lends its
//! bytes to a closure *in place* (no copy), clears the `seq` words of the
//! slot and only then publishes the new `tail`, which frees the space.
//!
//! The peer is not trusted: it could scribble anything into the shared
//! memory. Each end keeps its own index privately and re-validates the
//! peer's index and every frame header, so corruption is reported as
//! [`MsgError::Corrupt`], never as an out-of-bounds access or a panic.
//!
//! # Waiting and waking
//!
//! A client waiting for a reply, or a server with no work, waits according
//! to a [`PollMode`]: `Spin` polls (dedicated cores), `Block` sleeps on a
//! futex at once (timeshared cores), `Adaptive` spins for
//! [`ADAPTIVE_SPIN_NS`] then sleeps. A server sleeps on one word for all its
//! channels: its [`Doorbell`], which clients ring after each request.
//!
//! Sleeping is safe because a waiter *announces* itself on the futex word
//! before its last check, with a read-modify-write, and a notifier changes
//! the same word with a read-modify-write after making its change: either
//! the waiter's last check sees the change, or the notifier sees the
//! announcement and issues `FUTEX_WAKE`, and the kernel refuses to put the
//! waiter to sleep on a word that changed. When nobody sleeps, notifying
//! costs no system call. The `wait` module gives the full argument; the
//! `loom` tests check it:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p atoll-msg --release --lib loom
//! ```
//!
//! # Example
//!
//! ```
//! use std::os::fd::AsFd;
//! use atoll_msg::{ClientChannel, Control, PollMode, RingSize, ServerChannel};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The boot thread makes the control block and a channel; the fds travel
//! // to the client over the boot socket, which maps them.
//! let (control_fd, control) = Control::create(1)?;
//! let (channel_fd, server) = ServerChannel::create(RingSize::Small)?;
//! let client = ClientChannel::map(channel_fd.as_fd())?;
//! let client_control = Control::map(control_fd.as_fd())?;
//!
//! // Client: enqueue a request and ring server 0's doorbell.
//! client.send(b"ping", client_control.doorbell(0))?;
//!
//! // Server: wait for work, serve the request in place, reply.
//! control.doorbell(0).wait(PollMode::Adaptive);
//! let len = server.try_recv(|req| req.len())?.expect("a request");
//! assert_eq!(len, 4);
//! server.reply(b"pong")?;
//! server.notify(b"forget /tmp/x")?;
//!
//! // Client: the reply, then what the server sent unasked.
//! let reply = client.recv(PollMode::Adaptive, |bytes| bytes.to_vec())?;
//! assert_eq!(reply, b"pong");
//! assert_eq!(client.drain_inbox(|_| {})?, 1);
//! # Ok(())
//! # }
//! ```

#[cfg(not(loom))]
pub mod bench;
#[cfg(not(loom))]
mod channel;
mod control;
#[cfg_attr(loom, allow(dead_code))]
pub mod lease;
pub mod liveness;
mod pool;
#[cfg(not(loom))]
mod region;
#[cfg_attr(loom, allow(dead_code))]
mod ring;
pub mod sizes;
mod sync;
mod wait;
#[cfg(not(loom))]
pub mod watch;

pub use atoll_proto::boot::PollMode;
pub use atoll_proto::MAX_FRAME;

#[cfg(not(loom))]
pub use channel::{Channel, ClientChannel, RingSize, ServerChannel};
#[cfg(not(loom))]
pub use control::Control;
pub use control::Doorbell;
#[cfg(not(loom))]
pub use control::{Gauge, GAUGES, GAUGE_INODES, GAUGE_NAMES};
pub use lease::{LeaseSlot, LeaseTicket, LEASE_SLOTS};
pub use pool::{BlockPool, PoolRep, RepCounts, POOL_MAX_SERVERS};
#[cfg(not(loom))]
pub use region::SharedRegion;
pub use ring::{slot_size, FRAME_ALIGN, FRAME_HEADER};
pub use sizes::{slot_of, SizeSlot, SIZE_SLOTS};
pub use wait::ADAPTIVE_SPIN_NS;

#[derive(Debug, thiserror::Error)]
pub enum MsgError {
    #[error("frame of {0} bytes exceeds the ring's largest frame")]
    TooLarge(usize),
    #[error("ring is full")]
    Full,
    #[error("peer corrupted the ring: {0}")]
    Corrupt(&'static str),
    #[error("system error: {0}")]
    Io(#[from] std::io::Error),
}
