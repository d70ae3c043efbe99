//! What a process start asks of the instance when its `execve` is placed
//! on a core (Hare §3.6.1, `--exec-via place`): the load table is mapped
//! once by the forking parent and inherited (`client/src/loadmap.rs`),
//! and the chosen core's scheduling server hears of the exec by one
//! datagram (`sched/src/proxy.rs`, `place_self`).

use atoll_tests::run_in_atoll;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// In a forked subshell (builtins only, so nothing execs): how many
/// mappings of the load table it holds, as `/proc/self/maps` lists them.
const COUNT_TABLE_MAPPINGS: &str = r#"
    ( n=0
      while read -r l; do case $l in *sched.load*) n=$((n+1));; esac; done < /proc/self/maps
      echo "mapped $n" )
"#;

fn run_ok(opts: &[&str], script: &str) -> String {
    let out = run_in_atoll(opts, script);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A shell that forks maps the load table once, before the fork: its
/// children find it mapped when they exec instead of opening and mapping
/// it each. Nothing maps it when no exec is placed.
#[test]
fn a_forking_shell_maps_the_load_table_for_its_children() {
    let placed = run_ok(&["--placement", "round-robin"], COUNT_TABLE_MAPPINGS);
    assert_eq!(placed.trim(), "mapped 1");
    let local = run_ok(&["--placement", "local"], COUNT_TABLE_MAPPINGS);
    assert_eq!(local.trim(), "mapped 0");
}

/// Children forked after the table was mapped still place their execs
/// (round-robin spreads them over the cores: the move to a core happens
/// only once its server took the `Placed` datagram) and run as on Linux,
/// and so do their own children, which inherit the mapping again.
#[test]
fn forked_children_place_their_execs_through_the_inherited_table() {
    let text = run_ok(
        &["--placement", "round-robin"],
        r#"
        for i in 1 2 3 4; do grep Cpus_allowed_list /proc/self/status; done | sort -u | wc -l
        bash -c 'for i in 1 2 3 4; do /bin/echo "inner $i"; done' | sort | uniq | wc -l
        ( /bin/true ) && echo "subshell exec ok"
        "#,
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let spread: usize = lines[0].trim().parse().expect("a count");
    if cores() >= 2 {
        assert!(spread >= 2, "every exec on one core: {text}");
    }
    assert_eq!(lines[1].trim(), "4", "{text}");
    assert_eq!(lines[2], "subshell exec ok", "{text}");
}
