//! Extended attributes of files in the mount, for a filtered program:
//! `setxattr`, `getxattr`, `listxattr`, `removexattr` and their `l`
//! forms, performed through the relay's client as a dynamic program's
//! are. The descriptor forms (`fsetxattr`, …) are not filtered: on a
//! descriptor the relay gave out they act on its copy, as `fchmod` does.

use super::{seccomp, Answer, Notif, Place, Supervisor, CWD};
use crate::foreign::files::cstr;

/// `XATTR_NAME_MAX`: a longer (or empty) name is `ERANGE`, as in the
/// kernel.
const NAME_MAX: usize = 255;
/// `XATTR_SIZE_MAX`: the largest value or list the kernel moves.
const SIZE_MAX: usize = 65536;

/// Which call, and whether it follows a final symbolic link.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Set,
    Get,
    List,
    Remove,
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn rc(r: isize) -> Result<i64, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as i64)
    }
}

impl Supervisor {
    /// The xattr call `n` (`op`; `nofollow` for the `l` forms).
    pub(super) fn xattr(&mut self, n: &Notif, op: Op, nofollow: bool) -> Result<Answer, i32> {
        let a = n.args;
        let path = match self.place(n, CWD, a[0], false)? {
            Place::Here(p) => p,
            _ => return Ok(Answer::Kernel),
        };
        let p = cstr(&path)?;
        let name = if op == Op::List {
            None
        } else {
            let name = super::paths::read_path(n.pid, a[1])?;
            if name.is_empty() || name.len() > NAME_MAX {
                return Err(libc::ERANGE);
            }
            Some(cstr(&name)?)
        };
        let name_ptr = name.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY (all calls below): NUL-terminated path and name, and
        // local buffers of the sizes passed; the relay's client library
        // answers a path in the mount.
        let r = match op {
            Op::Set => {
                let size = a[3] as usize;
                if size > SIZE_MAX {
                    return Err(libc::E2BIG);
                }
                let mut value = vec![0u8; size];
                seccomp::read_mem(n.pid, a[2], &mut value)?;
                self.alive(n)?;
                let (v, flags) = (value.as_ptr().cast(), a[4] as i32);
                rc(unsafe {
                    if nofollow {
                        libc::lsetxattr(p.as_ptr(), name_ptr, v, size, flags)
                    } else {
                        libc::setxattr(p.as_ptr(), name_ptr, v, size, flags)
                    }
                } as isize)
            }
            Op::Get | Op::List => {
                let (buf_at, size) = if op == Op::Get {
                    (a[2], a[3] as usize)
                } else {
                    (a[1], a[2] as usize)
                };
                let mut buf = vec![0u8; size.min(SIZE_MAX)];
                self.alive(n)?;
                let b = buf.as_mut_ptr().cast();
                let got = rc(unsafe {
                    match (op, nofollow) {
                        (Op::Get, false) => libc::getxattr(p.as_ptr(), name_ptr, b, buf.len()),
                        (Op::Get, true) => libc::lgetxattr(p.as_ptr(), name_ptr, b, buf.len()),
                        (_, false) => libc::listxattr(p.as_ptr(), b.cast(), buf.len()),
                        (_, true) => libc::llistxattr(p.as_ptr(), b.cast(), buf.len()),
                    }
                })?;
                // Size 0 asks for the size needed: nothing to write.
                if size > 0 {
                    seccomp::write_mem(n.pid, buf_at, &buf[..got as usize])?;
                }
                Ok(got)
            }
            Op::Remove => {
                self.alive(n)?;
                rc(unsafe {
                    if nofollow {
                        libc::lremovexattr(p.as_ptr(), name_ptr)
                    } else {
                        libc::removexattr(p.as_ptr(), name_ptr)
                    }
                } as isize)
            }
        };
        Ok(Answer::Done(r))
    }
}
