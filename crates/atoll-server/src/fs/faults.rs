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

/// Environment variable naming the fault: `SERVER:REQUEST`.
pub const ENV_FAULT_PANIC: &str = "ATOLL_FAULT_PANIC";

/// The request (counting from 1) on which this server panics, if any.
pub fn panic_at(server: usize) -> Option<u64> {
    parse(&std::env::var(ENV_FAULT_PANIC).ok()?, server)
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
}
