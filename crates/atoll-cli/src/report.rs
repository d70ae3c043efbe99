//! Human and JSON renderings of server statistics (`atoll run --stats`,
//! `--stats-json`, `atoll status`) and of the instance list.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use atoll_proto::boot::InstanceStatus;
use atoll_proto::{ServerStats, BLOCK_SIZE};
use serde::Serialize;

use crate::args::human_bytes;
use crate::registry::InstanceRecord;

/// A text table: left-aligned first column, right-aligned others.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self, out: &mut String) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for r in &self.rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c == 0 {
                    let _ = write!(line, "{cell:<w$}", w = width[0]);
                } else {
                    let _ = write!(line, "  {cell:>w$}", w = width[c]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

/// `850` → `850ns`, `2_100` → `2.1µs`, `3_400_000` → `3.4ms`.
pub fn human_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0}ns")
    } else if ns < 1e6 {
        format!("{:.1}µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.1}ms", ns / 1e6)
    } else {
        format!("{:.2}s", ns / 1e9)
    }
}

fn mean(total_ns: u64, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        total_ns as f64 / count as f64
    }
}

/// Operation totals over all servers: name → (count, total ns, per-server counts).
fn ops_by_name(servers: &[ServerStats]) -> BTreeMap<&str, (u64, u64, Vec<u64>)> {
    let mut ops: BTreeMap<&str, (u64, u64, Vec<u64>)> = BTreeMap::new();
    for (i, s) in servers.iter().enumerate() {
        for (name, count, ns) in &s.ops {
            let e = ops
                .entry(name.as_str())
                .or_insert_with(|| (0, 0, vec![0; servers.len()]));
            e.0 += count;
            e.1 += ns;
            e.2[i] += count;
        }
    }
    ops
}

/// Most servers shown one column each in the operation table.
const MAX_SERVER_COLUMNS: usize = 8;

/// The `--stats` table: one line per server, then one per operation.
pub fn stats_table(servers: &[ServerStats]) -> String {
    let mut out = String::new();
    let mut t = Table::new(&[
        "server", "core", "requests", "bad", "mean", "sessions", "inodes", "open", "blocks",
        "free", "borrowed", "returned",
    ]);
    for s in servers {
        let (count, ns) = s
            .ops
            .iter()
            .fold((0, 0), |(c, n), (_, oc, on)| (c + oc, n + on));
        t.row(vec![
            s.server.to_string(),
            core(s.core),
            s.requests.to_string(),
            s.bad_requests.to_string(),
            human_ns(mean(ns, count)),
            s.sessions.to_string(),
            s.inodes.to_string(),
            s.open_descriptions.to_string(),
            // Used of owned; the pool's counters (`fs::blocks`).
            format!("{}/{}", s.blocks_used, s.blocks_total),
            s.blocks_free.to_string(),
            s.blocks_borrowed.to_string(),
            s.blocks_returned.to_string(),
        ]);
    }
    t.render(&mut out);
    let ops = ops_by_name(servers);
    if ops.is_empty() {
        return out;
    }
    out.push('\n');
    let per_server = servers.len() > 1 && servers.len() <= MAX_SERVER_COLUMNS;
    let mut header = vec![
        "operation".to_string(),
        "count".into(),
        "mean".into(),
        "total".into(),
    ];
    if per_server {
        header.extend(servers.iter().map(|s| format!("s{}", s.server)));
    }
    let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
    let mut by_count: Vec<_> = ops.into_iter().collect();
    by_count.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    for (name, (count, ns, each)) in by_count {
        let mut row = vec![
            name.to_string(),
            count.to_string(),
            human_ns(mean(ns, count)),
            human_ns(ns as f64),
        ];
        if per_server {
            row.extend(each.iter().map(u64::to_string));
        }
        t.row(row);
    }
    t.render(&mut out);
    let counters = counters_total(servers);
    if !counters.is_empty() {
        out.push('\n');
        let mut t = Table::new(&["counter", "total"]);
        for (name, n) in counters {
            t.row(vec![name.to_string(), n.to_string()]);
        }
        t.render(&mut out);
    }
    out
}

/// Named counters of the Hare techniques summed over servers (invalidations
/// sent, cache hits and misses reported by clients, broadcasts, …).
fn counters_total(servers: &[ServerStats]) -> BTreeMap<&str, u64> {
    let mut m: BTreeMap<&str, u64> = BTreeMap::new();
    for s in servers {
        for (name, n) in &s.counters {
            *m.entry(name.as_str()).or_insert(0) += n;
        }
    }
    m
}

/// The servers' counters and those of the instance's process
/// (`InstanceStatus::process_counters`).
fn all_counters(st: &InstanceStatus) -> BTreeMap<&str, u64> {
    let mut m = counters_total(&st.servers);
    for (name, n) in &st.process_counters {
        *m.entry(name.as_str()).or_insert(0) += n;
    }
    m
}

fn core(c: i32) -> String {
    if c < 0 {
        "-".into()
    } else {
        c.to_string()
    }
}

#[derive(Serialize)]
struct OpJson<'a> {
    op: &'a str,
    count: u64,
    total_ns: u64,
    mean_ns: f64,
}

#[derive(Serialize)]
struct ServerJson<'a> {
    server: u32,
    core: i32,
    sessions: u64,
    inodes: u64,
    open_descriptions: u64,
    blocks_used: u64,
    blocks_total: u64,
    blocks_free: u64,
    blocks_borrowed: u64,
    blocks_returned: u64,
    blocks_dropped: u64,
    blocks_repaired: u64,
    root_free_blocks: u64,
    requests: u64,
    bad_requests: u64,
    pipes: u64,
    pipe_bytes: u64,
    pipe_ops: u64,
    /// Data transfers by Cosh mode (`atoll_proto::Transfers`).
    copies: u64,
    copy_bytes: u64,
    shares: u64,
    share_bytes: u64,
    moves: u64,
    move_bytes: u64,
    /// Directory mode swaps completed as home server, and the directories
    /// (`st_ino`) homed here now distributed by one (Hare §6.1.2).
    mode_swaps: u64,
    adapted_dirs: Vec<u64>,
    ops: Vec<OpJson<'a>>,
}

fn servers_json(servers: &[ServerStats]) -> Vec<ServerJson<'_>> {
    servers
        .iter()
        .map(|s| ServerJson {
            server: s.server,
            core: s.core,
            sessions: s.sessions,
            inodes: s.inodes,
            open_descriptions: s.open_descriptions,
            blocks_used: s.blocks_used,
            blocks_total: s.blocks_total,
            blocks_free: s.blocks_free,
            blocks_borrowed: s.blocks_borrowed,
            blocks_returned: s.blocks_returned,
            blocks_dropped: s.blocks_dropped,
            blocks_repaired: s.blocks_repaired,
            root_free_blocks: s.root_free_blocks,
            requests: s.requests,
            bad_requests: s.bad_requests,
            pipes: s.pipes,
            pipe_bytes: s.pipe_bytes,
            pipe_ops: s.pipe_ops,
            copies: s.transfers.copies,
            copy_bytes: s.transfers.copy_bytes,
            shares: s.transfers.shares,
            share_bytes: s.transfers.share_bytes,
            moves: s.transfers.moves,
            move_bytes: s.transfers.move_bytes,
            mode_swaps: s.mode_swaps,
            adapted_dirs: s.adapted_dirs.iter().map(|d| d.0).collect(),
            ops: s
                .ops
                .iter()
                .map(|(op, count, ns)| OpJson {
                    op,
                    count: *count,
                    total_ns: *ns,
                    mean_ns: mean(*ns, *count),
                })
                .collect(),
        })
        .collect()
}

/// `--stats-json`: `{"servers": [{"server": 0, "ops": [...], ...}], "totals": {...}}`.
pub fn stats_json(servers: &[ServerStats]) -> serde_json::Value {
    let totals: BTreeMap<&str, serde_json::Value> = ops_by_name(servers)
        .into_iter()
        .map(|(name, (count, ns, _))| {
            (
                name,
                serde_json::json!({"count": count, "total_ns": ns, "mean_ns": mean(ns, count)}),
            )
        })
        .collect();
    serde_json::json!({
        "servers": servers_json(servers),
        "totals": totals,
        "counters": counters_total(servers),
    })
}

/// `atoll status` for humans.
/// `  (REASON)`, or nothing for an unknown reason.
fn why(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!("  ({reason})")
    }
}

pub fn status_text(st: &InstanceStatus, rec: &InstanceRecord) -> String {
    let mut out = String::new();
    let cores: Vec<String> = st.servers.iter().map(|s| core(s.core)).collect();
    let used: u64 = st.servers.iter().map(|s| s.blocks_used).sum();
    let listed: u64 = st.servers.iter().map(|s| s.blocks_free).sum();
    // Servers share one pool; each saw its size and root (an instance of
    // an older build reports neither: its partitions add up instead).
    let total = match st.servers.iter().map(|s| s.instance_blocks).max() {
        Some(n) if n > 0 => n,
        _ => st.servers.iter().map(|s| s.blocks_total).sum(),
    };
    let root = st
        .servers
        .iter()
        .map(|s| s.root_free_blocks)
        .min()
        .unwrap_or(0);
    let open: u64 = st.servers.iter().map(|s| s.open_descriptions).sum();
    let requests: u64 = st.servers.iter().map(|s| s.requests).sum();
    let _ = writeln!(
        out,
        "instance     {}  (pid {}, {})",
        st.id, st.pid, rec.kind
    );
    let _ = writeln!(out, "mount        {}", st.mount);
    let _ = writeln!(out, "island       {}", island(st));
    if !st.syscall_sites.is_empty() {
        let _ = writeln!(
            out,
            "syscalls     {}: {}",
            st.syscall_sites, st.syscall_sites_why
        );
    }
    let _ = writeln!(
        out,
        "servers      {}  on cores {}{}",
        st.servers.len(),
        cores.join(","),
        why(&rec.servers_why)
    );
    if !rec.poll.is_empty() {
        let _ = writeln!(out, "poll         {}{}", rec.poll, why(&rec.poll_why));
    }
    for h in st
        .health
        .iter()
        .filter(|h| h.pid != 0 || h.state != "up" || h.restarts > 0)
    {
        let why = if h.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", h.reason)
        };
        let rebuilt = match h.restarts {
            0 => String::new(),
            n => format!(
                ", rebuilt {n}× from its journal (last in {:.1} ms)",
                h.recovery_us as f64 / 1000.0
            ),
        };
        // A server process: which host, and for how long (`hosts`).
        let process = match h.pid {
            0 => String::new(),
            pid => format!(
                ", host {} (pid {pid}), core {}, up {:.1} s{}",
                h.host,
                h.core,
                h.uptime_ms as f64 / 1000.0,
                match h.moves {
                    0 => String::new(),
                    n => format!(", moved {n}×"),
                }
            ),
        };
        let process = match h.joined {
            true => format!("{process}, joined while running"),
            false => process,
        };
        let _ = writeln!(
            out,
            "  server {}   {}{process}{rebuilt}{why}",
            h.server, h.state
        );
    }
    if st.scaling.members > 0 {
        let joined = match st.scaling.joined.as_slice() {
            [] => String::new(),
            j => format!(
                "; joined while running: {}",
                j.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        let _ = writeln!(
            out,
            "members      {} file servers, room for {}{joined}",
            st.scaling.members, st.scaling.room
        );
    }
    if st.scaling.hosts > 0 {
        let _ = writeln!(
            out,
            "hosts        {} of at most {}, {}{}",
            st.scaling.hosts,
            st.scaling.max_hosts,
            if st.scaling.auto { "auto" } else { "fixed" },
            match st.scaling.changes {
                0 => String::new(),
                n => format!(", changed {n}×"),
            }
        );
    }
    for s in sched_servers(rec)
        .into_iter()
        .filter(|s| s.pid != 0 || s.restarts > 0)
    {
        let process = match s.pid {
            0 => String::new(),
            pid => format!(
                ", pid {pid}, core {}, up {:.1} s",
                s.core,
                s.uptime_ms as f64 / 1000.0
            ),
        };
        let restarted = match s.restarts {
            0 => String::new(),
            n => format!(", restarted {n}×"),
        };
        let _ = writeln!(
            out,
            "  scheduling server of core {}   up{process}{restarted}",
            s.core
        );
    }
    let up = st.health.iter().filter(|h| h.state == "up").count();
    let _ = writeln!(
        out,
        "fleets       /fs/server ({}): {up} of {} up; /sched/core: {} servers",
        st.fs_policy.as_str(),
        st.health.len(),
        sched_servers(rec).len()
    );
    // Every registered name and the generation it resolves to.
    let names: Vec<String> = st
        .health
        .iter()
        .map(|h| format!("/fs/server/{} @{}", h.server, h.generation))
        .chain(
            sched_servers(rec)
                .iter()
                .map(|s| format!("/sched/core/{} @{}", s.core, s.generation)),
        )
        .collect();
    let _ = writeln!(out, "names        {}", names.join(", "));
    let journal: u64 = st.health.iter().map(|h| h.journal_bytes).sum();
    if st.health.iter().any(|h| h.journal_records > 0) {
        let unrecoverable: Vec<String> = st
            .health
            .iter()
            .filter(|h| h.state == "up" && !h.recoverable)
            .map(|h| h.server.to_string())
            .collect();
        let _ = writeln!(
            out,
            "journals     {} in {} records{}",
            human_bytes(journal),
            st.health.iter().map(|h| h.journal_records).sum::<u64>(),
            match unrecoverable.is_empty() {
                true => String::new(),
                false => format!(
                    "; full, so not rebuilt if they die: server {}",
                    unrecoverable.join(", ")
                ),
            }
        );
    }
    // How each server takes its snapshots, and what the newest cost it
    // (`atoll_server::snapshot`): a forked one stops it for the fork only.
    let snaps: Vec<String> = st
        .health
        .iter()
        .filter(|h| h.snapshots > 0)
        .map(|h| {
            format!(
                "server {}: {} {}, newest {}, paused {:.1} ms, encoded in {:.1} ms",
                h.server,
                h.snapshots,
                if h.snapshot_mode.is_empty() {
                    "taken"
                } else {
                    &h.snapshot_mode
                },
                human_bytes(h.snapshot_bytes),
                h.snapshot_us as f64 / 1000.0,
                h.snapshot_encode_us as f64 / 1000.0
            )
        })
        .collect();
    if !snaps.is_empty() {
        let _ = writeln!(out, "snapshots    {}", snaps.join("; "));
    }
    let _ = writeln!(out, "clients      {}  ({} lanes)", st.clients, st.lanes);
    let _ = writeln!(out, "open files   {open}");
    let _ = writeln!(
        out,
        "blocks       {used}/{total} in use ({} of {})",
        human_bytes(used * BLOCK_SIZE as u64),
        human_bytes(total * BLOCK_SIZE as u64)
    );
    let _ = writeln!(
        out,
        "block pool   {} free: {root} in the root, {listed} in servers' lists",
        root + listed
    );
    let lent: u64 = st.servers.iter().map(|s| s.blocks_total).sum();
    let _ = writeln!(
        out,
        "             {lent} lent to servers, of which {used} hold data"
    );
    out.push_str(&transfers_text(&st.servers));
    out.push_str(&limits_text(&st.limits));
    out.push_str(&adaptive_text(st));
    let _ = writeln!(out, "requests     {requests}");
    out.push('\n');
    out.push_str(&stats_table(&st.servers));
    out
}

/// The island kind (an instance of an older build reports none: it
/// could only be coherent or incoherent, and said nothing).
fn island(st: &InstanceStatus) -> &str {
    if st.island.is_empty() {
        "coherent"
    } else {
        &st.island
    }
}

/// Data transfers of all servers by Cosh mode (§5).
fn transfers_text(servers: &[ServerStats]) -> String {
    let t = total_transfers(servers);
    format!(
        "transfers    copy {} ({}), share {} ({}), move {} ({})\n",
        t.copies,
        human_bytes(t.copy_bytes),
        t.shares,
        human_bytes(t.share_bytes),
        t.moves,
        human_bytes(t.move_bytes)
    )
}

/// Adaptive directories (Hare §6.1.2): per server that swapped any, the
/// swaps it completed as home server and the directories (inode numbers)
/// a swap left distributed; then each directory that swapped: its path,
/// inode number, mode now and how many times its mode changed. Nothing
/// when no directory ever swapped.
fn adaptive_text(st: &InstanceStatus) -> String {
    let mut out = String::new();
    let mut label = "adaptive    ";
    for s in st.servers.iter().filter(|s| s.mode_swaps > 0) {
        let dirs: Vec<String> = s.adapted_dirs.iter().map(|d| d.0.to_string()).collect();
        let now = match dirs.is_empty() {
            true => "none distributed now".to_string(),
            false => format!("distributed now: {}", dirs.join(", ")),
        };
        let _ = writeln!(out, "{label} s{}: {} swaps, {now}", s.server, s.mode_swaps);
        label = "            ";
    }
    for s in &st.servers {
        for d in &s.swapped_dirs {
            let path = crate::top::dir_path(&st.mount, &st.dir_names, d.ino);
            let _ = writeln!(
                out,
                "{label} {} (inode {}, home s{}): {}, {} mode change{}",
                if path.is_empty() { "?" } else { &path },
                d.ino,
                s.server,
                mode_word(d),
                d.swaps,
                if d.swaps == 1 { "" } else { "s" }
            );
        }
    }
    out
}

fn mode_word(d: &atoll_proto::SwappedDir) -> &'static str {
    match (d.swapping, d.distributed) {
        (true, _) => "swapping",
        (false, true) => "distributed",
        (false, false) => "centralized",
    }
}

/// The `inodes` line and the other bounded metadata of `atoll status`.
fn limits_text(limits: &[(String, u64, u64)]) -> String {
    let mut out = String::new();
    if let Some((_, used, limit)) = limits.iter().find(|(n, _, _)| n == "inodes") {
        let _ = writeln!(
            out,
            "inodes       {used}/{limit} in use ({} free)",
            limit.saturating_sub(*used)
        );
    }
    let rest: Vec<String> = limits
        .iter()
        .filter(|(n, _, _)| n != "inodes")
        .map(|(n, used, limit)| {
            if n.ends_with("_bytes") {
                format!(
                    "{} {}/{}",
                    n.replace('_', " "),
                    human_bytes(*used),
                    human_bytes(*limit)
                )
            } else {
                format!("{} {used}/{limit}", n.replace('_', " "))
            }
        })
        .collect();
    if !rest.is_empty() {
        let _ = writeln!(out, "limits       {}", rest.join(", "));
    }
    out
}

/// Per live client process (session): its pid and the bytes of data the
/// servers copied and shared for it, summed over servers.
fn client_transfers(st: &InstanceStatus) -> Vec<serde_json::Value> {
    let mut per: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for l in st.servers.iter().flat_map(|s| &s.sessions_load) {
        let e = per.entry(l.session).or_default();
        e.0 += l.copy_bytes;
        e.1 += l.share_bytes;
    }
    st.sessions
        .iter()
        .map(|(session, pid)| {
            let (copy, share) = per.get(session).copied().unwrap_or_default();
            serde_json::json!({
                "session": session,
                "pid": pid,
                "copy_bytes": copy,
                "share_bytes": share,
            })
        })
        .collect()
}

fn total_transfers(servers: &[ServerStats]) -> atoll_proto::Transfers {
    let mut t = atoll_proto::Transfers::default();
    for s in servers {
        t.add(&s.transfers);
    }
    t
}

/// The buffer cache's block pool, the block manager of file data (K42's
/// Global Page Manager shape, `fs::blocks`): its size, the blocks free in
/// the root and in servers' lists, lent to servers, and holding data.
fn pool_json(servers: &[ServerStats]) -> serde_json::Value {
    serde_json::json!({
        "blocks": servers.iter().map(|s| s.instance_blocks).max().unwrap_or(0),
        "free_root": servers.iter().map(|s| s.root_free_blocks).min().unwrap_or(0),
        "free_listed": servers.iter().map(|s| s.blocks_free).sum::<u64>(),
        "lent": servers.iter().map(|s| s.blocks_total).sum::<u64>(),
        "used": servers.iter().map(|s| s.blocks_used).sum::<u64>(),
    })
}

/// One scheduling server, as the load table in the instance's runtime
/// directory describes it.
struct SchedServer {
    core: usize,
    running: u64,
    execs: u64,
    restarts: u64,
    /// 0: a thread of the instance, or a process being restarted.
    pid: u32,
    uptime_ms: u64,
    /// Which incarnation serves `/sched/core/<core>`.
    generation: u64,
}

/// The scheduling servers of the instance of `rec`.
fn sched_servers(rec: &InstanceRecord) -> Vec<SchedServer> {
    let Some(table) = rec
        .socket
        .parent()
        .and_then(|d| atoll_sched::LoadTable::open(&d.join(atoll_sched::LOAD_FILE)))
    else {
        return Vec::new();
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    table
        .served()
        .map(|c| SchedServer {
            core: c,
            running: table.running(c),
            execs: table.execs(c),
            restarts: table.restarts(c),
            pid: table.pid(c),
            generation: table.generation(c),
            uptime_ms: match table.started_ms(c) {
                0 => 0,
                t => now_ms.saturating_sub(t),
            },
        })
        .collect()
}

/// The instance's fleets (fos §3.3): the file servers under `/fs/server`
/// with the instance's policy, the scheduling servers under `/sched/core`
/// (each process picks by its `--placement`, round robin by default),
/// and each member's state, restarts, process and generation (which
/// incarnation its name resolves to; clients re-bind when it changes).
fn names_json(st: &InstanceStatus, rec: &InstanceRecord) -> serde_json::Value {
    let fs: Vec<serde_json::Value> = st
        .health
        .iter()
        .map(|h| {
            serde_json::json!({
                "name": format!("/fs/server/{}", h.server),
                "index": h.server,
                "core": h.core,
                "state": h.state,
                "restarts": h.restarts,
                "pid": h.pid,
                "uptime_ms": h.uptime_ms,
                "generation": h.generation,
            })
        })
        .collect();
    let sched: Vec<serde_json::Value> = sched_servers(rec)
        .into_iter()
        .map(|s| {
            serde_json::json!({
                "name": format!("/sched/core/{}", s.core),
                "index": s.core,
                "core": s.core,
                "state": "up",
                "restarts": s.restarts,
                "pid": s.pid,
                "uptime_ms": s.uptime_ms,
                "generation": s.generation,
            })
        })
        .collect();
    serde_json::json!({
        "fleets": [
            { "name": "/fs/server", "policy": st.fs_policy.as_str(), "members": fs },
            { "name": "/sched/core", "policy": "round-robin", "members": sched },
        ]
    })
}

pub fn status_json(st: &InstanceStatus, rec: &InstanceRecord) -> serde_json::Value {
    let sched: Vec<serde_json::Value> = sched_servers(rec)
        .into_iter()
        .map(|s| {
            serde_json::json!({
                "core": s.core, "running": s.running, "execs": s.execs,
                "restarts": s.restarts, "pid": s.pid, "uptime_ms": s.uptime_ms,
            })
        })
        .collect();
    serde_json::json!({
        "names": names_json(st, rec),
        "sched": sched,
        // Named counters summed over servers, client-reported ones too
        // (`names.rebinds`, `dcache.hits`, …), as in `--stats-json`.
        "counters": all_counters(st),
        "id": st.id,
        "pid": st.pid,
        "kind": rec.kind,
        "mount": st.mount,
        "socket": rec.socket,
        "clients": st.clients,
        "lanes": st.lanes,
        "lanes_made": st.lanes_made,
        "images_handed_over": st.images_handed_over,
        "island": island(st),
        // `rewrite` or `trap` (`--syscall-sites`), and why.
        "syscall_sites": st.syscall_sites,
        "syscall_sites_why": st.syscall_sites_why,
        "transfers": total_transfers(&st.servers),
        "client_transfers": client_transfers(st),
        "pool": pool_json(&st.servers),
        "servers": servers_json(&st.servers),
        // The server count and poll mode, and where each came from
        // (`--servers`, `--poll`, or the default for the machine).
        "shape": {
            "servers": st.servers.len(),
            "servers_why": rec.servers_why,
            "poll": rec.poll,
            "poll_why": rec.poll_why,
        },
        // Up, stalled or down (`atoll chaos`, fault containment).
        "health": st.health,
        // Host processes running the servers (`atoll scale`).
        "scaling": st.scaling,
        // Not in `servers_json`: `--stats-json` and the benchmarks take
        // differences of every number there, and inode ids are no counts.
        "hot_dirs": st
            .servers
            .iter()
            .flat_map(|s| {
                s.hot_dirs.iter().map(|d| {
                    serde_json::json!({
                        "server": s.server,
                        "ino": d.ino,
                        "ops": d.ops,
                        "distributed": d.distributed,
                        "path": crate::top::dir_path(&st.mount, &st.dir_names, d.ino),
                    })
                })
            })
            .collect::<Vec<_>>(),
        // Directories whose mode swaps changed (Hare §6.1.2), per home
        // server; like `hot_dirs`, ids rather than counts.
        "swapped_dirs": st
            .servers
            .iter()
            .flat_map(|s| {
                s.swapped_dirs.iter().map(|d| {
                    serde_json::json!({
                        "server": s.server,
                        "ino": d.ino,
                        "path": crate::top::dir_path(&st.mount, &st.dir_names, d.ino),
                        "mode": mode_word(d),
                        "swaps": d.swaps,
                    })
                })
            })
            .collect::<Vec<_>>(),
        "limits": st
            .limits
            .iter()
            .map(|(name, used, limit)| {
                (
                    name.clone(),
                    serde_json::json!({
                        "used": used,
                        "limit": limit,
                        "free": limit.saturating_sub(*used),
                    }),
                )
            })
            .collect::<serde_json::Map<_, _>>(),
    })
}

/// `atoll list` for humans.
pub fn list_text(records: &[InstanceRecord]) -> String {
    let mut t = Table::new(&["id", "pid", "kind", "servers", "memory", "mount", "command"]);
    for r in records {
        let mut row = vec![
            r.id.clone(),
            r.pid.to_string(),
            r.kind.clone(),
            r.servers.to_string(),
            human_bytes(r.cache_bytes),
            r.mount.clone(),
        ];
        row.push(r.command.join(" "));
        t.row(row);
    }
    let mut out = String::new();
    t.render(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(i: u32, ops: &[(&str, u64, u64)]) -> ServerStats {
        ServerStats {
            server: i,
            core: i as i32,
            sessions: 1,
            inodes: 10,
            open_descriptions: 2,
            blocks_used: 5,
            blocks_total: 100,
            requests: ops.iter().map(|o| o.1).sum(),
            bad_requests: 0,
            ops: ops
                .iter()
                .map(|(n, c, t)| (n.to_string(), *c, *t))
                .collect(),
            ..ServerStats::default()
        }
    }

    #[test]
    fn human_ns_picks_a_readable_unit() {
        assert_eq!(human_ns(850.0), "850ns");
        assert_eq!(human_ns(2_100.0), "2.1µs");
        assert_eq!(human_ns(3_400_000.0), "3.4ms");
        assert_eq!(human_ns(2e9), "2.00s");
    }

    #[test]
    fn table_aligns_columns_and_sums_ops_over_servers() {
        let s = [
            server(0, &[("open", 10, 20_000), ("stat", 1, 500)]),
            server(1, &[("open", 30, 60_000)]),
        ];
        let text = stats_table(&s);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("server"));
        let open = lines.iter().find(|l| l.starts_with("open")).unwrap();
        let cells: Vec<&str> = open.split_whitespace().collect();
        // operation, count, mean, total, s0, s1
        assert_eq!(cells, ["open", "40", "2.0µs", "80.0µs", "10", "30"]);
        // Busiest operation first.
        let first_op = lines.iter().position(|l| l.starts_with("open")).unwrap();
        let stat = lines.iter().position(|l| l.starts_with("stat")).unwrap();
        assert!(first_op < stat);
        assert!(lines[1].contains("5/100"), "{text}");
    }

    #[test]
    fn json_has_servers_with_ops_and_totals() {
        let s = [
            server(0, &[("open", 4, 400)]),
            server(1, &[("open", 1, 100)]),
        ];
        let v = stats_json(&s);
        assert_eq!(v["servers"].as_array().unwrap().len(), 2);
        assert_eq!(v["servers"][0]["ops"][0]["op"], "open");
        assert_eq!(v["servers"][0]["ops"][0]["mean_ns"], 100.0);
        assert_eq!(v["totals"]["open"]["count"], 5);
    }
}
