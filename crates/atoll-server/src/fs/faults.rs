//! Faults injected on purpose, for tests of what survives them (fos §3.5
//! plans for servers that fail; so must the tests).
//!
//! `ATOLL_FAULT_PANIC=N:K` in the environment of the instance makes file
//! server `N` panic on its `K`-th call (a request somebody waits for),
//! before the call changes anything. The server's loop catches the panic
//! and answers `EIO` for that call alone (`server::serve_frame`), counted
//! as a bad request; every other request, the server's own included, goes
//! on. Posted requests (no reply: `WriteDone`, `Adopt`, …) are never the
//! victim: nobody would learn that one was lost, and what depends on it
//! would be left half done.

//!
//! `ATOLL_FAULT_HANG=N:K` makes server `N` *wedge* on its `K`-th call
//! instead: the handler never returns, as a server caught in an endless
//! loop or a lost wake-up. A server process that wedges is found by the
//! watchdog (the request it owes stays unanswered) and replaced (fos §3.5;
//! `process`, `wedge`); a server thread stays wedged, its clients waiting.
//! A successor process does not repeat its predecessor's fault.
//!
//! `ATOLL_FAULT_KILL=N:OP[:K]` makes server `N`'s process kill itself
//! (`SIGKILL`) on its `K`-th (default: first) call named `OP` (as
//! `atoll status` names operations, e.g. `Share`) right after the call reached the journal and
//! before its reply went out: the window in which the successor answers
//! with the reply the replay of the call's record computes
//! (`server::rebuild_answering`, `server::take_over`), which a `kill` from
//! outside hits only by chance. For server processes (the
//! default); a server thread would take its whole instance with it.

/// Environment variable naming the panic: `SERVER:REQUEST`.
pub const ENV_FAULT_PANIC: &str = "ATOLL_FAULT_PANIC";

/// Environment variable naming the wedge: `SERVER:REQUEST`.
pub const ENV_FAULT_HANG: &str = "ATOLL_FAULT_HANG";

/// Environment variable naming the kill: `SERVER:OPERATION[:CALL]`.
pub const ENV_FAULT_KILL: &str = "ATOLL_FAULT_KILL";

/// What this server does on purpose on one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Panic,
    Hang,
}

/// The call (counting from 1) on which this server fails, and how.
pub fn planned(server: usize) -> Option<(u64, Fault)> {
    let named = |var: &str| parse(&std::env::var(var).ok()?, server);
    named(ENV_FAULT_PANIC)
        .map(|k| (k, Fault::Panic))
        .or_else(|| named(ENV_FAULT_HANG).map(|k| (k, Fault::Hang)))
}

/// The operation (index in `ops::OP_NAMES`) after whose `K`-th call
/// this server's process kills itself (`ENV_FAULT_KILL`), and `K`.
pub fn planned_kill(server: usize) -> Option<(usize, u64)> {
    parse_kill(&std::env::var(ENV_FAULT_KILL).ok()?, server)
}

fn parse_kill(v: &str, server: usize) -> Option<(usize, u64)> {
    let mut parts = v.split(':').map(str::trim);
    let s = parts.next()?.parse::<usize>().ok()?;
    let op = parts.next()?;
    let k = match parts.next() {
        Some(k) => k.parse::<u64>().ok().filter(|&k| k > 0)?,
        None => 1,
    };
    let op = super::ops::OP_NAMES.iter().position(|n| *n == op)?;
    (s == server && parts.next().is_none()).then_some((op, k))
}

/// End this process as `SIGKILL` from outside would (`ENV_FAULT_KILL`).
pub fn kill_self() -> ! {
    // SAFETY: plain system calls on this process; no memory is involved.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    hang() // the signal is not caught; this is never reached
}

/// Wedge the calling thread for good (`Fault::Hang`).
pub fn hang() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

fn parse(v: &str, server: usize) -> Option<u64> {
    let (s, k) = v.split_once(':')?;
    let (s, k) = (
        s.trim().parse::<usize>().ok()?,
        k.trim().parse::<u64>().ok()?,
    );
    (s == server && k > 0).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_server_panics_and_bad_values_mean_none() {
        assert_eq!(parse("1:40", 1), Some(40));
        assert_eq!(parse("1:40", 0), None);
        assert_eq!(parse("1:0", 1), None);
        assert_eq!(parse("x:4", 1), None);
        assert_eq!(parse("1", 1), None);
    }

    #[test]
    fn a_kill_names_a_known_operation_and_its_call() {
        let share = super::super::ops::OP_NAMES
            .iter()
            .position(|n| *n == "Share")
            .unwrap();
        assert_eq!(parse_kill("0:Share", 0), Some((share, 1)));
        assert_eq!(parse_kill("0:Share:2", 0), Some((share, 2)));
        assert_eq!(parse_kill("0:Share:2", 1), None);
        assert_eq!(parse_kill("0:Share:0", 0), None);
        assert_eq!(parse_kill("0:Nonesuch", 0), None);
        assert_eq!(parse_kill("0:Share:1:9", 0), None);
    }
}
