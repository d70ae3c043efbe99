//! Path lexing: fixed-capacity path buffers (no allocation on the walk's
//! hot path), component splitting with Linux's trailing-slash rules, the
//! mount-prefix test, and `#!` parsing. Pure functions, unit-tested here;
//! the walk that sends `Lookup`s is in `walk.rs`.

/// Capacity of a path buffer: `PATH_MAX` plus room for one more component,
/// so that "too long" is detected rather than truncated.
pub const CAP: usize = 4096 + 256 + 8;

/// Largest path accepted (without NUL), as Linux's `PATH_MAX - 1`.
pub const MAX_PATH: usize = 4095;

/// A path in a fixed buffer, always followed by a NUL in the buffer so it
/// can be handed to the kernel directly.
#[derive(Clone)]
pub struct PathBuf {
    buf: [u8; CAP],
    len: usize,
}

impl PathBuf {
    pub fn new() -> PathBuf {
        PathBuf {
            buf: [0; CAP],
            len: 0,
        }
    }
    pub fn from_bytes(b: &[u8]) -> Result<PathBuf, i32> {
        let mut p = PathBuf::new();
        p.push_bytes(b)?;
        Ok(p)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    /// Pointer to the NUL-terminated string (for a kernel call).
    pub fn as_ptr(&self) -> *const u8 {
        self.buf.as_ptr()
    }
    /// The path and the NUL that follows it.
    pub fn as_bytes_with_nul(&self) -> &[u8] {
        &self.buf[..=self.len]
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn clear(&mut self) {
        self.len = 0;
        self.buf[0] = 0;
    }
    /// Append raw bytes; `ENAMETOOLONG` past the capacity.
    pub fn push_bytes(&mut self, b: &[u8]) -> Result<(), i32> {
        if self.len + b.len() + 1 > CAP {
            return Err(libc::ENAMETOOLONG);
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        self.buf[self.len] = 0;
        Ok(())
    }
    /// Append `/name` (a canonical path grows by one component).
    pub fn push_component(&mut self, name: &[u8]) -> Result<(), i32> {
        if self.len == 1 && self.buf[0] == b'/' {
            return self.push_bytes(name);
        }
        self.push_bytes(b"/")?;
        self.push_bytes(name)
    }
    /// Drop the last component, never going above `floor` bytes (the mount
    /// path: a canonical atoll path never leaves the mount lexically).
    pub fn pop_component(&mut self, floor: usize) {
        let b = &self.buf[..self.len];
        let cut = match b.iter().rposition(|&c| c == b'/') {
            Some(0) => 1,
            Some(i) => i,
            None => 0,
        };
        self.len = cut.max(floor.min(self.len));
        self.buf[self.len] = 0;
    }
}

impl Default for PathBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for PathBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// The canonical path of the directory a walk stands in. Unlike the path
/// being resolved, it has no length limit: a relative walk may go as deep
/// as the file system does (Linux bounds only the *argument* of a call by
/// `PATH_MAX`, not how deep a cwd or a directory descriptor may be), and
/// only `getcwd` reports `ENAMETOOLONG` for a longer one.
#[derive(Clone, Default)]
pub struct Canon {
    buf: Vec<u8>,
}

impl Canon {
    pub fn new() -> Canon {
        Canon {
            buf: Vec::with_capacity(128),
        }
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn clear(&mut self) {
        self.buf.clear();
    }
    pub fn push_bytes(&mut self, b: &[u8]) -> Result<(), i32> {
        self.buf.extend_from_slice(b);
        Ok(())
    }
    /// Append `/name`.
    pub fn push_component(&mut self, name: &[u8]) -> Result<(), i32> {
        if self.buf != b"/" {
            self.buf.push(b'/');
        }
        self.buf.extend_from_slice(name);
        Ok(())
    }
    /// Keep the first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }
    /// Drop the last component, never going above `floor` bytes.
    pub fn pop_component(&mut self, floor: usize) {
        let cut = match self.buf.iter().rposition(|&c| c == b'/') {
            Some(0) => 1,
            Some(i) => i,
            None => 0,
        };
        self.buf.truncate(cut.max(floor.min(self.buf.len())));
    }
}

impl core::fmt::Debug for Canon {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.buf))
    }
}

/// What follows `/proc/<this process>/` in `path`: the process named as
/// `self`, `thread-self` or by its pid. `None` for any other path.
///
/// ```text
/// "/proc/self/exe" → "exe"; "/proc/<own pid>/fd/" → "fd/"; "/proc/1/fd" → None
/// ```
pub fn proc_self_entry(path: &[u8]) -> Option<&[u8]> {
    let rest = path.strip_prefix(b"/proc/")?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    let (who, entry) = (&rest[..slash], &rest[slash + 1..]);
    let me = who == b"self"
        || who == b"thread-self"
        || core::str::from_utf8(who)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            == Some(std::process::id());
    me.then_some(entry)
}

/// One component found by [`next_component`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comp {
    pub start: usize,
    pub end: usize,
    /// No further component follows.
    pub last: bool,
    /// The last component is followed by one or more `/` (Linux then
    /// requires it to be a directory).
    pub trailing_slash: bool,
}

/// The next component of `p` at or after `pos`, skipping slashes.
///
/// ```text
/// "a//b/"  pos 0 → a (not last); pos 2 → b (last, trailing slash)
/// "///"    → None
/// ```
pub fn next_component(p: &[u8], pos: usize) -> Option<Comp> {
    let mut i = pos;
    while i < p.len() && p[i] == b'/' {
        i += 1;
    }
    if i >= p.len() {
        return None;
    }
    let start = i;
    while i < p.len() && p[i] != b'/' {
        i += 1;
    }
    let end = i;
    let rest_only_slashes = p[end..].iter().all(|&c| c == b'/');
    Some(Comp {
        start,
        end,
        last: rest_only_slashes,
        trailing_slash: rest_only_slashes && end < p.len(),
    })
}

pub fn is_dot(name: &[u8]) -> bool {
    name == b"."
}

pub fn is_dotdot(name: &[u8]) -> bool {
    name == b".."
}

/// If absolute path `p` names the mount or something below it, the part
/// after the mount prefix (may be empty or start with `/`). Repeated
/// slashes and `.` components before and inside the prefix are tolerated
/// as the kernel would; a `..` before the prefix is matched is not (the
/// path is then a host path, which the kernel resolves itself).
///
/// ```text
/// mount "/atoll": "/atoll/a/b" → "/a/b"; "//atoll" → ""; "/atollx" → None
/// ```
pub fn mount_rest<'p>(p: &'p [u8], mount: &[u8]) -> Option<&'p [u8]> {
    if p.first() != Some(&b'/') {
        return None;
    }
    let mut pos = 0;
    let mut mpos = 0;
    loop {
        let Some(mc) = next_component(mount, mpos) else {
            // Whole mount matched; the rest starts at `pos`.
            return Some(&p[pos..]);
        };
        let mname = &mount[mc.start..mc.end];
        // Skip `.` components of the path.
        let c = loop {
            let c = next_component(p, pos)?;
            if is_dot(&p[c.start..c.end]) {
                pos = c.end;
                continue;
            }
            break c;
        };
        if &p[c.start..c.end] != mname {
            return None;
        }
        pos = c.end;
        mpos = mc.end;
    }
}

/// Does a directory created at `rel` (its path relative to the mount,
/// without leading slash) fall under one of the `distribute` prefixes?
/// `""` matches everything; `"src"` matches `src` and `src/x`, not `srcx`.
pub fn matches_distribute(rel: &[u8], patterns: &[String]) -> bool {
    patterns.iter().any(|pat| {
        let pat = pat.trim_matches('/').as_bytes();
        pat.is_empty()
            || rel == pat
            || (rel.len() > pat.len() && rel.starts_with(pat) && rel[pat.len()] == b'/')
    })
}

/// Parse a `#!` line from the first bytes of a file: `(interpreter,
/// optional single argument)`, as Linux's binfmt_script does (the rest of
/// the line after the interpreter is one argument, trimmed).
pub fn parse_shebang(head: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let line = head.strip_prefix(b"#!")?;
    let end = line.iter().position(|&c| c == b'\n').unwrap_or(line.len());
    let line = &line[..end];
    let is_ws = |c: &u8| *c == b' ' || *c == b'\t';
    let start = line.iter().position(|c| !is_ws(c))?;
    let line = &line[start..];
    let iend = line.iter().position(is_ws).unwrap_or(line.len());
    let interp = &line[..iend];
    let rest = &line[iend..];
    let arg = match rest.iter().position(|c| !is_ws(c)) {
        Some(s) => {
            let a = &rest[s..];
            let e = a.iter().rposition(|c| !is_ws(c)).map_or(0, |e| e + 1);
            Some(&a[..e])
        }
        None => None,
    };
    if interp.is_empty() {
        None
    } else {
        Some((interp, arg))
    }
}

/// Lexically normalise an absolute path (`.`/`..`/`//`), as `getcwd`
/// reports after a `chdir` that left atoll through `..`.
pub fn normalize_abs(p: &[u8]) -> Result<PathBuf, i32> {
    let mut out = PathBuf::from_bytes(b"/")?;
    let mut pos = 0;
    while let Some(c) = next_component(p, pos) {
        let name = &p[c.start..c.end];
        pos = c.end;
        if is_dot(name) {
            continue;
        }
        if is_dotdot(name) {
            out.pop_component(1);
            continue;
        }
        out.push_component(name)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comps(p: &[u8]) -> Vec<(String, bool, bool)> {
        let mut v = Vec::new();
        let mut pos = 0;
        while let Some(c) = next_component(p, pos) {
            v.push((
                String::from_utf8_lossy(&p[c.start..c.end]).into_owned(),
                c.last,
                c.trailing_slash,
            ));
            pos = c.end;
        }
        v
    }

    #[test]
    fn components_skip_repeated_slashes_and_flag_the_trailing_one() {
        assert_eq!(
            comps(b"a//b/"),
            vec![("a".into(), false, false), ("b".into(), true, true)]
        );
        assert_eq!(comps(b"/x"), vec![("x".into(), true, false)]);
        assert!(comps(b"///").is_empty());
        assert!(comps(b"").is_empty());
    }

    #[test]
    fn mount_prefix_matches_whole_components_only() {
        let m = b"/atoll";
        assert_eq!(mount_rest(b"/atoll/a/b", m), Some(&b"/a/b"[..]));
        assert_eq!(mount_rest(b"/atoll", m), Some(&b""[..]));
        assert_eq!(mount_rest(b"//atoll//", m), Some(&b"//"[..]));
        assert_eq!(mount_rest(b"/./atoll/x", m), Some(&b"/x"[..]));
        assert_eq!(mount_rest(b"/atollx", m), None);
        assert_eq!(mount_rest(b"/etc/passwd", m), None);
        assert_eq!(mount_rest(b"atoll/x", m), None);
        assert_eq!(mount_rest(b"/tmp/../atoll", m), None);
        assert_eq!(mount_rest(b"/t/mnt/f", b"/t/mnt"), Some(&b"/f"[..]));
        assert_eq!(mount_rest(b"/t", b"/t/mnt"), None);
    }

    #[test]
    fn canonical_paths_pop_but_never_above_the_floor() {
        let mut p = PathBuf::from_bytes(b"/atoll").unwrap();
        p.push_component(b"a").unwrap();
        p.push_component(b"b").unwrap();
        assert_eq!(p.as_bytes(), b"/atoll/a/b");
        p.pop_component(6);
        assert_eq!(p.as_bytes(), b"/atoll/a");
        p.pop_component(6);
        p.pop_component(6);
        assert_eq!(p.as_bytes(), b"/atoll");
        let mut r = PathBuf::from_bytes(b"/").unwrap();
        r.push_component(b"x").unwrap();
        assert_eq!(r.as_bytes(), b"/x");
        r.pop_component(1);
        assert_eq!(r.as_bytes(), b"/");
    }

    #[test]
    fn path_buffer_reports_overflow_as_enametoolong() {
        let mut p = PathBuf::new();
        assert_eq!(p.push_bytes(&[b'a'; CAP]), Err(libc::ENAMETOOLONG));
        assert!(p.push_bytes(&[b'a'; 4000]).is_ok());
        assert_eq!(*p.as_bytes().last().unwrap(), b'a');
    }

    #[test]
    fn distribute_prefixes_match_components() {
        let pats = vec!["src".to_string()];
        assert!(matches_distribute(b"src", &pats));
        assert!(matches_distribute(b"src/x", &pats));
        assert!(!matches_distribute(b"srcx", &pats));
        assert!(!matches_distribute(b"other", &pats));
        assert!(matches_distribute(b"anything", &["".to_string()]));
        assert!(!matches_distribute(b"a", &[]));
    }

    #[test]
    fn shebang_lines_parse_like_binfmt_script() {
        assert_eq!(
            parse_shebang(b"#!/bin/sh\necho"),
            Some((&b"/bin/sh"[..], None))
        );
        assert_eq!(
            parse_shebang(b"#! /usr/bin/env  python3 -u \n"),
            Some((&b"/usr/bin/env"[..], Some(&b"python3 -u"[..])))
        );
        assert_eq!(parse_shebang(b"#!\n"), None);
        assert_eq!(parse_shebang(b"\x7fELF"), None);
    }

    #[test]
    fn normalize_resolves_dots_lexically() {
        assert_eq!(normalize_abs(b"/a/./b/../c//").unwrap().as_bytes(), b"/a/c");
        assert_eq!(normalize_abs(b"/../..").unwrap().as_bytes(), b"/");
    }
}
