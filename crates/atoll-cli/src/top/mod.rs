//! `atoll top`: a live view of one instance — per server its request rate
//! and busiest operations, how busy it is, how full its rings are, its
//! blocks; per client process its request and trap rates and lookup-cache
//! hit rate; per hot directory (the servers' sketches of name operations,
//! `atoll-server`'s `fs::hotdirs`) its rate, path and servers. Each sample
//! is two `status` snapshots an interval apart (`model`); `view` draws it
//! with `ratatui`. `--once` prints one sample (text, or JSON with
//! `--json`) for scripts.
//!
//! Keys: `q`/Esc quit, `s` cycles the client order (ops/s, traps/s, hit%,
//! pid), `/` starts a filter on command or pid (Enter keeps it, Esc clears
//! it), `p` pauses sampling.

mod model;
mod view;

pub use model::dir_path;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use atoll_proto::boot::InstanceStatus;

use crate::args::TopArgs;
use crate::registry::InstanceRecord;

pub fn top(args: TopArgs) -> Result<i32> {
    let rec = crate::admin::select(&args.select)?;
    let interval = Duration::from_secs_f64(args.interval);
    if args.once {
        let first = snapshot(&rec)?;
        let t0 = Instant::now();
        std::thread::sleep(interval);
        let second = snapshot(&rec)?;
        let s = model::sample(
            &first,
            &second,
            t0.elapsed().as_secs_f64(),
            model::proc_command,
        );
        if args.json {
            println!("{}", serde_json::to_string_pretty(&s)?);
        } else {
            print!("{}", view::text(&s, model::ClientOrder::Ops, ""));
        }
        return Ok(0);
    }
    view::interactive(|| snapshot(&rec), interval)?;
    Ok(0)
}

fn snapshot(rec: &InstanceRecord) -> Result<InstanceStatus> {
    crate::bootctl::status(&rec.socket)
        .with_context(|| format!("instance {} does not answer", rec.id))
}
