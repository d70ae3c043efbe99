# A fork and an exec hand over more descriptions than go in flight at once
# (40 files, some duplicated, spread over the servers): the child writes
# through each of them, a program it execs writes through 30, and every
# description is closed at the end.
import os, subprocess, sys

fds = [os.open(f"f{i}", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644) for i in range(40)]
dups = [os.dup(fds[i]) for i in range(0, 40, 3)]
pid = os.fork()
if pid == 0:
    for i, fd in enumerate(fds):
        os.write(fd, b"child%d " % i)
    for d in dups:
        os.write(d, b"dup ")
    os._exit(0)
os.waitpid(pid, 0)
for fd in fds + dups:
    os.set_inheritable(fd, True)
writer = "import os, sys\nfor fd in sys.argv[1:]:\n    os.write(int(fd), b'exec%s ' % fd.encode())\n"
subprocess.run([sys.executable, "-c", writer] + [str(fd) for fd in fds[:30]], close_fds=False, check=True)
for fd in fds + dups:
    os.close(fd)
for i in range(40):
    with open(f"f{i}") as f:
        print(i, f.read())
