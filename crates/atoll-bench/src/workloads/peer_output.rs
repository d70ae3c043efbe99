//! Parsers for the peer benchmarks' own output: each program's metric, in
//! its own unit, and the amount of work it did. The tests parse output
//! captured from the Debian packages (bookworm: dbench 4.00, fs_mark 3.3,
//! fio 3.33, PostMark 1.51) in `fixtures/`.

use serde_json::Value;

use crate::util::{BenchError, Result};

/// What a peer program reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeerFigures {
    /// The program's own metric ([`super::Workload::native_metric`]).
    pub native: f64,
    /// Operations the program counted (dbench operations, fs_mark files,
    /// fio I/Os, postmark transactions).
    pub ops: u64,
}

fn unparsable(program: &str, what: &str, output: &str) -> BenchError {
    let tail: Vec<&str> = output.lines().rev().take(5).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    BenchError::Tool(format!(
        "{program}: no {what} in its output (ends: {:?})",
        tail.join(" / ")
    ))
}

/// dbench: `Throughput 396.933 MB/sec  2 clients …` and the operation
/// table (`NTCreateX 23996 0.012 8.117`, …) whose counts are summed.
pub fn dbench(output: &str) -> Result<PeerFigures> {
    let native = output
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "Throughput").then_some(())?;
            let v: f64 = w.next()?.parse().ok()?;
            (w.next()? == "MB/sec").then_some(v)
        })
        // dbench prints 0 when the run was too short to sample.
        .filter(|&v| v > 0.0)
        .ok_or_else(|| unparsable("dbench", "non-zero `Throughput … MB/sec`", output))?;
    let mut ops = 0;
    let mut in_table = false;
    for l in output.lines() {
        let t = l.trim();
        if t.starts_with("----") {
            in_table = true;
            continue;
        }
        if in_table {
            let w: Vec<&str> = t.split_whitespace().collect();
            match w.as_slice() {
                [_, count, _, _] => match count.parse::<u64>() {
                    Ok(n) => ops += n,
                    Err(_) => break,
                },
                _ => break,
            }
        }
    }
    Ok(PeerFigures { native, ops })
}

/// fs_mark: one row per loop (`FSUse% Count Size Files/sec App Overhead`),
/// `Count` cumulative. The run's rate is all files over the loops' summed
/// times (each loop's files ÷ its own rate).
pub fn fs_mark(output: &str) -> Result<PeerFigures> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for l in output.lines() {
        if l.trim_start().starts_with("FSUse%") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let w: Vec<&str> = l.split_whitespace().collect();
        if let [_, count, _, rate, _] = w.as_slice() {
            if let (Ok(c), Ok(r)) = (count.parse::<u64>(), rate.parse::<f64>()) {
                rows.push((c, r));
            }
        }
    }
    let mut seconds = 0.0;
    let mut previous = 0;
    for &(count, rate) in &rows {
        if rate <= 0.0 || count < previous {
            return Err(unparsable("fs_mark", "valid loop rows", output));
        }
        seconds += (count - previous) as f64 / rate;
        previous = count;
    }
    if rows.is_empty() || seconds <= 0.0 {
        return Err(unparsable("fs_mark", "loop rows", output));
    }
    Ok(PeerFigures {
        native: previous as f64 / seconds,
        ops: previous,
    })
}

/// One direction (`read` or `write`) of one fio job group.
struct FioSide {
    io_bytes: f64,
    runtime_ms: f64,
    iops: f64,
    total_ios: u64,
}

fn fio_sides(output: &str) -> Result<Vec<FioSide>> {
    // fio prints notes (e.g. "fio: file … exceeds …") before the JSON.
    let start = output
        .find('{')
        .ok_or_else(|| unparsable("fio", "JSON", output))?;
    let v: Value = serde_json::from_str(&output[start..])
        .map_err(|e| BenchError::Tool(format!("fio: unreadable JSON output: {e}")))?;
    let jobs = v["jobs"]
        .as_array()
        .filter(|j| !j.is_empty())
        .ok_or_else(|| unparsable("fio", "jobs", output))?;
    let mut sides = Vec::new();
    for job in jobs {
        if job["error"].as_i64().unwrap_or(0) != 0 {
            return Err(BenchError::Tool(format!(
                "fio: job {} reported error {}",
                job["jobname"], job["error"]
            )));
        }
        for dir in ["read", "write"] {
            let s = &job[dir];
            let num = |k: &str| s[k].as_f64().unwrap_or(0.0);
            sides.push(FioSide {
                io_bytes: num("io_bytes"),
                runtime_ms: num("runtime"),
                iops: num("iops"),
                total_ios: s["total_ios"].as_u64().unwrap_or(0),
            });
        }
    }
    Ok(sides)
}

/// fio `--output-format=json --group_reporting`, random read/write: the
/// reads' and writes' IOPS together.
pub fn fio_iops(output: &str) -> Result<PeerFigures> {
    let sides = fio_sides(output)?;
    let native: f64 = sides.iter().map(|s| s.iops).sum();
    let ops = sides.iter().map(|s| s.total_ios).sum();
    if native <= 0.0 {
        return Err(unparsable("fio", "I/O", output));
    }
    Ok(PeerFigures { native, ops })
}

/// fio, sequential write then read (two stonewalled groups): MiB moved
/// over the groups' summed run times.
pub fn fio_bandwidth(output: &str) -> Result<PeerFigures> {
    let sides = fio_sides(output)?;
    let bytes: f64 = sides.iter().map(|s| s.io_bytes).sum();
    // fio's run times are whole milliseconds; a group too short to count
    // one is taken as one.
    let ms: f64 = sides
        .iter()
        .filter(|s| s.io_bytes > 0.0)
        .map(|s| s.runtime_ms.max(1.0))
        .sum();
    if bytes <= 0.0 {
        return Err(unparsable("fio", "I/O", output));
    }
    Ok(PeerFigures {
        native: bytes / (1024.0 * 1024.0) / (ms / 1000.0),
        ops: sides.iter().map(|s| s.total_ios).sum(),
    })
}

/// PostMark's own figure: `N seconds of transactions (R per second)`.
/// Its clock counts whole seconds (and a phase under one second as one),
/// so the harness times the transaction phase itself by PostMark's
/// progress output ([`postmark_phase`]) and keeps this for reference.
pub fn postmark_printed_rate(output: &str) -> Result<f64> {
    output
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("seconds of transactions (")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .ok_or_else(|| unparsable("postmark", "transaction rate", output))
}

/// Where PostMark's transaction phase starts and ends in its output
/// (`Performing transactions` … `Done`): byte offsets, so a reader that
/// notes when each byte arrived can time the phase.
pub fn postmark_phase(output: &str) -> Option<(usize, usize)> {
    const START: &str = "Performing transactions";
    let start = output.find(START)?;
    let done = output[start..].find("Done")? + start;
    Some((start + START.len(), done))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DBENCH: &str = include_str!("fixtures/dbench-2-clients.txt");
    const FS_MARK: &str = include_str!("fixtures/fs_mark-2-dirs-2-loops.txt");
    const FIO_RANDRW: &str = include_str!("fixtures/fio-randrw-2-jobs.json");
    const FIO_SEQ: &str = include_str!("fixtures/fio-seq-2-jobs.json");
    const POSTMARK: &str = include_str!("fixtures/postmark.txt");

    #[test]
    fn dbench_throughput_and_operation_counts() {
        let f = dbench(DBENCH).unwrap();
        assert_eq!(f.native, 396.933);
        // The sixteen rows of the operation table.
        assert_eq!(
            f.ops,
            23996
                + 17692
                + 1015
                + 4789
                + 2
                + 2
                + 21673
                + 3923
                + 3981
                + 1954
                + 8373
                + 12612
                + 37566
                + 78
                + 78
                + 1684
        );
        assert!(dbench("dbench version 4.00\n").is_err());
        let unsampled = DBENCH.replace("Throughput 396.933 MB/sec", "Throughput 0 MB/sec");
        assert!(dbench(&unsampled).is_err());
    }

    #[test]
    fn fs_mark_rate_is_all_files_over_the_loops_summed_times() {
        let f = fs_mark(FS_MARK).unwrap();
        assert_eq!(f.ops, 800);
        let want = 800.0 / (400.0 / 26123.1 + 400.0 / 21819.8);
        assert!((f.native - want).abs() < 1e-6, "{} vs {want}", f.native);
        // Between the two loops' rates, nearer the slower one.
        assert!(f.native > 21819.8 && f.native < 26123.1);
        assert!(fs_mark("Must specify at least one directory with -d switch\n").is_err());
    }

    #[test]
    fn fio_randrw_adds_read_and_write_iops() {
        let f = fio_iops(FIO_RANDRW).unwrap();
        assert!((f.native - (23595.238095 + 25166.666667)).abs() < 1e-3);
        assert_eq!(f.ops, 1982 + 2114);
    }

    #[test]
    fn fio_seq_is_bytes_over_both_groups_run_times() {
        let f = fio_bandwidth(FIO_SEQ).unwrap();
        // 32 MiB written in 8 ms, 32 MiB read in 3 ms.
        let want = 64.0 / (11.0 / 1000.0);
        assert!((f.native - want).abs() < 1e-6, "{} vs {want}", f.native);
        assert_eq!(f.ops, 64);
    }

    #[test]
    fn fio_notes_before_the_json_are_skipped_and_errors_reported() {
        let noted = format!("fio: note: something\n{FIO_RANDRW}");
        assert!(fio_iops(&noted).is_ok());
        let failed = FIO_RANDRW.replacen("\"error\" : 0", "\"error\" : 5", 1);
        let e = fio_iops(&failed).unwrap_err().to_string();
        assert!(e.contains("error 5"), "{e}");
        assert!(fio_iops("fio: unrecognized option\n").is_err());
    }

    #[test]
    fn postmark_printed_rate_and_transaction_phase() {
        assert_eq!(postmark_printed_rate(POSTMARK).unwrap(), 2000.0);
        let (a, b) = postmark_phase(POSTMARK).unwrap();
        assert_eq!(&POSTMARK[a..b], "..........");
        assert!(postmark_phase("PostMark v1.51 : 8/14/01\n").is_none());
    }
}
