/* fanotify(7) on a directory of the file system under test: a child
 * process creates, writes, chmods, renames and deletes entries in a marked
 * directory; the parent then reads the events and prints them in a form
 * that compares across file systems (file handles by their order of first
 * appearance, "dir" for the marked directory's; descriptors by the name
 * they reach; the writer's pid as "child"). In "mount" mode (a filesystem mark) only events about the
 * directory and the child's file are printed: others may share the file
 * system.
 *
 * usage: probe MODE DIR   (MODE: fd, fid, dfid_name, fid_dfid_name, mount)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

static char handles[64][MAX_HANDLE_SZ + 8];
static int nhandles;
static struct {
    struct file_handle h;
    unsigned char b[MAX_HANDLE_SZ];
} dirh;
static fsid_t fsid;
static pid_t child;
static int filter;
static struct {
    struct file_handle h;
    unsigned char b[MAX_HANDLE_SZ];
} fileh;

static int same_handle(const struct file_handle *a, const struct file_handle *b) {
    return a->handle_bytes == b->handle_bytes && a->handle_type == b->handle_type &&
           memcmp(a->f_handle, b->f_handle, a->handle_bytes) == 0;
}

static void print_handle(const struct file_handle *h) {
    if (same_handle(h, &dirh.h)) {
        printf(" dir");
        return;
    }
    for (int k = 0; k < nhandles; k++)
        if (same_handle(h, (struct file_handle *)handles[k])) {
            printf(" h%d", k);
            return;
        }
    if (nhandles < 64 && h->handle_bytes <= MAX_HANDLE_SZ) {
        memcpy(handles[nhandles], h, sizeof *h + h->handle_bytes);
        printf(" h%d", nhandles++);
    }
}

static void print_mask(unsigned long long m) {
    static const struct { unsigned long long bit; const char *name; } names[] = {
        {FAN_ACCESS, "ACCESS"}, {FAN_MODIFY, "MODIFY"}, {FAN_ATTRIB, "ATTRIB"},
        {FAN_CLOSE_WRITE, "CLOSE_WRITE"}, {FAN_CLOSE_NOWRITE, "CLOSE_NOWRITE"},
        {FAN_OPEN, "OPEN"}, {FAN_MOVED_FROM, "MOVED_FROM"}, {FAN_MOVED_TO, "MOVED_TO"},
        {FAN_CREATE, "CREATE"}, {FAN_DELETE, "DELETE"}, {FAN_DELETE_SELF, "DELETE_SELF"},
        {FAN_MOVE_SELF, "MOVE_SELF"}, {FAN_Q_OVERFLOW, "Q_OVERFLOW"}, {FAN_ONDIR, "ONDIR"},
    };
    int first = 1;
    for (unsigned k = 0; k < sizeof names / sizeof names[0]; k++)
        if (m & names[k].bit) {
            printf("%s%s", first ? "" : "|", names[k].name);
            first = 0;
            m &= ~names[k].bit;
        }
    if (m) printf("%s0x%llx", first ? "" : "|", m);
}

static int ours(struct fanotify_event_metadata *e) {
    char *p = (char *)e + e->metadata_len, *end = (char *)e + e->event_len;
    while (p < end) {
        struct fanotify_event_info_fid *fid = (void *)p;
        struct file_handle *fh = (struct file_handle *)fid->handle;
        if (same_handle(fh, &dirh.h) || same_handle(fh, &fileh.h)) return 1;
        if (fid->hdr.len == 0) break;
        p += fid->hdr.len;
    }
    return 0;
}

static void print_event(struct fanotify_event_metadata *e) {
    if (filter && !ours(e)) return;
    print_mask(e->mask);
    if (e->fd >= 0) {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", e->fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        target[n < 0 ? 0 : n] = 0;
        const char *base = strrchr(target, '/');
        int fl = fcntl(e->fd, F_GETFL);
        printf(" fd=%s%s", base ? base + 1 : target, (fl & O_ACCMODE) == O_RDONLY ? "(ro)" : "(rw)");
        close(e->fd);
    } else if (e->fd != FAN_NOFD) {
        printf(" fd=%d", e->fd);
    }
    printf(" pid=%s", e->pid == child ? "child" : e->pid == 0 ? "0" : "other");
    char *p = (char *)e + e->metadata_len, *end = (char *)e + e->event_len;
    while (p < end) {
        struct fanotify_event_info_fid *fid = (void *)p;
        struct fanotify_event_info_header *h = &fid->hdr;
        const char *type = h->info_type == FAN_EVENT_INFO_TYPE_FID ? "fid"
                           : h->info_type == FAN_EVENT_INFO_TYPE_DFID_NAME ? "dfid_name"
                           : h->info_type == FAN_EVENT_INFO_TYPE_DFID ? "dfid"
                                                                          : "other";
        printf(" [%s%s", type, memcmp(&fid->fsid, &fsid, sizeof fsid) ? " fsid?" : "");
        struct file_handle *fh = (struct file_handle *)fid->handle;
        print_handle(fh);
        if (h->info_type == FAN_EVENT_INFO_TYPE_DFID_NAME)
            printf(" '%s'", (char *)fh->f_handle + fh->handle_bytes);
        printf(" len=%d]", h->len);
        if (h->len == 0) break;
        p += h->len;
    }
    printf("\n");
}

static void work(const char *dir, int fd_mode, int out) {
    char a[PATH_MAX], b[PATH_MAX], sub[PATH_MAX];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    int fd = open(a, O_CREAT | O_WRONLY, 0644);
    if (write(fd, "hello", 5) != 5) _exit(2);
    close(fd);
    chmod(a, 0600);
    if (fd_mode) _exit(0); /* descriptors of files still there */
    rename(a, b);
    mkdir(sub, 0755);
    chmod(dir, 0755);
    rmdir(sub);
    int mount_id;
    fileh.h.handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(AT_FDCWD, b, &fileh.h, &mount_id, 0)) _exit(3);
    if (write(out, &fileh, sizeof fileh) != sizeof fileh) _exit(4);
    unlink(b);
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *mode = argv[1], *dir = argv[2];
    unsigned init = FAN_CLASS_NOTIF;
    unsigned long long mask = FAN_MODIFY | FAN_CLOSE_WRITE | FAN_EVENT_ON_CHILD | FAN_ONDIR;
    unsigned mflags = FAN_MARK_ADD | FAN_MARK_ONLYDIR;
    int fd_mode = 0;
    if (!strcmp(mode, "fd")) {
        fd_mode = 1;
    } else if (!strcmp(mode, "mount")) {
        mflags = FAN_MARK_ADD | FAN_MARK_FILESYSTEM;
        init |= FAN_REPORT_FID;
        filter = 1;
    } else {
        if (!strcmp(mode, "fid")) init |= FAN_REPORT_FID;
        else if (!strcmp(mode, "dfid_name")) init |= FAN_REPORT_DFID_NAME;
        else if (!strcmp(mode, "fid_dfid_name")) init |= FAN_REPORT_DFID_NAME | FAN_REPORT_FID;
        else return 2;
    }
    if (!fd_mode && strcmp(mode, "mount"))
        mask |= FAN_ATTRIB | FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO;
    if (!strcmp(mode, "mount"))
        mask = FAN_MODIFY | FAN_CLOSE_WRITE | FAN_ATTRIB | FAN_CREATE | FAN_DELETE | FAN_MOVE | FAN_ONDIR;
    if (mkdir(dir, 0700)) { perror("mkdir"); return 1; }
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/f", dir);
    close(open(file, O_CREAT | O_WRONLY, 0644));
    int mount_id;
    dirh.h.handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(AT_FDCWD, dir, &dirh.h, &mount_id, 0)) { perror("name_to_handle_at"); return 1; }
    struct statfs sf;
    if (statfs(dir, &sf)) { perror("statfs"); return 1; }
    fsid = sf.f_fsid;
    printf("fsid %s\n", fsid.__val[0] || fsid.__val[1] ? "set" : "zero");
    int fan = fanotify_init(init, O_RDONLY | O_CLOEXEC);
    if (fan < 0) { perror("fanotify_init"); return 1; }
    /* Refused marks first: events an fd-mode group cannot report. */
    if (fd_mode) {
        int r = fanotify_mark(fan, FAN_MARK_ADD, FAN_CREATE, AT_FDCWD, dir);
        printf("fd-mode FAN_CREATE: %s\n", r ? strerror(errno) : "ok");
    }
    errno = 0;
    int r = fanotify_mark(fan, FAN_MARK_REMOVE, FAN_MODIFY, AT_FDCWD, dir);
    printf("remove before add: %s\n", r ? strerror(errno) : "ok");
    if (fanotify_mark(fan, mflags, mask, AT_FDCWD, dir)) { perror("fanotify_mark"); return 1; }
    r = fanotify_mark(fan, FAN_MARK_ADD | FAN_MARK_ONLYDIR, FAN_MODIFY, AT_FDCWD, file);
    printf("ONLYDIR on a file: %s\n", r ? strerror(errno) : "ok");
    int p[2];
    if (pipe(p)) return 1;
    child = fork();
    if (child == 0) work(dir, fd_mode, p[1]);
    int st;
    waitpid(child, &st, 0);
    if (!fd_mode && read(p[0], &fileh, sizeof fileh) != sizeof fileh) return 1;
    char buf[8192] __attribute__((aligned(8)));
    fcntl(fan, F_SETFL, O_NONBLOCK);
    for (;;) {
        ssize_t n = read(fan, buf, sizeof buf);
        if (n < 0) {
            if (errno != EAGAIN) perror("read");
            break;
        }
        struct fanotify_event_metadata *e = (void *)buf;
        while (FAN_EVENT_OK(e, n)) {
            print_event(e);
            e = FAN_EVENT_NEXT(e, n);
        }
    }
    r = fanotify_mark(fan, FAN_MARK_FLUSH, 0, AT_FDCWD, NULL);
    printf("flush: %s\n", r ? strerror(errno) : "ok");
    return 0;
}
