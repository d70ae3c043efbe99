//! Which mapping holds a code address, read from `/proc/self/maps` with
//! raw system calls (it runs inside the SIGSYS handler, where neither
//! malloc nor the dynamic loader's lock may be taken: the trapped code may
//! be `dlopen` itself, holding that lock).
//!
//! Only the fields the rewriting rules need are kept: bounds, permissions,
//! private or shared, the inode (0 for anonymous memory), and where in
//! which file the mapping starts (for the remembered sites, `remember`).

use crate::raw;

/// One line of `/proc/self/maps`, as far as the rewriting rules read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub private: bool,
    pub inode: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    /// The device, as `stat` encodes it.
    pub dev: u64,
}

/// The path field of a line (empty for anonymous memory), as far as
/// `line` holds it.
pub fn path_of(line: &[u8]) -> &[u8] {
    let mut rest = line;
    for _ in 0..5 {
        let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
        rest = &rest[start..];
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        rest = &rest[end..];
    }
    let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    &rest[start..]
}

/// Parse one line, e.g.
/// `7f0c1a400000-7f0c1a595000 r-xp 00028000 fd:01 1318 /usr/lib/libc.so.6`.
pub fn parse_line(line: &[u8]) -> Option<Mapping> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty()).take(5);
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let dev = fields.next()?;
    let inode = fields.next()?;
    let colon = dev.iter().position(|&b| b == b':')?;
    let (major, minor) = (hex(&dev[..colon])?, hex(&dev[colon + 1..])?);
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(&range[..dash])?;
    let end = hex(&range[dash + 1..])?;
    if perms.len() < 4 {
        return None;
    }
    Some(Mapping {
        start,
        end,
        read: perms[0] == b'r',
        write: perms[1] == b'w',
        exec: perms[2] == b'x',
        private: perms[3] == b'p',
        inode: decimal(inode)?,
        offset: hex(offset)? as u64,
        dev: libc::makedev(major as u32, minor as u32),
    })
}

fn hex(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0usize, |acc, &c| {
        let d = (c as char).to_digit(16)? as usize;
        Some(acc << 4 | d)
    })
}

fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        let d = (c as char).to_digit(10)? as u64;
        Some(acc * 10 + d)
    })
}

/// Open `path` (NUL-terminated) for reading with a raw system call (the
/// rewriter runs inside atoll's entry and may not re-enter it).
pub fn open_read_only(path: &[u8]) -> Option<i64> {
    let fd = raw::syscall(
        libc::SYS_open,
        &[
            path.as_ptr() as u64,
            (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
        ],
    );
    (fd >= 0).then_some(fd)
}

/// The mapping that contains `addr`, or `None` (not mapped, or the file
/// could not be read).
pub fn mapping_of(addr: usize) -> Option<Mapping> {
    let mut found = None;
    each_line(|m, _| {
        if m.start <= addr && addr < m.end {
            found = Some(*m);
        }
        // Lines come in address order.
        m.end <= addr
    });
    found
}

/// Run `each` on every line of `/proc/self/maps` with its path (cut
/// when the line is longer than 512 bytes: then empty) until it says
/// stop (false). False if the file could not be read.
pub fn each_line(mut each: impl FnMut(&Mapping, &[u8]) -> bool) -> bool {
    let Some(fd) = open_read_only(b"/proc/self/maps\0") else {
        return false;
    };
    let read = scan(fd as i32, &mut each);
    raw::syscall(libc::SYS_close, &[fd as u64]);
    read
}

/// Read `fd` chunk by chunk and hand every whole line to `each`.
fn scan(fd: i32, each: &mut impl FnMut(&Mapping, &[u8]) -> bool) -> bool {
    let mut chunk = [0u8; 4096];
    let mut line = [0u8; 512];
    let mut len = 0usize;
    let mut cut = false;
    loop {
        let n = raw::syscall(
            libc::SYS_read,
            &[fd as u64, chunk.as_mut_ptr() as u64, chunk.len() as u64],
        );
        if n == -(libc::EINTR as i64) {
            continue;
        }
        if n < 0 {
            return false;
        }
        if n == 0 {
            return true;
        }
        for &b in &chunk[..n as usize] {
            if b != b'\n' {
                if len < line.len() {
                    line[len] = b;
                    len += 1;
                } else {
                    cut = true;
                }
                continue;
            }
            let m = parse_line(&line[..len]);
            let path = if cut { &[][..] } else { path_of(&line[..len]) };
            len = 0;
            cut = false;
            if let Some(m) = m {
                if !each(&m, path) {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_text_line_parses() {
        let m =
            parse_line(b"7f0c1a400000-7f0c1a595000 r-xp 00028000 fd:01 1318   /usr/lib/libc.so.6")
                .unwrap();
        assert_eq!(m.start, 0x7f0c1a400000);
        assert_eq!(m.end, 0x7f0c1a595000);
        assert!(m.read && m.exec && m.private && !m.write);
        assert_eq!(m.inode, 1318);
        assert_eq!(m.offset, 0x28000);
        assert_eq!(m.dev, libc::makedev(0xfd, 1));
        let line = b"7f0c1a400000-7f0c1a595000 r-xp 00028000 fd:01 1318   /usr/lib/libc.so.6";
        assert_eq!(path_of(line), b"/usr/lib/libc.so.6");
        assert_eq!(path_of(b"7ffd1000-7ffd3000 rwxp 00000000 00:00 0"), b"");
    }

    #[test]
    fn anonymous_writable_memory_has_no_inode() {
        let m = parse_line(b"7ffd1000-7ffd3000 rwxp 00000000 00:00 0").unwrap();
        assert!(m.write && m.exec);
        assert_eq!(m.inode, 0);
    }

    #[test]
    fn garbage_does_not_parse() {
        assert_eq!(parse_line(b""), None);
        assert_eq!(parse_line(b"zz-10 r-xp 0 0:0 1"), None);
    }

    #[test]
    fn this_test_binarys_text_is_found_file_backed_and_not_writable() {
        let here =
            this_test_binarys_text_is_found_file_backed_and_not_writable as *const () as usize;
        let m = mapping_of(here).unwrap();
        assert!(m.start <= here && here < m.end);
        assert!(m.exec && !m.write && m.inode != 0);
        let stack = 0u8;
        let s = mapping_of(&stack as *const u8 as usize).unwrap();
        assert!(s.write && !s.exec);
        // Its path names the file `stat` finds at the same device and inode.
        let mut path = Vec::new();
        each_line(|l, p| {
            if l.start <= here && here < l.end {
                path = p.to_vec();
            }
            true
        });
        use std::os::unix::fs::MetadataExt;
        let st = std::fs::metadata(std::str::from_utf8(&path).unwrap()).unwrap();
        assert_eq!((st.dev(), st.ino()), (m.dev, m.inode));
    }
}
