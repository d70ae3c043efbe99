//! Manual pages and shell completions, generated from the same clap
//! definition that parses the command line (`args.rs`), so neither can
//! drift from what `atoll` accepts.
//!
//! `atoll man --out DIR` writes `atoll.1` and one `atoll-SUB.1` per visible
//! subcommand (the layout `man` expects under `share/man/man1`);
//! `atoll completions SHELL` prints a completion script. `make install`
//! runs both and puts the results where bash, zsh, fish and `man` look.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::args::Cli;

/// Write the manual pages of `atoll` and its visible subcommands into
/// `dir` (created if missing); returns the files written.
pub fn write_man_pages(dir: &Path) -> Result<Vec<String>> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut cmd = Cli::command();
    cmd.build();
    let mut written = Vec::new();
    written.push(render_page(&cmd, "atoll", dir)?);
    // clap's generated `help` subcommand is `atoll help`, not a page.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        // The page's title is the name a reader types: `man atoll-run`.
        let name = format!("atoll-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(name.clone())
            .bin_name(format!("atoll {}", sub.get_name()));
        written.push(render_page(&sub, &name, dir)?);
    }
    Ok(written)
}

fn render_page(cmd: &clap::Command, name: &str, dir: &Path) -> Result<String> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("1")
        .manual("atoll manual")
        .render(&mut page)
        .with_context(|| format!("cannot render the page of {name}"))?;
    let file = format!("{name}.1");
    let path = dir.join(&file);
    fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(file)
}

/// Print the completion script for `shell` on `out`.
pub fn write_completions(shell: Shell, out: &mut dyn Write) -> Result<()> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "atoll", out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_subcommand_gets_a_page_naming_its_options() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_man_pages(dir.path()).unwrap();
        let visible: Vec<String> = Cli::command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .map(|s| format!("atoll-{}.1", s.get_name()))
            .collect();
        for f in &visible {
            assert!(files.contains(f), "{f} missing from {files:?}");
        }
        assert!(!files.iter().any(|f| f.contains("bench-worker")));
        assert!(!files.iter().any(|f| f == "atoll-help.1"));
        let run = fs::read_to_string(dir.path().join("atoll-run.1")).unwrap();
        for long in ["servers", "memory", "placement", "pipes", "runtime\\-dir"] {
            assert!(
                run.contains(&format!("\\-\\-{long}")),
                "--{long} not in atoll-run.1"
            );
        }
        assert!(
            run.starts_with(".ie") || run.contains(".TH atoll\\-run"),
            "{run:.200}"
        );
    }

    #[test]
    fn completions_know_subcommands_and_options() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            write_completions(shell, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            // fish spells long options `-l servers`.
            let long = |o: &str| match shell {
                Shell::Fish => format!("-l {o}"),
                _ => format!("--{o}"),
            };
            for word in ["status".to_string(), long("servers"), long("placement")] {
                assert!(text.contains(&word), "{shell}: {word} missing");
            }
        }
    }
}
