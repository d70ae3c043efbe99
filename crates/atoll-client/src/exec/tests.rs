//! Unit tests of the exec plan: environment rewriting, `getppid` of a
//! proxy, the stand-in test.

use super::*;

fn has(env: &[Vec<u8>], kv: &str) -> bool {
    env.iter().any(|e| e == kv.as_bytes())
}

#[test]
fn stripped_environment_gets_every_variable_back() {
    let env = rewrite_env(
        &[],
        Some("/lib/libatoll_preload.so"),
        "/run/a/boot.sock",
        Some(901),
        "v1",
    );
    assert!(has(&env, "LD_PRELOAD=/lib/libatoll_preload.so"));
    assert!(has(&env, "ATOLL_SOCKET=/run/a/boot.sock"));
    assert!(has(&env, "ATOLL_PRELOAD=/lib/libatoll_preload.so"));
    assert!(has(&env, "ATOLL_SESSION_FD=901"));
    assert!(has(&env, "ATOLL_STATE=v1"));
    assert_eq!(env.len(), 5);
}

#[test]
fn preload_is_prepended_once_and_stale_values_replaced() {
    let input: Vec<&[u8]> = vec![
        b"PATH=/bin",
        b"LD_PRELOAD=/other.so",
        b"ATOLL_STATE=old",
        b"ATOLL_SESSION_FD=3",
    ];
    let env = rewrite_env(&input, Some("/p.so"), "/s", None, "new");
    assert!(has(&env, "PATH=/bin"));
    assert!(has(&env, "LD_PRELOAD=/p.so:/other.so"));
    assert!(has(&env, "ATOLL_STATE=new"));
    assert!(!env.iter().any(|e| e.starts_with(b"ATOLL_SESSION_FD=")));
    assert!(!has(&env, "ATOLL_STATE=old"));
    let again: Vec<&[u8]> = vec![b"LD_PRELOAD=/x.so /p.so"];
    let env = rewrite_env(&again, Some("/p.so"), "/s", None, "v1");
    assert!(
        has(&env, "LD_PRELOAD=/x.so /p.so"),
        "already present: kept as is"
    );
}

#[test]
fn ppid_is_field_four_whatever_the_command_name() {
    assert_eq!(stat_ppid(b"123 (bash) S 77 123 123 0"), Some(77));
    assert_eq!(stat_ppid(b"9 (a) b (c) T 4242 9 9"), Some(4242));
    assert_eq!(stat_ppid(b"garbage"), None);
    // Our own line names our real parent.
    let me = std::fs::read("/proc/self/stat").unwrap();
    // SAFETY: getppid takes no arguments.
    assert_eq!(stat_ppid(&me), Some(unsafe { libc::getppid() }));
}

#[test]
fn a_stand_in_is_only_the_process_that_read_it() {
    // Not a remote program: getppid() is the real one.
    assert_eq!(proxy_of_self(), None);
    // SAFETY: getppid takes no arguments.
    assert_eq!(proxy_getppid(), unsafe { libc::getppid() } as i64);
    // Standing for ourselves: the answer is our parent, read through
    // /proc.
    PROXY.store(raw_getpid(), Ordering::Relaxed);
    PROXY_OWNER.store(raw_getpid(), Ordering::Relaxed);
    assert_eq!(proxy_of_self(), Some(raw_getpid()));
    // SAFETY: as above.
    assert_eq!(proxy_getppid(), unsafe { libc::getppid() } as i64);
    // A forked child (other pid) is not the stand-in.
    PROXY_OWNER.store(raw_getpid() + 1, Ordering::Relaxed);
    assert_eq!(proxy_of_self(), None);
    PROXY.store(0, Ordering::Relaxed);
}

#[test]
fn initial_state_names_the_cwd() {
    let (k, v) = initial_state_env("/atoll/src");
    assert_eq!(k, "ATOLL_STATE");
    let st = State::decode(&v).unwrap();
    assert_eq!(st.cwd, Some((b"/atoll/src".to_vec(), None)));
    assert!(st.fds.is_empty());
}
