# O_APPEND as Linux has it: where the offset stands before and after
# appends, reads through an appending description, pwrite that appends,
# O_APPEND switched on and off with F_SETFL, and appends racing from
# threads, from a forked child sharing the description, and from other
# processes with descriptions of their own: every record whole, none lost.
import fcntl, os, sys, threading

root = os.environ["ROOT"]
os.chdir(root)

def show(label, value):
    print(label, value, flush=True)

fd = os.open("log", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
show("fresh offset", os.lseek(fd, 0, os.SEEK_CUR))
os.write(fd, b"one\n")
show("after append", os.lseek(fd, 0, os.SEEK_CUR))
os.lseek(fd, 0, os.SEEK_SET)
show("read from 0", os.read(fd, 2))
os.write(fd, b"two\n")
show("append after a seek to 0 ends at", os.lseek(fd, 0, os.SEEK_CUR))
show("read at the end", os.read(fd, 10))
os.pwrite(fd, b"pw\n", 0)
show("pwrite appends; offset stays", os.lseek(fd, 0, os.SEEK_CUR))
show("SEEK_END", os.lseek(fd, 0, os.SEEK_END))
# Another description appends: this one's SEEK_END sees it.
other = os.open("log", os.O_WRONLY | os.O_APPEND)
os.write(other, b"other\n")
show("SEEK_END after another's append", os.lseek(fd, 0, os.SEEK_END))
os.close(other)
# A reopened file: the first SEEK_END right after open (stdio's "a").
with open("log", "a") as f:
    show("fopen a, tell", f.tell())
    f.write("stdio\n")
show("size", os.fstat(fd).st_size)
# Off and on again with F_SETFL.
plain = os.open("log", os.O_WRONLY)
os.write(plain, b"X")
show("plain write at 0, offset", os.lseek(plain, 0, os.SEEK_CUR))
fcntl.fcntl(plain, fcntl.F_SETFL, os.O_APPEND)
os.write(plain, b"appended\n")
show("after F_SETFL O_APPEND", os.lseek(plain, 0, os.SEEK_CUR))
fcntl.fcntl(plain, fcntl.F_SETFL, 0)
os.lseek(plain, 1, os.SEEK_SET)
os.write(plain, b"Y")
show("after clearing it", os.lseek(plain, 0, os.SEEK_CUR))
os.close(plain)
os.lseek(fd, 0, os.SEEK_SET)
show("content", os.read(fd, 1000))
os.close(fd)

# Races: threads of one process on one description, a forked child
# sharing another, and two more processes with their own.
RECORD = 37
def record(tag, i):
    body = f"{tag}:{i:06d}:".encode()
    return body + b"." * (RECORD - 1 - len(body)) + b"\n"

race = os.open("race", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def appender(tag, fdesc, n):
    for i in range(n):
        os.write(fdesc, record(tag, i))
pids = []
for tag in ("p1", "p2"):
    pid = os.fork()
    if pid == 0:
        own = os.open("race", os.O_WRONLY | os.O_APPEND)
        appender(tag, own, 300)
        os._exit(0)
    pids.append(pid)
pid = os.fork()
if pid == 0:
    appender("child", race, 300)
    os._exit(0)
pids.append(pid)
threads = [threading.Thread(target=appender, args=(f"t{k}", race, 300)) for k in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for p in pids:
    os.waitpid(p, 0)
data = open("race", "rb").read()
lines = data.split(b"\n")[:-1]
show("race records", len(lines))
show("all whole", all(len(l) == RECORD - 1 for l in lines))
seen = {}
for l in lines:
    tag, i, _ = l.split(b":")
    seen.setdefault(tag, []).append(int(i))
show("each writer in order, none lost", all(v == list(range(300)) for v in seen.values()))
show("writers", sorted(k.decode() for k in seen))
# The shared description's offset is where its own last append ended
# (another description's may have come after it); one more append through
# it ends at the size.
os.write(race, b"end\n")
show("an append after the race ends at the size", os.lseek(race, 0, os.SEEK_CUR) == os.fstat(race).st_size)
os.close(race)
