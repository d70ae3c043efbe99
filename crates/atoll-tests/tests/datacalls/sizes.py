# Reads and writes of sizes around the bounds of one data call (8 KiB,
# the old frame's; 32 KiB, a `ReadData`/`WriteData` now; 64 KiB) at odd
# offsets, with pwrite and pread. `write` makes the files, `check` reads
# them back (in another process, perhaps on another host), `enospc`
# writes until the instance is full. Everything printed is compared with
# the same run on tmpfs, except `enospc`, which has no host twin.
import hashlib
import os
import sys

SIZES = [1, 8191, 8192, 8193, 32767, 32768, 32769, 65535, 65536, 65537, (1 << 20) + 3]
OFFSETS = [0, 1, 8191, 32771]


def pattern(n, seed):
    return bytes((i * 31 + seed + i // 8191) & 255 for i in range(n))


DATA = pattern((1 << 20) + 3 + 32771, 7)


def digest(b):
    return hashlib.sha256(b).hexdigest()[:16]


def name(size, off):
    return "s%d_o%d" % (size, off)


def write():
    for size in SIZES:
        for off in OFFSETS:
            fd = os.open(name(size, off), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            n = os.pwrite(fd, DATA[:size], off)
            # A second write over part of the first, at another odd offset.
            m = os.pwrite(fd, DATA[off : off + size // 2 + 1], off + size // 3 + 1)
            back = os.pread(fd, size + 100, off)
            print("w", size, off, n, m, len(back), digest(back))
            os.close(fd)


def check():
    for size in SIZES:
        for off in OFFSETS:
            fd = os.open(name(size, off), os.O_RDONLY)
            end = os.fstat(fd).st_size
            whole = os.pread(fd, end + 7, 0)
            # The file in pieces of the call's size from an odd start.
            pieces, at = [], off | 1
            while True:
                b = os.pread(fd, size, at)
                if not b:
                    break
                pieces.append(b)
                at += len(b)
            tail = os.pread(fd, size, max(end - size // 2 - 1, 0))
            print("r", size, off, end, len(whole), digest(whole), digest(b"".join(pieces)), len(tail), digest(tail))
            os.close(fd)


def enospc():
    data = pattern(3000001, 29)
    fd = os.open("full", os.O_RDWR | os.O_CREAT, 0o644)
    total, err, short, wrote = 0, None, 0, []
    while True:
        try:
            n = os.pwrite(fd, data, total)
        except OSError as e:
            err = e.errno
            break
        if n == 0:
            err = 0
            break
        if n < len(data):
            short += 1
        total += n
        wrote.append(data[:n])
    size = os.fstat(fd).st_size
    back = os.pread(fd, size + 1, 0)
    print("enospc", total > 0, short >= 1, total == size, back == b"".join(wrote), "errno", err)


{"write": write, "check": check, "enospc": enospc}[sys.argv[1]]()
