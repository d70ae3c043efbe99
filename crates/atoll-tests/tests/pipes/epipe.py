import os, signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
bad = 0
N = int(sys.argv[1])
how = sys.argv[2]
for i in range(N):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        if how == "exit":
            os._exit(0)
        time.sleep(30)
        os._exit(0)
    os.close(r)
    if how == "kill":
        time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    try:
        os.write(w, b"x")
        bad += 1
    except BrokenPipeError:
        pass
    os.close(w)
print(how, "writes that succeeded after the reader was reaped:", bad, "of", N)
