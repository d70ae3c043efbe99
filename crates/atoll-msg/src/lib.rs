//! atoll's messaging layer (Popcorn ch. 5, fos §3.2, Hare §3.7.2).
//!
//! STUB: the public API below is the contract other crates code against;
//! bodies are being implemented.

use std::os::fd::{BorrowedFd, OwnedFd};

pub use atoll_proto::boot::PollMode;
pub use atoll_proto::MAX_FRAME;

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

/// A shared memory file mapped into this process; unmapped on drop.
pub struct SharedRegion {
    _private: (),
}

impl SharedRegion {
    /// Create an anonymous shared memory file (`memfd`, sealed against
    /// shrinking) of `len` bytes and map it.
    pub fn create(_name: &str, _len: usize) -> std::io::Result<(OwnedFd, SharedRegion)> {
        todo!()
    }
    /// Map an existing shared memory file received from a peer.
    pub fn map(_fd: BorrowedFd<'_>) -> std::io::Result<SharedRegion> {
        todo!()
    }
    pub fn as_ptr(&self) -> *mut u8 {
        todo!()
    }
    pub fn len(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Per-instance control block: one doorbell per server plus published load.
pub struct Control {
    _private: (),
}

impl Control {
    pub fn create(_servers: usize) -> std::io::Result<(OwnedFd, Control)> {
        todo!()
    }
    pub fn map(_fd: BorrowedFd<'_>) -> std::io::Result<Control> {
        todo!()
    }
    pub fn servers(&self) -> usize {
        todo!()
    }
    pub fn doorbell(&self, _server: usize) -> &Doorbell {
        todo!()
    }
}

/// A server's doorbell: clients ring it after enqueuing a request; the
/// server waits on it when it has nothing to do.
pub struct Doorbell {
    _private: (),
}

impl Doorbell {
    /// Client side: wake the server if (and only if) it announced sleep.
    pub fn ring(&self) {
        todo!()
    }
    /// Server side: wait until rung, honouring `mode`; returns after a
    /// spurious wake-up too (callers re-poll).
    pub fn wait(&self, _mode: PollMode) {
        todo!()
    }
}

/// Client end of one channel (client × server): request ring out, reply
/// ring and inbox in.
pub struct ClientChannel {
    _private: (),
}

impl ClientChannel {
    pub fn create() -> std::io::Result<(OwnedFd, ClientChannel)> {
        todo!()
    }
    pub fn map(_fd: BorrowedFd<'_>) -> std::io::Result<ClientChannel> {
        todo!()
    }
    /// Atomic delivery: returns only when `frame` is in the request ring.
    pub fn send(&self, _frame: &[u8], _doorbell: &Doorbell) -> Result<(), MsgError> {
        todo!()
    }
    /// Wait for the next reply and hand its bytes to `f` in place.
    pub fn recv<R>(&self, _mode: PollMode, _f: impl FnOnce(&[u8]) -> R) -> Result<R, MsgError> {
        todo!()
    }
    /// Non-blocking: the next reply if one is there.
    pub fn try_recv<R>(&self, _f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, MsgError> {
        todo!()
    }
    /// Drain server-initiated messages; returns how many were handled.
    pub fn drain_inbox(&self, _f: impl FnMut(&[u8])) -> Result<usize, MsgError> {
        todo!()
    }
}

/// Server end of one channel.
pub struct ServerChannel {
    _private: (),
}

impl ServerChannel {
    pub fn map(_fd: BorrowedFd<'_>) -> std::io::Result<ServerChannel> {
        todo!()
    }
    /// The next request, handed to `f` in place, if one is there.
    pub fn try_recv<R>(&self, _f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, MsgError> {
        todo!()
    }
    /// Enqueue a reply and wake the client if it sleeps.
    pub fn reply(&self, _frame: &[u8]) -> Result<(), MsgError> {
        todo!()
    }
    /// Enqueue a server-initiated message without waiting for the client.
    pub fn notify(&self, _frame: &[u8]) -> Result<(), MsgError> {
        todo!()
    }
}
