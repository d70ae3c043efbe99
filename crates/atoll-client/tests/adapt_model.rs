//! Adaptive directories and the elastic server count against a model
//! (Hare §6.1.2, §6.1.1): random sequences of create, mkdir, link, rename,
//! unlink, rmdir and listing in two directories, interleaved with random
//! swaps between centralized and distributed and random changes of the
//! number of host processes the three file servers run in (`atoll
//! scale`: servers move between hosts), on an in-process instance,
//! compared after every step with a map of names. What is compared is
//! what programs see: each name listed exactly once, the errno of each
//! call as Linux gives it, link counts of files, subdirectories and the
//! two directories, hard links sharing an inode; a listing read part-way,
//! then across a swap or a move, returns every entry once.
//!
//! The server hosts are this test binary started again with the server
//! subcommand (so it has its own `main`, not the test harness).

mod common;
use common::*;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;

const SERVERS: usize = 3;
const XATTR: &str = "user.atoll.distributed\0";
/// Names the operations pick from (few, so that they collide).
const NAMES: u8 = 6;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Node {
    /// A file, by model identity (hard links share it).
    File(u32),
    /// A subdirectory; `full` when it holds its one file `x`.
    Dir { full: bool },
}

#[derive(Clone, Debug)]
enum Op {
    Create(usize, u8),
    Mkdir(usize, u8),
    /// Create `x` inside subdirectory `name`.
    Fill(usize, u8),
    Unlink(usize, u8),
    Rmdir(usize, u8),
    Rename(usize, u8, usize, u8),
    Link(usize, u8, usize, u8),
    /// Thirty files at once, so listings take several `getdents` calls
    /// and swaps move many entries.
    Populate(usize),
    Swap(usize, bool),
    /// Read the first `u8` records of a listing, swap to `bool`, read on.
    ListAcrossSwap(usize, bool, u8),
    /// Run the servers in this many hosts (1 to `SERVERS`).
    Scale(usize),
    /// Read the first `u8` records of a listing, scale, read on.
    ListAcrossScale(usize, usize, u8),
}

fn op() -> impl Strategy<Value = Op> {
    let d = 0..2usize;
    let n = 0..NAMES;
    prop_oneof![
        4 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Create(d, n)),
        2 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Mkdir(d, n)),
        1 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Fill(d, n)),
        3 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Unlink(d, n)),
        2 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Rmdir(d, n)),
        3 => (d.clone(), n.clone(), d.clone(), n.clone())
            .prop_map(|(a, x, b, y)| Op::Rename(a, x, b, y)),
        2 => (d.clone(), n.clone(), d.clone(), n.clone())
            .prop_map(|(a, x, b, y)| Op::Link(a, x, b, y)),
        1 => d.clone().prop_map(Op::Populate),
        3 => (d.clone(), any::<bool>()).prop_map(|(d, m)| Op::Swap(d, m)),
        2 => (d.clone(), any::<bool>(), 0..40u8).prop_map(|(d, m, k)| Op::ListAcrossSwap(d, m, k)),
        2 => (1..=SERVERS).prop_map(Op::Scale),
        1 => (d, 1..=SERVERS, 0..40u8).prop_map(|(d, h, k)| Op::ListAcrossScale(d, h, k)),
    ]
}

/// The two directories' entries as Linux would have them.
#[derive(Default)]
struct Model {
    dirs: [BTreeMap<String, Node>; 2],
    next_file: u32,
    populated: u32,
}

impl Model {
    fn get(&self, d: usize, name: &str) -> Option<Node> {
        self.dirs[d].get(name).copied()
    }

    /// What `rename(a/x, b/y)` returns, applying it if it succeeds.
    fn rename(&mut self, a: usize, x: &str, b: usize, y: &str) -> i64 {
        let Some(src) = self.get(a, x) else {
            return ENOENT;
        };
        let dst = self.get(b, y);
        if (a, x) == (b, y) {
            return 0;
        }
        match (src, dst) {
            // Two links of one file: nothing happens (POSIX rename).
            (Node::File(i), Some(Node::File(j))) if i == j => return 0,
            (Node::File(_), Some(Node::Dir { .. })) => return EISDIR,
            (Node::Dir { .. }, Some(Node::File(_))) => return ENOTDIR,
            (Node::Dir { .. }, Some(Node::Dir { full: true })) => return ENOTEMPTY,
            _ => {}
        }
        self.dirs[a].remove(x);
        self.dirs[b].insert(y.to_string(), src);
        0
    }

    /// Links to model file `id` among both directories.
    fn links(&self, id: u32) -> usize {
        self.dirs
            .iter()
            .flat_map(|d| d.values())
            .filter(|n| **n == Node::File(id))
            .count()
    }
}

/// One case's two directories, `base/d0` and `base/d1`.
struct Case {
    base: String,
}

impl Case {
    fn dir(&self, d: usize) -> String {
        format!("{}/d{d}", self.base)
    }

    fn path(&self, d: usize, name: &str) -> std::ffi::CString {
        p(&format!("{}/{name}", self.dir(d)))
    }
}

fn name(n: u8) -> String {
    format!("n{n}")
}

fn swap(path: &std::ffi::CString, distributed: bool) -> i64 {
    let v: &[u8] = if distributed { b"1" } else { b"0" };
    let args = [ptr(path), XATTR.as_ptr() as u64, v.as_ptr() as u64, 1, 0];
    sc(libc::SYS_setxattr, &args)
}

fn mode(path: &std::ffi::CString) -> Vec<u8> {
    let mut v = [0u8; 8];
    let args = [ptr(path), XATTR.as_ptr() as u64, v.as_mut_ptr() as u64, 8];
    let n = sc(libc::SYS_getxattr, &args);
    assert!(n > 0, "getxattr: {n}");
    v[..n as usize].to_vec()
}

/// Names of one `getdents64` reply, `.` and `..` left out.
fn records(buf: &[u8], out: &mut Vec<String>) {
    let mut pos = 0;
    while pos < buf.len() {
        let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
        let name = &buf[pos + 19..pos + reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
        let s = String::from_utf8_lossy(name).into_owned();
        if s != "." && s != ".." {
            out.push(s);
        }
        pos += reclen;
    }
}

/// Run the servers in `hosts` hosts; the servers' hosts must then be
/// `hosts` distinct processes, and no server restarted.
fn scale(hosts: usize) {
    let inst = &env().instance;
    let (running, _) = inst.scale(Some(hosts)).expect("scale");
    assert_eq!(running, hosts);
    let health = inst.health();
    let pids: std::collections::BTreeSet<u32> = health.iter().map(|h| h.pid).collect();
    assert_eq!(pids.len(), hosts, "{health:?}");
    assert!(
        health.iter().all(|h| h.state == "up" && h.restarts == 0),
        "{health:?}"
    );
}

/// A listing of `dir` with `change` done after about `first` records.
fn list_across(dir: &std::ffi::CString, first: usize, change: impl Fn()) -> Vec<String> {
    let fd = open(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0);
    assert!(fd >= 0, "opendir: {fd}");
    let mut names = Vec::new();
    // Small reads (about four records each), so the swap falls inside.
    let mut buf = vec![0u8; 128];
    let mut swapped = false;
    loop {
        if !swapped && names.len() >= first {
            change();
            swapped = true;
        }
        let args = [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64];
        let n = sc(libc::SYS_getdents64, &args);
        assert!(n >= 0, "getdents64: {n}");
        if n == 0 && swapped {
            break;
        }
        if n == 0 {
            // At the end already: the end stays the end across a change.
            change();
            swapped = true;
            continue;
        }
        records(&buf[..n as usize], &mut names);
    }
    assert_eq!(close(fd), 0);
    names
}

/// Apply `op` to the instance and the model; the errno must agree.
fn step(c: &Case, m: &mut Model, op: &Op) {
    let unlink = |path: &std::ffi::CString| sc(libc::SYS_unlink, &[ptr(path)]);
    let rmdir = |path: &std::ffi::CString| sc(libc::SYS_rmdir, &[ptr(path)]);
    match *op {
        Op::Create(d, n) => {
            let fd = open(
                &c.path(d, &name(n)),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                0o644,
            );
            match m.get(d, &name(n)) {
                Some(_) => assert_eq!(fd, EEXIST, "{op:?}"),
                None => {
                    assert!(fd >= 0, "{op:?}: {fd}");
                    assert_eq!(close(fd), 0);
                    m.next_file += 1;
                    m.dirs[d].insert(name(n), Node::File(m.next_file));
                }
            }
        }
        Op::Mkdir(d, n) => {
            let r = mkdir(&c.path(d, &name(n)), 0o755);
            let want = if m.get(d, &name(n)).is_some() {
                EEXIST
            } else {
                0
            };
            assert_eq!(r, want, "{op:?}");
            if r == 0 {
                m.dirs[d].insert(name(n), Node::Dir { full: false });
            }
        }
        Op::Fill(d, n) => {
            let fd = open(
                &c.path(d, &format!("{}/x", name(n))),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            );
            match m.get(d, &name(n)) {
                None => assert_eq!(fd, ENOENT, "{op:?}"),
                Some(Node::File(_)) => assert_eq!(fd, ENOTDIR, "{op:?}"),
                Some(Node::Dir { .. }) => {
                    assert!(fd >= 0, "{op:?}: {fd}");
                    assert_eq!(close(fd), 0);
                    m.dirs[d].insert(name(n), Node::Dir { full: true });
                }
            }
        }
        Op::Unlink(d, n) => {
            let r = unlink(&c.path(d, &name(n)));
            let want = match m.get(d, &name(n)) {
                None => ENOENT,
                Some(Node::Dir { .. }) => EISDIR,
                Some(Node::File(_)) => 0,
            };
            assert_eq!(r, want, "{op:?}");
            if r == 0 {
                m.dirs[d].remove(&name(n));
            }
        }
        Op::Rmdir(d, n) => {
            let r = rmdir(&c.path(d, &name(n)));
            let want = match m.get(d, &name(n)) {
                None => ENOENT,
                Some(Node::File(_)) => ENOTDIR,
                Some(Node::Dir { full: true }) => ENOTEMPTY,
                Some(Node::Dir { full: false }) => 0,
            };
            assert_eq!(r, want, "{op:?}");
            if r == 0 {
                m.dirs[d].remove(&name(n));
            }
        }
        Op::Rename(a, x, b, y) => {
            let (from, to) = (c.path(a, &name(x)), c.path(b, &name(y)));
            let r = sc(libc::SYS_rename, &[ptr(&from), ptr(&to)]);
            assert_eq!(r, m.rename(a, &name(x), b, &name(y)), "{op:?}");
        }
        Op::Link(a, x, b, y) => {
            let (from, to) = (c.path(a, &name(x)), c.path(b, &name(y)));
            let r = sc(libc::SYS_link, &[ptr(&from), ptr(&to)]);
            // Linux's order: the source is looked up, then the new name
            // created (EEXIST), and only then is a directory refused.
            let want = match (m.get(a, &name(x)), m.get(b, &name(y))) {
                (None, _) => ENOENT,
                (Some(_), Some(_)) => EEXIST,
                (Some(Node::Dir { .. }), None) => -(libc::EPERM as i64),
                (Some(Node::File(id)), None) => {
                    m.dirs[b].insert(name(y), Node::File(id));
                    0
                }
            };
            assert_eq!(r, want, "{op:?}");
        }
        Op::Populate(d) => {
            m.populated += 1;
            for i in 0..30 {
                let n = format!("p{}-{i}", m.populated);
                put(&c.path(d, &n), b"");
                m.next_file += 1;
                m.dirs[d].insert(n, Node::File(m.next_file));
            }
        }
        Op::Swap(d, to) => {
            let dir = p(&c.dir(d));
            assert_eq!(swap(&dir, to), 0, "{op:?}");
            assert_eq!(mode(&dir), if to { b"1" } else { b"0" }, "{op:?}");
        }
        Op::ListAcrossSwap(d, to, first) => {
            let dir = p(&c.dir(d));
            let mut names = list_across(&dir, first as usize, || {
                assert_eq!(swap(&dir, to), 0, "swap during a listing");
            });
            names.sort();
            let want: Vec<&String> = m.dirs[d].keys().collect();
            assert_eq!(
                names.iter().collect::<Vec<_>>(),
                want,
                "{op:?}: a listing across a swap"
            );
        }
        Op::Scale(hosts) => scale(hosts),
        Op::ListAcrossScale(d, hosts, first) => {
            let mut names = list_across(&p(&c.dir(d)), first as usize, || scale(hosts));
            names.sort();
            let want: Vec<&String> = m.dirs[d].keys().collect();
            assert_eq!(
                names.iter().collect::<Vec<_>>(),
                want,
                "{op:?}: a listing across a move"
            );
        }
    }
}

/// The instance holds exactly the model: names listed once, types, link
/// counts, hard links on one inode, subdirectories' contents.
fn compare(c: &Case, m: &Model) {
    let mut inode_of: BTreeMap<u32, u64> = BTreeMap::new();
    for d in 0..2 {
        let listed = list(&p(&c.dir(d)));
        let want: Vec<&String> = m.dirs[d].keys().collect();
        assert_eq!(listed.iter().collect::<Vec<_>>(), want, "listing of d{d}");
        let subdirs = m.dirs[d]
            .values()
            .filter(|n| matches!(n, Node::Dir { .. }))
            .count();
        let st = stat(&p(&c.dir(d))).expect("stat dir");
        assert_eq!(st.st_nlink as usize, 2 + subdirs, "nlink of d{d}");
        for (n, node) in &m.dirs[d] {
            let st = stat(&c.path(d, n)).unwrap_or_else(|e| panic!("stat d{d}/{n}: {e}"));
            match *node {
                Node::File(id) => {
                    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFREG, "d{d}/{n}");
                    assert_eq!(st.st_nlink as usize, m.links(id), "nlink of d{d}/{n}");
                    let ino = *inode_of.entry(id).or_insert(st.st_ino);
                    assert_eq!(st.st_ino, ino, "d{d}/{n}: links share the inode");
                }
                Node::Dir { full } => {
                    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFDIR, "d{d}/{n}");
                    assert_eq!(st.st_nlink, 2, "nlink of d{d}/{n}");
                    let inside = list(&c.path(d, n));
                    let want: Vec<String> = if full { vec!["x".into()] } else { vec![] };
                    assert_eq!(inside, want, "d{d}/{n}");
                }
            }
        }
    }
}

/// Remove everything (the case's directories may be distributed: the
/// three-phase rmdir must find every shard).
fn clean(c: &Case, m: &Model) {
    for d in 0..2 {
        for (n, node) in &m.dirs[d] {
            let path = c.path(d, n);
            match node {
                Node::File(_) => assert_eq!(sc(libc::SYS_unlink, &[ptr(&path)]), 0),
                Node::Dir { full } => {
                    if *full {
                        let x = c.path(d, &format!("{n}/x"));
                        assert_eq!(sc(libc::SYS_unlink, &[ptr(&x)]), 0);
                    }
                    assert_eq!(sc(libc::SYS_rmdir, &[ptr(&path)]), 0);
                }
            }
        }
        assert_eq!(sc(libc::SYS_rmdir, &[ptr(&p(&c.dir(d)))]), 0, "rmdir d{d}");
    }
    assert_eq!(sc(libc::SYS_rmdir, &[ptr(&p(&c.base))]), 0);
}

static CASES: AtomicU32 = AtomicU32::new(0);

/// One case: fresh directories, the operations, a comparison after each.
fn case(ops: &[Op]) {
    let c = Case {
        base: format!("adapt{}", CASES.fetch_add(1, Ordering::Relaxed)),
    };
    assert_eq!(mkdir(&p(&c.base), 0o755), 0);
    for d in 0..2 {
        assert_eq!(mkdir(&p(&c.dir(d)), 0o755), 0);
    }
    let mut m = Model::default();
    for op in ops {
        step(&c, &mut m, op);
        compare(&c, &m);
    }
    clean(&c, &m);
}

fn main() {
    // A server host started by the instance below (`hosts`).
    if std::env::args().nth(1).as_deref() == Some(atoll_server::process::SUBCOMMAND) {
        std::process::exit(atoll_server::process::child_main());
    }
    let name = "random_operations_across_random_swaps_and_scalings_match_the_model";
    if std::env::args().any(|a| a == "--list") {
        println!("{name}: test");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    env_configured(SERVERS, |config| {
        config.server_exe = Some(exe);
        config.hosts = 1;
    });
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(128);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        // Outside the harness proptest knows no source file to keep
        // failing cases beside; a failure prints its case.
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    match runner.run(&prop::collection::vec(op(), 1..80), |ops| {
        case(&ops);
        Ok(())
    }) {
        Ok(()) => {
            let moves: u32 = env().instance.health().iter().map(|h| h.moves).sum();
            // The property saw servers move (a scaling op per ~13 ops).
            assert!(cases < 8 || moves > 0, "no server ever moved");
            println!("test {name} ... ok ({cases} cases, {moves} moves)");
        }
        Err(e) => {
            println!("test {name} ... FAILED");
            panic!("{e}");
        }
    }
}
