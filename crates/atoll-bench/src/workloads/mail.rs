//! *mailbench* (sv6's mail server, Hare Table 5.1), without `exec`:
//!
//! ```text
//!  deliver i:  mail/tmp/<id>  (create, write, close)
//!              link → mail/queue/<id>, unlink tmp          5 ops / message
//!  qman:       readdir mail/queue; per message: read the To: header
//!              (open, read, close), rename → mail/users/u<k>/new/<id>
//! ```
//!
//! The queue directory is shared by all delivering processes and the queue
//! manager; every message must end up in its recipient's mailbox exactly
//! once.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use super::{sub, Job, Role, WorkerReport};
use crate::util::{is_not_found, list_names, At, BenchError, Result};

pub const USERS: usize = 8;
const BODY: usize = 512;

fn mail(job: &Job) -> PathBuf {
    sub(&job.dir, "mail")
}

fn recipient(idx: usize, m: u64) -> usize {
    (idx + m as usize) % USERS
}

fn message(id: &str, user: usize) -> Vec<u8> {
    let mut v = format!("To: u{user}\nId: {id}\n\n").into_bytes();
    v.resize(v.len() + BODY, b'm');
    v
}

pub fn setup(job: &Job) -> Result<()> {
    let m = mail(job);
    for d in ["tmp", "queue"] {
        let p = m.join(d);
        fs::create_dir_all(&p).at("mkdir", &p)?;
    }
    for u in 0..USERS {
        let p = m.join(format!("users/u{u}/new"));
        fs::create_dir_all(&p).at("mkdir", &p)?;
    }
    Ok(())
}

pub fn deliver(job: &Job, idx: usize) -> Result<WorkerReport> {
    let m = mail(job);
    let mut r = WorkerReport::new(Role::Worker, idx);
    for k in 0..job.iterations() {
        let id = format!("{idx}.{k}");
        let tmp = m.join("tmp").join(&id);
        let q = m.join("queue").join(&id);
        let mut f = fs::File::create(&tmp).at("create", &tmp)?;
        f.write_all(&message(&id, recipient(idx, k)))
            .at("write", &tmp)?;
        drop(f);
        fs::hard_link(&tmp, &q).at("link", &q)?;
        fs::remove_file(&tmp).at("unlink", &tmp)?;
        r.ops += 5;
    }
    Ok(r)
}

/// Move every queued message into its mailbox until all
/// `P × iterations` messages have been moved.
pub fn qman(job: &Job, idx: usize) -> Result<WorkerReport> {
    let m = mail(job);
    let queue = m.join("queue");
    let total = job.nworkers as u64 * job.iterations();
    let mut r = WorkerReport::new(Role::Qman, idx);
    let mut moved = 0u64;
    let mut idle = 0u32;
    while moved < total {
        let names = list_names(&queue)?;
        r.ops += 1;
        if names.is_empty() {
            // Nothing queued yet: let the delivering processes run.
            idle += 1;
            r.bump("idle_passes", 1);
            if idle > 64 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            } else {
                std::thread::yield_now();
            }
            continue;
        }
        idle = 0;
        for name in names {
            let p = queue.join(&name);
            let data = match fs::read(&p) {
                Ok(d) => d,
                Err(e) if is_not_found(&e) => {
                    return Err(BenchError::Check(format!(
                        "queued message {name} vanished before the queue manager moved it"
                    )))
                }
                Err(e) => return Err(e).at("read", &p),
            };
            let user = parse_to(&data).ok_or_else(|| {
                BenchError::Check(format!("queued message {name} has no To: header"))
            })?;
            let dst = m.join(format!("users/u{user}/new")).join(&name);
            fs::rename(&p, &dst).at("rename", &p)?;
            r.ops += 4;
            moved += 1;
        }
    }
    r.bump("moved", moved);
    Ok(r)
}

fn parse_to(data: &[u8]) -> Option<usize> {
    let line = data.split(|&b| b == b'\n').next()?;
    let s = std::str::from_utf8(line).ok()?;
    let u: usize = s.strip_prefix("To: u")?.parse().ok()?;
    (u < USERS).then_some(u)
}

pub fn check(job: &Job) -> Result<()> {
    let m = mail(job);
    for d in ["tmp", "queue"] {
        let left = list_names(&m.join(d))?;
        if !left.is_empty() {
            return Err(BenchError::Check(format!(
                "mail/{d} still holds {} messages",
                left.len()
            )));
        }
    }
    let mut want: Vec<Vec<String>> = vec![Vec::new(); USERS];
    for i in 0..job.nworkers {
        for k in 0..job.iterations() {
            want[recipient(i, k)].push(format!("{i}.{k}"));
        }
    }
    for (u, mut w) in want.into_iter().enumerate() {
        w.sort();
        let dir = m.join(format!("users/u{u}/new"));
        let got = list_names(&dir)?;
        if got != w {
            return Err(BenchError::Check(format!(
                "mailbox u{u} holds {} messages, expected {} (each exactly once)",
                got.len(),
                w.len()
            )));
        }
        for name in got {
            let p = dir.join(&name);
            let data = fs::read(&p).at("read", &p)?;
            if data != message(&name, u) {
                return Err(BenchError::Check(format!("message {name} was corrupted")));
            }
        }
    }
    Ok(())
}

pub fn check_reports(job: &Job, reports: &[WorkerReport]) -> Result<()> {
    let moved: u64 = reports.iter().map(|r| r.get("moved")).sum();
    let total = job.nworkers as u64 * job.iterations();
    if moved != total {
        return Err(BenchError::Check(format!(
            "queue manager moved {moved} of {total} messages"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run_tiny;
    use super::super::{Role, Workload};
    use super::*;

    #[test]
    fn every_message_is_delivered_exactly_once() {
        let (_t, job, reports) = run_tiny(Workload::Mailbench, 3);
        let n = job.iterations();
        let delivered: usize = (0..USERS)
            .map(|u| {
                std::fs::read_dir(job.dir.join(format!("mail/users/u{u}/new")))
                    .unwrap()
                    .count()
            })
            .sum();
        assert_eq!(delivered as u64, 3 * n);
        let q = reports.iter().find(|r| r.role == Role::Qman).unwrap();
        assert_eq!(q.get("moved"), 3 * n);
    }

    #[test]
    fn to_header_parses() {
        assert_eq!(parse_to(&message("0.1", 5)), Some(5));
        assert_eq!(parse_to(b"To: u99\n"), None);
        assert_eq!(parse_to(b"garbage"), None);
    }
}
