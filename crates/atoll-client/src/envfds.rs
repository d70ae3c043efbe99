//! atoll's own descriptors of another process that published no table of
//! them (`fdpub::publish_at_start`), read from its initial environment.
//!
//! A new image that an exec handed its session over to keeps the session
//! socket, the buffer cache and the control block at the numbers its
//! environment names (`ATOLL_SESSION_FD`, and the `a:` record of
//! `ATOLL_STATE`), and until that list changes it makes no table: most
//! images (a shell's `/bin/true`) never need one otherwise. A process of
//! the instance listing its `/proc/PID/fd` reads the list here instead.
//! `/proc/PID/environ` shows the environment the image started with
//! (the library's own `unsetenv` moves pointers, not these bytes); a
//! program that writes over that memory (a process title) leaves nothing
//! usable here, and its listing then shows those descriptors, as it would
//! show any of a process that is not atoll's.

use atoll_proto::boot::{ENV_SESSION_FD, ENV_STATE};

use crate::session::PRIVATE_FD_MIN;
use crate::state::State;
use crate::sys;

/// Most bytes of an environment read (the kernel's `ARG_MAX` share for
/// it is larger, but an instance's variables come first in none of them:
/// a longer one is read in full up to this).
const MOST: usize = 1 << 20;

/// `pid`'s own descriptors by its initial environment, if it names them.
pub fn private_of(pid: u32) -> Option<Vec<i32>> {
    let path = format!("/proc/{pid}/environ\0");
    let fd = sys::open_read(libc::AT_FDCWD as i64, path.as_bytes());
    if fd < 0 {
        return None;
    }
    let mut env = Vec::new();
    let mut chunk = [0u8; 16384];
    while env.len() < MOST {
        // SAFETY: reading into our own buffer of that length.
        let n = unsafe {
            sys::sc(
                libc::SYS_read,
                fd as u64,
                chunk.as_mut_ptr() as u64,
                chunk.len() as u64,
                0,
            )
        };
        if n <= 0 {
            break;
        }
        env.extend_from_slice(&chunk[..n as usize]);
    }
    sys::close(fd as i32);
    parse(&env)
}

/// The session socket, buffer cache and control block an environment
/// (`NAME=value` strings, each ended by a NUL) names, when it names the
/// socket and the control block (the cache is absent in a copy island),
/// each in atoll's range of numbers.
fn parse(env: &[u8]) -> Option<Vec<i32>> {
    let mut socket = None;
    let mut carried = None;
    for var in env.split(|&b| b == 0) {
        let Some(eq) = var.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, value) = (&var[..eq], &var[eq + 1..]);
        if name == ENV_SESSION_FD.as_bytes() {
            socket = core::str::from_utf8(value).ok()?.parse::<i32>().ok();
        } else if name == ENV_STATE.as_bytes() {
            carried = core::str::from_utf8(value)
                .ok()
                .and_then(State::decode)
                .and_then(|st| st.attached);
        }
    }
    let a = carried?;
    let list = [Some(socket?), Some(a.control.fd), a.cache.map(|c| c.fd)];
    let ours = |fd: &i32| *fd >= PRIVATE_FD_MIN;
    let list: Vec<i32> = list.into_iter().flatten().collect();
    list.iter().all(ours).then_some(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Attached, CarriedFd};

    fn state(cache: Option<i32>, control: i32) -> String {
        let fd = |fd| CarriedFd { fd, dev: 1, ino: 2 };
        State {
            attached: Some(Attached {
                session: 5,
                cache: cache.map(fd),
                control: fd(control),
                info: vec![1, 2],
                umask: Some(0o22),
            }),
            ..State::default()
        }
        .encode()
    }

    fn env(vars: &[String]) -> Vec<u8> {
        vars.iter()
            .flat_map(|v| [v.as_bytes(), b"\0"].concat())
            .collect()
    }

    #[test]
    fn the_socket_cache_and_control_block_an_exec_handed_over() {
        let e = env(&[
            "PATH=/bin".into(),
            format!("{ENV_SESSION_FD}=902"),
            format!("{ENV_STATE}={}", state(Some(904), 903)),
            "HOME=/".into(),
        ]);
        assert_eq!(parse(&e), Some(vec![902, 903, 904]));
        // A copy island's image holds no cache descriptor.
        let e = env(&[
            format!("{ENV_STATE}={}", state(None, 903)),
            format!("{ENV_SESSION_FD}=902"),
        ]);
        assert_eq!(parse(&e), Some(vec![902, 903]));
    }

    #[test]
    fn nothing_without_both_variables_or_outside_atoll_s_numbers() {
        let socket_only = env(&[format!("{ENV_SESSION_FD}=902")]);
        assert_eq!(parse(&socket_only), None);
        let state_only = env(&[format!("{ENV_STATE}={}", state(Some(904), 903))]);
        assert_eq!(parse(&state_only), None);
        let low = env(&[
            format!("{ENV_SESSION_FD}=5"),
            format!("{ENV_STATE}={}", state(Some(904), 903)),
        ]);
        assert_eq!(parse(&low), None);
        // Written over (a process title): garbage, not a list.
        let garbage = env(&[
            format!("{ENV_SESSION_FD}=9x2"),
            "ATOLL_STATE=v1;a:zz".into(),
        ]);
        assert_eq!(parse(&garbage), None);
        assert_eq!(parse(b""), None);
    }
}
