//! Descriptors passed over Unix sockets (`SCM_RIGHTS`): the receiver gets
//! the sender's file or pipe of the mount, sharing its offset, and a pipe
//! end passed and closed everywhere ends the pipe, as on Linux. Before,
//! the receiver got atoll's empty placeholder: its reads saw nothing and
//! its writes vanished (CPython's multiprocessing forkserver, which passes
//! pipes this way, failed with `EOFError`).

use atoll_tests::{assert_same_on_tmpfs, compile_probe};

const PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void send_fds(int s, const int *fds, int n) {
    char b = 'x';
    struct iovec io = {&b, 1};
    char buf[CMSG_SPACE(sizeof(int) * 8)];
    memset(buf, 0, sizeof buf);
    struct msghdr m = {0};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    if (sendmsg(s, &m, MSG_NOSIGNAL) != 1) { perror("sendmsg"); exit(1); }
}

static int recv_fds(int s, int *fds, int flags) {
    char b;
    struct iovec io = {&b, 1};
    char buf[CMSG_SPACE(sizeof(int) * 8)];
    struct msghdr m = {0};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = buf;
    m.msg_controllen = sizeof buf;
    if (recvmsg(s, &m, flags) != 1) { perror("recvmsg"); exit(1); }
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    memcpy(fds, CMSG_DATA(c), sizeof(int) * n);
    return n;
}

static void slurp(const char *what, int fd) {
    char buf[256];
    ssize_t n, all = 0;
    while ((n = read(fd, buf + all, sizeof buf - 1 - all)) > 0) all += n;
    buf[all] = 0;
    printf("%s: %zd [%s] end %zd\n", what, all, buf, n);
}

int main(int argc, char **argv) {
    if (chdir(argv[1])) return 1;
    setvbuf(stdout, 0, _IONBF, 0);
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pid_t p = fork();
    if (p == 0) {
        close(sv[0]);
        int fds[8];
        /* A file with a shared offset, a pipe's write end and /dev/null. */
        int n = recv_fds(sv[1], fds, MSG_CMSG_CLOEXEC);
        printf("child got %d, cloexec %d\n", n, fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
        if (write(fds[0], "B", 1) != 1) perror("child write");
        if (write(fds[1], "through the pipe", 16) != 16) perror("pipe write");
        if (write(fds[2], "void", 4) != 4) perror("null write");
        close(fds[0]);
        close(fds[1]);
        close(fds[2]);
        /* Sent back to the parent, which holds the file already. */
        int f = open("passed", O_RDONLY);
        send_fds(sv[1], &f, 1);
        close(f);
        _exit(0);
    }
    close(sv[1]);
    int fd = open("passed", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (write(fd, "A", 1) != 1) perror("write A");
    int pp[2];
    pipe(pp);
    int null = open("/dev/null", O_WRONLY);
    int fds[3] = {fd, pp[1], null};
    send_fds(sv[0], fds, 3);
    close(pp[1]);
    close(null);
    /* The child's descriptor and ours share one offset. */
    slurp("pipe", pp[0]);
    int back;
    recv_fds(sv[0], &back, 0);
    waitpid(p, 0, 0);
    if (write(fd, "C", 1) != 1) perror("write C");
    char buf[16] = {0};
    printf("back reads %zd [%s]\n", pread(back, buf, sizeof buf - 1, 0), buf);
    close(back);
    close(fd);
    /* A pipe end passed to this very process, then closed twice. */
    int self[2];
    socketpair(AF_UNIX, SOCK_DGRAM, 0, self);
    pipe(pp);
    send_fds(self[0], &pp[1], 1);
    int again;
    recv_fds(self[1], &again, 0);
    if (write(again, "self", 4) != 4) perror("self write");
    close(again);
    close(pp[1]);
    slurp("self pipe", pp[0]);
    /* Two messages of one sendmmsg, received by one recvmmsg. */
    int pa[2], pb[2];
    pipe(pa);
    pipe(pb);
    struct mmsghdr mm[2];
    struct iovec mio[2];
    char mb[2] = {'a', 'b'};
    char mc[2][CMSG_SPACE(sizeof(int))];
    int ends[2] = {pa[1], pb[1]};
    memset(mm, 0, sizeof mm);
    for (int i = 0; i < 2; i++) {
        mio[i].iov_base = &mb[i];
        mio[i].iov_len = 1;
        mm[i].msg_hdr.msg_iov = &mio[i];
        mm[i].msg_hdr.msg_iovlen = 1;
        mm[i].msg_hdr.msg_control = mc[i];
        mm[i].msg_hdr.msg_controllen = sizeof mc[i];
        struct cmsghdr *h = CMSG_FIRSTHDR(&mm[i].msg_hdr);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &ends[i], sizeof(int));
    }
    int nsent = sendmmsg(self[0], mm, 2, 0);
    printf("sendmmsg: %d, lengths %u %u\n", nsent, mm[0].msg_len, mm[1].msg_len);
    close(pa[1]);
    close(pb[1]);
    memset(mc, 0, sizeof mc);
    printf("recvmmsg: %d\n", recvmmsg(self[1], mm, 2, 0, 0));
    for (int i = 0; i < 2; i++) {
        int got;
        memcpy(&got, CMSG_DATA(CMSG_FIRSTHDR(&mm[i].msg_hdr)), sizeof(int));
        if (write(got, i ? "second" : "first", i ? 6 : 5) < 0) perror("mmsg write");
        close(got);
    }
    slurp("first pipe", pa[0]);
    slurp("second pipe", pb[0]);
    /* A send that fails keeps nothing in flight: the pipe still ends. */
    pipe(pp);
    int dead[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, dead);
    close(dead[1]);
    char b = 'x';
    struct iovec io = {&b, 1};
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct msghdr m = {0};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pp[1], sizeof(int));
    errno = 0;
    ssize_t sent = sendmsg(dead[0], &m, MSG_NOSIGNAL);
    printf("failed send: %zd %s\n", sent, strerror(errno));
    close(pp[1]);
    slurp("unsent pipe", pp[0]);
    return 0;
}
"#;

#[test]
fn descriptors_passed_over_unix_sockets_are_the_senders_as_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_probe(dir.path(), "fdpass", PROBE);
    let script = format!("{} \"$ROOT\"", bin.display());
    for opts in [&["--servers", "2"][..], &["--servers", "3"][..]] {
        let out = assert_same_on_tmpfs(opts, &script, true);
        assert!(out.contains("back reads 3 [ABC]"), "{out}");
        assert!(out.contains("second pipe: 6 [second] end 0"), "{out}");
    }
}
