//! Emulated calls run inside a SIGSYS handler, possibly on a program's small
//! alternate signal stack: the common calls must fit in a modest stack.
//! Measured: a release build needs less than 16 KiB, a debug build less
//! than 48 KiB; the default checked here (64 KiB) leaves room for debug.

mod common;
use common::*;

fn exercise() {
    let f = p("stack/f");
    put(&f, b"data");
    assert_eq!(get(&f), b"data");
    assert!(stat(&p("stack/../stack/f")).is_ok());
    assert_eq!(list(&p("stack")), vec!["f".to_string()]);
    assert_eq!(sc(libc::SYS_rename, &[ptr(&f), ptr(&p("stack/g"))]), 0);
    assert_eq!(sc(libc::SYS_unlink, &[ptr(&p("stack/g"))]), 0);
}

#[test]
fn common_calls_fit_in_a_small_stack() {
    let _ = env();
    assert_eq!(mkdir(&p("stack"), 0o755), 0);
    let kb: usize = std::env::var("ATOLL_TEST_STACK_KB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    std::thread::Builder::new()
        .stack_size(kb << 10)
        .spawn(exercise)
        .unwrap()
        .join()
        .unwrap();
}
