import os, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
def once(exit_how):
    r, w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.close(hold_w)
        if exit_how == "exit":
            sys.exit(0)
        if exit_how == "_exit":
            os._exit(0)
        if exit_how == "SIGKILL itself":
            os.kill(os.getpid(), signal.SIGKILL)
        # Killed by the parent while it waits on a pipe of its own.
        os.read(hold_r, 1)
        os._exit(0)
    os.close(r)
    os.close(hold_r)
    if exit_how == "killed by its parent":
        os.kill(pid, signal.SIGKILL)
        reaped = os.waitid(os.P_PID, pid, os.WEXITED)
        assert reaped.si_code == os.CLD_KILLED, reaped
    else:
        os.waitpid(pid, 0)
    os.close(hold_w)
    try:
        os.write(w, b"x")
        return 1
    except BrokenPipeError:
        return 0
    finally:
        os.close(w)
for how in ("exit", "_exit", "SIGKILL itself", "killed by its parent"):
    print(how, "writes without EPIPE:", sum(once(how) for _ in range(60)))
# A FIFO's reader killed and reaped: a writer opening it then finds no
# reader (ENXIO for a non-blocking open), as on Linux.
def fifo_once(i):
    name = f"fifo{os.getpid()}_{i}"
    os.mkfifo(name)
    pid = os.fork()
    if pid == 0:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_NONBLOCK))
        found = 1
    except OSError:
        found = 0
    os.unlink(name)
    return found
print("FIFO opens that found a killed reader:", sum(fifo_once(i) for i in range(60)))
