/* The frame a handler gets for a signal that arrives while atoll code
   runs a blocking read of an atoll pipe: through an inline `syscall`
   (trapped), RIP, RSP, RAX, callee-saved registers, mask, the sender's
   siginfo, the alternate stack, as Linux shows them on the return from
   that system call; through libc's read (a wrapper), the call's return
   point and the callee-saved registers; and what the handler writes into
   `uc_mcontext` (RAX, RIP) is what the program resumes with. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* The probes' callee-saved registers: saved, then magic values the
   handler looks for; and restored. */
asm(".macro magic_callee_saved\n"
    "  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
    "  movabs $0x1111111111111111, %rbx\n"
    "  movabs $0x2222222222222222, %rbp\n"
    "  movabs $0x3333333333333333, %r12\n"
    "  movabs $0x4444444444444444, %r13\n"
    "  movabs $0x5555555555555555, %r14\n"
    "  movabs $0x6666666666666666, %r15\n"
    ".endm\n"
    ".macro restore_callee_saved\n"
    "  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"
    ".endm\n");

/* probe_read(fd, buf, n): read(2) by an inline `syscall` (never through
   libc), with magic values in the callee-saved registers and the stack
   pointer at the call recorded in probe_rsp. probe_skip, past the call,
   returns 55. */
extern long probe_read(long fd, void *buf, long n);
extern char probe_syscall[], probe_after[], probe_skip[];
unsigned long probe_rsp;
asm(".text\n"
    ".globl probe_read\n"
    ".type probe_read,@function\n"
    "probe_read:\n"
    "  magic_callee_saved\n"
    "  mov %rsp, probe_rsp(%rip)\n"
    "  xor %eax, %eax\n"
    ".globl probe_syscall\n"
    "probe_syscall:\n"
    "  syscall\n"
    ".globl probe_after\n"
    "probe_after:\n"
    "  jmp 1f\n"
    ".globl probe_skip\n"
    "probe_skip:\n"
    "  mov $55, %eax\n"
    "1:\n"
    "  restore_callee_saved\n"
    "  ret\n"
    ".size probe_read, .-probe_read\n");

/* site_read: probe_read with the number loaded by `mov $0,%eax`, a site
   atoll rewrites into a call of its entry the first time it traps; then
   the signal comes while atoll serves the call without any trap. */
extern long site_read(long fd, void *buf, long n);
extern char site_mov[], site_syscall[], site_after[], site_skip[];
asm(".text\n"
    ".globl site_read\n"
    ".type site_read,@function\n"
    "site_read:\n"
    "  magic_callee_saved\n"
    "  mov %rsp, probe_rsp(%rip)\n"
    ".globl site_mov\n"
    "site_mov:\n"
    "  mov $0, %eax\n"
    ".globl site_syscall\n"
    "site_syscall:\n"
    "  syscall\n"
    ".globl site_after\n"
    "site_after:\n"
    "  jmp 1f\n"
    ".globl site_skip\n"
    "site_skip:\n"
    "  mov $55, %eax\n"
    "1:\n"
    "  restore_callee_saved\n"
    "  ret\n"
    ".size site_read, .-site_read\n");

/* plt_read(fd, buf, n): read() through libc (a PLT call), with the same
   magic callee-saved registers; plt_rsp is the stack pointer at the call
   (and after its return), plt_after the return address. */
extern long plt_read(long fd, void *buf, long n);
extern char plt_after[];
unsigned long plt_rsp;
asm(".text\n"
    ".globl plt_read\n"
    ".type plt_read,@function\n"
    "plt_read:\n"
    "  magic_callee_saved\n"
    "  sub $8, %rsp\n"
    "  mov %rsp, plt_rsp(%rip)\n"
    "  call read@PLT\n"
    ".globl plt_after\n"
    "plt_after:\n"
    "  add $8, %rsp\n"
    "  restore_callee_saved\n"
    "  ret\n"
    ".size plt_read, .-plt_read\n");

static int note_fd = -1;
static int via_site; /* the cases of site_read */
static volatile sig_atomic_t change; /* 1: RAX = 4242, 2: RIP = probe_skip */
static char altstack[1 << 16];
static struct {
    greg_t rip, rsp, rax, saved[6];
    int usr1_blocked, usr2_blocked, code, value, on_alt, runs;
    pid_t pid;
    uid_t uid;
} seen;

static void on_usr1(int sig, siginfo_t *si, void *ucv) {
    ucontext_t *uc = ucv;
    greg_t *g = uc->uc_mcontext.gregs;
    char here, c = 'n';
    int saved = errno;
    (void)sig;
    seen.rip = g[REG_RIP];
    seen.rsp = g[REG_RSP];
    seen.rax = g[REG_RAX];
    seen.saved[0] = g[REG_RBX];
    seen.saved[1] = g[REG_RBP];
    seen.saved[2] = g[REG_R12];
    seen.saved[3] = g[REG_R13];
    seen.saved[4] = g[REG_R14];
    seen.saved[5] = g[REG_R15];
    seen.usr1_blocked = sigismember(&uc->uc_sigmask, SIGUSR1);
    seen.usr2_blocked = sigismember(&uc->uc_sigmask, SIGUSR2);
    seen.code = si->si_code;
    seen.pid = si->si_pid;
    seen.uid = si->si_uid;
    seen.value = si->si_value.sival_int;
    seen.on_alt = &here >= altstack && &here < altstack + sizeof altstack;
    seen.runs++;
    if (change == 1) g[REG_RAX] = 4242;
    if (change == 2) g[REG_RIP] = (greg_t)(via_site ? site_skip : probe_skip);
    if (write(note_fd, &c, 1) != 1) _exit(90);
    errno = saved;
}

/* Is process `pid` asleep? */
static int asleep(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'S';
}

/* A child that sends SIGUSR1 with value 1234 once its parent sleeps in
   the read, then (feed) waits for the handler's note and writes "go". */
static pid_t sender(int notes_r, int feed_w) {
    pid_t pid = fork();
    if (pid == 0) {
        pid_t parent = getppid();
        struct timespec t = { 0, 10 * 1000 * 1000 };
        union sigval v = { .sival_int = 1234 };
        char c;
        alarm(20);
        nanosleep(&(struct timespec){ 0, 150 * 1000 * 1000 }, NULL);
        for (int i = 0; i < 500 && !asleep(parent); i++) nanosleep(&t, NULL);
        if (sigqueue(parent, SIGUSR1, v) != 0) _exit(3);
        if (feed_w < 0) _exit(0);
        if (read(notes_r, &c, 1) != 1 || write(feed_w, "go", 2) != 2) _exit(4);
        _exit(0);
    }
    return pid;
}

static void install(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO | flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0) { perror("sigaction"); exit(2); }
}

static const char *where(greg_t rip) {
    if (rip == (greg_t)(via_site ? site_after : probe_after)) return "after the syscall";
    if (rip == (greg_t)(via_site ? site_syscall : probe_syscall)) return "at the syscall (restart)";
    return "elsewhere";
}

static const char *callee_saved(void) {
    static const greg_t magic[6] = { 0x1111111111111111, 0x2222222222222222,
        0x3333333333333333, 0x4444444444444444, 0x5555555555555555,
        0x6666666666666666 };
    return memcmp(seen.saved, magic, sizeof magic) == 0 ? "the program's" : "other";
}

/* Linux shows the frame inside libc's read (its return address on top of
   the stack), atoll the frame at read's return: both are the call's
   return point, with the program's callee-saved registers. */
static const char *return_point(void) {
    if (seen.rip == (greg_t)plt_after && seen.rsp == (greg_t)plt_rsp) return "yes";
    if (seen.rsp + 8 == (greg_t)plt_rsp && *(greg_t *)seen.rsp == (greg_t)plt_after) return "yes";
    return "no";
}

static void libc_case(const char *name, int flags, int how, int feed, int notes_r) {
    int rd[2];
    char buf[8];
    if (pipe(rd) != 0) exit(2);
    install(flags);
    change = how;
    memset(&seen, 0, sizeof seen);
    pid_t s = sender(notes_r, feed ? rd[1] : -1);
    errno = 0;
    long r = plt_read(rd[0], buf, sizeof buf);
    int e = errno;
    int st;
    waitpid(s, &st, 0);
    if (!feed) {
        char c;
        if (read(notes_r, &c, 1) != 1) exit(2);
    }
    printf("%s: returned %ld%s; handler ran %d", name, r, r < 0 && e == EINTR ? " EINTR" : "",
           seen.runs);
    if (!feed)
        printf(", found the call's return point %s, callee-saved %s, mask %s, "
               "siginfo code %s pid %s value %d",
               return_point(), callee_saved(),
               seen.usr2_blocked && !seen.usr1_blocked ? "the program's" : "other",
               seen.code == SI_QUEUE ? "SI_QUEUE" : "other",
               seen.pid == s ? "the sender's" : "other", seen.value);
    printf("\n");
    close(rd[0]);
    close(rd[1]);
}

static void run_case(const char *name, int flags, int how, int feed, int notes_r) {
    int rd[2];
    char buf[8];
    if (pipe(rd) != 0) exit(2);
    install(flags);
    change = how;
    memset(&seen, 0, sizeof seen);
    pid_t s = sender(notes_r, feed ? rd[1] : -1);
    long r = via_site ? site_read(rd[0], buf, sizeof buf) : probe_read(rd[0], buf, sizeof buf);
    int st;
    waitpid(s, &st, 0);
    if (!feed) {
        char c;
        if (read(notes_r, &c, 1) != 1) exit(2);
    }
    printf("%s: returned %ld; handler ran %d, saw rip %s, rsp %s, rax %ld, "
           "callee-saved %s, mask %s, siginfo code %s pid %s uid %s value %d, "
           "on the alternate stack %s\n",
           name, r, seen.runs, where(seen.rip),
           seen.rsp == (greg_t)probe_rsp ? "the program's" : "other", (long)seen.rax,
           callee_saved(),
           seen.usr2_blocked && !seen.usr1_blocked ? "the program's" : "other",
           seen.code == SI_QUEUE ? "SI_QUEUE" : "other",
           seen.pid == s ? "the sender's" : "other",
           seen.uid == getuid() ? "ours" : "other", seen.value,
           seen.on_alt ? "yes" : "no");
    close(rd[0]);
    close(rd[1]);
}

/* Run site_read once on a pipe that holds a byte, so that its site traps
   (and, under atoll, is rewritten). With `expect-rewrite`, say so if the
   site's `mov` is still what was written (the cases below would then test
   the trapped path again). */
static void warm_site(int expect_rewrite) {
    int p[2];
    char c;
    if (pipe(p) != 0 || write(p[1], "w", 1) != 1) exit(2);
    if (site_read(p[0], &c, 1) != 1) exit(2);
    close(p[0]);
    close(p[1]);
    if (expect_rewrite && (unsigned char)site_mov[0] == 0xb8) printf("site not rewritten\n");
}

int main(int argc, char **argv) {
    int np[2];
    sigset_t usr2;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (pipe(np) != 0) return 2;
    note_fd = np[1];
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigprocmask(SIG_BLOCK, &usr2, NULL);
    run_case("read without SA_RESTART", 0, 0, 0, np[0]);
    run_case("read with SA_RESTART", SA_RESTART, 0, 1, np[0]);
    run_case("handler sets RAX", 0, 1, 0, np[0]);
    run_case("handler sets RIP", 0, 2, 0, np[0]);
    libc_case("libc read without SA_RESTART", 0, 0, 0, np[0]);
    libc_case("libc read with SA_RESTART", SA_RESTART, 0, 1, np[0]);
    libc_case("libc read, handler sets RAX", 0, 1, 0, np[0]);
    stack_t ss = { .ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0 };
    if (sigaltstack(&ss, NULL) != 0) { perror("sigaltstack"); return 2; }
    run_case("SA_ONSTACK read without SA_RESTART", SA_ONSTACK, 0, 0, np[0]);
    ss.ss_flags = SS_DISABLE;
    if (sigaltstack(&ss, NULL) != 0) { perror("sigaltstack"); return 2; }
    warm_site(argc > 1 && strcmp(argv[1], "expect-rewrite") == 0);
    via_site = 1;
    run_case("site read without SA_RESTART", 0, 0, 0, np[0]);
    run_case("site read with SA_RESTART", SA_RESTART, 0, 1, np[0]);
    run_case("site read, handler sets RAX", 0, 1, 0, np[0]);
    run_case("site read, handler sets RIP", 0, 2, 0, np[0]);
    return 0;
}
