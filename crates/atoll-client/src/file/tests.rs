//! Unit tests of `open`'s flag handling.

use super::final_flags;

#[test]
fn a_trailing_slash_follows_and_wants_a_directory() {
    let nofollow = (libc::O_RDONLY | libc::O_NOFOLLOW) as u32;
    assert_eq!(final_flags(nofollow, false), nofollow);
    let f = final_flags(nofollow, true);
    assert_eq!(f & libc::O_NOFOLLOW as u32, 0);
    assert_ne!(f & libc::O_DIRECTORY as u32, 0);
    let path = (libc::O_PATH | libc::O_NOFOLLOW) as u32;
    assert_eq!(
        final_flags(path, true),
        (libc::O_PATH | libc::O_DIRECTORY) as u32
    );
}
