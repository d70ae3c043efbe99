//! `#!` scripts: what their interpreter is given (Linux
//! `fs/binfmt_script.c`), for scripts in the mount and host scripts whose
//! interpreter is in it.

use super::{Shebang, MAX_INTERP_DEPTH};
use crate::error::{err, Result};
use crate::fdtable;
use crate::session::Client;

/// One more `#!` level for the script at `prog_path` (from `dirfd`):
/// `argv` becomes its interpreter's, which is returned as the program to
/// run next; `ELOOP` past Linux's nesting limit.
pub(super) fn next_interpreter(
    depth: &mut u32,
    argv: &mut Vec<Vec<u8>>,
    dirfd: i64,
    prog_path: &[u8],
    shebang: Shebang,
) -> Result<Vec<u8>> {
    *depth += 1;
    if *depth > MAX_INTERP_DEPTH {
        return err(libc::ELOOP);
    }
    let script = script_path(dirfd, prog_path)?;
    Ok(through_interpreter(argv, shebang, script))
}

/// binfmt_script: `argv` becomes `interp [arg] script argv[1..]`; the
/// interpreter is the program to run next.
fn through_interpreter(
    argv: &mut Vec<Vec<u8>>,
    (interp, arg): Shebang,
    script: Vec<u8>,
) -> Vec<u8> {
    let mut next = vec![interp.clone()];
    next.extend(arg);
    next.push(script);
    next.extend(argv.drain(..).skip(1));
    *argv = next;
    interp
}

/// The path a script's interpreter receives: as given when absolute or
/// relative to the cwd (the new image restores the cwd), else the atoll
/// directory fd's path joined with it.
fn script_path(dirfd: i64, path: &[u8]) -> Result<Vec<u8>> {
    if path.first() == Some(&b'/') || dirfd == libc::AT_FDCWD as i64 {
        return Ok(path.to_vec());
    }
    match fdtable::get(dirfd).and_then(|d| d.path().map(<[u8]>::to_vec)) {
        Some(mut p) => {
            p.push(b'/');
            p.extend_from_slice(path);
            Ok(p)
        }
        None => err(libc::ENOEXEC),
    }
}

/// `path` (relative to `dirfd`) as an absolute path, joined lexically.
pub(super) fn absolute(c: &Client, dirfd: i64, path: &[u8]) -> Result<Vec<u8>> {
    if path.first() != Some(&b'/') && dirfd == libc::AT_FDCWD as i64 {
        if let Some(cwd) = c.cwd() {
            let mut p = cwd.path.clone();
            p.push(b'/');
            p.extend_from_slice(path);
            return Ok(p);
        }
    }
    script_path(dirfd, path)
}
