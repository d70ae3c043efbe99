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
//! `ATOLL_FAULT_KILL=N:OP[:K[:PHASE]]` makes server `N`'s process kill
//! itself (`SIGKILL`) on its `K`-th (default: first) call named `OP` (as
//! `atoll status` names operations, e.g. `Share`), at `PHASE`
//! ([`KillPhase`]; default `journaled`): windows a `kill` from outside
//! hits only by chance, each settled otherwise by the successor
//! (`server::take_over`). For server processes (the default); a server
//! thread would take its whole instance with it.

/// Environment variable naming the panic: `SERVER:REQUEST`.
pub const ENV_FAULT_PANIC: &str = "ATOLL_FAULT_PANIC";

/// Environment variable naming the wedge: `SERVER:REQUEST`.
pub const ENV_FAULT_HANG: &str = "ATOLL_FAULT_HANG";

/// Environment variable naming the kill: `SERVER:OPERATION[:CALL[:PHASE]]`.
pub const ENV_FAULT_KILL: &str = "ATOLL_FAULT_KILL";

/// Where in a call a planned kill (`ENV_FAULT_KILL`) strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillPhase {
    /// `handled`: the handler ran (its writes to the buffer cache, claims
    /// and gauge moves are done) but the call's record is not in the
    /// journal, and its frame is still in its ring: the successor serves
    /// it again.
    Handled,
    /// `journaled` (the default): the call reached the journal and its
    /// reply did not go out: the successor answers with the reply the
    /// replay of its record computes (`server::rebuild_answering`).
    Journaled,
    /// `taken`: the call's frame left its ring and its reply did not go
    /// out. A call that changes something is journaled by then (as
    /// `journaled`); one that changes nothing (`Lookup`, `GetAttr`, …) is
    /// never journaled, so the successor answers it "not applied"
    /// (`Errno::NOT_APPLIED`) and the client sends it again.
    Taken,
}

/// A planned kill: the operation (index in `ops::OP_NAMES`), its calls
/// still to go before the one that is killed, and where in that call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KillPlan {
    pub op: usize,
    pub left: u64,
    pub phase: KillPhase,
}

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

/// The kill planned for this server's process (`ENV_FAULT_KILL`).
pub fn planned_kill(server: usize) -> Option<KillPlan> {
    parse_kill(&std::env::var(ENV_FAULT_KILL).ok()?, server)
}

fn parse_kill(v: &str, server: usize) -> Option<KillPlan> {
    let mut parts = v.split(':').map(str::trim);
    let s = parts.next()?.parse::<usize>().ok()?;
    let op = parts.next()?;
    let left = match parts.next() {
        Some(k) => k.parse::<u64>().ok().filter(|&k| k > 0)?,
        None => 1,
    };
    let phase = match parts.next() {
        None | Some("journaled") => KillPhase::Journaled,
        Some("handled") => KillPhase::Handled,
        Some("taken") => KillPhase::Taken,
        Some(_) => return None,
    };
    let op = super::ops::OP_NAMES.iter().position(|n| *n == op)?;
    (s == server && parts.next().is_none()).then_some(KillPlan { op, left, phase })
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
        let plan = |left, phase| {
            Some(KillPlan {
                op: share,
                left,
                phase,
            })
        };
        assert_eq!(parse_kill("0:Share", 0), plan(1, KillPhase::Journaled));
        assert_eq!(parse_kill("0:Share:2", 0), plan(2, KillPhase::Journaled));
        assert_eq!(parse_kill("0:Share:1:taken", 0), plan(1, KillPhase::Taken));
        assert_eq!(
            parse_kill("0:Share:3:handled", 0),
            plan(3, KillPhase::Handled)
        );
        assert_eq!(parse_kill("0:Share:2", 1), None);
        assert_eq!(parse_kill("0:Share:0", 0), None);
        assert_eq!(parse_kill("0:Nonesuch", 0), None);
        assert_eq!(parse_kill("0:Share:1:9", 0), None);
        assert_eq!(parse_kill("0:Share:1:taken:1", 0), None);
    }
}
