//! `atoll bench --report DIR`: a tiny benchmark writes DIR/index.html, and
//! a real browser (headless Chromium) renders it — every workload's charts
//! are SVG with plotted shapes, nothing is logged on the console, and
//! a screenshot of the page is not blank. A DIR that cannot be written is
//! refused on one line with exit status 2 before any benchmark runs.

use std::path::Path;
use std::process::Command;

use atoll_tests::{atoll, output_within, require, RUN_LIMIT};

const WORKLOADS: [&str; 2] = ["creates", "renames"];

/// `atoll bench --quick` cut down to seconds: two workloads, tmpfs and the
/// timeshare configuration, one and two processes, no micro-benchmarks.
fn tiny_bench(report: &Path) -> std::process::Output {
    let mut cmd = atoll();
    cmd.args([
        "bench",
        "--quick",
        "--workloads",
        &WORKLOADS.join(","),
        "--systems",
        "tmpfs,atoll-timeshare",
        "--procs",
        "1,2",
        "--no-rpc",
        "--startup-spawns",
        "0",
        "--report",
    ])
    .arg(report);
    output_within(cmd, RUN_LIMIT)
}

/// Headless Chromium with a fresh profile and nothing that reaches the
/// network, logging the page's console to stderr.
fn chromium(profile: &Path) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// The page's console messages in Chromium's log
/// (`[…:INFO:CONSOLE:1] "message", source: …`). Chromium logs
/// `console.error` at INFO level like any other, so every console line
/// counts: the page has no scripts, so it should have none at all.
fn console_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect()
}

/// The part of `dom` from workload `w`'s section to its end.
fn section<'a>(dom: &'a str, w: &str) -> &'a str {
    let start = dom
        .find(&format!("data-workload=\"{w}\""))
        .unwrap_or_else(|| panic!("no section for {w} in the rendered page"));
    let end = dom[start..]
        .find("</section>")
        .map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

/// The `<svg>…</svg>` elements of `html`.
fn svgs(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(s) = rest.find("<svg") {
        let Some(e) = rest[s..].find("</svg>") else {
            break;
        };
        out.push(&rest[s..s + e + "</svg>".len()]);
        rest = &rest[s + e..];
    }
    out
}

/// The value of attribute `name` in the element text `el`.
fn attr<'a>(el: &'a str, name: &str) -> Option<&'a str> {
    el.split(&format!(" {name}=\""))
        .nth(1)
        .and_then(|v| v.split('"').next())
}

/// Bars with data in an SVG: `rect`s of a series colour (not the black,
/// white or grey of background, frame and grid) with a visible size.
/// Each legend entry has one too.
fn coloured_bars(svg: &str) -> usize {
    svg.split("<rect")
        .skip(1)
        .map(|r| &r[..r.find('>').unwrap_or(r.len())])
        .filter(|r| {
            let size = |n| {
                attr(r, n)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let fill = attr(r, "fill").unwrap_or("").to_ascii_uppercase();
            size("width") > 0.0
                && size("height") > 0.0
                && !["#000000", "#FFFFFF", "NONE", ""].contains(&fill.as_str())
        })
        .count()
}

#[test]
fn bench_report_renders_a_chart_per_workload_in_a_browser() {
    require("chromium");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let out = tiny_bench(&report);
    assert!(
        out.status.success(),
        "atoll bench failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let index = report.join("index.html");
    let html = std::fs::read_to_string(&index).expect("index.html written");
    // Self-contained: no scripts, style sheets, images or fonts fetched.
    let outside = html.replace("http://www.w3.org/2000/svg", "");
    for bad in [
        "<script", "<link", "<img", "src=", "http:", "https:", "@import",
    ] {
        assert!(!outside.contains(bad), "the page loads something: {bad}");
    }

    let profile = dir.path().join("profile");
    let mut dump = chromium(&profile);
    dump.arg("--dump-dom")
        .arg(format!("file://{}", index.display()));
    let out = output_within(dump, RUN_LIMIT);
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium --dump-dom failed: {log}");
    let console = console_lines(&log);
    assert!(console.is_empty(), "console messages: {console:#?}");
    for machine in [
        "Machine",
        "CPUs",
        "kernel",
        "memory",
        "Configuration",
        "Targets",
    ] {
        assert!(dom.contains(machine), "`{machine}` not on the page");
    }
    for w in WORKLOADS {
        let sec = section(&dom, w);
        let charts = svgs(sec);
        // Throughput, ratio to tmpfs, messages and traps per operation.
        assert_eq!(charts.len(), 3, "{w}: charts {}", charts.len());
        for (i, svg) in charts.iter().enumerate() {
            assert!(svg.contains("<text"), "{w}: chart {i} has no labels");
        }
        // Each system's line has a point per number of processes (2 × 2),
        // besides one marker per system in the legend.
        let points = charts[0].matches("<circle").count();
        assert_eq!(points, 2 * 2 + 2, "{w}: throughput points");
        for label in [
            "tmpfs",
            "atoll-timeshare",
            "processes (P)",
            "operations per second",
        ] {
            assert!(
                charts[0].contains(label),
                "{w}: `{label}` not in the throughput chart"
            );
        }
        // atoll-timeshare at P = 1 and 2 against tmpfs: two bars, and the
        // legend's (no FUSE ran, so it has no entry).
        assert!(charts[1].contains("× tmpfs") && !charts[1].contains("× FUSE"));
        assert_eq!(coloured_bars(charts[1]), 2 + 1, "{w}: ratio bars");
        // Messages per operation of atoll-timeshare at P = 1 and 2 (tmpfs
        // has no servers to count), and the legend's two entries; traps
        // may be zero, so their bars may be empty.
        let bars = coloured_bars(charts[2]);
        assert!((2 + 2..=2 + 2 + 2).contains(&bars), "{w}: cost bars {bars}");
        for label in ["messages / op", "traps / op", "per operation"] {
            assert!(
                charts[2].contains(label),
                "{w}: `{label}` not in the cost chart"
            );
        }
    }

    let shot = dir.path().join("page.png");
    let mut screenshot = chromium(&profile);
    screenshot
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,4000")
        .arg(format!("file://{}", index.display()));
    let out = output_within(screenshot, RUN_LIMIT);
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A blank 1280x4000 page compresses to a few KiB; charts and tables
    // do not.
    assert!(png.len() > 30_000, "screenshot only {} bytes", png.len());
}

#[test]
fn a_report_dir_that_cannot_be_written_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    for bad in [file.clone(), file.join("below-a-file")] {
        let started = std::time::Instant::now();
        let out = tiny_bench(&bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.lines().count(), 1, "not one line: {err}");
        assert!(
            err.starts_with("atoll: error: --report ") && err.contains(&*bad.to_string_lossy()),
            "{err}"
        );
        // Nothing ran: no table on stdout, and no time spent.
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(started.elapsed().as_secs() < 10);
    }
}

/// The filter above on lines Chromium 156 writes: console messages and
/// uncaught exceptions count, its own complaints about D-Bus do not.
#[test]
fn console_lines_are_told_from_chromiums_own_log() {
    let log = r#"[1:1:1125/055857.573737:INFO:CONSOLE:1] "boom", source: file:///tmp/x.html (1)
[1:1:1125/055857.575161:INFO:CONSOLE:1] "Uncaught ReferenceError: f is not defined", source: file:///tmp/x.html (1)
[1:1:1125/055125.152465:ERROR:dbus/object_proxy.cc:572] Failed to call method: org.freedesktop.DBus.NameHasOwner
"#;
    let lines = console_lines(log);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines.iter().all(|l| !l.contains("dbus")));
}
