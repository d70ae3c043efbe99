//! Pipe throughput with 1 MiB writes, in one run: a Linux pipe, Linux
//! `vmsplice` into a pipe (the writer's pages lent, not copied), and an
//! atoll pipe (the same program as the Linux pipe, run inside an atoll
//! instance, where `pipe(2)` makes atoll pipes: a ring of buffer-cache
//! blocks shared by the two ends, Cosh §5). Part of `atoll bench transfer`.
//!
//! Each measurement forks a writer that sends `total` bytes in `chunk`
//! writes and a reader (this process) that reads them into a buffer of the
//! same size and checks the last byte of each chunk; the number is bytes
//! per second from the first read to the writer's exit, best of `repeat`.

use std::fmt::Write as _;
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

/// What one run measured, in bytes per second.
#[derive(Clone, Debug, Serialize)]
pub struct PipeResults {
    pub chunk: usize,
    pub total: u64,
    pub linux_pipe: f64,
    pub vmsplice: Option<f64>,
    pub atoll_pipe: Option<f64>,
    /// Why the atoll pipe was not measured, if it was not.
    pub atoll_skipped: Option<String>,
    /// The atoll pipe without splits (`ATOLL_PIPE_SPLIT=off`: only the
    /// reader copies a large write), for comparison: splits pay when the
    /// CPUs are free and cost a little when they are busy
    /// (docs/BENCHMARKS.md).
    pub atoll_splits_off: Option<f64>,
}

/// How a writer puts a chunk into the pipe.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writer {
    Write,
    Vmsplice,
}

/// Best throughput of `repeat` runs of `total` bytes in `chunk` pieces.
pub fn measure(
    how_vmsplice: bool,
    chunk: usize,
    total: u64,
    repeat: usize,
) -> std::io::Result<f64> {
    let how = if how_vmsplice {
        Writer::Vmsplice
    } else {
        Writer::Write
    };
    let mut best = 0f64;
    for _ in 0..repeat.max(1) {
        best = best.max(once(how, chunk, total)?);
    }
    Ok(best)
}

fn once(how: Writer, chunk: usize, total: u64) -> std::io::Result<f64> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a two-int array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (rd, wr) = (fds[0], fds[1]);
    // A pipe as large as a chunk where allowed (Linux: up to
    // pipe-max-size; atoll: up to its ring), so each write can land whole.
    // SAFETY: integer arguments.
    unsafe { libc::fcntl(wr, libc::F_SETPIPE_SZ, chunk as libc::c_int) };
    let data = vec![0x5au8; chunk];
    let chunks = total.div_ceil(chunk as u64);
    // SAFETY: the child only writes, closes and _exits, on memory made
    // before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: the child's own copies of the descriptors and buffer.
        unsafe {
            libc::close(rd);
            for _ in 0..chunks {
                if !write_chunk(how, wr, &data) {
                    libc::_exit(1);
                }
            }
            libc::_exit(0);
        }
    }
    // SAFETY: our copy of the write end.
    unsafe { libc::close(wr) };
    let mut buf = vec![0u8; chunk];
    let mut got = 0u64;
    let mut bad = false;
    let start = Instant::now();
    loop {
        // SAFETY: reading into our own buffer.
        let n = unsafe { libc::read(rd, buf.as_mut_ptr().cast(), chunk) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if n == 0 {
            break;
        }
        bad |= buf[n as usize - 1] != 0x5a;
        got += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    // SAFETY: our read end, and our child.
    let status = unsafe {
        libc::close(rd);
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
        st
    };
    if bad
        || got != chunks * chunk as u64
        || !libc::WIFEXITED(status)
        || libc::WEXITSTATUS(status) != 0
    {
        return Err(std::io::Error::other(format!(
            "pipe measurement lost data: {got} of {} bytes",
            chunks * chunk as u64
        )));
    }
    Ok(got as f64 / secs.max(1e-9))
}

/// Put all of `data` into the pipe; false on error.
///
/// # Safety
/// `wr` is the pipe's write end.
unsafe fn write_chunk(how: Writer, wr: i32, data: &[u8]) -> bool {
    let mut off = 0;
    while off < data.len() {
        let rest = &data[off..];
        let n = match how {
            // SAFETY: writing our own buffer.
            Writer::Write => unsafe { libc::write(wr, rest.as_ptr().cast(), rest.len()) },
            Writer::Vmsplice => {
                let iov = libc::iovec {
                    iov_base: rest.as_ptr() as *mut _,
                    iov_len: rest.len(),
                };
                // SAFETY: one iovec over our own buffer, which stays
                // unchanged while the reader may still see its pages.
                unsafe { libc::vmsplice(wr, &iov, 1, 0) }
            }
        };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        off += n as usize;
    }
    true
}

/// The atoll pipe: this very measurement, run by `atoll run` (default
/// options but 2 servers) as `atoll bench transfer --pipe-probe`, which
/// prints its bytes per second; `splits_off`: with `ATOLL_PIPE_SPLIT=off`.
fn atoll_pipe(chunk: usize, total: u64, repeat: usize, splits_off: bool) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("no atoll binary: {e}"))?;
    let mut cmd = Command::new(&exe);
    if splits_off {
        cmd.env("ATOLL_PIPE_SPLIT", "off");
    }
    let out = cmd
        .args(["run", "--servers", "2", "--"])
        .arg(&exe)
        .args([
            "bench",
            "transfer",
            "--pipe-probe",
            &format!("{chunk},{total},{repeat}"),
        ])
        .output()
        .map_err(|e| format!("cannot start atoll run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "atoll run failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    text.trim()
        .parse()
        .map_err(|_| format!("unexpected probe output {text:?}"))
}

/// The measurements: Linux, vmsplice, atoll (default and splits off).
pub fn run(quick: bool) -> std::io::Result<PipeResults> {
    let chunk = 1 << 20;
    let (total, repeat) = if quick {
        (64u64 << 20, 2)
    } else {
        (1u64 << 30, 5)
    };
    let linux_pipe = measure(false, chunk, total, repeat)?;
    let vmsplice = measure(true, chunk, total, repeat).ok();
    let default = atoll_pipe(chunk, total, repeat, false);
    let atoll_splits_off = default
        .as_ref()
        .ok()
        .and_then(|_| atoll_pipe(chunk, total, repeat, true).ok());
    let (atoll_pipe, atoll_skipped) = match default {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    };
    Ok(PipeResults {
        chunk,
        total,
        linux_pipe,
        vmsplice,
        atoll_pipe,
        atoll_skipped,
        atoll_splits_off,
    })
}

fn gbs(v: f64) -> String {
    format!("{:.2} GB/s", v / 1e9)
}

/// The report as printed.
pub fn table(r: &PipeResults) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Pipe throughput, {} KiB writes, {} MiB per run, best of the runs:",
        r.chunk >> 10,
        r.total >> 20
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>12} {:>10}",
        "pipe", "throughput", "vs Linux"
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>12} {:>9.2}x",
        "Linux",
        gbs(r.linux_pipe),
        1.0
    );
    match r.vmsplice {
        Some(v) => {
            let _ = writeln!(
                out,
                "  {:<12} {:>12} {:>9.2}x",
                "vmsplice",
                gbs(v),
                v / r.linux_pipe
            );
        }
        None => {
            let _ = writeln!(out, "  {:<12} {:>12}", "vmsplice", "failed");
        }
    }
    match (r.atoll_pipe, &r.atoll_skipped) {
        (Some(v), _) => {
            let _ = writeln!(
                out,
                "  {:<12} {:>12} {:>9.2}x",
                "atoll",
                gbs(v),
                v / r.linux_pipe
            );
            if let Some(off) = r.atoll_splits_off {
                let _ = writeln!(
                    out,
                    "  {:<12} {:>12} {:>9.2}x  (ATOLL_PIPE_SPLIT=off, not the default)",
                    "no split",
                    gbs(off),
                    off / r.linux_pipe
                );
            }
            let _ = writeln!(
                out,
                "  target: atoll ≥ 2× Linux: {}",
                if v >= 2.0 * r.linux_pipe {
                    "met"
                } else {
                    "MISSED"
                }
            );
        }
        (None, why) => {
            let _ = writeln!(
                out,
                "  {:<12} not measured: {}",
                "atoll",
                why.as_deref().unwrap_or("?")
            );
        }
    }
    out
}

/// `--pipe-probe CHUNK,TOTAL,REPEAT` inside an instance: print bytes/s.
pub fn probe(spec: &str) -> anyhow::Result<()> {
    let v: Vec<u64> = spec
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow::anyhow!("--pipe-probe wants CHUNK,TOTAL,REPEAT, not {spec:?}"))?;
    let [chunk, total, repeat] = v[..] else {
        anyhow::bail!("--pipe-probe wants CHUNK,TOTAL,REPEAT, not {spec:?}");
    };
    if chunk == 0 || total == 0 {
        anyhow::bail!("--pipe-probe: sizes must be positive");
    }
    println!(
        "{}",
        measure(false, chunk as usize, total, repeat as usize)?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linux_pipe_moves_every_byte_and_vmsplice_too() {
        assert!(measure(false, 64 << 10, 4 << 20, 1).unwrap() > 0.0);
        assert!(measure(true, 64 << 10, 4 << 20, 1).unwrap() > 0.0);
    }

    #[test]
    fn the_report_names_the_target() {
        let r = PipeResults {
            chunk: 1 << 20,
            total: 64 << 20,
            linux_pipe: 2e9,
            vmsplice: Some(4e9),
            atoll_pipe: Some(3e9),
            atoll_skipped: None,
            atoll_splits_off: Some(9e9),
        };
        let t = table(&r);
        assert!(t.contains("1.50x") && t.contains("MISSED"), "{t}");
        // Splits off is shown beside the default, not judged.
        assert!(t.contains("no split") && t.contains("4.50x"), "{t}");
        let r = PipeResults {
            atoll_pipe: None,
            atoll_skipped: Some("no instance".into()),
            ..r
        };
        assert!(table(&r).contains("not measured: no instance"));
    }

    #[test]
    fn bad_probe_specs_are_errors() {
        assert!(probe("1,2").is_err());
        assert!(probe("a,b,c").is_err());
        assert!(probe("0,1,1").is_err());
    }
}
