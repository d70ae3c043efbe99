//! File-system round trips through `dispatch` against an in-process
//! instance. Each test works in its own directory (tests run in parallel,
//! which also exercises concurrent lanes).

mod common;
use common::*;

use std::ffi::CString;

fn dir(name: &str) -> String {
    let _ = env();
    assert_eq!(mkdir(&p(name), 0o755), 0, "mkdir {name}");
    name.to_string()
}

#[test]
fn create_write_read_back_and_stat() {
    let d = dir("rw");
    let f = p(&format!("{d}/file"));
    let fd = open(&f, libc::O_CREAT | libc::O_RDWR | libc::O_EXCL, 0o640);
    assert!(fd >= 0, "{fd}");
    assert!(atoll_client::is_atoll_fd(fd as i32));
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(write(fd, &data), data.len() as i64);
    assert_eq!(
        sc(libc::SYS_lseek, &[fd as u64, 0, libc::SEEK_SET as u64]),
        0
    );
    let mut back = vec![0u8; 12_000];
    assert_eq!(read(fd, &mut back), data.len() as i64);
    assert_eq!(&back[..data.len()], &data[..]);
    assert_eq!(read(fd, &mut back), 0, "EOF");
    // pread at an offset in the middle of a block.
    let mut mid = [0u8; 100];
    assert_eq!(
        sc(
            libc::SYS_pread64,
            &[fd as u64, mid.as_mut_ptr() as u64, 100, 5000]
        ),
        100
    );
    assert_eq!(&mid[..], &data[5000..5100]);
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(
        sc(libc::SYS_fstat, &[fd as u64, &mut st as *mut _ as u64]),
        0
    );
    assert_eq!(st.st_size, 10_000);
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFREG);
    assert_eq!(st.st_dev, atoll_client::ATOLL_DEV);
    assert_eq!(st.st_blksize, 4096);
    assert!(st.st_blocks >= 16, "blocks {}", st.st_blocks);
    // A copy far above the numbers other tests (running in parallel in
    // this process) can be given, so the check after closing it cannot
    // meet someone else's new descriptor.
    let high = sc(libc::SYS_fcntl, &[fd as u64, libc::F_DUPFD as u64, 900]);
    assert!(high >= 900, "{high}");
    assert!(atoll_client::is_atoll_fd(high as i32));
    assert_eq!(close(fd), 0);
    let st2 = stat(&f).unwrap();
    assert_eq!(st2.st_ino, st.st_ino);
    assert_eq!(st2.st_nlink, 1);
    // statx agrees.
    // SAFETY: all-zero is a valid `struct statx`.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    assert_eq!(
        sc(
            libc::SYS_statx,
            &[
                libc::AT_FDCWD as u64,
                ptr(&f),
                0,
                libc::STATX_BASIC_STATS as u64,
                &mut sx as *mut _ as u64
            ]
        ),
        0
    );
    assert_eq!(sx.stx_size, 10_000);
    assert_eq!(sx.stx_ino, st.st_ino);
    assert_eq!(get(&f), data);
    // Closed fds are not atoll's any more: Linux answers.
    assert_eq!(close(high), 0);
    assert!(!atoll_client::is_atoll_fd(high as i32));
    assert_eq!(
        host(libc::SYS_read, &[high as u64, back.as_mut_ptr() as u64, 1]),
        atoll_client::Dispatch::Host
    );
}

#[test]
fn append_and_writev_and_readv() {
    let d = dir("vec");
    let f = p(&format!("{d}/log"));
    put(&f, b"head;");
    let fd = open(&f, libc::O_WRONLY | libc::O_APPEND, 0);
    let (a, b) = (b"one;".to_vec(), b"two;".to_vec());
    let iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut _,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut _,
            iov_len: b.len(),
        },
    ];
    assert_eq!(
        sc(libc::SYS_writev, &[fd as u64, iov.as_ptr() as u64, 2]),
        8
    );
    close(fd);
    assert_eq!(get(&f), b"head;one;two;");
    let fd = open(&f, libc::O_RDONLY, 0);
    let mut x = [0u8; 5];
    let mut y = [0u8; 20];
    let iov = [
        libc::iovec {
            iov_base: x.as_mut_ptr() as *mut _,
            iov_len: 5,
        },
        libc::iovec {
            iov_base: y.as_mut_ptr() as *mut _,
            iov_len: 20,
        },
    ];
    assert_eq!(
        sc(libc::SYS_readv, &[fd as u64, iov.as_ptr() as u64, 2]),
        13
    );
    assert_eq!(&x, b"head;");
    assert_eq!(&y[..8], b"one;two;");
    close(fd);
}

#[test]
fn errno_cases() {
    let d = dir("errs");
    let f = p(&format!("{d}/f"));
    put(&f, b"x");
    assert_eq!(open(&p(&format!("{d}/missing")), libc::O_RDONLY, 0), ENOENT);
    assert_eq!(
        open(&f, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o600),
        EEXIST
    );
    assert_eq!(open(&p(&format!("{d}/f/x")), libc::O_RDONLY, 0), ENOTDIR);
    assert_eq!(stat(&p(&format!("{d}/f/"))).unwrap_err(), ENOTDIR);
    assert_eq!(open(&p(&d), libc::O_WRONLY, 0), EISDIR);
    assert_eq!(mkdir(&p(&d), 0o755), EEXIST);
    assert_eq!(sc(libc::SYS_rmdir, &[ptr(&p(&d))]), ENOTEMPTY);
    assert_eq!(sc(libc::SYS_rmdir, &[ptr(&f)]), ENOTDIR);
    assert_eq!(sc(libc::SYS_unlink, &[ptr(&p(&d))]), EISDIR);
    let long = "n".repeat(300);
    assert_eq!(
        open(
            &p(&format!("{d}/{long}")),
            libc::O_CREAT | libc::O_WRONLY,
            0o600
        ),
        ENAMETOOLONG
    );
    // A symlink loop.
    let a = p(&format!("{d}/la"));
    let b = p(&format!("{d}/lb"));
    assert_eq!(sc(libc::SYS_symlink, &[ptr(&b), ptr(&a)]), 0);
    assert_eq!(sc(libc::SYS_symlink, &[ptr(&a), ptr(&b)]), 0);
    assert_eq!(open(&a, libc::O_RDONLY, 0), ELOOP);
    assert_eq!(stat(&a).unwrap_err(), ELOOP);
    assert!(lstat(&a).is_ok());
    // Bad fds.
    let mut buf = [0u8; 4];
    assert_eq!(
        host(libc::SYS_read, &[9999, buf.as_mut_ptr() as u64, 4]),
        atoll_client::Dispatch::Host
    );
    // O_NOFOLLOW on a symlink.
    assert_eq!(open(&a, libc::O_RDONLY | libc::O_NOFOLLOW, 0), ELOOP);
}

#[test]
fn directories_list_and_remove() {
    let d = dir("dirs");
    for i in 0..40 {
        put(&p(&format!("{d}/file{i:02}")), format!("{i}").as_bytes());
    }
    assert_eq!(mkdir(&p(&format!("{d}/sub")), 0o700), 0);
    let names = list(&p(&d));
    assert_eq!(names.len(), 41);
    assert!(names.contains(&"sub".to_string()));
    assert!(names.contains(&"file39".to_string()));
    let st = stat(&p(&format!("{d}/sub"))).unwrap();
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFDIR);
    // dnotify: the client puts the kernel file the registration is made
    // on behind a directory's descriptor (a shadow the servers play the
    // directory's changes on), then the kernel answers: 0 on a directory,
    // `ENOTDIR` on a file, as Linux.
    const DN_CREATE: u64 = 0x4; // <linux/fcntl.h>; not in the libc crate
    const DN_MULTISHOT: u64 = 0x8000_0000;
    let notify = DN_CREATE | DN_MULTISHOT;
    let kernel = |fd: i64| {
        let a = [fd as u64, libc::F_NOTIFY as u64, notify];
        assert!(matches!(
            host(libc::SYS_fcntl, &a),
            atoll_client::Dispatch::Host
        ));
        // SAFETY: fcntl with integer arguments.
        let r = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_NOTIFY, notify) };
        if r < 0 {
            -(std::io::Error::last_os_error().raw_os_error().unwrap() as i64)
        } else {
            r
        }
    };
    let dfd = open(&p(&d), libc::O_RDONLY | libc::O_DIRECTORY, 0);
    assert_eq!(kernel(dfd), 0);
    close(dfd);
    let ffd = open(&p(&format!("{d}/file00")), libc::O_RDONLY, 0);
    assert_eq!(kernel(ffd), -libc::ENOTDIR as i64);
    close(ffd);
    assert_eq!(st.st_mode & 0o777, 0o700 & !current_umask());
    for i in 0..40 {
        assert_eq!(
            sc(libc::SYS_unlink, &[ptr(&p(&format!("{d}/file{i:02}")))]),
            0
        );
    }
    assert_eq!(list(&p(&d)), vec!["sub".to_string()]);
    assert_eq!(sc(libc::SYS_rmdir, &[ptr(&p(&format!("{d}/sub")))]), 0);
    assert!(list(&p(&d)).is_empty());
    assert_eq!(stat(&p(&format!("{d}/sub"))).unwrap_err(), ENOENT);
}

fn current_umask() -> u32 {
    // SAFETY: umask only swaps the process mask; restored at once.
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    }
}

#[test]
fn rename_cases() {
    let d = dir("ren");
    let a = p(&format!("{d}/a"));
    let b = p(&format!("{d}/b"));
    put(&a, b"AAA");
    assert_eq!(sc(libc::SYS_rename, &[ptr(&a), ptr(&b)]), 0);
    assert_eq!(stat(&a).unwrap_err(), ENOENT);
    assert_eq!(get(&b), b"AAA");
    // Over an existing file, atomically replacing it.
    put(&a, b"new");
    assert_eq!(sc(libc::SYS_rename, &[ptr(&a), ptr(&b)]), 0);
    assert_eq!(get(&b), b"new");
    // Into another directory, and a directory into a sibling.
    assert_eq!(mkdir(&p(&format!("{d}/x")), 0o755), 0);
    assert_eq!(mkdir(&p(&format!("{d}/x/y")), 0o755), 0);
    let moved = p(&format!("{d}/x/b"));
    assert_eq!(sc(libc::SYS_rename, &[ptr(&b), ptr(&moved)]), 0);
    assert_eq!(get(&moved), b"new");
    // A directory into its own subtree.
    assert_eq!(
        sc(
            libc::SYS_rename,
            &[ptr(&p(&format!("{d}/x"))), ptr(&p(&format!("{d}/x/y/z")))]
        ),
        EINVAL
    );
    // RENAME_NOREPLACE.
    put(&a, b"1");
    assert_eq!(
        sc(
            libc::SYS_renameat2,
            &[
                libc::AT_FDCWD as u64,
                ptr(&a),
                libc::AT_FDCWD as u64,
                ptr(&moved),
                libc::RENAME_NOREPLACE as u64
            ]
        ),
        EEXIST
    );
    // RENAME_EXCHANGE.
    assert_eq!(
        sc(
            libc::SYS_renameat2,
            &[
                libc::AT_FDCWD as u64,
                ptr(&a),
                libc::AT_FDCWD as u64,
                ptr(&moved),
                libc::RENAME_EXCHANGE as u64
            ]
        ),
        0
    );
    assert_eq!(get(&a), b"new");
    assert_eq!(get(&moved), b"1");
    // Directory over a non-empty directory.
    assert_eq!(mkdir(&p(&format!("{d}/e")), 0o755), 0);
    assert_eq!(
        sc(
            libc::SYS_rename,
            &[ptr(&p(&format!("{d}/e"))), ptr(&p(&format!("{d}/x")))]
        ),
        ENOTEMPTY
    );
    // `..` of a moved directory follows it.
    assert_eq!(
        sc(
            libc::SYS_rename,
            &[ptr(&p(&format!("{d}/x/y"))), ptr(&p(&format!("{d}/e/y")))]
        ),
        0
    );
    let up = stat(&p(&format!("{d}/e/y/.."))).unwrap();
    assert_eq!(up.st_ino, stat(&p(&format!("{d}/e"))).unwrap().st_ino);
}

#[test]
fn symlinks_and_readlink() {
    let d = dir("sym");
    let target = p(&format!("{d}/t"));
    put(&target, b"via link");
    let l = p(&format!("{d}/l"));
    let rel = CString::new("t").unwrap();
    assert_eq!(sc(libc::SYS_symlink, &[ptr(&rel), ptr(&l)]), 0);
    assert_eq!(get(&l), b"via link");
    let mut buf = [0u8; 64];
    assert_eq!(
        sc(libc::SYS_readlink, &[ptr(&l), buf.as_mut_ptr() as u64, 64]),
        1
    );
    assert_eq!(&buf[..1], b"t");
    assert_eq!(
        sc(
            libc::SYS_readlink,
            &[ptr(&target), buf.as_mut_ptr() as u64, 64]
        ),
        EINVAL
    );
    assert_eq!(lstat(&l).unwrap().st_mode & libc::S_IFMT, libc::S_IFLNK);
    // Absolute symlink to a directory, used in the middle of a path.
    let dl = p(&format!("{d}/dl"));
    let abs = p(&d);
    assert_eq!(sc(libc::SYS_symlink, &[ptr(&abs), ptr(&dl)]), 0);
    assert_eq!(get(&p(&format!("{d}/dl/t"))), b"via link");
    // A symlink to a host path leads to the host.
    let hl = p(&format!("{d}/hostlink"));
    let etc = CString::new("/etc").unwrap();
    assert_eq!(sc(libc::SYS_symlink, &[ptr(&etc), ptr(&hl)]), 0);
    let hosts = p(&format!("{d}/hostlink/hostname"));
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = sc(libc::SYS_stat, &[ptr(&hosts), &mut st as *mut _ as u64]);
    let host_r = unsafe { libc::stat(c"/etc/hostname".as_ptr(), &mut st) };
    assert_eq!(r == 0, host_r == 0, "resolved on the host");
    // Hard link shares the inode.
    let h = p(&format!("{d}/hard"));
    assert_eq!(sc(libc::SYS_link, &[ptr(&target), ptr(&h)]), 0);
    assert_eq!(stat(&h).unwrap().st_ino, stat(&target).unwrap().st_ino);
    assert_eq!(stat(&target).unwrap().st_nlink, 2);
    assert_eq!(sc(libc::SYS_unlink, &[ptr(&target)]), 0);
    assert_eq!(get(&h), b"via link");
    assert_eq!(stat(&h).unwrap().st_nlink, 1);
}

#[test]
fn chmod_chown_truncate_utimes() {
    let d = dir("attrs");
    let f = p(&format!("{d}/f"));
    put(&f, b"0123456789");
    assert_eq!(sc(libc::SYS_chmod, &[ptr(&f), 0o600]), 0);
    assert_eq!(stat(&f).unwrap().st_mode & 0o7777, 0o600);
    let fd = open(&f, libc::O_RDWR, 0);
    assert_eq!(sc(libc::SYS_fchmod, &[fd as u64, 0o640]), 0);
    assert_eq!(stat(&f).unwrap().st_mode & 0o7777, 0o640);
    // chown to ourselves is allowed.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!(sc(libc::SYS_chown, &[ptr(&f), uid as u64, gid as u64]), 0);
    assert_eq!(sc(libc::SYS_ftruncate, &[fd as u64, 4]), 0);
    assert_eq!(get(&f), b"0123");
    assert_eq!(sc(libc::SYS_ftruncate, &[fd as u64, 8192]), 0);
    let back = get(&f);
    assert_eq!(back.len(), 8192);
    assert!(back[4..].iter().all(|&b| b == 0), "extension reads zeros");
    assert_eq!(sc(libc::SYS_truncate, &[ptr(&f), 2]), 0);
    assert_eq!(get(&f), b"01");
    let times = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 7,
        },
    ];
    assert_eq!(
        sc(
            libc::SYS_utimensat,
            &[libc::AT_FDCWD as u64, ptr(&f), times.as_ptr() as u64, 0]
        ),
        0
    );
    let st = stat(&f).unwrap();
    assert_eq!((st.st_atime, st.st_atime_nsec), (1_000_000, 5));
    assert_eq!((st.st_mtime, st.st_mtime_nsec), (2_000_000, 7));
    // A read-only fd cannot ftruncate.
    let ro = open(&f, libc::O_RDONLY, 0);
    assert_eq!(sc(libc::SYS_ftruncate, &[ro as u64, 0]), EINVAL);
    close(ro);
    close(fd);
    // access()
    assert_eq!(sc(libc::SYS_access, &[ptr(&f), libc::R_OK as u64]), 0);
    assert_eq!(
        sc(
            libc::SYS_access,
            &[ptr(&p(&format!("{d}/none"))), libc::F_OK as u64]
        ),
        ENOENT
    );
}

#[test]
fn xattrs_round_trip() {
    let d = dir("xattr");
    let f = p(&format!("{d}/f"));
    put(&f, b"");
    let name = CString::new("user.colour").unwrap();
    let val = b"blue";
    assert_eq!(
        sc(
            libc::SYS_setxattr,
            &[ptr(&f), ptr(&name), val.as_ptr() as u64, 4, 0]
        ),
        0
    );
    let mut buf = [0u8; 16];
    assert_eq!(
        sc(libc::SYS_getxattr, &[ptr(&f), ptr(&name), 0, 0]),
        4,
        "size query"
    );
    assert_eq!(
        sc(
            libc::SYS_getxattr,
            &[ptr(&f), ptr(&name), buf.as_mut_ptr() as u64, 16]
        ),
        4
    );
    assert_eq!(&buf[..4], b"blue");
    assert_eq!(
        sc(
            libc::SYS_getxattr,
            &[ptr(&f), ptr(&name), buf.as_mut_ptr() as u64, 2]
        ),
        -(libc::ERANGE as i64)
    );
    let mut names = [0u8; 64];
    let n = sc(
        libc::SYS_listxattr,
        &[ptr(&f), names.as_mut_ptr() as u64, 64],
    );
    assert_eq!(&names[..n as usize], b"user.colour\0");
    assert_eq!(
        sc(
            libc::SYS_setxattr,
            &[
                ptr(&f),
                ptr(&name),
                val.as_ptr() as u64,
                4,
                libc::XATTR_CREATE as u64
            ]
        ),
        EEXIST
    );
    let fd = open(&f, libc::O_RDONLY, 0);
    assert_eq!(
        sc(
            libc::SYS_fgetxattr,
            &[fd as u64, ptr(&name), buf.as_mut_ptr() as u64, 16]
        ),
        4
    );
    close(fd);
    assert_eq!(sc(libc::SYS_removexattr, &[ptr(&f), ptr(&name)]), 0);
    assert_eq!(
        sc(
            libc::SYS_getxattr,
            &[ptr(&f), ptr(&name), buf.as_mut_ptr() as u64, 16]
        ),
        -(libc::ENODATA as i64)
    );
}

#[test]
fn mmap_shared_and_private() {
    let d = dir("mmap");
    let f = p(&format!("{d}/m"));
    put(&f, &vec![b'a'; 10_000]);
    let fd = open(&f, libc::O_RDWR, 0);
    let len = 10_000u64;
    let addr = sc(
        libc::SYS_mmap,
        &[
            0,
            len,
            (libc::PROT_READ | libc::PROT_WRITE) as u64,
            libc::MAP_SHARED as u64,
            fd as u64,
            0,
        ],
    );
    assert!(addr > 0, "mmap: {addr}");
    // SAFETY: the mapping is `len` bytes long and ours.
    let m = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len as usize) };
    assert!(m.iter().all(|&b| b == b'a'));
    m[4095] = b'X';
    m[4096] = b'Y';
    // Stores through the shared mapping are the file's data.
    let back = get(&f);
    assert_eq!(&back[4095..4097], b"XY");
    // A private mapping sees the data but its stores stay private.
    let pa = sc(
        libc::SYS_mmap,
        &[
            0,
            len,
            (libc::PROT_READ | libc::PROT_WRITE) as u64,
            libc::MAP_PRIVATE as u64,
            fd as u64,
            4096,
        ],
    );
    assert!(pa > 0);
    // SAFETY: the private mapping is `len` bytes long and ours.
    let pm = unsafe { std::slice::from_raw_parts_mut(pa as *mut u8, 4096) };
    assert_eq!(pm[0], b'Y');
    pm[0] = b'Z';
    assert_eq!(get(&f)[4096], b'Y');
    // SAFETY: unmapping our own mappings.
    unsafe {
        libc::munmap(addr as *mut _, len as usize);
        libc::munmap(pa as *mut _, len as usize);
    }
    close(fd);
}

#[test]
fn dup_shares_the_offset_and_close_keeps_the_other() {
    let d = dir("dup");
    let f = p(&format!("{d}/f"));
    put(&f, b"abcdef");
    let fd = open(&f, libc::O_RDONLY, 0);
    let fd2 = sc(libc::SYS_dup, &[fd as u64]);
    assert!(fd2 >= 0 && fd2 != fd);
    let mut b = [0u8; 2];
    assert_eq!(read(fd, &mut b), 2);
    assert_eq!(close(fd), 0);
    assert_eq!(read(fd2, &mut b), 2);
    assert_eq!(&b, b"cd", "shared offset");
    // dup2 onto a chosen number, then fcntl flags.
    let fd3 = sc(libc::SYS_dup2, &[fd2 as u64, 777]);
    assert_eq!(fd3, 777);
    assert_eq!(read(777, &mut b), 2);
    assert_eq!(&b, b"ef");
    let fl = sc(libc::SYS_fcntl, &[777, libc::F_GETFL as u64, 0]);
    assert_eq!(fl as i32 & libc::O_ACCMODE, libc::O_RDONLY);
    close(777);
    close(fd2);
    // Closed: no longer atoll's, Linux answers (EBADF). Checked on 777,
    // which no test running in parallel can be given meanwhile.
    assert_eq!(host(libc::SYS_close, &[777]), atoll_client::Dispatch::Host);
}

#[test]
fn distributed_directory_spreads_lists_and_removes_in_three_phases() {
    let _ = env();
    let _ = mkdir(&p("dist"), 0o755);
    let d = "dist/spread";
    assert_eq!(mkdir(&p(d), 0o755), 0);
    for i in 0..60 {
        put(&p(&format!("{d}/f{i}")), b"x");
    }
    let names = list(&p(d));
    assert_eq!(names.len(), 60, "every entry from every server");
    assert_eq!(sc(libc::SYS_rmdir, &[ptr(&p(d))]), ENOTEMPTY);
    // The failed rmdir aborted: creation still works.
    put(&p(&format!("{d}/late")), b"y");
    for i in 0..60 {
        assert_eq!(sc(libc::SYS_unlink, &[ptr(&p(&format!("{d}/f{i}")))]), 0);
    }
    assert_eq!(sc(libc::SYS_unlink, &[ptr(&p(&format!("{d}/late")))]), 0);
    assert!(list(&p(d)).is_empty());
    assert_eq!(sc(libc::SYS_rmdir, &[ptr(&p(d))]), 0);
    assert_eq!(stat(&p(d)).unwrap_err(), ENOENT);
}

#[test]
fn rename_across_servers_in_a_distributed_directory() {
    let _ = env();
    let _ = mkdir(&p("dist"), 0o755);
    let d = "dist/moves";
    assert_eq!(mkdir(&p(d), 0o755), 0);
    // With two servers some pairs of names land on different servers.
    for i in 0..20 {
        let a = p(&format!("{d}/src{i}"));
        let b = p(&format!("{d}/dst{i}"));
        put(&a, format!("v{i}").as_bytes());
        put(&b, b"old");
        assert_eq!(sc(libc::SYS_rename, &[ptr(&a), ptr(&b)]), 0);
        assert_eq!(get(&b), format!("v{i}").as_bytes());
        assert_eq!(stat(&a).unwrap_err(), ENOENT);
        assert_eq!(stat(&b).unwrap().st_nlink, 1);
    }
    // A directory moved across servers keeps its content.
    assert_eq!(mkdir(&p(&format!("{d}/sub0")), 0o755), 0);
    put(&p(&format!("{d}/sub0/inside")), b"in");
    let mut at = 0;
    for i in 0..10 {
        let from = p(&format!("{d}/sub{at}"));
        let to = p(&format!("{d}/sub{}", i + 1));
        let r = sc(libc::SYS_rename, &[ptr(&from), ptr(&to)]);
        // EXDEV (mv then copies) while the owner server refuses to count a
        // second name of a directory; the tree must be intact either way.
        assert!(r == 0 || r == -(libc::EXDEV as i64), "rename dir: {r}");
        if r == 0 {
            at = i + 1;
        }
        assert_eq!(get(&p(&format!("{d}/sub{at}/inside"))), b"in");
    }
}

#[test]
fn statfs_reports_the_cache() {
    let _ = env();
    // SAFETY: all-zero is a valid `struct statfs`.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        sc(libc::SYS_statfs, &[ptr(&p("")), &mut st as *mut _ as u64]),
        0
    );
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_blocks * 4096, 64 << 20);
    assert_eq!(st.f_namelen, 255);
}

#[test]
fn paths_outside_the_mount_are_linux_business() {
    let _ = env();
    let etc = CString::new("/etc/passwd").unwrap();
    assert!(!atoll_client::may_concern(
        libc::SYS_open,
        &[ptr(&etc), 0, 0, 0, 0, 0]
    ));
    assert_eq!(
        host(libc::SYS_open, &[ptr(&etc), 0, 0]),
        atoll_client::Dispatch::Host
    );
    let m = p("x");
    assert!(atoll_client::may_concern(
        libc::SYS_open,
        &[ptr(&m), 0, 0, 0, 0, 0]
    ));
    assert!(!atoll_client::may_concern(libc::SYS_brk, &[0; 6]));
    assert!(!atoll_client::may_concern(
        libc::SYS_mmap,
        &[
            0,
            4096,
            3,
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
            u64::MAX,
            0
        ]
    ));
    // `..` at the mount root leaves atoll: the rest is a host path.
    let up = p("../etc/passwd");
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = sc(libc::SYS_stat, &[ptr(&up), &mut st as *mut _ as u64]);
    assert_eq!(r, 0);
    assert_ne!(st.st_dev, atoll_client::ATOLL_DEV);
}

#[test]
fn many_threads_take_their_own_lanes() {
    let d = dir("threads");
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let f = p(&format!("{d}/t{t}-{i}"));
                    let data = format!("thread {t} file {i}").repeat(50);
                    put(&f, data.as_bytes());
                    assert_eq!(get(&f), data.as_bytes());
                    assert_eq!(sc(libc::SYS_unlink, &[ptr(&f)]), 0);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(list(&p(&d)).is_empty());
}
