//! The program an image runs, as `/proc/self/exe` should name it. An
//! image started from a file in the mount runs a memfd copy, which is all
//! the kernel knows; the exec records the atoll path for the new image
//! (`handover`), and `readlink` of `/proc/self/exe` answers it.

use crate::error::{err, Result};
use crate::sys;

/// The atoll path of the program this image runs, when it was started
/// from a file in the mount (the kernel only knows the memfd it ran).
pub(super) static SELF_EXE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// Was this image started from a file in the mount?
pub fn started_from_atoll() -> bool {
    SELF_EXE.get().is_some()
}

/// Does `path` name this process's executable through `/proc`?
pub fn is_self_exe(path: &[u8]) -> bool {
    crate::path::proc_self_entry(path) == Some(b"exe")
}

/// `readlink` of `/proc/self/exe` for an image started from the mount:
/// the atoll path (Linux would show the file's path; the kernel here only
/// knows a memfd). `None`: the kernel's answer is right.
pub fn readlink_self_exe(path: &[u8], buf: u64, size: i64) -> Option<Result<crate::Out>> {
    let exe = SELF_EXE.get()?;
    if !is_self_exe(path) {
        return None;
    }
    if size <= 0 {
        return Some(err(libc::EINVAL));
    }
    let n = exe.len().min(size as usize);
    Some(match sys::copy_to_user(buf, &exe[..n]) {
        Ok(()) => Ok(crate::Out::Done(n as i64)),
        Err(e) => err(e),
    })
}

/// The host file the kernel's `/proc/self/exe` names.
pub(super) fn host_self_exe() -> Result<Vec<u8>> {
    let mut buf = vec![0u8; sys::PATH_MAX];
    // SAFETY: NUL-terminated literal; `buf` is ours and PATH_MAX long.
    let n = unsafe {
        sys::sc(
            libc::SYS_readlink,
            c"/proc/self/exe".as_ptr() as u64,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
            0,
        )
    };
    if n < 0 {
        return err(-n as i32);
    }
    buf.truncate(n as usize);
    Ok(buf)
}
