//! Message traces: writing the file `atoll run --trace` asked for, and
//! `atoll trace summarize FILE`, which reads it back and prints per
//! operation the count, latency percentiles and a log₂ histogram of
//! service times (the server-side events; each message is also on its
//! client's track).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};

use anyhow::{Context, Result};
use atoll_server::trace::Sink;
use serde::Deserialize;

use crate::args::TraceCommand;

/// Write `sink` as a Chrome trace into `file`.
pub fn write(sink: &Sink, file: File) -> Result<()> {
    let (events, dropped) = sink.counts();
    let mut out = BufWriter::new(file);
    sink.write_chrome(&mut out, atoll_server::fs::op_name)?;
    out.flush()?;
    if dropped > 0 {
        eprintln!(
            "atoll: the trace kept {events} messages and dropped {dropped} (at most {} per server)",
            atoll_server::trace::EVENTS_PER_SERVER
        );
    }
    Ok(())
}

pub fn run(cmd: TraceCommand) -> Result<i32> {
    match cmd {
        TraceCommand::Summarize { file } => {
            let f = File::open(&file).with_context(|| format!("cannot open {}", file.display()))?;
            let trace: Trace = serde_json::from_reader(BufReader::new(f)).with_context(|| {
                format!(
                    "{} is not a trace written by atoll run --trace",
                    file.display()
                )
            })?;
            print!("{}", summarize(&trace));
            Ok(0)
        }
    }
}

#[derive(Deserialize)]
struct Trace {
    #[serde(rename = "traceEvents")]
    events: Vec<Event>,
    #[serde(rename = "otherData", default)]
    other: Option<Other>,
}

#[derive(Deserialize, Default)]
struct Other {
    #[serde(default)]
    dropped_events: u64,
}

#[derive(Deserialize)]
struct Event {
    ph: String,
    #[serde(default)]
    cat: String,
    #[serde(default)]
    name: String,
    /// Microseconds.
    #[serde(default)]
    dur: f64,
    #[serde(default)]
    args: Option<Args>,
}

#[derive(Deserialize, Default)]
struct Args {
    #[serde(default)]
    coalesced: bool,
    #[serde(default)]
    invalidations: u64,
    #[serde(default)]
    ok: Option<bool>,
}

#[derive(Default)]
struct OpSummary {
    /// Service times in nanoseconds.
    ns: Vec<u64>,
    coalesced: u64,
    invalidations: u64,
    errors: u64,
}

/// Nearest-rank percentile of sorted `v`.
fn percentile(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
}

fn summarize(t: &Trace) -> String {
    let mut ops: BTreeMap<&str, OpSummary> = BTreeMap::new();
    for e in t.events.iter().filter(|e| e.ph == "X" && e.cat == "server") {
        let s = ops.entry(e.name.as_str()).or_default();
        s.ns.push((e.dur * 1000.0).round() as u64);
        if let Some(a) = &e.args {
            s.coalesced += u64::from(a.coalesced);
            s.invalidations += a.invalidations;
            s.errors += u64::from(a.ok == Some(false));
        }
    }
    let total: usize = ops.values().map(|s| s.ns.len()).sum();
    let mut out = format!("{total} messages");
    if let Some(d) = t.other.as_ref().filter(|o| o.dropped_events > 0) {
        let _ = write!(out, " ({} more dropped while recording)", d.dropped_events);
    }
    out.push_str("\n\n");
    let _ = writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "operation",
        "count",
        "mean µs",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "max µs",
        "coalesced",
        "inval",
        "errors"
    );
    let mut by_count: Vec<(&&str, &mut OpSummary)> = ops.iter_mut().collect();
    by_count.sort_by(|a, b| b.1.ns.len().cmp(&a.1.ns.len()).then(a.0.cmp(b.0)));
    let mut histograms = String::new();
    for (name, s) in by_count {
        s.ns.sort_unstable();
        let mean = s.ns.iter().sum::<u64>() / s.ns.len().max(1) as u64;
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}",
            name,
            s.ns.len(),
            us(mean),
            us(percentile(&s.ns, 50.0)),
            us(percentile(&s.ns, 90.0)),
            us(percentile(&s.ns, 99.0)),
            us(*s.ns.last().unwrap_or(&0)),
            s.coalesced,
            s.invalidations,
            s.errors
        );
        histograms.push_str(&histogram(name, &s.ns));
    }
    out.push('\n');
    out.push_str(&histograms);
    out
}

/// Log₂ buckets of service time, from the first to the last non-empty one.
fn histogram(name: &str, sorted_ns: &[u64]) -> String {
    let bucket = |ns: u64| 64 - ns.max(1).leading_zeros() as usize - 1; // floor(log2)
    let mut counts = [0u64; 64];
    for &ns in sorted_ns {
        counts[bucket(ns)] += 1;
    }
    let (Some(lo), Some(hi)) = (
        counts.iter().position(|&c| c > 0),
        counts.iter().rposition(|&c| c > 0),
    ) else {
        return String::new();
    };
    let most = *counts.iter().max().unwrap_or(&1);
    let mut out = format!("{name}\n");
    for (b, &n) in counts.iter().enumerate().take(hi + 1).skip(lo) {
        let bar = "#".repeat(((n * 40).div_ceil(most)) as usize);
        let _ = writeln!(
            out,
            "  {:>10} .. {:<10} {:>9}  {bar}",
            format!("{}µs", us(1 << b)),
            format!("{}µs", us(1 << (b + 1))),
            n
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(json: &str) -> Trace {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn percentiles_and_histograms_come_from_server_events() {
        let mut evs = vec![
            r#"{"ph":"M","name":"thread_name","pid":0,"tid":0,"args":{"name":"server 0"}}"#
                .to_string(),
        ];
        for (i, dur) in [1.0, 2.0, 3.0, 4.0, 100.0].iter().enumerate() {
            evs.push(format!(
                r#"{{"ph":"X","cat":"server","name":"Open","ts":{i},"dur":{dur},"pid":0,"tid":0,"args":{{"coalesced":true,"invalidations":1,"ok":true}}}}"#
            ));
            // The same message on the client track must not count twice.
            evs.push(format!(
                r#"{{"ph":"X","cat":"client","name":"Open","ts":{i},"dur":{dur},"pid":9,"tid":0}}"#
            ));
        }
        evs.push(r#"{"ph":"X","cat":"server","name":"Lookup","ts":9,"dur":0.5,"pid":0,"tid":0,"args":{"ok":false}}"#.into());
        let t = trace(&format!(
            r#"{{"traceEvents":[{}],"otherData":{{"dropped_events":3}}}}"#,
            evs.join(",")
        ));
        let s = summarize(&t);
        assert!(s.starts_with("6 messages (3 more dropped"), "{s}");
        let open = s.lines().find(|l| l.starts_with("Open ")).unwrap();
        let cells: Vec<&str> = open.split_whitespace().collect();
        // count, mean, p50, p90, p99, max, coalesced, invalidations, errors
        assert_eq!(
            cells[1..],
            ["5", "22.00", "3.00", "100.00", "100.00", "100.00", "5", "5", "0"]
        );
        let lookup = s.lines().find(|l| l.starts_with("Lookup ")).unwrap();
        assert!(lookup.ends_with(" 1"), "{lookup}");
        // Histogram: 100 µs lands in [65.536, 131.072) µs.
        assert!(s.contains("65.54µs .. 131.07µs"), "{s}");
    }

    #[test]
    fn percentile_is_nearest_rank() {
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[1, 2, 3, 4], 50.0), 2);
        assert_eq!(percentile(&[1, 2, 3, 4], 51.0), 3);
    }
}
