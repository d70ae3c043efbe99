//! File servers that join a running instance (Hare §6.1.1, fos fleets):
//! booted with `--servers 1` and no `--max-servers`, `atoll scale` past
//! the members makes new servers join. They take only what is made after
//! they join: a distributed directory keeps the width it was made with and
//! reaches new members by a swap; the work of programs running meanwhile
//! ends as on a tmpfs directory of the host; a joined member whose host is
//! killed is rebuilt from its own journal.

use atoll_tests::OutputBounded as _;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use atoll_tests::{atoll, output_within, run_in_host_dir, Booted, RUN_LIMIT};

/// `atoll scale --id ID --servers N`, which must take.
fn scale_to(inst: &Booted, n: usize) {
    let out: Output = atoll()
        .args(["scale", "--id", &inst.id, "--servers", &n.to_string()])
        .output_bounded()
        .expect("atoll scale");
    assert!(
        out.status.success(),
        "scale to {n}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(inst.status()["scaling"]["hosts"], n as u64);
}

/// Wait until `script` succeeds in the instance.
fn wait_for(inst: &Booted, script: &str) {
    let started = Instant::now();
    while !inst.command(script).status().is_ok_and(|s| s.success()) {
        assert!(started.elapsed() < RUN_LIMIT, "never true: {script}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `bash -c script` in the instance: its stdout, which must succeed.
fn run(inst: &Booted, script: &str) -> String {
    let out = inst.command(script).output_bounded().expect("atoll exec");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Inodes each member holds, from `atoll status --json`.
fn inodes_per_server(st: &serde_json::Value) -> Vec<u64> {
    st["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| s["inodes"].as_u64().expect("inodes"))
        .collect()
}

/// Four processes create, write, rename and unlink in a distributed
/// directory and in directories of their own (new subdirectories now and
/// then), while the members grow; then everything is listed. A
/// distributed directory made once the script runs spreads over however
/// many members there are then (`wide`, made half way).
const CHURN: &str = r#"
    cd "$ROOT"
    mkdir shared && setfattr -n user.atoll.distributed -v 1 shared 2>/dev/null
    for w in 1 2 3 4; do
      (
        mkdir own$w
        for i in $(seq 150); do
          echo "$w.$i" > shared/n$w-$i || echo "failed create $w $i"
          mv shared/n$w-$i shared/m$w-$i || echo "failed rename $w $i"
          echo "$i" >> own$w/log || echo "failed append $w $i"
          if [ $((i % 3)) = 0 ]; then rm shared/m$w-$i || echo "failed unlink $w $i"; fi
          if [ $((i % 10)) = 0 ]; then mkdir own$w/d$i && echo $i > own$w/d$i/f; fi
          if [ $((i % 30)) = 0 ]; then mv own$w/d$((i - 10)) own$w/r$i || echo "failed mv $w $i"; fi
          if [ $w = 1 ] && [ $i = 75 ]; then mkdir wide && setfattr -n user.atoll.distributed -v 1 wide 2>/dev/null; fi
          if [ $i = 76 ]; then while [ ! -d wide ]; do sleep 0.01; done; fi
          if [ $i -gt 75 ]; then echo $i > wide/w$w-$i || echo "failed wide $w $i"; fi
        done
      ) &
    done
    wait
    cd "$ROOT"; find . -print | LC_ALL=C sort
    for w in 1 2 3 4; do md5sum own$w/log; done
    cat shared/m1-1 shared/m4-149 own2/r150/f wide/w3-100
    ls shared | wc -l; ls wide | wc -l
    stat -c '%h %n' own1 own1/d60
"#;

/// 1 → 4 → 2 → 3 hosts during the churn, from one member: servers 1, 2
/// and 3 join (and stay members when the hosts go down to 2), the work
/// ends as on a tmpfs directory, no call failed, and new inodes landed on
/// the members that joined.
#[test]
fn members_join_during_churn_one_four_two_three_and_it_matches_tmpfs() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir on /dev/shm");
    let (dir, host) = run_in_host_dir(dir, CHURN);
    let want =
        String::from_utf8_lossy(&host.stdout).replace(&*dir.path().to_string_lossy(), "$ROOT");
    assert!(host.status.success());

    let inst = Booted::new(&["--servers", "1"]);
    let st = inst.status();
    assert_eq!(st["scaling"]["members"], 1, "{}", st["scaling"]);
    assert!(st["scaling"]["room"].as_u64().unwrap() >= 4);
    let mut cmd = inst.command(CHURN);
    cmd.stdin(Stdio::null());
    let started = Instant::now();
    let runner = std::thread::spawn(move || output_within(cmd, RUN_LIMIT));
    wait_for(&inst, r#"test -e "$ROOT/shared/m1-10""#);
    for n in [4, 2, 3] {
        scale_to(&inst, n);
        std::thread::sleep(Duration::from_millis(150));
    }
    let out = runner.join().expect("churn thread");
    let got = String::from_utf8_lossy(&out.stdout).replace("/atoll", "$ROOT");
    assert!(started.elapsed() < RUN_LIMIT, "hung");
    assert!(
        !got.contains("failed"),
        "{got}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(got, want, "{}", String::from_utf8_lossy(&out.stderr));

    // A directory made distributed now spreads over every member, and
    // its files live where their entries do: some on each joined member.
    run(
        &inst,
        r#"cd "$ROOT"; mkdir after && setfattr -n user.atoll.distributed -v 1 after
           for i in $(seq 40); do echo $i > after/f$i; done"#,
    );
    let st = inst.status();
    assert_eq!(st["scaling"]["members"], 4, "{}", st["scaling"]);
    assert_eq!(
        st["scaling"]["joined"],
        serde_json::json!([1, 2, 3]),
        "{}",
        st["scaling"]
    );
    let health = st["health"].as_array().expect("health");
    assert_eq!(health.len(), 4, "members stay when hosts go: {health:?}");
    for h in health {
        assert_eq!(h["state"], "up", "{h}");
        assert_eq!(h["joined"], h["server"] != 0, "{h}");
    }
    let per = inodes_per_server(&st);
    assert!(
        per[1..].iter().all(|&n| n > 0),
        "every joined member holds inodes: {per:?}"
    );
}

/// A directory distributed before members joined keeps its width, and
/// all its names stay reachable; one made distributed after (under a
/// `--distribute` path, or in a distributed parent made before) spreads
/// over the wider width, and a directory spread by a swap before reaches
/// the new members by being swapped again.
#[test]
fn a_directory_keeps_its_width_and_one_made_after_growth_is_wider() {
    let inst = Booted::new(&["--servers", "2", "--distribute", "/atoll/ids"]);
    let width = |path: &str| {
        run(
            &inst,
            &format!(
                r#"getfattr --absolute-names --only-values -n user.atoll.width "$ROOT/{path}""#
            ),
        )
    };
    run(
        &inst,
        r#"cd "$ROOT"; mkdir ids ids/before swapped
           setfattr -n user.atoll.distributed -v 1 swapped
           for i in $(seq 60); do echo b$i > ids/before/b$i; echo w$i > swapped/w$i; done"#,
    );
    assert_eq!(width("ids/before"), "2");
    assert_eq!(width("swapped"), "2");
    scale_to(&inst, 4);
    run(
        &inst,
        r#"cd "$ROOT"; mkdir ids/after ids/before/sub
           for i in $(seq 60); do
             echo a$i > ids/after/a$i; echo c$i > ids/before/c$i; echo s$i > ids/before/sub/s$i
           done"#,
    );
    assert_eq!(width("ids/before"), "2", "kept");
    assert_eq!(width("swapped"), "2", "kept");
    assert_eq!(width("ids/after"), "4");
    assert_eq!(width("ids/before/sub"), "4", "made after, in an older one");
    let all = r#"cd "$ROOT"; ls ids/before | wc -l; ls ids/after | wc -l; ls ids/before/sub | wc -l
                 ls swapped | wc -l
                 cat ids/before/b1 ids/before/b60 ids/before/c30 ids/after/a17 ids/before/sub/s44 swapped/w9"#;
    let want = "121\n60\n60\n60\nb1\nb60\nc30\na17\ns44\nw9\n";
    assert_eq!(run(&inst, all), want);
    // The files of the wider directories live where their entries do,
    // the joined members among them.
    let per = inodes_per_server(&inst.status());
    assert!(per[2] > 0 && per[3] > 0, "{per:?}");
    // A swap back and forth spreads it over the members there are now.
    run(
        &inst,
        r#"cd "$ROOT"; setfattr -n user.atoll.distributed -v 0 swapped
           setfattr -n user.atoll.distributed -v 1 swapped"#,
    );
    assert_eq!(width("swapped"), "4", "a swap reaches the new members");
    assert_eq!(run(&inst, all), want, "every name stays reachable");
}

/// A joined member's host killed with SIGKILL: the watchdog finds the
/// member's journal and rebuilds it; what it held is still there.
#[test]
fn a_joined_member_killed_is_rebuilt_from_its_journal() {
    let inst = Booted::new(&["--servers", "1"]);
    scale_to(&inst, 3);
    // A directory made distributed now spreads over the three members,
    // and its files live where their entries do.
    let made = r#"cd "$ROOT"; mkdir d && setfattr -n user.atoll.distributed -v 1 d
                  for i in $(seq 30); do echo $i > d/f$i; done"#;
    run(&inst, made);
    let before = inst.status();
    let per = inodes_per_server(&before);
    assert!(per[2] > 0, "member 2 holds something to lose: {per:?}");
    let h2 = &before["health"][2];
    assert!(h2["joined"].as_bool().unwrap(), "{h2}");
    assert!(h2["journal_records"].as_u64().unwrap() > 0, "{h2}");
    assert!(inst.chaos(&["--kill", "server:2"]).status.success());
    let started = Instant::now();
    loop {
        let h = inst.status()["health"][2].clone();
        if h["restarts"].as_u64().unwrap_or(0) >= 1 && h["state"] == "up" {
            break;
        }
        assert!(started.elapsed() < RUN_LIMIT, "never rebuilt: {h}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let check =
        r#"cd "$ROOT"; for i in $(seq 30); do cat d/f$i; done | awk '{s += $1} END {print s}'"#;
    assert_eq!(run(&inst, check), "465\n");
    assert_eq!(inodes_per_server(&inst.status()), per, "nothing lost");
}
