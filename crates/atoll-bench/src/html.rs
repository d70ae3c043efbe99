//! `atoll bench --report DIR`: the whole report as one HTML page,
//! `DIR/index.html`, that can be mailed or archived on its own — the
//! charts are inline SVG drawn with `plotters`, the style is inline, and
//! nothing is fetched from anywhere (no scripts, fonts or images).
//!
//! What the page holds, top down: the machine, the configuration of the
//! run, one section per workload (its table, throughput against the
//! number of processes per system, the ratio to tmpfs and FUSE where they
//! ran, messages and traps per operation), the targets, the technique
//! ablation when one ran, the messaging round trips, start-up costs and
//! what was skipped.
//!
//! [`check_dir`] runs before any benchmark, so a report that cannot be
//! written fails the command at once instead of after an hour of runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{self, Report, RunResult};

/// Bad input found after parsing (the `atoll` command exits with 2, as
/// for clap's own errors).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Make sure `dir` is (or can be made) a directory this process can write
/// into, by creating it and a file in it.
pub fn check_dir(dir: &Path) -> Result<(), UsageError> {
    let bad = |why: String| UsageError(format!("--report {}: {why}", dir.display()));
    if dir.exists() && !dir.is_dir() {
        return Err(bad("not a directory".into()));
    }
    std::fs::create_dir_all(dir).map_err(|e| bad(format!("cannot create it: {e}")))?;
    let probe = dir.join(format!(".atoll-bench-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| bad(format!("cannot write into it: {e}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The configuration of the run, as `(what, value)` rows for the page.
pub type Config = Vec<(String, String)>;

/// Write `dir/index.html`; returns its path.
pub fn write(rep: &Report, config: &Config, dir: &Path) -> anyhow::Result<PathBuf> {
    let page = page(rep, config)?;
    let path = dir.join("index.html");
    std::fs::write(&path, page).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    Ok(path)
}

const STYLE: &str = "
body { font-family: sans-serif; margin: 2em auto; max-width: 1240px; color: #222; }
h1 { margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 14px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; }
th { background: #f3f3f3; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.met { background: #e3f6e3; } td.missed { background: #fbe3e3; }
td.failed { color: #b00; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; }
figcaption { font-size: 13px; color: #555; max-width: 600px; }
pre { background: #f7f7f7; padding: 8px; font-size: 13px; }
.note { color: #555; font-size: 14px; }
";

/// `&`, `<`, `>` and quotes as entities.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

/// 1234567 → "1.23M": axis labels stay short.
fn human(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let mut s = format!("{x:.2}");
    // 1.50 → 1.5, 2.00 → 2: fewer digits, same value.
    while s.contains('.') && (s.ends_with('0') || s.ends_with('.')) {
        s.pop();
    }
    s + unit
}

/// Seconds since 1970 as `YYYY-MM-DD hh:mm UTC` (proleptic Gregorian;
/// Howard Hinnant's days-to-civil algorithm), so no date crate is needed.
fn utc(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60
    )
}

fn page(rep: &Report, config: &Config) -> anyhow::Result<String> {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>atoll bench report</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>atoll bench</h1>\n<p class=\"note\">Size <b>{}</b>; {} runs. Throughput is \
         operations per second of the whole run (all processes together), or for the \
         peers' own benchmarks their program's own metric (the unit on the chart); ×tmpfs and \
         ×FUSE divide it by the same workload's at the same number of processes.</p>\n",
        esc(&rep.size),
        rep.results.len()
    );
    machine(&mut h, &rep.machine);
    h.push_str("<h2>Configuration</h2>\n<table>\n");
    for (k, v) in config {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    h.push_str("</table>\n");
    if !rep.results.is_empty() {
        h.push_str("<h2>Workloads</h2>\n");
    }
    for w in workloads(&rep.results) {
        workload(&mut h, rep, &w)?;
    }
    targets(&mut h, rep);
    if let Some(svg) = ablation_chart(rep)? {
        let _ = write!(
            h,
            "<h2>Technique ablation</h2>\n<div class=\"charts\"><figure>{svg}<figcaption>\
             Throughput with one technique switched off, as a fraction of the same \
             configuration with everything on (Hare §5.4), at the fewest processes \
             measured. Below 1: the technique helps.</figcaption></figure></div>\n\
             <pre>{}</pre>\n",
            esc(&report::ablation_table(rep))
        );
    }
    if let Some(r) = &rep.rpc {
        let _ = write!(
            h,
            "<h2>Messaging round trips</h2>\n<pre>{}</pre>\n",
            esc(&report::rpc_table(r))
        );
    }
    if !rep.startup.is_empty() {
        h.push_str("<h2>Start-up</h2>\n<table>\n<tr><th>system</th><th>spawns</th><th>/bin/true plain (µs)</th><th>with the system's environment (µs)</th><th>added (µs)</th></tr>\n");
        for s in &rep.startup {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.0}</td><td class=\"n\">{:.0}</td><td class=\"n\">{:.0}</td></tr>",
                esc(&s.system),
                s.spawns,
                s.plain_us,
                s.with_system_env_us,
                s.added_us
            );
        }
        h.push_str("</table>\n");
    }
    if !rep.skipped.is_empty() {
        h.push_str("<h2>Skipped</h2>\n<ul>\n");
        for s in &rep.skipped {
            let _ = writeln!(h, "<li>{}: {}</li>", esc(&s.what), esc(&s.reason));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}

fn machine(h: &mut String, m: &serde_json::Value) {
    let s = |k: &str| match &m[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        v => v.to_string(),
    };
    let when = m["unix_time"].as_u64().map_or("-".to_string(), utc);
    let rows = [
        ("CPUs", s("cpus")),
        ("model", s("cpu_model")),
        ("kernel", s("kernel")),
        (
            "memory",
            m["mem_mib"]
                .as_u64()
                .map_or("-".into(), |x| format!("{x} MiB")),
        ),
        (
            "TSC",
            m["tsc_ghz"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.3} GHz")),
        ),
        ("host", s("hostname")),
        ("measured at", when),
    ];
    h.push_str("<h2>Machine</h2>\n<table>\n");
    for (k, v) in rows {
        let _ = writeln!(h, "<tr><th>{k}</th><td>{}</td></tr>", esc(&v));
    }
    h.push_str("</table>\n");
}

/// Workloads in the order they ran.
fn workloads(rs: &[RunResult]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rs {
        if !v.contains(&r.workload) {
            v.push(r.workload.clone());
        }
    }
    v
}

/// Systems of `rs` in the order they ran.
fn systems<'a>(rs: impl Iterator<Item = &'a RunResult>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rs {
        if !v.contains(&r.system) {
            v.push(r.system.clone());
        }
    }
    v
}

fn workload(h: &mut String, rep: &Report, w: &str) -> anyhow::Result<()> {
    let rows: Vec<&RunResult> = rep.results.iter().filter(|r| r.workload == w).collect();
    let _ = write!(
        h,
        "<section class=\"workload\" id=\"workload-{0}\" data-workload=\"{0}\">\n<h3>{0}</h3>\n\
         <table>\n<tr><th>system</th><th>P</th><th>ops</th><th>seconds</th><th>ops/s</th>\
         <th>×tmpfs</th><th>×FUSE</th><th>speedup over P=1</th><th>messages/op</th>\
         <th>traps/op</th><th>after warm-up</th></tr>\n",
        esc(w)
    );
    for r in &rows {
        if let Some(e) = &r.error {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"failed\" colspan=\"8\">FAILED: {}</td></tr>",
                esc(&r.system),
                r.procs,
                esc(e.lines().next().unwrap_or(""))
            );
            continue;
        }
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td>\
             <td class=\"n\">{:.0}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td></tr>",
            esc(&r.system),
            r.procs,
            r.ops,
            r.elapsed_s,
            r.ops_per_sec,
            opt(r.ratio_vs_tmpfs, 2),
            opt(ratio_vs(&rep.results, r, "fuse"), 2),
            opt(r.speedup_vs_p1, 2),
            opt(r.messages_per_op, 2),
            opt(r.traps_per_op, 2),
            opt(r.steady_traps_per_op, 2)
        );
    }
    h.push_str("</table>\n<div class=\"charts\">\n");
    let ok: Vec<&RunResult> = rows.iter().copied().filter(|r| r.error.is_none()).collect();
    let charts = [
        (
            throughput_chart(w, &ok)?,
            "Operations per second of all processes together, per system, against the number of processes (P).",
        ),
        (
            ratio_chart(w, &ok, &rep.results)?,
            "Throughput divided by tmpfs's and FUSE's on the same workload at the same P (1 = as fast; a log scale when the ratios span more than 30×).",
        ),
        (
            cost_chart(w, &ok)?,
            "Messages to file servers and system calls that reached atoll through a trap, per operation.",
        ),
    ];
    for (svg, caption) in charts {
        if let Some(svg) = svg {
            let _ = writeln!(
                h,
                "<figure>{svg}<figcaption>{}</figcaption></figure>",
                esc(caption)
            );
        }
    }
    h.push_str("</div>\n</section>\n");
    Ok(())
}

/// `r`'s throughput over `base`'s on the same workload and P.
fn ratio_vs(all: &[RunResult], r: &RunResult, base: &str) -> Option<f64> {
    if r.system == base {
        return None;
    }
    all.iter()
        .find(|b| {
            b.system == base
                && b.workload == r.workload
                && b.procs == r.procs
                && b.error.is_none()
                && b.ops_per_sec > 0.0
        })
        .map(|b| r.ops_per_sec / b.ops_per_sec)
}

fn targets(h: &mut String, rep: &Report) {
    if rep.targets.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Targets</h2>\n<table>\n<tr><th>goal</th><th>value</th><th>verdict</th><th>note</th></tr>\n",
    );
    for t in &rep.targets {
        let (class, verdict) = match (t.met, t.score) {
            (Some(true), _) => ("met", "met".to_string()),
            (Some(false), Some(sc)) => ("missed", format!("missed by {:.2}×", 1.0 / sc.max(1e-12))),
            _ => ("", "not measured".to_string()),
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"{class}\">{}</td><td>{}</td></tr>",
            esc(&t.goal),
            opt(t.value, 2),
            esc(&verdict),
            esc(&t.note)
        );
    }
    h.push_str("</table>\n");
}

/// How a legend entry shows its series.
#[derive(Clone, Copy)]
enum Mark {
    Line,
    Bar,
}

/// An SVG document: `draw` gets a `w`×`h` area for the chart, and the
/// legend (`items`) goes below it, in rows, so it never hides data.
fn svg(
    w: u32,
    h: u32,
    items: &[(String, RGBAColor, Mark)],
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> anyhow::Result<()>,
) -> anyhow::Result<String> {
    let item_w = |label: &str| 34 + (label.chars().count() as f64 * CHAR_W) as u32 + 16;
    let (left, right) = (70, w - 10);
    let mut rows: Vec<Vec<(u32, usize)>> = vec![Vec::new()];
    let mut x = left;
    for (i, (label, _, _)) in items.iter().enumerate() {
        let iw = item_w(label);
        if x + iw > right && x > left {
            rows.push(Vec::new());
            x = left;
        }
        rows.last_mut().unwrap().push((x, i));
        x += iw;
    }
    let legend_h = if items.is_empty() {
        0
    } else {
        rows.len() as u32 * 20 + 8
    };
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (w, h + legend_h)).into_drawing_area();
        root.fill(&WHITE).map_err(de)?;
        let (chart, legend) = root.split_vertically(h);
        draw(&chart)?;
        for (r, row) in rows.iter().enumerate() {
            let y = r as i32 * 20 + 8;
            for &(x, i) in row {
                let (label, c, mark) = &items[i];
                let x = x as i32;
                match mark {
                    Mark::Line => {
                        legend
                            .draw(&PathElement::new(
                                [(x, y + 7), (x + 24, y + 7)],
                                c.stroke_width(3),
                            ))
                            .map_err(de)?;
                        legend
                            .draw(&Circle::new((x + 12, y + 7), 4, c.filled()))
                            .map_err(de)?;
                    }
                    Mark::Bar => {
                        legend
                            .draw(&Rectangle::new([(x + 4, y), (x + 20, y + 14)], c.filled()))
                            .map_err(de)?;
                    }
                }
                legend
                    .draw(&Text::new(label.clone(), (x + 30, y), (FONT, LABEL)))
                    .map_err(de)?;
            }
        }
        root.present().map_err(de)?;
    }
    Ok(s)
}

fn de<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e}")
}

const W: u32 = 600;
const H: u32 = 380;
const FONT: &str = "sans-serif";
/// Font sizes as plotters takes them (its SVG backend writes 1/1.24 of
/// them as `font-size`, so 15 is about 12 px on the page).
const LABEL: f64 = 15.0;
const DESC: f64 = 16.0;
const TITLE: f64 = 22.0;
/// Width taken per character of a label (12 px sans-serif averages about
/// 7 px; a little more, since without font metrics (no font dependency)
/// nothing is measured).
const CHAR_W: f64 = 8.0;

/// Colours that stay apart from each other and readable on white
/// (Tableau 10); plotters' own palette has pale yellows.
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

fn color(i: usize) -> RGBAColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b).to_rgba()
}

/// Throughput against P, a line with points per system.
fn throughput_chart(w: &str, ok: &[&RunResult]) -> anyhow::Result<Option<String>> {
    if ok.is_empty() {
        return Ok(None);
    }
    let systems = systems(ok.iter().copied());
    let pmax = ok.iter().map(|r| r.procs).max().unwrap_or(1) as f64;
    let ymax = ok
        .iter()
        .map(|r| r.ops_per_sec)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.25;
    let items: Vec<(String, RGBAColor, Mark)> = systems
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), color(i), Mark::Line))
        .collect();
    svg(W, H, &items, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(format!("{w}: throughput"), (FONT, TITLE))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.5f64..pmax + 0.5, 0f64..ymax)
            .map_err(de)?;
        chart
            .configure_mesh()
            .light_line_style(BLACK.mix(0.04))
            .x_labels((pmax as usize + 1) * 2)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 1.0 {
                    format!("{i:.0}")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| human(*y))
            .x_desc("processes (P)")
            .y_desc(
                crate::workloads::Workload::from_name(w)
                    .and_then(|w| w.native_metric())
                    .unwrap_or("operations per second"),
            )
            .label_style((FONT, LABEL))
            .axis_desc_style((FONT, DESC))
            .draw()
            .map_err(de)?;
        for (i, s) in systems.iter().enumerate() {
            let c = color(i);
            let mut pts: Vec<(f64, f64)> = ok
                .iter()
                .filter(|r| &r.system == s)
                .map(|r| (r.procs as f64, r.ops_per_sec))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(de)?;
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(de)?;
        }
        Ok(())
    })
    .map(Some)
}

/// "atoll-timeshare" at P=2 → "timeshare P=2": category labels that fit.
fn category(system: &str, p: usize, one_p: bool) -> String {
    let s = system.strip_prefix("atoll-").unwrap_or(system);
    if one_p {
        s.to_string()
    } else {
        format!("{s} P={p}")
    }
}

/// Grouped horizontal bars: one group per category (`cats`, top down,
/// labelled at the left where long system names fit), one bar per kind
/// (`kinds`), `values[category][kind]`. A `ratio` chart has a line at 1,
/// and a logarithmic value axis when the values span more than 30×.
fn bar_chart(
    title: &str,
    x_desc: &str,
    cats: &[String],
    kinds: &[&str],
    values: &[Vec<Option<f64>>],
    ratio: bool,
    color_of: impl Fn(usize) -> RGBAColor,
) -> anyhow::Result<String> {
    let all: Vec<f64> = values.iter().flatten().flatten().copied().collect();
    let (min, max) = all
        .iter()
        .fold((1.0f64, 1.0f64), |(a, b), &v| (a.min(v), b.max(v)));
    let log = ratio && min > 0.0 && max / min > 30.0;
    let n = cats.len();
    let k = kinds.len().max(1) as f64;
    let label_w =
        20 + (cats.iter().map(|c| c.chars().count()).max().unwrap_or(4) as f64 * CHAR_W) as u32;
    let height = (100 + n as u32 * (kinds.len() as u32 * 16 + 14)).max(220);
    // Category i is centred on y = n - 1 - i, so the first is on top.
    let bar_y = |ci: usize, ki: usize| {
        let w = 0.8 / k;
        let y1 = (n - 1 - ci) as f64 + 0.4 - ki as f64 * w;
        (y1 - 0.95 * w, y1 - 0.05 * w)
    };
    let cats = cats.to_vec();
    let items: Vec<(String, RGBAColor, Mark)> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| (k.to_string(), color_of(i), Mark::Bar))
        .collect();
    svg(W, height, &items, |root| {
        let fmt_y = |y: &f64| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                cats[n - 1 - i as usize].clone()
            } else {
                String::new()
            }
        };
        let mut b = ChartBuilder::on(root);
        b.caption(title, (FONT, TITLE))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(label_w);
        let ys = -0.5f64..n as f64 - 0.5;
        if log {
            let (lo, hi) = (min / 2.0, max * 2.0);
            let mut chart = b.build_cartesian_2d((lo..hi).log_scale(), ys).map_err(de)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                // Plotters puts a light line at every minor step of a
                // log axis; a few labelled ones read better.
                .light_line_style(TRANSPARENT)
                .label_style((FONT, LABEL))
                .x_labels(8)
                .x_label_formatter(&|x| format!("{}×", human(*x)))
                .y_labels(n)
                .y_label_formatter(&fmt_y)
                .x_desc(x_desc)
                .axis_desc_style((FONT, DESC))
                .draw()
                .map_err(de)?;
            for ki in 0..kinds.len() {
                let c = color_of(ki);
                chart
                    .draw_series(values.iter().enumerate().filter_map(|(ci, row)| {
                        let v = row.get(ki).copied().flatten()?;
                        let (y0, y1) = bar_y(ci, ki);
                        Some(Rectangle::new([(lo, y0), (v, y1)], c.filled()))
                    }))
                    .map_err(de)?;
            }
            chart
                .draw_series(LineSeries::new(
                    [(1.0, -0.5), (1.0, n as f64 - 0.5)],
                    BLACK.stroke_width(1),
                ))
                .map_err(de)?;
        } else {
            let hi = max.max(0.1) * 1.15;
            let mut chart = b.build_cartesian_2d(0f64..hi, ys).map_err(de)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .light_line_style(BLACK.mix(0.04))
                .label_style((FONT, LABEL))
                .x_label_formatter(&|x| human(*x))
                .y_labels(n)
                .y_label_formatter(&fmt_y)
                .x_desc(x_desc)
                .axis_desc_style((FONT, DESC))
                .draw()
                .map_err(de)?;
            for ki in 0..kinds.len() {
                let c = color_of(ki);
                chart
                    .draw_series(values.iter().enumerate().filter_map(|(ci, row)| {
                        let v = row.get(ki).copied().flatten()?;
                        let (y0, y1) = bar_y(ci, ki);
                        Some(Rectangle::new([(0.0, y0), (v, y1)], c.filled()))
                    }))
                    .map_err(de)?;
            }
            if ratio {
                chart
                    .draw_series(LineSeries::new(
                        [(1.0, -0.5), (1.0, n as f64 - 0.5)],
                        BLACK.stroke_width(1),
                    ))
                    .map_err(de)?;
            }
        }
        Ok(())
    })
}

/// Per (system, P) other than the baselines: ×tmpfs and ×FUSE.
fn ratio_chart(w: &str, ok: &[&RunResult], all: &[RunResult]) -> anyhow::Result<Option<String>> {
    let one_p = ok.iter().all(|r| r.procs == ok[0].procs);
    let mut cats = Vec::new();
    let mut values = Vec::new();
    for r in ok
        .iter()
        .filter(|r| r.system != "tmpfs" && r.system != "fuse")
    {
        let row = vec![ratio_vs(all, r, "tmpfs"), ratio_vs(all, r, "fuse")];
        if row.iter().any(Option::is_some) {
            cats.push(category(&r.system, r.procs, one_p));
            values.push(row);
        }
    }
    if cats.is_empty() {
        return Ok(None);
    }
    let mut kinds = vec!["× tmpfs", "× FUSE"];
    // Only the baselines that ran get a legend entry.
    if values.iter().all(|r| r[1].is_none()) {
        kinds.pop();
    }
    bar_chart(
        &format!("{w}: throughput relative to tmpfs and FUSE"),
        "ops/s ÷ baseline ops/s",
        &cats,
        &kinds,
        &values,
        true,
        color,
    )
    .map(Some)
}

/// Per (system, P): messages and traps per operation.
fn cost_chart(w: &str, ok: &[&RunResult]) -> anyhow::Result<Option<String>> {
    let one_p = ok.iter().all(|r| r.procs == ok[0].procs);
    let mut cats = Vec::new();
    let mut values = Vec::new();
    for r in ok {
        let row = vec![r.messages_per_op, r.traps_per_op];
        if row.iter().any(Option::is_some) {
            cats.push(category(&r.system, r.procs, one_p));
            values.push(row);
        }
    }
    if cats.is_empty() {
        return Ok(None);
    }
    bar_chart(
        &format!("{w}: messages and traps per operation"),
        "per operation",
        &cats,
        &["messages / op", "traps / op"],
        &values,
        false,
        |i| color(i + 4),
    )
    .map(Some)
}

/// What each switched-off technique leaves of the throughput, per
/// workload and base configuration, at the fewest processes measured.
fn ablation_chart(rep: &Report) -> anyhow::Result<Option<String>> {
    let cells = report::ablation_cells(rep);
    if cells.is_empty() {
        return Ok(None);
    }
    let pmin = cells.iter().map(|c| c.procs).min().unwrap_or(1);
    let mut offs: Vec<&str> = Vec::new();
    let mut cats: Vec<(String, String)> = Vec::new();
    for c in cells.iter().filter(|c| c.procs == pmin) {
        if !offs.contains(&c.off.as_str()) {
            offs.push(&c.off);
        }
        let key = (c.workload.clone(), c.base.clone());
        if !cats.contains(&key) {
            cats.push(key);
        }
    }
    let bases = cats
        .iter()
        .map(|c| &c.1)
        .collect::<std::collections::BTreeSet<_>>();
    let labels: Vec<String> = cats
        .iter()
        .map(|(w, b)| {
            if bases.len() > 1 {
                format!("{w} ({})", b.strip_prefix("atoll-").unwrap_or(b))
            } else {
                w.clone()
            }
        })
        .collect();
    let values: Vec<Vec<Option<f64>>> = cats
        .iter()
        .map(|(w, b)| {
            offs.iter()
                .map(|off| {
                    cells
                        .iter()
                        .find(|c| {
                            c.procs == pmin && &c.workload == w && &c.base == b && c.off == *off
                        })
                        .map(|c| c.fraction)
                })
                .collect()
        })
        .collect();
    let title = format!("throughput with a technique off ÷ all on (P = {pmin})");
    bar_chart(
        &title,
        "fraction of full throughput",
        &labels,
        &offs,
        &values,
        true,
        color,
    )
    .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{derive, TargetCheck};

    fn r(w: &str, s: &str, p: usize, ops: f64) -> RunResult {
        RunResult {
            workload: w.into(),
            system: s.into(),
            procs: p,
            ops: 100,
            elapsed_s: 100.0 / ops,
            ops_per_sec: ops,
            messages_per_op: s.starts_with("atoll").then_some(2.5),
            traps_per_op: s.starts_with("atoll").then_some(0.1),
            ..RunResult::default()
        }
    }

    fn rep(results: Vec<RunResult>) -> Report {
        let mut results = results;
        derive(&mut results);
        Report {
            machine: serde_json::json!({"cpus": 2, "cpu_model": "Test <CPU>", "kernel": "6.1", "mem_mib": 4096}),
            size: "quick".into(),
            results,
            skipped: vec![],
            startup: vec![],
            rpc: None,
            targets: vec![TargetCheck {
                name: "t".into(),
                goal: "atoll ≥ 3× tmpfs".into(),
                value: Some(1.5),
                score: Some(0.5),
                met: Some(false),
                note: String::new(),
            }],
        }
    }

    /// The `<section>` of workload `w` in `page`.
    fn section<'a>(page: &'a str, w: &str) -> &'a str {
        let start = page
            .find(&format!("data-workload=\"{w}\""))
            .unwrap_or_else(|| panic!("no section for {w}"));
        let end = page[start..].find("</section>").unwrap() + start;
        &page[start..end]
    }

    #[test]
    fn every_workload_has_a_table_and_charts_with_its_points() {
        let page = page(
            &rep(vec![
                r("creates", "tmpfs", 1, 100.0),
                r("creates", "tmpfs", 2, 150.0),
                r("creates", "fuse", 1, 10.0),
                r("creates", "atoll-timeshare", 1, 400.0),
                r("creates", "atoll-timeshare", 2, 600.0),
                r("writes", "tmpfs", 1, 100.0),
                r("writes", "atoll-timeshare", 1, 50.0),
            ]),
            &vec![("systems".into(), "tmpfs,atoll".into())],
        )
        .unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        // Self-contained: nothing is loaded from elsewhere.
        for bad in ["<script", "<link", "src=", "http://", "https://", "@import"] {
            let outside_svg_ns = page.replace("http://www.w3.org/2000/svg", "");
            assert!(!outside_svg_ns.contains(bad), "page has {bad}");
        }
        assert!(page.contains("Test &lt;CPU&gt;"));
        let c = section(&page, "creates");
        // Throughput: a point per (system, P) measured, and one in each
        // system's legend entry.
        assert_eq!(c.matches("<circle").count(), 5 + 3, "{c}");
        assert_eq!(c.matches("<svg").count(), 3);
        assert!(c.contains("× FUSE") && c.contains("processes (P)"));
        let w = section(&page, "writes");
        assert_eq!(w.matches("<circle").count(), 2 + 2);
        // No FUSE run for writes: no FUSE bar or legend.
        assert!(!w.contains("× FUSE"), "{w}");
        assert!(page.contains("missed by 2.00×"));
        assert!(!page.contains("Technique ablation"));
    }

    #[test]
    fn an_ablation_run_gets_its_chart() {
        let page = page(
            &rep(vec![
                r("creates", "atoll-timeshare", 1, 400.0),
                r("creates", "atoll-timeshare-no-dir-cache", 1, 100.0),
                r("creates", "atoll-timeshare-no-affinity", 1, 200.0),
            ]),
            &vec![],
        )
        .unwrap();
        let abl = &page[page.find("Technique ablation").expect("ablation section")..];
        assert!(abl.contains("no-dir-cache") && abl.contains("no-affinity"));
        assert!(abl.contains("<rect"));
    }

    #[test]
    fn a_file_or_an_uncreatable_path_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("file");
        std::fs::write(&f, b"x").unwrap();
        assert!(check_dir(&f).unwrap_err().0.contains("not a directory"));
        assert!(check_dir(&f.join("sub")).is_err());
        let d = t.path().join("new/report");
        check_dir(&d).unwrap();
        assert!(d.is_dir());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "probe left");
    }

    #[test]
    fn human_numbers_are_short() {
        assert_eq!(human(1_500_000.0), "1.5M");
        assert_eq!(human(2_000_000.0), "2M");
        assert_eq!(human(25_000.0), "25k");
        assert_eq!(human(0.25), "0.25");
        assert_eq!(human(0.0), "0");
        assert_eq!(human(120.0), "120");
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400 + 3_661), "2000-02-29 01:01 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13 UTC");
    }
}
