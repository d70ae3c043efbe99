# Drive an interactive shell on a pseudo-terminal as a user would: ^C, ^Z,
# jobs, fg, a program reading the terminal. Every wait is bounded; a
# failure prints the transcript and exits 1. Prints "ok" at the end.
# argv: the sigcount probe, then the shell's command line
# (e.g. `atoll run -- bash --norc --noprofile -i`).
import os, pty, select, sys, time

probe, cmd = sys.argv[1], sys.argv[2:]
# Command lines unique to this session, found in /proc by the waits.
SLEEP1 = "sleep 101.%d" % os.getpid()
SLEEP2 = "sleep 102.%d" % os.getpid()
env = dict(os.environ, PS1="PROMPT> ", TERM="dumb", INPUTRC="/dev/null")
pid, fd = pty.fork()
if pid == 0:
    os.execvpe(cmd[0], cmd, env)

buf = b""
mark = 0

def fail(what):
    sys.stderr.write("FAILED: %s\n--- transcript ---\n%s\n" % (what, buf.decode("utf-8", "replace")))
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    sys.exit(1)

def expect(pat, count=1, limit=120):
    """Wait (bounded) until `pat` appears `count` times after the mark."""
    global buf, mark
    pat = pat.encode()
    end = time.monotonic() + limit
    while buf[mark:].count(pat) < count:
        left = end - time.monotonic()
        if left <= 0:
            fail("no %r" % pat)
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                fail("eof waiting for %r" % pat)
            buf += chunk
    i = mark
    for _ in range(count):
        i = buf.index(pat, i) + len(pat)
    mark = i

def send(s):
    global mark
    mark = len(buf)
    os.write(fd, s.encode())

def procs(cmdline):
    """pids of processes running exactly this command line."""
    want = b"".join(w.encode() + b"\0" for w in cmdline.split(" "))
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    if f.read() == want:
                        out.append(int(p))
            except OSError:
                pass
    return out

def state(p):
    try:
        with open("/proc/%d/stat" % p, "rb") as f:
            s = f.read()
        return chr(s[s.rindex(b")") + 2])
    except OSError:
        return "gone"

def wait_for(cond, what, limit=120):
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            fail(what)
        time.sleep(0.02)

expect("PROMPT> ")
# 1. ^C ends a foreground program; the shell survives.
send(SLEEP1 + "\n")
wait_for(lambda: procs(SLEEP1), "sleep 101 never ran")
send("\x03")
expect("PROMPT> ")
wait_for(lambda: not procs(SLEEP1), "sleep 101 survived ^C")
send("echo alive-$((20+22))\n")
expect("alive-42")
expect("PROMPT> ")
# 2. ^C reaches a program that catches it exactly once; ^\ reports.
send(probe + "\n")
expect("ready")
send("\x03")
expect("got")
send("\x1c")
expect("int=")
expect("PROMPT> ")
line = buf[buf.rindex(b"usr1="):].split(b"\n")[0].strip()
if line != b"usr1=0 term=0 int=1":
    fail("^C deliveries: %r" % line)
# 3. ^Z stops the job, jobs shows it, fg resumes it, ^C ends it.
send(SLEEP2 + "\n")
wait_for(lambda: procs(SLEEP2), "sleep 102 never ran")
send("\x1a")
expect("Stopped")
expect("PROMPT> ")
wait_for(lambda: all(state(p) == "T" for p in procs(SLEEP2)), "sleep 102 not stopped")
send("jobs\n")
expect("Stopped")
expect("PROMPT> ")
send("fg\n")
expect(SLEEP2)
wait_for(lambda: procs(SLEEP2) and all(state(p) in "SR" for p in procs(SLEEP2)),
         "sleep 102 not running again")
send("\x03")
expect("PROMPT> ")
wait_for(lambda: not procs(SLEEP2), "sleep 102 survived ^C after fg")
send("echo back-$((1+1))\n")
expect("back-2")
expect("PROMPT> ")
# 4. The terminal works for a program: head reads a typed line.
send("head -q -n 1\n")
wait_for(lambda: procs("head -q -n 1"), "head never ran")
send("typed-line\n")
expect("typed-line", count=2)  # the terminal's echo, then head's copy
expect("PROMPT> ")
send("exit\n")
end = time.monotonic() + 120
while True:
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        break
    if time.monotonic() > end:
        fail("shell did not exit")
    try:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            buf += os.read(fd, 4096)
    except OSError:
        pass
print("ok")
