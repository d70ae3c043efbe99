//! Message traces (`atoll run --trace FILE`): every request a server
//! serves, with when it started and how long it took, who sent it (session,
//! lane, process), its operation, its size and its reply's, whether it did
//! the work of several protocol steps at once (coalesced, Hare §3.7.4) and
//! how many invalidations it caused (Hare §3.7.2).
//!
//! Each server thread records into its own vector (no sharing on the hot
//! path: one clock read is already taken for the per-operation statistics,
//! the record adds one more and a push), bounded to [`EVENTS_PER_SERVER`];
//! past it events are counted as dropped. At shutdown the vectors go to a
//! [`Sink`], which writes the Chrome trace-event JSON that Perfetto and
//! `chrome://tracing` open: one track per server (process "atoll servers",
//! thread "server N") and one per client lane (process "pid P", thread
//! "lane L"), each message appearing on both.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

/// Most events one server keeps (about 40 bytes each).
pub const EVENTS_PER_SERVER: usize = 2_000_000;

/// One served request.
#[derive(Clone, Copy, Debug)]
pub struct TraceEvent {
    /// Nanoseconds from the instance's start to the start of service.
    pub start_ns: u64,
    pub dur_ns: u32,
    pub session: u64,
    pub lane: u32,
    pub server: u16,
    /// Index into the server's operation names.
    pub op: u16,
    pub request_bytes: u32,
    pub reply_bytes: u32,
    pub ok: bool,
    pub coalesced: bool,
    pub invalidations: u16,
}

/// A server's recorder.
pub struct Recorder {
    pub epoch: Instant,
    pub events: Vec<TraceEvent>,
    pub dropped: u64,
}

impl Recorder {
    pub fn new(epoch: Instant) -> Recorder {
        Recorder {
            epoch,
            events: Vec::new(),
            dropped: 0,
        }
    }

    #[inline]
    pub fn push(&mut self, e: TraceEvent) {
        if self.events.len() < EVENTS_PER_SERVER {
            self.events.push(e);
        } else {
            self.dropped += 1;
        }
    }
}

/// Where recorders end up, and what the boot thread knows of sessions.
pub struct Sink {
    pub epoch: Instant,
    inner: Mutex<SinkInner>,
}

#[derive(Default)]
struct SinkInner {
    events: Vec<TraceEvent>,
    dropped: u64,
    pids: HashMap<u64, u32>,
}

impl Sink {
    pub fn new() -> Sink {
        Sink {
            epoch: Instant::now(),
            inner: Mutex::default(),
        }
    }

    /// A server hands over what it recorded (at shutdown).
    pub fn collect(&self, r: Recorder) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.events.extend(r.events);
        g.dropped += r.dropped;
    }

    /// The boot thread learned which process a session belongs to.
    pub fn session_pid(&self, session: u64, pid: u32) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.pids.insert(session, pid);
    }

    /// Events recorded and dropped so far.
    pub fn counts(&self) -> (usize, u64) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (g.events.len(), g.dropped)
    }

    /// Write the Chrome trace-event JSON; `op_name` names operation indices.
    pub fn write_chrome(
        &self,
        out: &mut dyn Write,
        op_name: impl Fn(u16) -> &'static str,
    ) -> std::io::Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.events.sort_by_key(|e| e.start_ns);
        let servers_pid = 0u64;
        // A client track's process id: its pid, or a made-up id above any
        // pid for sessions whose process never said (distinct per session).
        let client_pid = |s: u64| -> u64 {
            match g.pids.get(&s) {
                Some(&p) if p > 0 => u64::from(p),
                _ => (1 << 32) + s,
            }
        };
        let mut meta: Vec<Value> = vec![json!({
            "ph": "M", "name": "process_name", "pid": servers_pid, "tid": 0,
            "args": {"name": "atoll servers"}
        })];
        let mut named_servers = std::collections::BTreeSet::new();
        let mut named_lanes = std::collections::BTreeSet::new();
        for e in &g.events {
            if named_servers.insert(e.server) {
                meta.push(json!({"ph": "M", "name": "thread_name", "pid": servers_pid,
                    "tid": e.server, "args": {"name": format!("server {}", e.server)}}));
            }
            let pid = client_pid(e.session);
            if named_lanes.insert((pid, e.lane)) {
                if named_lanes.iter().filter(|(p, _)| *p == pid).count() == 1 {
                    meta.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": format!("pid {} (session {})", if pid >> 32 == 0 { pid.to_string() } else { "?".into() }, e.session)}}));
                }
                meta.push(
                    json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": e.lane,
                    "args": {"name": format!("lane {}", e.lane)}}),
                );
            }
        }
        write!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{\"dropped_events\":{}}},\"traceEvents\":[", g.dropped)?;
        let mut first = true;
        let mut emit = |out: &mut dyn Write, v: &Value| -> std::io::Result<()> {
            if !first {
                out.write_all(b",\n")?;
            }
            first = false;
            serde_json::to_writer(&mut *out, v).map_err(std::io::Error::other)
        };
        for m in &meta {
            emit(out, m)?;
        }
        for e in &g.events {
            let args = json!({
                "session": e.session, "lane": e.lane, "server": e.server,
                "request_bytes": e.request_bytes, "reply_bytes": e.reply_bytes,
                "ok": e.ok, "coalesced": e.coalesced, "invalidations": e.invalidations,
            });
            // Microseconds with nanosecond precision, as the format wants.
            let ts = e.start_ns as f64 / 1000.0;
            let dur = f64::from(e.dur_ns) / 1000.0;
            let name = op_name(e.op);
            emit(
                out,
                &json!({"ph": "X", "cat": "server", "name": name, "ts": ts, "dur": dur,
                "pid": servers_pid, "tid": e.server, "args": args}),
            )?;
            emit(
                out,
                &json!({"ph": "X", "cat": "client", "name": name, "ts": ts, "dur": dur,
                "pid": client_pid(e.session), "tid": e.lane, "args": args}),
            )?;
        }
        out.write_all(b"]}\n")
    }
}

impl Default for Sink {
    fn default() -> Self {
        Sink::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(start_ns: u64, server: u16, session: u64, op: u16) -> TraceEvent {
        TraceEvent {
            start_ns,
            dur_ns: 1500,
            session,
            lane: 0,
            server,
            op,
            request_bytes: 40,
            reply_bytes: 20,
            ok: true,
            coalesced: op == 1,
            invalidations: 0,
        }
    }

    #[test]
    fn recorder_is_bounded_and_counts_what_it_drops() {
        let mut r = Recorder::new(Instant::now());
        r.events.reserve(0);
        for i in 0..3 {
            r.push(ev(i, 0, 1, 0));
        }
        assert_eq!((r.events.len(), r.dropped), (3, 0));
        r.events.resize(EVENTS_PER_SERVER, ev(0, 0, 1, 0));
        r.push(ev(9, 0, 1, 0));
        assert_eq!((r.events.len(), r.dropped), (EVENTS_PER_SERVER, 1));
    }

    #[test]
    fn chrome_json_has_a_track_per_server_and_lane_and_each_message_twice() {
        let sink = Sink::new();
        let mut a = Recorder::new(sink.epoch);
        a.push(ev(2000, 0, 7, 1));
        let mut b = Recorder::new(sink.epoch);
        b.push(ev(1000, 1, 8, 0));
        sink.collect(a);
        sink.collect(b);
        sink.session_pid(7, 4242);
        let mut out = Vec::new();
        sink.write_chrome(&mut out, |op| ["Lookup", "Open"][op as usize])
            .unwrap();
        let v: Value = serde_json::from_slice(&out).expect("valid JSON");
        let evs = v["traceEvents"].as_array().unwrap();
        let xs: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(xs.len(), 4);
        // Sorted by time: session 8's Lookup first.
        assert_eq!(xs[0]["name"], "Lookup");
        assert_eq!(xs[0]["ts"], 1.0);
        assert_eq!(xs[2]["args"]["coalesced"], true);
        assert!(xs.iter().any(|e| e["cat"] == "client" && e["pid"] == 4242));
        let names: Vec<String> = evs
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
            .collect();
        for want in ["atoll servers", "server 0", "server 1", "lane 0"] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
        assert!(names.iter().any(|n| n.starts_with("pid 4242")));
    }
}
