import os, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
def once(exit_how):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        if exit_how == "exit":
            sys.exit(0)
        os._exit(0)
    os.close(r)
    os.waitpid(pid, 0)
    try:
        os.write(w, b"x")
        return 1
    except BrokenPipeError:
        return 0
    finally:
        os.close(w)
for how in ("exit", "_exit"):
    print(how, "writes without EPIPE:", sum(once(how) for _ in range(60)))
