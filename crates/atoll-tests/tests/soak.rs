//! Soak (fos §3.5): random kills and stalls of file servers while
//! processes write, rename, remove and pipe. Nothing hangs, only `EIO`
//! ever fails, every acknowledged change is in the tree afterwards, and
//! once the files are gone nothing is left held: no block, no inode, no
//! open description.
//!
//! The short variant runs in CI; the long one (1,000 faults over ten
//! minutes) runs with `cargo test --release -p atoll-tests --test soak --
//! --ignored`.

use atoll_tests::OutputBounded as _;
use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use atoll_bench::util::Rng;
use atoll_tests::{output_within, Booted};

const SERVERS: usize = 3;

fn chaos(inst: &Booted, args: &[String]) -> bool {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    inst.chaos(&args).status.success()
}

fn soak(faults: usize, period: Duration, seed: u64) {
    let inst = Booted::new(&["--servers", &SERVERS.to_string()]);
    let setup = inst
        .command(r#"mkdir "$ROOT/d" && setfattr -n user.atoll.distributed -v 1 "$ROOT/d""#)
        .status()
        .expect("setup");
    assert!(setup.success());
    let stop_file = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    std::fs::remove_file(&stop_file).unwrap();
    let work = format!(
        r#"
        cd "$ROOT/d"
        for w in 1 2 3 4; do
          (
            i=0
            while [ ! -e "{stop}" ]; do
              i=$((i + 1))
              if echo "$w.$i" > "n$w-$i" && mv "n$w-$i" "m$w-$i"; then echo "ok $w $i"; else echo "failed $w $i"; fi
              if [ $((i % 4)) = 0 ]; then
                j=$((i - 2)); rm "m$w-$j" 2>/dev/null && echo "rm $w $j"
              fi
              if [ $((i % 10)) = 0 ]; then
                [ "$(seq 1 3000 | sort -rn | head -1)" = 3000 ] && echo "pipe ok" || echo "pipe failed"
              fi
            done
          ) 2>"/tmp/soak-$$-$w.err" &
        done
        wait
        cat /tmp/soak-$$-*.err | grep -v 'Input/output error$' | grep -v 'No such file' | sed 's/^/other error: /'
        rm -f /tmp/soak-$$-*.err
        "#,
        stop = stop_file.display()
    );
    let mut cmd = inst.command(&work);
    cmd.stdin(Stdio::null());
    // The faults take `period` each plus an `atoll chaos` command, which
    // costs much more on a loaded machine: the hang bound is counted from
    // the end of the faults (below), this one only stops a runaway run.
    let limit = 3 * period * faults as u32 + Duration::from_secs(600);
    let runner = std::thread::spawn(move || output_within(cmd, limit));

    let mut rng = Rng::new(seed);
    let (mut kills, mut stalls) = (0, 0);
    let started = Instant::now();
    for _ in 0..faults {
        std::thread::sleep(
            period / 2 + Duration::from_millis(rng.below(period.as_millis() as usize) as u64),
        );
        let server = rng.below(SERVERS);
        let target = format!("server:{server}");
        if rng.below(3) == 0 {
            let ms = 20 + rng.below(200);
            if chaos(
                &inst,
                &["--stall".into(), target, "--for".into(), format!("{ms}ms")],
            ) {
                stalls += 1;
            }
        } else if chaos(&inst, &["--kill".into(), target]) {
            kills += 1;
        }
    }
    std::fs::write(&stop_file, b"").unwrap();
    let stopped = Instant::now();
    let out = runner.join().expect("workload thread");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        started.elapsed() < limit && stopped.elapsed() < Duration::from_secs(120),
        "the workload hung ({kills} kills, {stalls} stalls)"
    );
    assert!(kills > faults / 3, "only {kills} kills took");
    assert!(!stdout.contains("other error"), "only EIO: {stdout}");

    // What was acknowledged is there; what was removed is gone.
    let mut kept: HashMap<String, String> = HashMap::new();
    let mut removed: HashSet<String> = HashSet::new();
    let (mut ok, mut failed, mut pipes_failed) = (0, 0, 0);
    for l in stdout.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["ok", w, i] => {
                ok += 1;
                kept.insert(format!("m{w}-{i}"), format!("{w}.{i}"));
            }
            ["rm", w, j] => {
                let name = format!("m{w}-{j}");
                kept.remove(&name);
                removed.insert(name);
            }
            ["failed", ..] => failed += 1,
            ["pipe", "failed"] => pipes_failed += 1,
            _ => {}
        }
    }
    assert!(ok > 100, "{ok} steps in all: {stdout}");
    // A kill fails at most the calls in flight: a few per kill.
    assert!(
        failed + pipes_failed <= 4 * kills + 4,
        "{failed} steps and {pipes_failed} pipelines failed for {kills} kills"
    );
    let listing = inst
        .command(r#"cd "$ROOT/d"; for f in m*; do printf '%s %s\n' "$f" "$(cat "$f")"; done"#)
        .output_bounded()
        .expect("listing");
    let listed: HashMap<String, String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    for (name, content) in &kept {
        assert_eq!(listed.get(name), Some(content), "lost {name}");
    }
    for name in &removed {
        assert!(!listed.contains_key(name), "{name} came back");
    }

    // Nothing held once everything is gone (a stalled server may still be
    // catching up: ask until it settles).
    let clean = inst.command(r#"rm -rf "$ROOT/d""#).status().expect("rm");
    assert!(clean.success());
    let started = Instant::now();
    loop {
        let st = inst.status();
        let used = st["pool"]["used"].as_u64().unwrap();
        let inodes = st["limits"]["inodes"]["used"].as_u64().unwrap();
        let descs = st["limits"]["open_descriptions"]["used"].as_u64().unwrap();
        let down: Vec<_> = st["health"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["state"] == "down")
            .collect();
        assert!(down.is_empty(), "servers not rebuilt: {down:?}");
        if (used, inodes, descs) == (0, 1, 0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "held after the end: {used} blocks, {inodes} inodes, {descs} descriptions"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn servers_killed_and_stalled_at_random_lose_nothing_acknowledged() {
    soak(24, Duration::from_millis(400), 0x5eed_0001);
}

#[test]
#[ignore = "ten minutes; run with --ignored"]
fn a_thousand_random_kills_and_stalls_over_ten_minutes() {
    soak(1000, Duration::from_millis(600), 0x5eed_1000);
}
