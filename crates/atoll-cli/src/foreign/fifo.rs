//! FIFOs in the mount, opened by a filtered program.
//!
//! The kernel cannot open an atoll FIFO, and its `open` may wait as long
//! as another process pleases (for the other end), which the supervisor
//! must not: it serves every other call of the program and its children.
//! So such an `open` is handed to a thread of its own. The thread opens
//! the FIFO through the relay's client with the program's flags — waiting
//! as Linux would, for a writer or a reader — then gives the program one
//! end of a host pipe (`SECCOMP_ADDFD_FLAG_SEND`, which also answers the
//! call) and copies between the other end and the FIFO, as the relay does
//! for the pipes a program inherits (`copy_in`, `copy_out`):
//!
//! * a reader gets the bytes writers put into the FIFO, then end of file
//!   once the last writer closes it (final: a writer that opens the FIFO
//!   afterwards is not heard, where Linux would let the reader read on);
//! * a writer's bytes go into the FIFO; its close (of every copy, its
//!   children's too) closes the relay's end, so readers see end of file;
//!   a FIFO whose readers left makes its next write fail with `EPIPE`.
//!   The relay waits for these copies before it reports the program's end.
//!
//! A program interrupted by a signal while it waits in the `open` leaves
//! the thread's open to complete on its own, then undone (the listener no
//! longer knows the call). An `O_RDWR` open (which never waits) gets one
//! end of a socket pair, copied both ways.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use super::seccomp;

/// A writer's copy: the host end and FIFO still held when the program
/// ended with a descendant still writing (for `hand_off`), else `None`.
type Writer = JoinHandle<(Option<OwnedFd>, i32)>;

/// The writers' copies running, taken by the relay when the program ends.
static WRITERS: Mutex<Vec<Writer>> = Mutex::new(Vec::new());

/// Readable once the program has ended (the relay's `ended`).
static ENDED: OnceLock<Arc<OwnedFd>> = OnceLock::new();

/// Set the relay's "the program has ended" pipe end, before the program
/// starts.
pub fn set_ended(ended: Arc<OwnedFd>) {
    let _ = ENDED.set(ended);
}

/// The writers' copies started so far (each finishes once everything the
/// program wrote is in its FIFO).
pub fn take_writers() -> Vec<Writer> {
    std::mem::take(&mut *WRITERS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Which ends the program holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    /// `O_RDWR`: a socket pair, copied both ways.
    Both,
}

/// Serve `open(path, flags)` of a FIFO of the mount for notification
/// `id`: answered later, from a thread (`Err` only if none can start).
pub fn open(listener: &OwnedFd, id: u64, path: &[u8], flags: i32) -> Result<(), i32> {
    let access = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => Access::Read,
        libc::O_WRONLY => Access::Write,
        _ => Access::Both,
    };
    let path = CString::new(path).map_err(|_| libc::EINVAL)?;
    let listener = listener.try_clone().map_err(|_| libc::EMFILE)?;
    std::thread::Builder::new()
        .name("atoll-fifo".into())
        .spawn(move || serve_open(listener, id, path, flags, access))
        .map(drop)
        .map_err(|_| libc::EAGAIN)
}

/// `(program's end, relay's end)` of a host pipe or socket pair.
fn ends(access: Access) -> Option<(OwnedFd, OwnedFd)> {
    match access {
        Access::Read => super::host_pipe().ok(),
        Access::Write => super::host_pipe().ok().map(|(r, w)| (w, r)),
        Access::Both => {
            let (mine, theirs) = std::os::unix::net::UnixStream::pair().ok()?;
            Some((theirs.into(), mine.into()))
        }
    }
}

fn serve_open(listener: OwnedFd, id: u64, path: CString, flags: i32, access: Access) {
    // The relay is a client: this waits for the other end as Linux does.
    let keep = flags & (libc::O_ACCMODE | libc::O_NONBLOCK);
    // SAFETY: open of a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), keep | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        seccomp::respond(&listener, id, Err(e));
        return;
    }
    // SAFETY: a new descriptor this thread owns alone.
    let fifo = unsafe { OwnedFd::from_raw_fd(fd) };
    let Some((program_end, relay_end)) = ends(access) else {
        seccomp::respond(&listener, id, Err(libc::ENFILE));
        return;
    };
    if flags & libc::O_NONBLOCK != 0 {
        super::set_nonblocking(&program_end, true);
    }
    let cloexec = flags & libc::O_CLOEXEC != 0;
    if seccomp::add_fd(&listener, id, program_end.as_raw_fd(), cloexec).is_err() {
        // The call is gone (a signal interrupted it): undone by the drops.
        seccomp::respond(&listener, id, Err(libc::EINTR));
        return;
    }
    drop(program_end);
    match access {
        Access::Read => super::copy_in(fifo.as_raw_fd(), relay_end),
        Access::Write => write_through(relay_end, fifo),
        Access::Both => {
            // Each direction owns a descriptor of its own (one open).
            let (Ok(fifo_in), Ok(host_in)) = (fifo.try_clone(), relay_end.try_clone()) else {
                return;
            };
            std::thread::spawn(move || super::copy_in(fifo_in.as_raw_fd(), host_in));
            write_through(relay_end, fifo);
        }
    }
}

/// Copy what the program writes into the FIFO, on a thread the relay
/// waits for when the program ends.
fn write_through(host: OwnedFd, fifo: OwnedFd) {
    let ended = ENDED.get().cloned();
    let copy = std::thread::spawn(move || {
        match super::copy_out(host, fifo.as_raw_fd(), ended.as_deref()) {
            None => (None, -1),
            Some(host) => (Some(host), fifo.into_raw_fd()),
        }
    });
    WRITERS.lock().unwrap_or_else(|e| e.into_inner()).push(copy);
}
