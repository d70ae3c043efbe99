//! The README's table of `atoll run` options says what `atoll run --help`
//! says: every option the command accepts has a row, and every row names
//! an option the command accepts.

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
        .output()
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
