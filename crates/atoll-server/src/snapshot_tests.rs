//! A server rebuilt from a snapshot and the records after it equals the
//! one it replaces; a snapshot cut short by a crash leaves the previous
//! one in force; a journal too small for a history stays whole.

use proptest::prelude::*;

use super::Schedule;
use crate::fs::tape;
use crate::recovery_tests::{as_replayed, step, Live, Step};
use crate::server::{rebuild, rebuild_showing, ServerParams};
use atoll_msg::Control;

/// Apply `steps` to a fresh server with a journal of `bytes`, taking a
/// snapshot whenever `schedule` says one is due, as the server loop does
/// between requests. Returns the live server's digest, the rebuilt
/// server's, and how many snapshots were committed.
fn run(steps: &[Step], bytes: usize, mut schedule: Schedule) -> (String, String, u64) {
    let (mut live, p, control) = Live::boot(bytes);
    for s in steps {
        live.apply(s);
        let fs = live.fs.as_mut().unwrap();
        tape::clear();
        schedule.between_requests(fs, &live.journal, 0, true, &|| {});
        assert!(!live.journal.full(), "the journal stopped");
    }
    // A child still at work finishes (its snapshot committed with the
    // records since its fork after it).
    schedule.settle(&live.journal);
    let before = live.fs.as_ref().unwrap().state_digest();
    let taken = live.journal.snapshots().0;
    live.fs = None; // gives its share of the pool to the rebuilt server
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    (before, rebuilt.state_digest(), taken)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Snapshots every few records: the rebuilt server loads the newest
    /// and replays the rest, and the state (free list and its order
    /// included, which a map iterated in another order would change)
    /// is the lost one's.
    #[test]
    fn a_snapshot_then_more_records_rebuilds_the_lost_state(
        steps in proptest::collection::vec(step(), 1..150),
        every in 200u64..4000,
    ) {
        let (live, rebuilt, _) = run(&steps, 16 << 20, Schedule::every(every));
        prop_assert_eq!(live, rebuilt);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// The same with forked snapshots, committed whenever their children
    /// happen to be done (and the half waiting for them when short of
    /// room): the records appended meanwhile follow each snapshot.
    #[test]
    fn forked_snapshots_rebuild_the_lost_state(
        steps in proptest::collection::vec(step(), 1..150),
        every in 200u64..4000,
    ) {
        let (live, rebuilt, _) = run(&steps, 16 << 20, Schedule::forked_every(every));
        prop_assert_eq!(live, rebuilt);
    }
}

/// What a server shows of itself: its state as a snapshot would encode
/// it (every field, maps in key order; but the time its requests took),
/// its digest (free list included),
/// and the replies it sent (or its replay computed) since its newest
/// snapshot.
#[derive(Debug, PartialEq)]
struct Seen {
    state: Vec<u8>,
    digest: String,
    replies: Vec<(u64, Vec<u8>)>,
}

/// What `live` shows of itself, then what a successor rebuilt from its
/// journal shows, and how many snapshots the journal committed.
fn lost_and_rebuilt(
    live: &mut Live,
    p: &ServerParams,
    control: &std::rc::Rc<Control>,
) -> (Seen, Seen, u64) {
    let fs = live.fs.as_ref().unwrap();
    let lost = Seen {
        state: fs.encode_state_untimed(),
        digest: fs.state_digest(),
        replies: std::mem::take(&mut live.replies),
    };
    let taken = live.journal.snapshots().0;
    live.fs = None; // gives its share of the pool to the successor
    tape::off();
    let mut replies = Vec::new();
    let (successor, _) = rebuild_showing(
        p,
        control,
        &live.journal,
        None,
        Some(&mut |id, bytes| replies.push((id, as_replayed(&bytes)))),
    )
    .expect("the journal replays");
    let rebuilt = Seen {
        state: successor.encode_state_untimed(),
        digest: successor.state_digest(),
        replies,
    };
    (lost, rebuilt, taken)
}

/// Apply `steps` to a fresh server, taking a snapshot after step `i`
/// whenever `at[i]` (a server takes one between two requests), and going
/// on from its own state, as the server loop does. Then drop it and
/// rebuild a successor from its journal (the newest snapshot, and the
/// records after it replayed). Returns what the live server showed, what
/// the successor shows, and how many snapshots were taken.
fn live_and_successor(steps: &[Step], at: &[bool]) -> (Seen, Seen, u64) {
    let (mut live, p, control) = Live::boot(16 << 20);
    for (s, &snap) in steps.iter().zip(at.iter().chain(std::iter::repeat(&false))) {
        live.apply(s);
        if snap {
            tape::clear();
            assert!(Schedule::every(1).take(live.fs.as_mut().unwrap(), &live.journal, 0));
            live.replies.clear();
        }
    }
    lost_and_rebuilt(&mut live, &p, &control)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Snapshots at random points of a random history, the live server
    /// keeping its own state after each: a successor rebuilt from the
    /// newest one and the records after it holds the same state, byte for
    /// byte, and its replay answers every request after that snapshot as
    /// the live server did.
    #[test]
    fn a_successor_answers_and_holds_what_the_live_server_did(
        steps in proptest::collection::vec(step(), 1..200),
        at in proptest::collection::vec(proptest::bool::weighted(0.08), 0..200),
    ) {
        let (live, successor, _) = live_and_successor(&steps, &at);
        prop_assert_eq!(live, successor);
    }
}

/// Apply `steps` to a fresh server; after step `i`, when `at[i]` and no
/// child is at work, fork one to encode the state (record N), go on
/// serving (records N+1.. appended while it encodes), and commit its
/// snapshot `lag[i]` steps later, as a server whose child is done then.
/// At the end the last child is committed if `finish`, else abandoned
/// (its server stopped). Returns what the live server showed (replies
/// since the newest committed snapshot's fork), what a successor rebuilt
/// from the journal shows, and the snapshots committed.
fn live_and_successor_forked(
    steps: &[Step],
    at: &[bool],
    lag: &[u8],
    finish: bool,
) -> (Seen, Seen, u64) {
    let (mut live, p, control) = Live::boot(16 << 20);
    let mut schedule = Schedule::forked_every(1);
    // The step a child's commit is due after, and the replies before its
    // fork (which its snapshot replaces).
    let mut child: Option<(usize, usize)> = None;
    for (i, s) in steps.iter().enumerate() {
        live.apply(s);
        tape::clear();
        if let Some((due, replies)) = child {
            if i >= due {
                assert!(schedule.settle(&live.journal), "committed");
                live.replies.drain(..replies);
                child = None;
            }
        }
        if child.is_none() && at.get(i).copied().unwrap_or(false) {
            assert!(schedule.fork(live.fs.as_ref().unwrap(), &live.journal));
            let lag = usize::from(lag.get(i).copied().unwrap_or(0));
            child = Some((i + lag, live.replies.len()));
        }
    }
    if let Some((_, replies)) = child {
        if finish {
            assert!(schedule.settle(&live.journal), "committed");
            live.replies.drain(..replies);
        } else {
            schedule.abandon();
        }
    }
    lost_and_rebuilt(&mut live, &p, &control)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Snapshots encoded by forked children from the state at one record
    /// while later records are appended, committed some steps later (or
    /// the last one abandoned): a successor holds the live server's state
    /// byte for byte and its replay answers as the live server did.
    #[test]
    fn a_successor_of_a_server_with_forked_snapshots_answers_alike(
        steps in proptest::collection::vec(step(), 1..200),
        at in proptest::collection::vec(proptest::bool::weighted(0.1), 0..200),
        lag in proptest::collection::vec(0u8..12, 0..200),
        finish in proptest::bool::ANY,
    ) {
        let (live, successor, _) = live_and_successor_forked(&steps, &at, &lag, finish);
        prop_assert_eq!(live, successor);
    }
}

#[test]
fn forked_snapshots_are_committed_with_the_records_after_their_fork() {
    let steps = churn(40);
    let at: Vec<bool> = (0..steps.len()).map(|i| i % 17 == 3).collect();
    let lag = vec![5u8; steps.len()];
    let (live, successor, taken) = live_and_successor_forked(&steps, &at, &lag, true);
    assert!(taken >= 5, "only {taken} snapshots");
    assert!(
        !successor.replies.is_empty(),
        "records followed the last one"
    );
    assert_eq!(live, successor);
}

/// A child that fails (here: its snapshot is larger than the journal
/// takes) changes nothing: the old half stays in force, and the server
/// says it did not fit.
#[test]
fn a_forked_snapshot_too_large_is_abandoned_and_the_old_half_stays() {
    let (mut live, p, control) = Live::boot(16 << 10);
    let mut r = 0u8;
    while live.fs.as_ref().unwrap().encode_state().unwrap().len() <= live.journal.snapshot_room() {
        live.apply(&Step::Mkdir {
            dir: r % 7,
            name: r,
        });
        r += 1;
    }
    assert!(!live.journal.full(), "the records still fit");
    let mut schedule = Schedule::forked_every(1);
    tape::clear();
    assert!(schedule.fork(live.fs.as_ref().unwrap(), &live.journal));
    assert!(!schedule.settle(&live.journal), "does not fit");
    assert_eq!(live.journal.snapshots().0, 0);
    assert_eq!(live.journal.child(), 0, "reaped and forgotten");
    let before = live.fs.as_ref().unwrap().state_digest();
    live.fs = None;
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    assert_eq!(before, rebuilt.state_digest());
}

/// A successor finds the pid of its predecessor's snapshot child in the
/// journal: it kills that child before it serves, but leaves alone a
/// process that is not one (a pid reused since).
#[test]
fn a_successor_ends_a_stray_snapshot_child_and_only_such_a_child() {
    use crate::sys::{fork_worker, reap_worker};
    let (_fd, journal) = crate::journal::Journal::create(1 << 20).unwrap();
    let sleep = || loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    };
    let stray = fork_worker(c"atoll-snap0", sleep).unwrap();
    journal.set_child(stray);
    super::end_stray(&journal);
    assert_eq!(journal.child(), 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        if let Some(s) = reap_worker(stray).unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "the stray lives on");
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert_eq!(status, -libc::SIGKILL);

    let other = fork_worker(c"not-a-snapshot", sleep).unwrap();
    journal.set_child(other);
    super::end_stray(&journal);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(reap_worker(other).unwrap(), None, "left alone");
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(other as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
    while reap_worker(other).unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A snapshot child dies with the thread that forked it (a server thread
/// that ends, or the host process killed): it never outlives its server
/// to write into a half a successor uses.
#[test]
fn a_snapshot_child_dies_with_the_thread_that_forked_it() {
    use crate::sys::{fork_worker, reap_worker};
    let pid = std::thread::spawn(|| {
        let (rx, tx) = rustix::pipe::pipe().unwrap();
        let pid = fork_worker(c"atoll-snap9", || {
            // The child's work begins once its death signal is set.
            let _ = rustix::io::write(&tx, b"!");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        })
        .unwrap();
        // The thread ends once the child runs (one that ends before the
        // child's `prctl` leaves it to its successor's check and to the
        // kill a stopping server does: `snapshot_fork`).
        assert_eq!(rustix::io::read(&rx, &mut [0u8; 1]).unwrap(), 1);
        pid
    })
    .join()
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        if let Some(s) = reap_worker(pid).unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "the child lives on");
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert_eq!(status, -libc::SIGKILL);
}

/// A fixed history that frees blocks in map order after snapshots
/// (sessions that end, with descriptions of written files).
fn churn(rounds: u8) -> Vec<Step> {
    let mut v = Vec::new();
    for r in 0..rounds {
        let session = 1 + r % 3;
        v.push(Step::Create {
            dir: 0,
            name: r % 5,
            session,
        });
        v.push(Step::Write {
            desc: 0,
            len: 9000,
            at: u16::from(r) * 7,
        });
        v.push(Step::Share {
            desc: 0,
            to: 1 + (r + 1) % 3,
        });
        if r % 4 == 3 {
            v.push(Step::EndSession { session });
        }
        if r % 3 == 2 {
            v.push(Step::Unlink {
                dir: 0,
                name: (r + 2) % 5,
            });
        }
    }
    v
}

#[test]
fn snapshots_are_taken_and_the_rebuilt_state_is_exact() {
    let (live, rebuilt, taken) = run(&churn(60), 16 << 20, Schedule::every(1500));
    assert_eq!(live, rebuilt);
    assert!(taken >= 5, "only {taken} snapshots");
}

/// A server killed while it wrote a snapshot: the new half holds a
/// snapshot and words, but the generation was never stored. The rebuild
/// takes the previous snapshot and every record after it.
#[test]
fn a_server_killed_mid_snapshot_recovers_from_the_previous_one() {
    let (mut live, p, control) = Live::boot(1 << 20);
    let mut schedule = Schedule::every(u64::MAX);
    let history = churn(30);
    let (first, rest) = history.split_at(history.len() / 2);
    for s in first {
        live.apply(s);
    }
    tape::clear();
    assert!(schedule.take(live.fs.as_mut().unwrap(), &live.journal, 0));
    for s in rest {
        live.apply(s);
    }
    // Half a snapshot, then the kill: garbage where the new one goes.
    let state = live.fs.as_ref().unwrap().encode_state().unwrap();
    let torn: Vec<u8> = state[..state.len() / 2].iter().map(|b| !b).collect();
    assert!(live.journal.write_snapshot_uncommitted(&torn));
    assert_eq!(live.journal.snapshots().0, 1, "not committed");
    let before = live.fs.as_ref().unwrap().state_digest();
    live.fs = None;
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the old half replays");
    assert_eq!(before, rebuilt.state_digest());
}

/// A snapshot whose bytes changed after its commit is refused, not
/// loaded.
#[test]
fn a_scribbled_snapshot_is_refused() {
    let (mut live, p, control) = Live::boot(1 << 20);
    for s in churn(5) {
        live.apply(&s);
    }
    tape::clear();
    assert!(Schedule::every(1).take(live.fs.as_mut().unwrap(), &live.journal, 0));
    live.journal.scribble_on_snapshot(3);
    live.fs = None;
    tape::off();
    let err = rebuild(&p, &control, &live.journal).err().expect("refused");
    assert!(err.contains("does not parse"), "{err}");
}

/// A history whose records are many times a small journal: without
/// snapshots the journal fills (and the server can no longer be
/// rebuilt); with them it stays whole, and the rebuild is exact.
#[test]
fn a_tiny_journal_keeps_its_server_recoverable() {
    let steps = churn(250);
    let bytes = 64 << 10;
    let (mut unsnapped, _, _) = Live::boot(bytes);
    for s in &steps {
        unsnapped.apply(s);
    }
    assert!(
        unsnapped.journal.full(),
        "the history outgrows the journal: {} bytes",
        unsnapped.journal.used()
    );
    unsnapped.fs = None;
    tape::off();

    let mut default = Schedule::every(u64::MAX);
    default.fixed = None;
    let (live, rebuilt, taken) = run(&steps, bytes, default);
    assert_eq!(live, rebuilt);
    assert!(taken >= 2, "only {taken} snapshots");
}

/// A state too large for a half of the journal is not snapshotted: the
/// journal fills and stops, as it did before snapshots, and says so.
#[test]
fn a_state_too_large_for_its_journal_stops_it() {
    let (mut live, _, _) = Live::boot(16 << 10);
    let mut schedule = Schedule::every(u64::MAX);
    schedule.fixed = None;
    for r in 0..200u8 {
        live.apply(&Step::Mkdir {
            dir: r % 7,
            name: r,
        });
        if schedule.due(&live.journal) {
            tape::clear();
            schedule.take(live.fs.as_mut().unwrap(), &live.journal, 0);
        }
    }
    assert!(live.journal.full());
    live.fs = None;
    tape::off();
}

/// The hazard that made a live server reload its own snapshot while its
/// maps were hash maps: a map that grew large and shrank (descriptions of
/// one session) had more buckets live than decoded, so the two iterated
/// in different orders; the session's end then frees its files' blocks in
/// that order, which the free list shows. Live (keeping its own state)
/// and rebuilt must agree.
#[test]
fn a_snapshot_keeps_the_order_a_session_end_frees_blocks_in() {
    let mut steps = Vec::new();
    for name in 0..80u8 {
        steps.push(Step::Create {
            dir: 0,
            name,
            session: 2,
        });
    }
    for desc in 0..80u8 {
        steps.push(Step::Write {
            desc,
            len: 4000,
            at: 0,
        });
    }
    for _ in 12..80u8 {
        steps.push(Step::Close { desc: 12 });
    }
    for name in 0..12u8 {
        steps.push(Step::Unlink { dir: 0, name });
    }
    let (mut live, p, control) = Live::boot(16 << 20);
    for s in &steps {
        live.apply(s);
    }
    tape::clear();
    assert!(Schedule::every(1).take(live.fs.as_mut().unwrap(), &live.journal, 0));
    live.apply(&Step::EndSession { session: 2 });
    let before = live.fs.as_ref().unwrap().state_digest();
    live.fs = None;
    tape::off();
    let rebuilt = rebuild(&p, &control, &live.journal).expect("the journal replays");
    assert_eq!(before, rebuilt.state_digest());
}
