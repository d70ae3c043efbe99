//! atoll's client library logic. STUB: contract only.

/// What to do with a system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Not atoll's: issue the original system call to Linux unchanged.
    Host,
    /// Handled: the raw system-call result (value ≥ 0, or −errno).
    Done(i64),
}

/// Join the instance named by `ATOLL_SOCKET` (or restore the session
/// inherited across `execve`). Returns false when this process is not an
/// atoll client; every later call then answers `Dispatch::Host`.
pub fn init() -> bool {
    todo!()
}

/// Is this process attached to an instance?
pub fn active() -> bool {
    todo!()
}

/// Cheap test used before `dispatch` in hot, signal-sensitive paths: may
/// this system call concern atoll at all? (E.g. `mmap` only with an atoll
/// fd, `brk`/`futex` never.) Lock-free and allocation-free.
pub fn may_concern(_nr: i64, _args: &[u64; 6]) -> bool {
    todo!()
}

/// Emulate system call `nr` with raw arguments `args` (x86-64 Linux ABI).
pub fn dispatch(_nr: i64, _args: &[u64; 6]) -> Dispatch {
    todo!()
}

/// State carried from `fork_prepare` to `fork_parent`/`fork_child`.
pub struct ForkPrep {
    _private: (),
}

pub fn fork_prepare() -> Result<Option<ForkPrep>, i32> {
    todo!()
}
pub fn fork_parent(_prep: ForkPrep, _child_pid: i64) {
    todo!()
}
pub fn fork_child(_prep: ForkPrep) {
    todo!()
}
