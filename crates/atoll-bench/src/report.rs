//! Results: derived metrics (ratio vs tmpfs, speedup over P = 1), the
//! targets of the issue, the terminal table, JSON and SVG charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::rpc::RpcResults;

/// One (workload, system, P) measurement.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RunResult {
    pub workload: String,
    pub system: String,
    pub procs: usize,
    pub ops: u64,
    pub elapsed_s: f64,
    /// Throughput: operations per second, or for a peer benchmark its
    /// program's own metric (`native_value`).
    pub ops_per_sec: f64,
    /// A peer benchmark's own metric and its unit (`MB/s` for dbench,
    /// `files/s` for fs_mark, `IOPS` for fio-randrw, `MiB/s` for fio-seq,
    /// `transactions/s` for postmark, `entries/s` for extract-debian).
    pub native_metric: Option<String>,
    pub native_value: Option<f64>,
    pub ratio_vs_tmpfs: Option<f64>,
    pub speedup_vs_p1: Option<f64>,
    pub messages_per_op: Option<f64>,
    pub traps: Option<u64>,
    pub traps_per_op: Option<f64>,
    /// Traps after warm-up, per operation: every trap but the first of each
    /// site that was then rewritten (rewriting is per process, so each new
    /// program image warms up again), i.e. the traps that recur.
    pub steady_traps_per_op: Option<f64>,
    /// Traps per system call number (which entry points escaped the libc
    /// wrappers).
    pub traps_by_syscall: Option<BTreeMap<u64, u64>>,
    /// Counter differences over the run, as the system reported them
    /// (per-server load for atoll).
    pub counters: Option<serde_json::Value>,
    pub detail: BTreeMap<String, u64>,
    /// Set when the run or its check failed; the numbers are then zero.
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Skipped {
    pub what: String,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Startup {
    pub system: String,
    pub spawns: usize,
    pub plain_us: f64,
    pub with_system_env_us: f64,
    pub added_us: f64,
}

/// A goal from the issue and how the measurement compares.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TargetCheck {
    pub name: String,
    pub goal: String,
    pub value: Option<f64>,
    /// `value / threshold` for "at least" goals, `threshold / value` for
    /// "at most" goals: ≥ 1 means met, 0.5 means missed by 2×.
    pub score: Option<f64>,
    pub met: Option<bool>,
    pub note: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    pub machine: serde_json::Value,
    pub size: String,
    pub results: Vec<RunResult>,
    pub skipped: Vec<Skipped>,
    pub startup: Vec<Startup>,
    pub rpc: Option<RpcResults>,
    pub targets: Vec<TargetCheck>,
}

/// Fill `ratio_vs_tmpfs` and `speedup_vs_p1`.
pub fn derive(results: &mut [RunResult]) {
    let key = |r: &RunResult| (r.workload.clone(), r.system.clone(), r.procs);
    let ok: BTreeMap<_, f64> = results
        .iter()
        .filter(|r| r.error.is_none() && r.ops_per_sec > 0.0)
        .map(|r| (key(r), r.ops_per_sec))
        .collect();
    for r in results.iter_mut().filter(|r| r.error.is_none()) {
        let tmpfs = ok.get(&(r.workload.clone(), "tmpfs".to_string(), r.procs));
        r.ratio_vs_tmpfs = tmpfs.map(|t| r.ops_per_sec / t);
        let p1 = ok.get(&(r.workload.clone(), r.system.clone(), 1));
        r.speedup_vs_p1 = p1.map(|b| r.ops_per_sec / b);
    }
}

fn at_least(
    name: &str,
    goal: &str,
    value: Option<f64>,
    threshold: f64,
    note: String,
) -> TargetCheck {
    let score = value.map(|v| v / threshold);
    TargetCheck {
        name: name.into(),
        goal: goal.into(),
        value,
        score,
        met: score.map(|s| s >= 1.0),
        note,
    }
}

fn find<'a>(rs: &'a [RunResult], w: &str, sys: &str, p: usize) -> Option<&'a RunResult> {
    rs.iter()
        .find(|r| r.workload == w && r.system == sys && r.procs == p && r.error.is_none())
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The targets, evaluated on what was measured (at P = 1).
pub fn targets(rs: &[RunResult], rpc: Option<&RpcResults>) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    // Targets are for atoll with all its techniques: runs with some
    // switched off (`--without`, `--ablation`) are only compared with it.
    let systems: Vec<String> = {
        let mut v: Vec<String> = rs
            .iter()
            .map(|r| r.system.clone())
            .filter(|s| !s.contains("-no-"))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let split = systems.iter().find(|s| s.starts_with("atoll-split"));
    let timeshare = systems.iter().find(|s| s.starts_with("atoll-timeshare"));
    let ratio = |w: &str, s: Option<&String>| {
        s.and_then(|s| find(rs, w, s, 1))
            .and_then(|r| r.ratio_vs_tmpfs)
    };
    for w in ["creates", "renames", "directories"] {
        out.push(at_least(
            &format!("split-{w}"),
            &format!("atoll-split ≥ 3× tmpfs on {w} at P=1"),
            ratio(w, split),
            3.0,
            String::new(),
        ));
    }
    out.push(at_least(
        "split-writes",
        "atoll-split ≥ 1× tmpfs on writes at P=1",
        ratio("writes", split),
        1.0,
        String::new(),
    ));
    let ts: Vec<f64> = timeshare
        .map(|s| {
            rs.iter()
                .filter(|r| &r.system == s && r.procs == 1)
                // Hare's file-system suite only: processes and pipes are
                // reported beside it, not folded into its target.
                .filter(|r| {
                    crate::workloads::Workload::from_name(&r.workload)
                        .is_some_and(|w| crate::workloads::Workload::ALL.contains(&w))
                })
                .filter_map(|r| r.ratio_vs_tmpfs)
                .collect()
        })
        .unwrap_or_default();
    out.push(at_least(
        "timeshare-median",
        "atoll-timeshare median ≥ 0.5× tmpfs (P=1, all workloads)",
        median(ts.clone()),
        0.5,
        format!("{} workloads", ts.len()),
    ));
    for s in systems.iter().filter(|s| s.starts_with("atoll")) {
        let mut worst: Option<(f64, String)> = None;
        for r in rs
            .iter()
            .filter(|r| &r.system == s && r.procs == 1 && r.error.is_none())
        {
            let meta =
                crate::workloads::Workload::from_name(&r.workload).is_some_and(|w| w.is_metadata());
            if !meta {
                continue;
            }
            if let Some(f) = find(rs, &r.workload, "fuse", 1) {
                let x = r.ops_per_sec / f.ops_per_sec;
                let better = match &worst {
                    None => true,
                    Some((v, _)) => x < *v,
                };
                if better {
                    worst = Some((x, r.workload.clone()));
                }
            }
        }
        let note = worst
            .as_ref()
            .map(|(_, w)| format!("worst metadata workload: {w}"))
            .unwrap_or_default();
        out.push(at_least(
            &format!("{s}-vs-fuse"),
            &format!("{s} ≥ 10× FUSE on every metadata workload at P=1"),
            worst.map(|(v, _)| v),
            10.0,
            note,
        ));
    }
    // The peers' own benchmarks (their programs' metrics): atoll as users
    // get it, `atoll run` with no options, at least as fast as tmpfs.
    for w in crate::workloads::Workload::PEERS {
        let name = w.name();
        let default = systems.iter().find(|s| s.as_str() == "atoll");
        out.push(at_least(
            &format!("atoll-{name}"),
            &format!("atoll ≥ 1× tmpfs on {name} at P=1"),
            ratio(name, default),
            1.0,
            w.native_metric()
                .map(|u| format!("{name}'s own {u}"))
                .unwrap_or_default(),
        ));
    }
    // Traps that recur (after each site's first, which rewrites it), on
    // every workload of the default system: the worst one decides.
    let default = systems.iter().find(|s| s.as_str() == "atoll");
    let worst_traps = default.and_then(|s| {
        rs.iter()
            .filter(|r| &r.system == s && r.procs == 1 && r.error.is_none())
            .filter_map(|r| r.steady_traps_per_op.map(|t| (t, r.workload.clone())))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    });
    out.push(TargetCheck {
        name: "atoll-traps".into(),
        goal: "atoll < 0.05 traps/op after warm-up, every workload, P=1".into(),
        value: worst_traps.as_ref().map(|(t, _)| *t),
        score: worst_traps.as_ref().map(|(t, _)| 0.05 / t.max(1e-12)),
        met: worst_traps.as_ref().map(|(t, _)| *t < 0.05),
        note: worst_traps
            .map(|(_, w)| format!("worst: {w}"))
            .unwrap_or_default(),
    });
    let (spin, raw) = rpc
        .map(|r| (r.atoll_spin_ns, r.raw_pingpong_ns))
        .unwrap_or((None, None));
    let x = spin.zip(raw).map(|(s, r)| s / r);
    // Issue target: the spin round trip within 1.5× the raw ping-pong of
    // the same run (a message costs at most half a line bounce more).
    out.push(TargetCheck {
        name: "rpc-spin".into(),
        goal: "atoll spin round trip ≤ 1.5× raw ping-pong".into(),
        value: x,
        score: x.map(|x| 1.5 / x),
        met: x.map(|x| x <= 1.5),
        note: "value = atoll spin / raw ping-pong".into(),
    });
    out
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

/// The terminal table.
pub fn table(rep: &Report) -> String {
    let mut s = String::new();
    if !rep.results.is_empty() {
        let _ = writeln!(
            s,
            "{:<13} {:<18} {:>3} {:>10} {:>8} {:>12} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "workload",
            "system",
            "P",
            "ops",
            "secs",
            "ops/s",
            "×tmpfs",
            "speedup",
            "msg/op",
            "trap/op",
            "steady"
        );
    }
    for r in &rep.results {
        if let Some(e) = &r.error {
            let _ = writeln!(
                s,
                "{:<13} {:<18} {:>3} FAILED: {}",
                r.workload,
                r.system,
                r.procs,
                e.lines().next().unwrap_or("")
            );
            continue;
        }
        let _ = writeln!(
            s,
            "{:<13} {:<18} {:>3} {:>10} {:>8.3} {:>12.0} {:>7} {:>7} {:>7} {:>7} {:>7}",
            r.workload,
            r.system,
            r.procs,
            r.ops,
            r.elapsed_s,
            r.ops_per_sec,
            opt(r.ratio_vs_tmpfs, 2),
            opt(r.speedup_vs_p1, 2),
            opt(r.messages_per_op, 2),
            opt(r.traps_per_op, 2),
            opt(r.steady_traps_per_op, 2)
        );
    }
    for k in &rep.skipped {
        let _ = writeln!(s, "skipped {}: {}", k.what, k.reason);
    }
    for st in &rep.startup {
        let _ = writeln!(
            s,
            "start-up ({}): /bin/true {:.0} µs plain, {:.0} µs with the system's environment (+{:.0} µs)",
            st.system, st.plain_us, st.with_system_env_us, st.added_us
        );
    }
    if let Some(r) = &rep.rpc {
        s.push_str(&rpc_table(r));
    }
    if !rep.targets.is_empty() {
        let _ = writeln!(s, "targets:");
        for t in &rep.targets {
            let verdict = match (t.met, t.score) {
                (Some(true), _) => "met".to_string(),
                (Some(false), Some(sc)) => format!("MISSED by {:.2}×", 1.0 / sc.max(1e-12)),
                _ => "not measured".to_string(),
            };
            let _ = writeln!(
                s,
                "  {:<60} {:>9}  {}{}",
                t.goal,
                opt(t.value, 2),
                verdict,
                if t.note.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", t.note)
                }
            );
        }
    }
    s
}

/// The technique switched off in `system` on top of `base`:
/// (`atoll-timeshare`, `atoll-timeshare-no-dir-cache`) → `no-dir-cache`.
fn switched_off<'a>(base: &str, system: &'a str) -> Option<&'a str> {
    let off = system.strip_prefix(base)?.strip_prefix('-')?;
    (off.starts_with("no-") && !off[3..].contains("-no-")).then_some(off)
}

/// One cell of the ablation: a run with technique `off` switched off on
/// top of configuration `base`, against `base` itself.
#[derive(Clone, Debug, PartialEq)]
pub struct AblationCell {
    pub workload: String,
    pub base: String,
    pub procs: usize,
    /// `no-dir-cache`, …
    pub off: String,
    /// Throughput with the technique off ÷ with it on.
    pub fraction: f64,
}

/// Every ablation cell that was measured (see [`ablation_table`]), for
/// the HTML report's chart.
pub fn ablation_cells(rep: &Report) -> Vec<AblationCell> {
    let (offs, bases) = ablation_sets(rep);
    let mut out = Vec::new();
    for base in rep
        .results
        .iter()
        .filter(|r| r.error.is_none() && r.ops_per_sec > 0.0 && bases.contains(&r.system.as_str()))
    {
        for off in &offs {
            let name = format!("{}-{off}", base.system);
            if let Some(r) = find(&rep.results, &base.workload, &name, base.procs) {
                out.push(AblationCell {
                    workload: base.workload.clone(),
                    base: base.system.clone(),
                    procs: base.procs,
                    off: off.to_string(),
                    fraction: r.ops_per_sec / base.ops_per_sec,
                });
            }
        }
    }
    out
}

/// The techniques switched off in some run and the configurations they
/// were switched off from.
fn ablation_sets(rep: &Report) -> (Vec<&str>, Vec<&str>) {
    let mut names: Vec<&str> = Vec::new();
    for r in rep.results.iter().filter(|r| r.system.starts_with("atoll")) {
        if !names.contains(&r.system.as_str()) {
            names.push(&r.system);
        }
    }
    let mut offs: Vec<&str> = Vec::new();
    let mut bases: Vec<&str> = Vec::new();
    for &b in &names {
        for &n in &names {
            if let Some(off) = switched_off(b, n) {
                if !offs.contains(&off) {
                    offs.push(off);
                }
                if !bases.contains(&b) {
                    bases.push(b);
                }
            }
        }
    }
    (offs, bases)
}

/// What each technique buys (Hare §5.4, Figs. 5-5 to 5-8): for every run
/// with a technique switched off, its throughput as a fraction of the same
/// configuration, workload and P with everything else on, and its messages
/// per operation beside the full configuration's. Empty without such runs.
pub fn ablation_table(rep: &Report) -> String {
    let (offs, bases) = ablation_sets(rep);
    let mut s = String::new();
    if offs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "technique effect: ops/s with the technique off ÷ with everything on (msg/op off; on):"
    );
    let _ = write!(
        s,
        "{:<13} {:<18} {:>3} {:>10} {:>6}",
        "workload", "system", "P", "on ops/s", "msg/op"
    );
    for off in &offs {
        let _ = write!(s, " {:>20}", off);
    }
    s.push('\n');
    for base in rep
        .results
        .iter()
        .filter(|r| r.error.is_none() && bases.contains(&r.system.as_str()))
    {
        let _ = write!(
            s,
            "{:<13} {:<18} {:>3} {:>10.0} {:>6}",
            base.workload,
            base.system,
            base.procs,
            base.ops_per_sec,
            opt(base.messages_per_op, 2)
        );
        for off in &offs {
            let name = format!("{}-{off}", base.system);
            let cell = match find(&rep.results, &base.workload, &name, base.procs) {
                Some(r) if base.ops_per_sec > 0.0 => format!(
                    "{:.2}× ({})",
                    r.ops_per_sec / base.ops_per_sec,
                    opt(r.messages_per_op, 2)
                ),
                _ => "-".to_string(),
            };
            let _ = write!(s, " {cell:>20}");
        }
        s.push('\n');
    }
    s
}

pub fn rpc_table(r: &RpcResults) -> String {
    let mut s = String::new();
    let cyc = |k: &str| {
        r.cycles
            .get(k)
            .map_or_else(|| "-".into(), |c| format!("{c:.0}"))
    };
    let _ = writeln!(
        s,
        "{:<28} {:>10} {:>10}",
        "round trip / call", "ns", "cycles"
    );
    let rows = [
        ("atoll (server spinning)", r.atoll_spin_ns, "atoll_spin"),
        ("atoll (server blocking)", r.atoll_block_ns, "atoll_block"),
        (
            "raw shared-memory ping-pong",
            r.raw_pingpong_ns,
            "raw_pingpong",
        ),
        ("null system call", r.null_syscall_ns, "null_syscall"),
        ("pipe ping-pong", r.pipe_ns, "pipe"),
        ("unix socket ping-pong", r.unix_socket_ns, "unix_socket"),
    ];
    for (name, ns, key) in rows {
        let _ = writeln!(s, "{:<28} {:>10} {:>10}", name, opt(ns, 0), cyc(key));
    }
    if let Some(m) = r.atoll_spin_median_ns {
        let _ = writeln!(
            s,
            "(best of {} trials each; median atoll spin {m:.0} ns)",
            crate::rpc::TRIALS
        );
    }
    let _ = writeln!(
        s,
        "{:<28} {:>10} {:>10}\n{:<28} {:>10} {:>10}",
        "fos round trip (published)",
        "",
        r.fos_round_trip_cycles,
        "Hare messaging per op (pub.)",
        "",
        format!("~{}", r.hare_cycles_per_op)
    );
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// SVG charts: `ratio-p<P>.svg` (ops/s relative to tmpfs per workload, one
/// bar per system) and `scaling-<system>.svg` (speedup over P = 1).
pub fn plot(rep: &Report, dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let ok: Vec<&RunResult> = rep.results.iter().filter(|r| r.error.is_none()).collect();
    let mut procs: Vec<usize> = ok.iter().map(|r| r.procs).collect();
    procs.sort();
    procs.dedup();
    let mut systems: Vec<String> = ok.iter().map(|r| r.system.clone()).collect();
    systems.sort();
    systems.dedup();
    let mut workloads: Vec<String> = Vec::new();
    for r in &ok {
        if !workloads.contains(&r.workload) {
            workloads.push(r.workload.clone());
        }
    }
    for &p in &procs {
        let path = dir.join(format!("ratio-p{p}.svg"));
        let bars: Vec<(usize, usize, f64)> = ok
            .iter()
            .filter(|r| r.procs == p)
            .filter_map(|r| {
                let w = workloads.iter().position(|x| *x == r.workload)?;
                let s = systems.iter().position(|x| *x == r.system)?;
                Some((w, s, r.ratio_vs_tmpfs?))
            })
            .collect();
        if bars.is_empty() {
            continue;
        }
        ratio_chart(&path, p, &workloads, &systems, &bars)?;
        written.push(path);
    }
    if procs.len() > 1 {
        for s in &systems {
            let path = dir.join(format!("scaling-{s}.svg"));
            let lines: Vec<(String, Vec<(f64, f64)>)> = workloads
                .iter()
                .map(|w| {
                    let pts = ok
                        .iter()
                        .filter(|r| &r.system == s && &r.workload == w)
                        .filter_map(|r| Some((r.procs as f64, r.speedup_vs_p1?)))
                        .collect();
                    (w.clone(), pts)
                })
                .filter(|(_, v): &(String, Vec<(f64, f64)>)| !v.is_empty())
                .collect();
            scaling_chart(&path, s, &procs, &lines)?;
            written.push(path);
        }
    }
    Ok(written)
}

fn ratio_chart(
    path: &Path,
    p: usize,
    workloads: &[String],
    systems: &[String],
    bars: &[(usize, usize, f64)],
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1100, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(de)?;
    let ymax = bars.iter().map(|b| b.2).fold(1.0f64, f64::max) * 1.15;
    let n = workloads.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("throughput relative to tmpfs, P = {p}"),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(90)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..ymax)
        .map_err(de)?;
    let names = workloads.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_label_style(
            ("sans-serif", 13)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .y_desc("ops/s ÷ tmpfs ops/s")
        .draw()
        .map_err(de)?;
    let k = systems.len().max(1) as f64;
    let w = 0.8 / k;
    for (si, sys) in systems.iter().enumerate() {
        let color = Palette99::pick(si).to_rgba();
        chart
            .draw_series(bars.iter().filter(|b| b.1 == si).map(|&(wi, _, v)| {
                let x0 = wi as f64 - 0.4 + si as f64 * w;
                Rectangle::new([(x0, 0.0), (x0 + w * 0.9, v)], color.filled())
            }))
            .map_err(de)?
            .label(sys.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            [(-0.5, 1.0), (n as f64 - 0.5, 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(de)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(de)?;
    root.present().map_err(de)?;
    Ok(())
}

fn scaling_chart(
    path: &Path,
    system: &str,
    procs: &[usize],
    lines: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(de)?;
    let pmax = procs.iter().copied().max().unwrap_or(1) as f64;
    let ymax = lines
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(pmax, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{system}: speedup over P = 1"), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(1f64..pmax.max(2.0), 0f64..ymax)
        .map_err(de)?;
    chart
        .configure_mesh()
        .x_desc("processes (P)")
        .y_desc("speedup")
        .draw()
        .map_err(de)?;
    chart
        .draw_series(LineSeries::new([(1.0, 1.0), (pmax, pmax)], BLACK.mix(0.3)))
        .map_err(de)?
        .label("linear");
    for (i, (w, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(de)?
            .label(w.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(de)?;
    root.present().map_err(de)?;
    Ok(())
}

fn de<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(w: &str, s: &str, p: usize, ops: f64) -> RunResult {
        RunResult {
            workload: w.into(),
            system: s.into(),
            procs: p,
            ops: 100,
            elapsed_s: 100.0 / ops,
            ops_per_sec: ops,
            ..RunResult::default()
        }
    }

    #[test]
    fn ablation_compares_each_switched_off_run_with_its_own_base() {
        let msgs = |mut x: RunResult, m: f64| {
            x.messages_per_op = Some(m);
            x
        };
        let rep = Report {
            machine: serde_json::Value::Null,
            size: "tiny".into(),
            results: vec![
                r("creates", "tmpfs", 1, 999.0),
                msgs(r("creates", "atoll-timeshare-no-affinity", 1, 400.0), 1.0),
                msgs(
                    r(
                        "creates",
                        "atoll-timeshare-no-affinity-no-dir-cache",
                        1,
                        100.0,
                    ),
                    2.5,
                ),
                msgs(
                    r(
                        "creates",
                        "atoll-timeshare-no-affinity-no-coalescing",
                        1,
                        200.0,
                    ),
                    1.5,
                ),
            ],
            skipped: vec![],
            startup: vec![],
            rpc: None,
            targets: vec![],
        };
        let t = ablation_table(&rep);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 3, "{t}");
        assert!(rows[1].contains("no-dir-cache") && rows[1].contains("no-coalescing"));
        assert!(rows[2].starts_with("creates") && rows[2].contains("atoll-timeshare-no-affinity"));
        assert!(
            rows[2].contains("0.25× (2.50)") && rows[2].contains("0.50× (1.50)"),
            "{t}"
        );
        assert!(!t.contains("tmpfs"));
        assert_eq!(
            ablation_table(&Report {
                results: rep.results[..2].to_vec(),
                ..rep
            }),
            ""
        );
    }

    fn sample() -> Vec<RunResult> {
        let mut v = vec![
            r("creates", "tmpfs", 1, 100.0),
            r("creates", "tmpfs", 2, 150.0),
            r("creates", "fuse", 1, 10.0),
            r("creates", "atoll-split", 1, 400.0),
            r("creates", "atoll-split", 2, 600.0),
            r("writes", "tmpfs", 1, 100.0),
            r("writes", "atoll-split", 1, 50.0),
        ];
        v.push(RunResult {
            error: Some("boom".into()),
            ..r("renames", "atoll-split", 1, 0.0)
        });
        derive(&mut v);
        v
    }

    #[test]
    fn ratios_and_speedups_are_derived_per_workload_and_p() {
        let v = sample();
        let s2 = find(&v, "creates", "atoll-split", 2).unwrap();
        assert_eq!(s2.ratio_vs_tmpfs, Some(4.0));
        assert_eq!(s2.speedup_vs_p1, Some(1.5));
        assert_eq!(v.last().unwrap().ratio_vs_tmpfs, None);
    }

    #[test]
    fn targets_report_met_missed_and_unmeasured() {
        let t = targets(&sample(), None);
        let get = |n: &str| t.iter().find(|t| t.name == n).unwrap();
        assert_eq!(get("split-creates").met, Some(true));
        assert_eq!(get("split-writes").met, Some(false));
        assert_eq!(get("split-writes").score, Some(0.5));
        assert_eq!(get("split-renames").met, None);
        assert_eq!(get("atoll-split-vs-fuse").value, Some(40.0));
        assert_eq!(get("rpc-spin").met, None);
    }

    #[test]
    fn every_peer_has_a_target_for_the_default_atoll_against_tmpfs() {
        let mut v = vec![
            r("dbench", "tmpfs", 1, 400.0),
            r("dbench", "atoll", 1, 500.0),
            r("dbench", "atoll-split", 1, 100.0),
            r("fio-seq", "tmpfs", 1, 4000.0),
            r("fio-seq", "atoll", 1, 1000.0),
        ];
        derive(&mut v);
        let t = targets(&v, None);
        let get = |n: &str| t.iter().find(|t| t.name == n).unwrap();
        for w in crate::workloads::Workload::PEERS {
            assert!(t.iter().any(|t| t.name == format!("atoll-{}", w.name())));
        }
        // The default configuration's ratio, not atoll-split's.
        assert_eq!(get("atoll-dbench").value, Some(1.25));
        assert_eq!(get("atoll-dbench").met, Some(true));
        assert_eq!(get("atoll-fio-seq").met, Some(false));
        assert_eq!(get("atoll-fio-seq").note, "fio-seq's own MiB/s");
        assert_eq!(get("atoll-postmark").met, None);
    }

    #[test]
    fn the_traps_target_takes_the_worst_workload_after_warm_up() {
        let mut v = vec![
            r("creates", "atoll", 1, 100.0),
            r("postmark", "atoll", 1, 100.0),
            r("postmark", "atoll-split", 1, 100.0),
        ];
        v[0].steady_traps_per_op = Some(0.01);
        v[1].steady_traps_per_op = Some(0.2);
        // Not the default system: not counted.
        v[2].steady_traps_per_op = Some(9.0);
        let t = targets(&v, None);
        let traps = t.iter().find(|t| t.name == "atoll-traps").unwrap();
        assert_eq!(traps.value, Some(0.2));
        assert_eq!(traps.met, Some(false));
        assert_eq!(traps.note, "worst: postmark");
        v[1].steady_traps_per_op = Some(0.0);
        let t = targets(&v, None);
        let traps = t.iter().find(|t| t.name == "atoll-traps").unwrap();
        assert_eq!((traps.value, traps.met), (Some(0.01), Some(true)));
        // Nothing measured (no trap statistics): not measured.
        let t = targets(&[r("creates", "atoll", 1, 1.0)], None);
        let traps = t.iter().find(|t| t.name == "atoll-traps").unwrap();
        assert_eq!(traps.met, None);
    }

    #[test]
    fn timeshare_median_ignores_processes_and_pipes() {
        let mut v = vec![
            r("creates", "tmpfs", 1, 100.0),
            r("creates", "atoll-timeshare", 1, 60.0),
            r("exec-remote", "tmpfs", 1, 1000.0),
            r("exec-remote", "atoll-timeshare", 1, 100.0),
        ];
        derive(&mut v);
        let t = targets(&v, None);
        let m = t.iter().find(|t| t.name == "timeshare-median").unwrap();
        assert_eq!(m.value, Some(0.6));
        assert_eq!(m.met, Some(true));
    }

    #[test]
    fn json_has_the_documented_shape() {
        let rep = Report {
            machine: serde_json::json!({"cpus": 2}),
            size: "tiny".into(),
            results: sample(),
            skipped: vec![],
            startup: vec![],
            rpc: Some(RpcResults {
                atoll_spin_ns: Some(300.0),
                raw_pingpong_ns: Some(200.0),
                ..RpcResults::default()
            }),
            targets: vec![],
        };
        let v = serde_json::to_value(&rep).unwrap();
        assert!(v["machine"].is_object());
        let first = &v["results"][0];
        for k in [
            "workload",
            "system",
            "procs",
            "ops_per_sec",
            "native_metric",
            "native_value",
            "ratio_vs_tmpfs",
        ] {
            assert!(first.get(k).is_some(), "missing {k}");
        }
        for k in [
            "atoll_spin_ns",
            "atoll_block_ns",
            "raw_pingpong_ns",
            "null_syscall_ns",
            "pipe_ns",
            "unix_socket_ns",
        ] {
            assert!(v["rpc"].get(k).is_some(), "missing rpc.{k}");
        }
        assert!(table(&rep).contains("FAILED: boom"));
    }

    #[test]
    fn plots_are_written_as_svg() {
        let t = tempfile::tempdir().unwrap();
        let rep = Report {
            machine: serde_json::json!({}),
            size: "tiny".into(),
            results: sample(),
            skipped: vec![],
            startup: vec![],
            rpc: None,
            targets: vec![],
        };
        let files = plot(&rep, t.path()).unwrap();
        assert!(files.iter().any(|f| f.ends_with("ratio-p1.svg")));
        assert!(files.iter().any(|f| f.ends_with("scaling-atoll-split.svg")));
        for f in files {
            let s = std::fs::read_to_string(f).unwrap();
            assert!(s.starts_with("<svg"));
        }
    }
}
