//! Processes and pipes: the cost of starting a program (fos Table 4,
//! "spawn": 1.549 ms local, 4.070 ms remote) and of moving data through a
//! pipe (Hare §3.5: under atoll a pipe is served by a file server and its
//! data lives in the shared buffer cache; elsewhere it is a Linux pipe).
//!
//! Everything goes through libc (`fork`, `execve`, `waitpid`, `pipe2`,
//! `read`, `write`) so that the preload library sees exactly the calls a C
//! program would make. Placement of `exec-local` / `exec-remote` is not
//! chosen here: the harness starts the worker with `ATOLL_PLACEMENT` (see
//! [`Workload::placement`]), which the client library reads when the
//! process starts; the worker also passes the same value in the `envp` of
//! every `execve`. On tmpfs and FUSE the variable means nothing and both are
//! plain local execs (the Linux baseline).
//!
//! A remote exec needs the instance's scheduling servers and a core other
//! than the caller's: without the load table they publish (an instance
//! booted without them) or when the policy picks the caller's own pinned
//! core (one application core, as in a 2-core split), the client library
//! execs locally and `exec-remote` measures the same thing as `exec-local`.
//! `atoll run --placement round-robin -- atoll bench-worker --phase run
//! --workload exec-local …` measures the remote path on its own.
//!
//! This is the crate's one `unsafe` module: the child side of a `fork`
//! must stay async-signal-safe (tests run workers as threads), so it only
//! calls `read`, `write`, `execve` and `_exit` on memory prepared before
//! the fork.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use super::{Job, Role, WorkerReport, Workload};
use crate::util::{BenchError, Result};

/// Bytes per `write` of `pipe-throughput` (one op).
pub const PIPE_CHUNK: usize = 64 * 1024;
/// The program `exec-*` runs.
const TRUE: &str = "/bin/true";
/// The variable the client library takes its placement policy from
/// (`atoll_sched::ENV_PLACEMENT`).
pub const ENV_PLACEMENT: &str = "ATOLL_PLACEMENT";

/// Worker processes are single-threaded, but unit tests run workers as
/// threads of one process: a child forked by one thread would inherit the
/// other thread's pipe ends and could hold off its EOF. The lock keeps the
/// fork-based workloads of one process one at a time; it costs nothing in
/// a real worker.
static FORK_LOCK: Mutex<()> = Mutex::new(());

fn os_err(what: &str) -> BenchError {
    BenchError::Tool(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// Wait for `pid` and require a clean exit.
fn reap(pid: libc::pid_t, what: &str) -> Result<()> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; `pid` is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(os_err("waitpid"));
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(BenchError::Check(format!(
            "{what}: child {pid} ended with status {status:#x}"
        )))
    }
}

fn cstring(b: &[u8]) -> Result<CString> {
    CString::new(b).map_err(|_| BenchError::Invalid("NUL byte in the environment".into()))
}

/// N × (fork + execve("/bin/true") + waitpid). Ops = execs.
pub fn exec(job: &Job, idx: usize) -> Result<WorkerReport> {
    let mut r = WorkerReport::new(Role::Worker, idx);
    let path = cstring(TRUE.as_bytes())?;
    let argv = [path.as_ptr(), std::ptr::null()];
    let key = OsStr::new(ENV_PLACEMENT);
    let mut env: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        if k != key {
            let mut e = k.as_bytes().to_vec();
            e.push(b'=');
            e.extend_from_slice(v.as_bytes());
            env.push(cstring(&e)?);
        }
    }
    if let Some(p) = job.workload.placement() {
        env.push(cstring(format!("{}={p}", ENV_PLACEMENT).as_bytes())?);
    }
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let _g = FORK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..job.iterations() {
        // SAFETY: the child only calls execve and _exit, both
        // async-signal-safe, on pointers built before the fork that stay
        // valid (argv, envp and their strings outlive the loop).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(os_err("fork"));
        }
        if pid == 0 {
            // SAFETY: see above; _exit never returns.
            unsafe {
                libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                libc::_exit(127);
            }
        }
        reap(pid, TRUE)?;
        r.ops += 1;
    }
    r.bump("execs", r.ops);
    Ok(r)
}

/// A pipe whose ends close on exec (so programs other threads exec do not
/// keep them) and on drop.
struct Pipe {
    rd: libc::c_int,
    wr: libc::c_int,
}

impl Pipe {
    fn new() -> Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid two-int out-array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(os_err("pipe2"));
        }
        Ok(Pipe {
            rd: fds[0],
            wr: fds[1],
        })
    }
}

fn close(fd: &mut libc::c_int) {
    if *fd >= 0 {
        // SAFETY: we own `fd` and forget it right after.
        unsafe { libc::close(*fd) };
        *fd = -1;
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        close(&mut self.rd);
        close(&mut self.wr);
    }
}

/// write(2) all of `buf`; false on error. Async-signal-safe.
fn write_all(fd: libc::c_int, buf: &[u8]) -> bool {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: the range is inside `buf`.
        let n = unsafe { libc::write(fd, buf[off..].as_ptr().cast(), buf.len() - off) };
        if n > 0 {
            off += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return false;
        }
    }
    true
}

/// read(2) once, retrying EINTR: bytes read, 0 at EOF, -1 on error.
fn read_some(fd: libc::c_int, buf: &mut [u8]) -> isize {
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return n;
    }
}

/// Bytes `pipe-throughput` moves per worker.
fn stream_bytes(job: &Job) -> u64 {
    job.iterations() * PIPE_CHUNK as u64
}

/// The byte at offset `i` of the stream (so the reader can check order).
fn pattern(i: u64) -> u8 {
    (i / PIPE_CHUNK as u64) as u8
}

/// A child streams `iterations` 64 KiB writes into a pipe; the parent
/// reads them all and checks count and content. Ops = child's writes.
pub fn pipe_throughput(job: &Job, idx: usize) -> Result<WorkerReport> {
    let mut r = WorkerReport::new(Role::Worker, idx);
    let n = job.iterations();
    let mut chunk = vec![0u8; PIPE_CHUNK];
    let mut buf = vec![0u8; PIPE_CHUNK];
    let _g = FORK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut p = Pipe::new()?;
    // SAFETY: the child only calls write, close and _exit on memory
    // allocated before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(os_err("fork"));
    }
    if pid == 0 {
        // SAFETY: closing our copy of the read end; see above.
        unsafe { libc::close(p.rd) };
        for k in 0..n {
            chunk.fill(pattern(k * PIPE_CHUNK as u64));
            if !write_all(p.wr, &chunk) {
                // SAFETY: _exit never returns and runs no destructors.
                unsafe { libc::_exit(1) };
            }
        }
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    close(&mut p.wr);
    let mut got: u64 = 0;
    loop {
        let m = read_some(p.rd, &mut buf);
        if m < 0 {
            let e = os_err("read from pipe");
            let _ = reap(pid, "pipe writer");
            return Err(e);
        }
        if m == 0 {
            break;
        }
        for (j, &b) in buf[..m as usize].iter().enumerate() {
            if b != pattern(got + j as u64) {
                let _ = reap(pid, "pipe writer");
                return Err(BenchError::Check(format!(
                    "pipe-throughput: byte {} is {b}, want {}",
                    got + j as u64,
                    pattern(got + j as u64)
                )));
            }
        }
        got += m as u64;
        r.bump("reads", 1);
    }
    reap(pid, "pipe writer")?;
    if got != stream_bytes(job) {
        return Err(BenchError::Check(format!(
            "pipe-throughput: {got} bytes arrived, want {}",
            stream_bytes(job)
        )));
    }
    r.ops = n;
    r.bump("bytes", got);
    Ok(r)
}

/// `iterations` one-byte round trips parent → child → parent over two
/// pipes; the child echoes each byte plus one. Ops = round trips.
pub fn pipe_latency(job: &Job, idx: usize) -> Result<WorkerReport> {
    let mut r = WorkerReport::new(Role::Worker, idx);
    let _g = FORK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut down = Pipe::new()?;
    let mut up = Pipe::new()?;
    // SAFETY: the child only calls read, write, close and _exit on stack
    // memory.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(os_err("fork"));
    }
    if pid == 0 {
        // SAFETY: closing the child's copies of the parent's ends.
        unsafe {
            libc::close(down.wr);
            libc::close(up.rd);
        }
        let mut b = [0u8; 1];
        let code = loop {
            match read_some(down.rd, &mut b) {
                0 => break 0,
                1 => {}
                _ => break 1,
            }
            b[0] = b[0].wrapping_add(1);
            if !write_all(up.wr, &b) {
                break 1;
            }
        };
        // SAFETY: _exit never returns and runs no destructors.
        unsafe { libc::_exit(code) };
    }
    close(&mut down.rd);
    close(&mut up.wr);
    let mut b = [0u8; 1];
    let mut failure = None;
    for k in 0..job.iterations() {
        let out = k as u8;
        if !write_all(down.wr, &[out]) {
            failure = Some(os_err("write to pipe"));
            break;
        }
        if read_some(up.rd, &mut b) != 1 {
            failure = Some(os_err("read from pipe"));
            break;
        }
        if b[0] != out.wrapping_add(1) {
            failure = Some(BenchError::Check(format!(
                "pipe-latency: round trip {k} echoed {}, want {}",
                b[0],
                out.wrapping_add(1)
            )));
            break;
        }
        r.ops += 1;
    }
    // EOF ends the child.
    close(&mut down.wr);
    let reaped = reap(pid, "pipe echo");
    if let Some(e) = failure {
        return Err(e);
    }
    reaped?;
    r.bump("round_trips", r.ops);
    Ok(r)
}

pub fn check_reports(job: &Job, reports: &[WorkerReport]) -> Result<()> {
    for r in reports {
        let (key, want) = match job.workload {
            Workload::ExecLocal | Workload::ExecRemote => ("execs", job.iterations()),
            Workload::PipeThroughput => ("bytes", stream_bytes(job)),
            Workload::PipeLatency => ("round_trips", job.iterations()),
            _ => unreachable!("procs::check_reports called for another workload"),
        };
        if r.get(key) != want {
            return Err(BenchError::Check(format!(
                "{}: worker {} reports {key} = {}, want {want}",
                job.workload.name(),
                r.index,
                r.get(key)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run_tiny;
    use super::super::Workload;
    use super::*;

    #[test]
    fn exec_local_runs_true_n_times() {
        let (_t, job, reports) = run_tiny(Workload::ExecLocal, 1);
        assert_eq!(reports[0].ops, job.iterations());
        assert_eq!(reports[0].get("execs"), job.iterations());
    }

    #[test]
    fn exec_remote_runs_true_n_times_per_worker() {
        let (_t, job, reports) = run_tiny(Workload::ExecRemote, 2);
        for r in &reports {
            assert_eq!(r.ops, job.iterations());
        }
    }

    #[test]
    fn pipe_throughput_delivers_every_byte_in_order() {
        let (_t, job, reports) = run_tiny(Workload::PipeThroughput, 1);
        assert_eq!(reports[0].ops, job.iterations());
        assert_eq!(
            reports[0].get("bytes"),
            job.iterations() * PIPE_CHUNK as u64
        );
        assert!(reports[0].get("reads") >= 1);
    }

    #[test]
    fn pipe_latency_echoes_every_byte() {
        let (_t, job, reports) = run_tiny(Workload::PipeLatency, 2);
        for r in &reports {
            assert_eq!(r.ops, job.iterations());
            assert_eq!(r.get("round_trips"), job.iterations());
        }
    }

    #[test]
    fn only_exec_workloads_ask_for_a_placement() {
        assert_eq!(Workload::ExecLocal.placement(), Some("local:0"));
        assert_eq!(Workload::ExecRemote.placement(), Some("round-robin:0"));
        assert_eq!(Workload::PipeLatency.placement(), None);
        assert_eq!(Workload::Creates.placement(), None);
    }
}
