//! Wrappers of the calls that make, replace and mask processes and
//! threads: `execve` and friends, `fork`, `pthread_create`, the signal
//! masks, `posix_spawn`. Same rules as the parent module's.

use super::*;

// ---------------------------------------------------------------------------
// exec

extern "C" {
    static environ: *const *const c_char;
}

type ExecveFn = unsafe extern "C-unwind" fn(Path, *const Path, *const Path) -> c_int;

/// # Safety
/// As `execve(2)`.
unsafe fn exec_common(
    real: &Real,
    nr: i64,
    args: [u64; 6],
    host: impl Fn(usize) -> c_int,
) -> c_int {
    let Some(_guard) = enter() else {
        return match real.get() {
            Some(p) => host(p),
            None => c_int::from_raw(raw::syscall6(nr, args)),
        };
    };
    // The new image starts with fresh counters: report ours first.
    stats::flush();
    match client::dispatch(nr, &args) {
        Dispatch::Done(v) => c_int::from_raw(v),
        Dispatch::Host => match real.get() {
            Some(p) => host(p),
            None => c_int::from_raw(raw::syscall6(nr, args)),
        },
    }
}

/// # Safety
/// As `execve(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn execve(path: Path, argv: *const Path, envp: *const Path) -> c_int {
    static REAL: Real = Real::new("execve\0");
    let args = args6(&[path as u64, argv as u64, envp as u64]);
    // SAFETY: libc's execve, with the caller's arguments.
    unsafe {
        exec_common(&REAL, libc::SYS_execve, args, |p| {
            core::mem::transmute::<usize, ExecveFn>(p)(path, argv, envp)
        })
    }
}

/// # Safety
/// As `execv(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn execv(path: Path, argv: *const Path) -> c_int {
    static REAL: Real = Real::new("execv\0");
    // SAFETY: `environ` is libc's current environment.
    let envp = unsafe { environ };
    let args = args6(&[path as u64, argv as u64, envp as u64]);
    // SAFETY: libc's execv, with the caller's arguments.
    unsafe {
        exec_common(&REAL, libc::SYS_execve, args, |p| {
            core::mem::transmute::<usize, unsafe extern "C-unwind" fn(Path, *const Path) -> c_int>(
                p,
            )(path, argv)
        })
    }
}

/// # Safety
/// As `fexecve(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn fexecve(fd: c_int, argv: *const Path, envp: *const Path) -> c_int {
    static REAL: Real = Real::new("fexecve\0");
    let args = args6(&[
        fd as u64,
        c"".as_ptr() as u64,
        argv as u64,
        envp as u64,
        libc::AT_EMPTY_PATH as u64,
    ]);
    // SAFETY: libc's fexecve, with the caller's arguments.
    unsafe {
        exec_common(&REAL, libc::SYS_execveat, args, |p| {
            core::mem::transmute::<
                usize,
                unsafe extern "C-unwind" fn(c_int, *const Path, *const Path) -> c_int,
            >(p)(fd, argv, envp)
        })
    }
}

// ---------------------------------------------------------------------------
// processes and threads

/// `fork`: the client prepares the child's session *before* glibc's fork
/// takes its internal locks (malloc's among them), which the trap path
/// cannot do; the real fork then runs with the selector at ALLOW.
///
/// # Safety
/// As `fork(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn fork() -> libc::pid_t {
    static REAL: Real = Real::new("fork\0");
    let host = || match REAL.get() {
        // SAFETY: libc's fork.
        Some(p) => unsafe {
            core::mem::transmute::<usize, unsafe extern "C-unwind" fn() -> libc::pid_t>(p)()
        },
        None => c_int::from_raw(raw::syscall(libc::SYS_fork, &[])),
    };
    let Some(guard) = enter() else { return host() };
    // Sites remembered since this process started, rewritten now so that
    // the child inherits them (`rewrite::eager::before_fork`); on atoll's
    // stack, as the client's work (a few pages of buffers).
    crate::stack::run(crate::rewrite::before_fork);
    let prep = match client::fork_prepare() {
        Ok(p) => p,
        Err(e) => {
            raw::set_errno(e);
            return -1;
        }
    };
    let pid = host();
    let err = raw::errno();
    if pid == 0 {
        sigdefer::forget_pending();
        stats::reset();
        client::fork_child(prep);
        // SUD is not inherited by fork children.
        selector::enable_sud();
    } else {
        client::fork_parent(prep, if pid < 0 { -(err as i64) } else { pid as i64 });
    }
    raw::set_errno(err);
    drop(guard);
    pid
}

/// `forkpty`, as glibc builds it (`openpty`, fork, `login_tty` in the
/// child), but forking through [`fork`] above: glibc's own calls its
/// internal `__fork`, whose `clone` reaches atoll only as a trap, with
/// malloc's locks held when the process has threads (a trap that then
/// prepares the child's session would wait for them forever: Python's
/// `pty.fork()` beside a watchdog thread).
///
/// # Safety
/// As `forkpty(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn forkpty(
    amaster: *mut c_int,
    name: *mut libc::c_char,
    termp: *const libc::termios,
    winp: *const libc::winsize,
) -> libc::pid_t {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: libc's openpty with the caller's `name`, `termp`, `winp`
    // and our own two descriptor slots.
    if unsafe { libc::openpty(&mut master, &mut slave, name, termp, winp) } == -1 {
        return -1;
    }
    // SAFETY: our fork wrapper; the descriptors are the pty's own.
    match unsafe { fork() } {
        -1 => {
            let err = raw::errno();
            // SAFETY: closing the pty we opened.
            unsafe {
                libc::close(master);
                libc::close(slave);
            }
            raw::set_errno(err);
            -1
        }
        0 => {
            // SAFETY: the child's copies of the pty's descriptors.
            unsafe {
                libc::close(master);
                if libc::login_tty(slave) != 0 {
                    libc::_exit(1);
                }
            }
            0
        }
        pid => {
            // SAFETY: `amaster` is the caller's, as forkpty(3) says.
            unsafe {
                *amaster = master;
                libc::close(slave);
            }
            pid
        }
    }
}

/// `daemon`, as glibc builds it, forking through [`fork`] above (glibc's
/// own forks with its internal `__fork`: see [`forkpty`]).
///
/// # Safety
/// As `daemon(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn daemon(nochdir: c_int, noclose: c_int) -> c_int {
    // SAFETY: our fork wrapper.
    match unsafe { fork() } {
        -1 => return -1,
        0 => {}
        // SAFETY: the parent leaves at once, as daemon(3) does.
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: plain calls of libc (ours where atoll wraps them), on paths
    // and descriptors of our own.
    unsafe {
        if libc::setsid() == -1 {
            return -1;
        }
        if nochdir == 0 {
            libc::chdir(c"/".as_ptr());
        }
        if noclose == 0 {
            let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if fd == -1 {
                return -1;
            }
            let mut st: libc::stat = core::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                libc::close(fd);
                return -1;
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != libc::makedev(1, 3) {
                libc::close(fd);
                raw::set_errno(libc::ENODEV);
                return -1;
            }
            for std_fd in 0..3 {
                libc::dup2(fd, std_fd);
            }
            if fd > 2 {
                libc::close(fd);
            }
        }
    }
    0
}

struct ThreadStart {
    start: extern "C-unwind" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
    /// The mask the thread starts the program's routine with: the
    /// creator's, as glibc would give it, or `None` when the attributes
    /// carry one (`pthread_attr_setsigmask_np`), which glibc has set.
    mask: Option<u64>,
}

/// glibc's cancellation signal, which glibc leaves unblocked in a new
/// thread whatever its creator blocks.
const SIGCANCEL: i32 = 32;

/// First code of a thread created through our `pthread_create`: arm SUD for
/// it (not inherited by new threads) and its alternate stack, then run the
/// program's routine. The alternate stack is armed here, not left to the
/// first trap's sigreturn: that trap may come on a stack too small for
/// its frame (a goroutine's, a `makecontext` one), now that `sigaltstack`
/// and the like, which a thread's start used to trap at, are rewritten.
///
/// The thread starts with every signal blocked (see `pthread_create`)
/// and gets the program's mask only here, once SUD is on: a program
/// handler run before that would have been program code whose trapped
/// calls went straight to Linux. The guard's drop delivers what came
/// meanwhile, with SUD on.
extern "C-unwind" fn thread_start(p: *mut c_void) -> *mut c_void {
    let ThreadStart { start, arg, .. } = {
        let _guard = AtollGuard::enter();
        // SAFETY: `p` is the Box leaked by `pthread_create` below, handed
        // to exactly this thread.
        let ts = *unsafe { Box::from_raw(p as *mut ThreadStart) };
        let r = crate::altstack::arm();
        if r != 0 {
            crate::sigsys::debug(&[b"arming the thread's alternate stack failed"], &[r]);
        }
        // A rewritten site's entry finds this thread's stack at the
        // offset the first thread found (`stack::ENTRY_TOP`).
        crate::stack::check_entry_offset();
        selector::enable_sud();
        if let Some(m) = ts.mask {
            sigdefer::set_thread_mask(m);
        }
        ts
    };
    start(arg)
}

/// Does `attr` carry a signal mask of its own (glibc 2.32's
/// `pthread_attr_getsigmask_np`; an older glibc has none to carry)?
fn attr_has_sigmask(attr: *const libc::pthread_attr_t) -> bool {
    type GetSigmaskFn =
        unsafe extern "C" fn(*const libc::pthread_attr_t, *mut libc::sigset_t) -> c_int;
    static GET: Real = Real::new("pthread_attr_getsigmask_np\0");
    if attr.is_null() {
        return false;
    }
    let Some(p) = GET.get() else {
        return false;
    };
    // SAFETY: glibc's `pthread_attr_getsigmask_np`, with the program's
    // attributes and a local set; it returns 0 when they carry a mask,
    // `PTHREAD_ATTR_NO_SIGMASK_NP` (-1) when not.
    unsafe {
        let get = core::mem::transmute::<usize, GetSigmaskFn>(p);
        let mut set: libc::sigset_t = core::mem::zeroed();
        get(attr, &mut set) == 0
    }
}

type PthreadCreateFn = unsafe extern "C-unwind" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C-unwind" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> c_int;

/// # Safety
/// As `pthread_create(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C-unwind" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    static REAL: Real = Real::new("pthread_create\0");
    let Some(p) = REAL.get() else {
        return libc::ENOSYS;
    };
    // SAFETY: libc's pthread_create.
    let real = unsafe { core::mem::transmute::<usize, PthreadCreateFn>(p) };
    if client::mode() == Mode::Off || selector::inside_atoll() {
        // SAFETY: the caller's arguments.
        return unsafe { real(thread, attr, start, arg) };
    }
    let _guard = AtollGuard::enter();
    // glibc starts the thread with the mask its creator has here (its
    // `start_thread` puts it back before the routine runs, SUD not yet on
    // there): every signal blocked, so that no program handler runs on
    // the thread before `thread_start` arms it; the creator's own mask
    // goes to the thread there (without glibc's SIGCANCEL, as glibc does).
    let own = !attr_has_sigmask(attr);
    let creator = own.then(sigdefer::block_all_but_sigsys);
    let mask = creator.map(|m| m & !crate::sigfix::bit(SIGCANCEL));
    let boxed = Box::into_raw(Box::new(ThreadStart { start, arg, mask }));
    // SAFETY: the caller's arguments, with our start routine in front.
    let r = unsafe { real(thread, attr, thread_start, boxed.cast()) };
    if let Some(m) = creator {
        // Signals that came meanwhile were deferred (atoll code runs):
        // the guard's drop delivers them.
        sigdefer::set_thread_mask(m);
    }
    if r != 0 {
        // SAFETY: the thread was not created; the Box is still ours.
        drop(unsafe { Box::from_raw(boxed) });
    }
    r
}

type SigmaskFn =
    unsafe extern "C-unwind" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// # Safety
/// As `sigprocmask(2)`; `pthread` selects `pthread_sigmask`'s error
/// convention (error number returned, errno untouched).
unsafe fn sigmask_common(
    real: &Real,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
    pthread: bool,
) -> c_int {
    let Some(p) = real.get() else {
        raw::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: libc's sigprocmask/pthread_sigmask.
    let f = unsafe { core::mem::transmute::<usize, SigmaskFn>(p) };
    if client::mode() == Mode::Off || set.is_null() || selector::inside_atoll() {
        // SAFETY: the caller's arguments.
        return unsafe { f(how, set, old) };
    }
    // The kernel reads the first 64 signals (`KSIGSET_SIZE`), the first
    // word of glibc's `sigset_t`.
    // SAFETY: `set` points to a sigset_t (caller's contract), which is at
    // least 8 bytes and aligned for a u64.
    let copy = crate::sigfix::program_mask(unsafe { *(set as *const u64) });
    // The system call itself, from our own text (never trapped), and
    // *without* holding an AtollGuard: signals this call unblocks are
    // delivered as it returns, and their handlers must run as program
    // code whose calls reach atoll (Python's wakeup-fd handler writes to
    // an atoll pipe). Nothing of the client is held here.
    let r = raw::syscall(
        libc::SYS_rt_sigprocmask,
        &[
            how as u64,
            &copy as *const u64 as u64,
            old as u64,
            KSIGSET_SIZE,
        ],
    );
    match (r < 0, pthread) {
        (false, _) => 0,
        (true, true) => (-r) as c_int,
        (true, false) => {
            raw::set_errno((-r) as c_int);
            -1
        }
    }
}

/// # Safety
/// As `sigprocmask(2)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    static REAL: Real = Real::new("sigprocmask\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { sigmask_common(&REAL, how, set, old, false) }
}

/// # Safety
/// As `pthread_sigmask(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    static REAL: Real = Real::new("pthread_sigmask\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { sigmask_common(&REAL, how, set, old, true) }
}

// ---------------------------------------------------------------------------
// posix_spawn

type SpawnFn = unsafe extern "C-unwind" fn(
    *mut libc::pid_t,
    Path,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const Path,
    *const Path,
) -> c_int;

/// Is `path` an executable file, asking atoll first? Runs under a guard.
fn executable(path: &core::ffi::CStr) -> bool {
    let args = args6(&[path.as_ptr() as u64, libc::X_OK as u64]);
    let r = match client::dispatch(libc::SYS_access, &args) {
        Dispatch::Done(v) => v,
        Dispatch::Host => raw::syscall6(libc::SYS_access, args),
    };
    r == 0
}

/// `posix_spawnp`'s search of `PATH` (default `/bin:/usr/bin`, as glibc),
/// done here because atoll directories in `PATH` are invisible to the
/// kernel. `None`: not found.
fn search_path(file: &[u8]) -> Option<std::ffi::CString> {
    // SAFETY: getenv has no preconditions; we only read the result.
    let path = unsafe { libc::getenv(c"PATH".as_ptr()) };
    let path: &[u8] = if path.is_null() {
        b"/bin:/usr/bin"
    } else {
        // SAFETY: getenv returns a NUL-terminated string.
        unsafe { core::ffi::CStr::from_ptr(path) }.to_bytes()
    };
    path.split(|&b| b == b':').find_map(|dir| {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let mut cand = dir.to_vec();
        cand.push(b'/');
        cand.extend_from_slice(file);
        let cand = std::ffi::CString::new(cand).ok()?;
        executable(&cand).then_some(cand)
    })
}

/// `posix_spawn(p)` without file actions for an atoll client: the client
/// prepares the exec in the parent (program image, environment, child
/// session), then the real
/// function runs with the selector at ALLOW, so its vfork-style clone and
/// the child's exec reach Linux directly — the child never runs atoll code
/// in memory it shares with us.
///
/// # Safety
/// As `posix_spawn(3)`.
#[allow(clippy::too_many_arguments)]
unsafe fn spawn_common(
    real: &Real,
    search: bool,
    pid: *mut libc::pid_t,
    file: Path,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const Path,
    envp: *const Path,
) -> c_int {
    let Some(p) = real.get() else {
        return libc::ENOSYS;
    };
    // SAFETY: libc's posix_spawn/posix_spawnp.
    let f = unsafe { core::mem::transmute::<usize, SpawnFn>(p) };
    // File actions (`dup2` of a pipe onto stdout, `open` of an atoll path,
    // …) run in the child before the exec; if they ran with the selector at
    // ALLOW they would act on bare placeholder descriptors the new program
    // cannot map back to atoll objects. Such spawns take the trapped path
    // instead, as `system()` and `popen()` do: the internal clone becomes a
    // fork with a child session, and the child's actions and exec are
    // emulated like any other system call.
    if client::mode() != Mode::Client
        || selector::inside_atoll()
        || file.is_null()
        || !actions.is_null()
    {
        // SAFETY: the caller's arguments.
        return unsafe { f(pid, file, actions, attr, argv, envp) };
    }
    let _guard = AtollGuard::enter();
    // A path the program cannot read fails as the child's execve would.
    let name = match client::user_path(file as u64) {
        // SAFETY: the kernel found `file` readable up to this NUL.
        Ok(p) => unsafe { core::ffi::CStr::from_ptr(p.as_ptr().cast()) },
        Err(e) => return e,
    };
    let resolved;
    let path: &core::ffi::CStr = if search && !name.to_bytes().contains(&b'/') {
        match search_path(name.to_bytes()) {
            Some(p) => {
                resolved = p;
                &resolved
            }
            None => return libc::ENOENT,
        }
    } else {
        name
    };
    let plan = match client::prepare_exec(path, argv, envp) {
        Ok(plan) => plan,
        Err(e) => return e,
    };
    // An atoll program was copied into a memfd the child inherits.
    let fd_path;
    let run: &core::ffi::CStr = match plan.exec_fd() {
        Some(fd) => {
            fd_path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default();
            &fd_path
        }
        None => plan.path(),
    };
    // fd 2 an atoll descriptor: the child's loader writes to a memfd the
    // child's client (or the instance, if the loader fails) copies there
    // (`exec/caught.rs`), put at the child's fd 2 by the one file action
    // (the caller gave none: `actions` is NULL here).
    let mut catch = CatchAction::new(plan.loader_stderr());
    let actions = catch.actions();
    // SAFETY: the plan owns `run`, argv and envp until it drops below;
    // `actions` is NULL or initialised and lives in `catch`.
    let r = unsafe { f(pid, run.as_ptr(), actions, attr, plan.argv(), plan.envp()) };
    if r == 0 {
        // SAFETY: posix_spawn stored the child's pid where `pid` points
        // (when it is not NULL).
        plan.started(if pid.is_null() { 0 } else { unsafe { *pid } });
    }
    drop(plan);
    r
}

/// The file action `dup2(memfd, 2)` of a spawn whose fd 2 is an atoll
/// descriptor, if there is one to make.
struct CatchAction {
    fa: Option<Box<libc::posix_spawn_file_actions_t>>,
}

impl CatchAction {
    fn new(fd: Option<i32>) -> CatchAction {
        let fa = fd.and_then(|fd| {
            // SAFETY: plain data, initialised by the call below.
            let mut fa: Box<libc::posix_spawn_file_actions_t> =
                Box::new(unsafe { core::mem::zeroed() });
            // SAFETY: `fa` is writable and lives as long as `self`.
            if unsafe { libc::posix_spawn_file_actions_init(&mut *fa) } != 0 {
                return None;
            }
            // SAFETY: `fa` was initialised above; `fd` is open (the plan
            // holds it) and 2 is a valid target.
            if unsafe { libc::posix_spawn_file_actions_adddup2(&mut *fa, fd, 2) } != 0 {
                // SAFETY: initialised above, destroyed once.
                unsafe { libc::posix_spawn_file_actions_destroy(&mut *fa) };
                return None;
            }
            Some(fa)
        });
        CatchAction { fa }
    }

    /// The actions to hand to `posix_spawn` (NULL: none).
    fn actions(&mut self) -> *const libc::posix_spawn_file_actions_t {
        self.fa
            .as_deref()
            .map_or(core::ptr::null(), |fa| fa as *const _)
    }
}

impl Drop for CatchAction {
    fn drop(&mut self) {
        if let Some(fa) = self.fa.as_deref_mut() {
            // SAFETY: initialised in `new`, destroyed once.
            unsafe { libc::posix_spawn_file_actions_destroy(fa) };
        }
    }
}

/// # Safety
/// As `posix_spawn(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: Path,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const Path,
    envp: *const Path,
) -> c_int {
    static REAL: Real = Real::new("posix_spawn\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { spawn_common(&REAL, false, pid, path, actions, attr, argv, envp) }
}

/// # Safety
/// As `posix_spawnp(3)`.
#[no_mangle]
pub unsafe extern "C-unwind" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: Path,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const Path,
    envp: *const Path,
) -> c_int {
    static REAL: Real = Real::new("posix_spawnp\0");
    // SAFETY: forwarding the caller's arguments.
    unsafe { spawn_common(&REAL, true, pid, file, actions, attr, argv, envp) }
}
