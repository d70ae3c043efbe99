//! The input of `extract-debian`: the source tree of a real Debian source
//! package, glibc, as Debian ships it in the binary package
//! `glibc-source` (`/usr/src/glibc/glibc-<version>.tar.xz`: upstream with
//! Debian's patches, ~21 000 entries, ~250 MB unpacked in bookworm).
//!
//! It is fetched once with `apt-get download glibc-source` (no `deb-src`
//! line is needed), decompressed to a plain tar (so that the run measures
//! the file system, not xz) and kept in a cache directory across runs.
//! Smaller sizes extract one subdirectory of the same archive.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::Size;
use crate::util::{have_tool, run_tool, At, BenchError, Result};

/// The Debian package whose tarball is extracted.
pub const PACKAGE: &str = "glibc-source";

/// A cached, decompressed source tarball.
#[derive(Clone, Debug, PartialEq)]
pub struct DebianTarball {
    pub tar: PathBuf,
    /// `glibc-source` and its Debian version, e.g. `2.36-9+deb12u14`.
    pub package: String,
    pub version: String,
    /// The archive's top directory (`glibc-2.36`).
    pub top: String,
}

/// The cache directory: `$XDG_CACHE_HOME/atoll/bench`, else
/// `$HOME/.cache/atoll/bench`, else under the temporary directory.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("atoll").join("bench")
}

/// `glibc-source_<version>.tar` in `cache` → the version.
fn cached_version(name: &str) -> Option<&str> {
    name.strip_prefix(PACKAGE)?
        .strip_prefix('_')?
        .strip_suffix(".tar")
}

/// The cached tarball, or fetch it. An error is the one-line reason the
/// workload is skipped.
pub fn fetch_debian_tarball(cache: &Path) -> Result<DebianTarball> {
    fs::create_dir_all(cache).at("mkdir", cache)?;
    let cached = crate::util::list_names(cache)?
        .into_iter()
        .filter(|n| cached_version(n).is_some())
        .max();
    let tar = match cached {
        Some(n) => cache.join(n),
        None => download(cache)?,
    };
    let name = tar
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let version = cached_version(&name).unwrap_or("").to_string();
    let out = run_tool(Command::new("tar").arg("-tf").arg(&tar))?;
    let listing = String::from_utf8_lossy(&out.stdout);
    let top = listing
        .lines()
        .next()
        .and_then(|l| l.split('/').next())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| BenchError::Invalid(format!("{} is empty", tar.display())))?
        .to_string();
    Ok(DebianTarball {
        tar,
        package: PACKAGE.into(),
        version,
        top,
    })
}

fn download(cache: &Path) -> Result<PathBuf> {
    for t in ["apt-get", "dpkg-deb", "xz"] {
        if !have_tool(t) {
            return Err(BenchError::MissingTool(format!(
                "{t} (needed once to fetch {PACKAGE})"
            )));
        }
    }
    eprintln!(
        "atoll bench: fetching {PACKAGE} for extract-debian (once; cached in {})",
        cache.display()
    );
    let dl = cache.join("download");
    let _ = fs::remove_dir_all(&dl);
    fs::create_dir_all(&dl).at("mkdir", &dl)?;
    run_tool(
        Command::new("apt-get")
            .current_dir(&dl)
            .args(["download", "-qq", PACKAGE]),
    )
    .map_err(|e| BenchError::Tool(format!("apt-get download {PACKAGE}: {e}")))?;
    let deb = crate::util::list_names(&dl)?
        .into_iter()
        .find(|n| n.starts_with(&format!("{PACKAGE}_")) && n.ends_with(".deb"))
        .ok_or_else(|| BenchError::Tool(format!("apt-get download {PACKAGE} gave no .deb")))?;
    // glibc-source_2.36-9+deb12u14_all.deb → 2.36-9+deb12u14
    let version = deb
        .trim_start_matches(&format!("{PACKAGE}_"))
        .split('_')
        .next()
        .unwrap_or("unknown")
        .to_string();
    let part = cache.join(format!("{PACKAGE}_{version}.tar.part"));
    // The data archive holds the compressed source tarball; take it out
    // and decompress it in one pipeline (bash for pipefail).
    run_tool(
        Command::new("bash")
            .arg("-c")
            .arg(
                "set -o pipefail; dpkg-deb --fsys-tarfile \"$1\" \
                 | tar -xOf - --wildcards './usr/src/glibc/glibc-*.tar.xz' \
                 | xz -dc > \"$2\"",
            )
            .arg("bash")
            .arg(dl.join(&deb))
            .arg(&part),
    )?;
    let tar = cache.join(format!("{PACKAGE}_{version}.tar"));
    fs::rename(&part, &tar).at("rename", &part)?;
    let _ = fs::remove_dir_all(&dl);
    Ok(tar)
}

/// What `extract-debian` extracts at `size`: the whole tree from the
/// default size up, one subdirectory below it (`time/`, 118 entries, for
/// unit tests; `elf/`, 791 entries, for the CI smoke run).
pub fn members(top: &str, size: Size) -> Vec<String> {
    match size {
        Size::Tiny => vec![format!("{top}/time")],
        Size::Quick => vec![format!("{top}/elf")],
        Size::Default | Size::Full => vec![],
    }
}

/// Entries an extraction of `members` creates (implied parents included).
pub fn entries(tar: &Path, members: &[String]) -> Result<u64> {
    let out = run_tool(Command::new("tar").arg("-tf").arg(tar).args(members))?;
    Ok(super::apps::tar_listing_entries(&String::from_utf8_lossy(
        &out.stdout,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tarball_names_carry_the_debian_version() {
        assert_eq!(
            cached_version("glibc-source_2.36-9+deb12u14.tar"),
            Some("2.36-9+deb12u14")
        );
        assert_eq!(cached_version("glibc-source_2.36.tar.part"), None);
        assert_eq!(cached_version("other_1.tar"), None);
    }

    #[test]
    fn a_cached_tarball_is_used_without_fetching() {
        if !have_tool("tar") {
            eprintln!("skipped: tar not installed");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::create_dir_all(src.join("glibc-9.9/time")).unwrap();
        fs::write(src.join("glibc-9.9/time/a.c"), b"x").unwrap();
        fs::write(src.join("glibc-9.9/README"), b"x").unwrap();
        let cache = t.path().join("cache");
        fs::create_dir_all(&cache).unwrap();
        let tar = cache.join("glibc-source_9.9-1.tar");
        run_tool(
            Command::new("tar")
                .arg("-cf")
                .arg(&tar)
                .arg("-C")
                .arg(&src)
                .arg("glibc-9.9"),
        )
        .unwrap();
        let d = fetch_debian_tarball(&cache).unwrap();
        assert_eq!(d.version, "9.9-1");
        assert_eq!(d.top, "glibc-9.9");
        assert_eq!(entries(&d.tar, &[]).unwrap(), 4);
        let tiny = members(&d.top, Size::Tiny);
        assert_eq!(entries(&d.tar, &tiny).unwrap(), 3);
    }
}
