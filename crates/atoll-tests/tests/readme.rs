//! The README's table of `atoll run` options says what `atoll run --help`
//! says: every option the command accepts has a row, and every row names
//! an option the command accepts.

use atoll_tests::OutputBounded as _;
use std::collections::BTreeSet;

use atoll_tests::atoll;

/// The long options (`--name`) that start lines of `text` matching `keep`.
fn long_options(text: &str, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
    text.lines()
        .filter(|l| keep(l))
        .flat_map(|l| {
            l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn readme_options_table_matches_run_help() {
    let out = atoll()
        .args(["run", "--help"])
        .output_bounded()
        .expect("atoll run --help");
    let help = String::from_utf8_lossy(&out.stdout);
    let accepted: BTreeSet<String> = long_options(&help, |l| l.trim_start().starts_with("--"))
        .into_iter()
        .filter(|o| o != "--help" && o != "--version")
        .collect();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let table = readme
        .split("| option | meaning |")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("README has the options table");
    let documented = long_options(table, |l| l.starts_with("| `--"));
    assert!(
        accepted.len() > 10,
        "too few options parsed from --help: {accepted:?}"
    );
    assert_eq!(
        accepted, documented,
        "README options table (right) differs from `atoll run --help` (left)"
    );
}

/// Options a subcommand's `--help` lists, without `--help`/`--version`.
fn options_of(args: &[&str]) -> BTreeSet<String> {
    let out = atoll()
        .args(args)
        .arg("--help")
        .output_bounded()
        .expect("atoll --help");
    let help = String::from_utf8_lossy(&out.stdout);
    long_options(&help, |l| {
        let l = l.trim_start();
        l.starts_with("--") || l.starts_with("-h, --") || l.starts_with("-V, --")
    })
    .into_iter()
    .filter(|o| o != "--help" && o != "--version")
    .collect()
}

/// The README's table of the other commands has one row per command of
/// `atoll --help`, and each row lists exactly the options that command
/// takes (`boot` takes the instance options of `run`'s table, `node` its
/// own and those).
#[test]
fn readme_commands_table_matches_help() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let table = readme
        .split("| command | options | what it does |")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("README has the commands table");
    let out = atoll()
        .arg("--help")
        .output_bounded()
        .expect("atoll --help");
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let commands: BTreeSet<String> = help
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("atoll --help lists commands")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help" && *c != "run")
        .map(str::to_string)
        .collect();
    let mut rows = BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `atoll ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1]
            .trim_matches('`')
            .split_whitespace()
            .nth(1)
            .expect("command name")
            .to_string();
        let documented = long_options(cells[2], |_| true);
        let accepted = options_of(&[&name]);
        match name.as_str() {
            "boot" => {
                let run = options_of(&["run"]);
                assert!(accepted.is_subset(&run), "boot takes options run lacks");
            }
            // `node` takes its own options (listed) and the instance
            // options of `run`'s table (the first node boots the instance).
            "node" => {
                let run = options_of(&["run"]);
                let own: BTreeSet<String> = accepted.difference(&run).cloned().collect();
                assert_eq!(
                    own, documented,
                    "README row of `atoll node` (right) differs from its own options (left)"
                );
            }
            _ => assert_eq!(
                accepted, documented,
                "README row of `atoll {name}` (right) differs from its --help (left)"
            ),
        }
        rows.insert(name);
    }
    assert!(
        commands.len() >= 7,
        "too few commands in --help: {commands:?}"
    );
    assert_eq!(
        commands, rows,
        "README commands table (right) vs atoll --help (left)"
    );
}
