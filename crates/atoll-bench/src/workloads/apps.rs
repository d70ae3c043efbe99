//! Application workloads of Hare Table 5.1 that drive standard programs:
//!
//! * *extract*: `tar -xf` of a source-like tree (a generated one, or a real
//!   tarball given with `--tarball`); each worker extracts its own copy, so
//!   P = 1 is Hare's sequential extract. gzip'd archives make tar use a pipe.
//! * *punzip*: copies of a manpage-like zip archive spread over P `unzip`
//!   processes (Hare: 20 copies, 1000 files each).
//! * *build*: `make -j P` of a generated C project of many small files
//!   (stands in for Hare's Linux build; make's jobserver is a shared pipe).
//!
//! Input archives are generated on the host (outside the file system under
//! test) by [`prepare_inputs`]; the run directory only receives what the
//! programs write.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{sub, Job, Role, Size, WorkerReport, Workload};
use crate::util::{count_entries, run_tool, At, BenchError, Result, Rng};

/// Host-side inputs shared by all runs of one benchmark invocation.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Inputs {
    pub tarball: Option<PathBuf>,
    /// Entries an extraction creates (directories and files).
    pub tar_entries: u64,
    pub zip: Option<PathBuf>,
    pub zip_entries: u64,
    /// `extract-debian`: the cached Debian source tarball (see `debian`),
    /// the members extracted at this size (none = all) and the entries
    /// they make.
    pub debian_tar: Option<PathBuf>,
    pub debian_members: Vec<String>,
    pub debian_entries: u64,
}

fn source_files(size: Size) -> usize {
    [12, 300, 3_000, 36_000][size as usize]
}

fn man_files(size: Size) -> usize {
    [5, 200, 500, 1_000][size as usize]
}

fn zip_copies(size: Size) -> usize {
    [2, 4, 8, 20][size as usize]
}

fn build_files(size: Size) -> usize {
    [3, 16, 100, 1_000][size as usize]
}

/// Generate (or inspect) the archives the selected workloads need, in the
/// host directory `aux`.
pub fn prepare_inputs(
    aux: &Path,
    size: Size,
    tarball: Option<&Path>,
    workloads: &[Workload],
) -> Result<Inputs> {
    let mut inputs = Inputs::default();
    fs::create_dir_all(aux).at("mkdir", aux)?;
    if workloads.contains(&Workload::Extract) {
        match tarball {
            Some(t) => {
                let out = run_tool(Command::new("tar").arg("-tf").arg(t))?;
                inputs.tar_entries = tar_listing_entries(&String::from_utf8_lossy(&out.stdout));
                inputs.tarball = Some(t.to_path_buf());
            }
            None => {
                let gen = aux.join("gen");
                let src = gen.join("src");
                if !src.exists() {
                    gen_source_tree(&src, source_files(size))?;
                }
                let tb = aux.join("src.tar.gz");
                run_tool(
                    Command::new("tar")
                        .arg("-czf")
                        .arg(&tb)
                        .arg("-C")
                        .arg(&gen)
                        .arg("src"),
                )?;
                inputs.tar_entries = count_entries(&src)? + 1;
                inputs.tarball = Some(tb);
            }
        }
    }
    if workloads.contains(&Workload::Punzip) {
        let man = aux.join("man");
        if !man.exists() {
            gen_man_pages(&man, man_files(size))?;
        }
        let z = aux.join("man.zip");
        let _ = fs::remove_file(&z);
        run_tool(
            Command::new("zip")
                .current_dir(aux)
                .arg("-q")
                .arg("-r")
                .arg(&z)
                .arg("man"),
        )?;
        inputs.zip_entries = count_entries(&man)? + 1;
        inputs.zip = Some(z);
    }
    Ok(inputs)
}

/// Distinct paths a `tar -tf` listing creates, implied parents included.
pub(super) fn tar_listing_entries(listing: &str) -> u64 {
    let mut set = BTreeSet::new();
    for line in listing.lines() {
        let mut p = line.trim_end_matches('/');
        while let Some(rest) = p.strip_prefix("./") {
            p = rest;
        }
        if p.is_empty() || p == "." {
            continue;
        }
        let mut acc = String::new();
        for comp in p.split('/') {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(comp);
            set.insert(acc.clone());
        }
    }
    set.len() as u64
}

/// A Linux-like tree: a few top-level directories, ~15 files per leaf
/// directory, `.c`/`.h` files of 256 B – 12 KiB.
fn gen_source_tree(root: &Path, files: usize) -> Result<()> {
    const TOP: [&str; 8] = [
        "arch", "drivers", "fs", "kernel", "mm", "net", "include", "lib",
    ];
    let dirs = (files / 15).max(1);
    let mut rng = Rng::new(0x5eed);
    for i in 0..files {
        let d = i % dirs;
        let dir = root
            .join(TOP[d % TOP.len()])
            .join(format!("sub{}", d / TOP.len()));
        if i < dirs {
            fs::create_dir_all(&dir).at("mkdir", &dir)?;
        }
        let ext = if i % 4 == 0 { "h" } else { "c" };
        let p = dir.join(format!("file{i}.{ext}"));
        let len = 256 + rng.below(12 * 1024 - 256);
        let mut s = String::with_capacity(len + 64);
        let mut line = 0;
        while s.len() < len {
            let _ = writeln!(
                s,
                "static int v{i}_{line} = {}; /* generated */",
                rng.below(1000)
            );
            line += 1;
        }
        fs::write(&p, s).at("write", &p)?;
    }
    Ok(())
}

fn gen_man_pages(dir: &Path, files: usize) -> Result<()> {
    fs::create_dir_all(dir).at("mkdir", dir)?;
    let mut rng = Rng::new(0x3a4);
    for i in 0..files {
        let p = dir.join(format!("page{i}.1"));
        let len = 1024 + rng.below(5 * 1024);
        let mut s = format!(".TH PAGE{i} 1\n.SH NAME\npage{i} \\- generated\n");
        while s.len() < len {
            let _ = writeln!(s, ".PP\nWord {} of page {i}.", rng.below(100_000));
        }
        fs::write(&p, s).at("write", &p)?;
    }
    Ok(())
}

pub fn setup(job: &Job) -> Result<()> {
    match job.workload {
        Workload::Extract => {
            for i in 0..job.nworkers {
                let p = sub(&job.dir, &format!("x{i}"));
                fs::create_dir(&p).at("mkdir", &p)?;
            }
            Ok(())
        }
        Workload::Punzip => Ok(()),
        Workload::Build => gen_project(&sub(&job.dir, "build"), build_files(job.size)),
        _ => unreachable!("apps::setup called for another workload"),
    }
}

fn need<'a>(p: &'a Option<PathBuf>, what: &str) -> Result<&'a PathBuf> {
    p.as_ref()
        .ok_or_else(|| BenchError::Invalid(format!("no {what} prepared")))
}

pub fn extract(job: &Job, idx: usize) -> Result<WorkerReport> {
    let tb = need(&job.inputs.tarball, "tarball")?;
    let dest = sub(&job.dir, &format!("x{idx}"));
    run_tool(Command::new("tar").arg("-xf").arg(tb).arg("-C").arg(&dest))?;
    let mut r = WorkerReport::new(Role::Worker, idx);
    r.ops = job.inputs.tar_entries;
    Ok(r)
}

fn copies_of(job: &Job, idx: usize) -> impl Iterator<Item = usize> {
    (idx..zip_copies(job.size)).step_by(job.nworkers.max(1))
}

pub fn punzip(job: &Job, idx: usize) -> Result<WorkerReport> {
    let z = need(&job.inputs.zip, "zip archive")?;
    let mut r = WorkerReport::new(Role::Worker, idx);
    for c in copies_of(job, idx) {
        let dest = sub(&job.dir, &format!("c{c}"));
        run_tool(
            Command::new("unzip")
                .arg("-q")
                .arg("-o")
                .arg(z)
                .arg("-d")
                .arg(&dest),
        )?;
        r.ops += job.inputs.zip_entries;
        r.bump("copies", 1);
    }
    Ok(r)
}

/// The value the generated program prints: Σ f_j(j) plus main's own term.
fn expected_sum(files: usize) -> i64 {
    (0..files as i64).map(|j| j * (j % 7 + 1) + j % 13).sum()
}

fn gen_project(root: &Path, files: usize) -> Result<()> {
    let inc = root.join("include");
    fs::create_dir_all(&inc).at("mkdir", &inc)?;
    let mut header = String::from("#ifndef COMMON_H\n#define COMMON_H\n");
    let mut objs = String::from("main.o");
    let mut calls = String::new();
    for j in 0..files {
        let dir = root.join(format!("src/d{}", j / 10));
        if j % 10 == 0 {
            fs::create_dir_all(&dir).at("mkdir", &dir)?;
        }
        let p = dir.join(format!("f{j}.c"));
        let body = format!(
            "#include \"common.h\"\nlong f_{j}(long x) {{ return x * {} + {}; }}\n",
            j % 7 + 1,
            j % 13
        );
        fs::write(&p, body).at("write", &p)?;
        let _ = writeln!(header, "long f_{j}(long x);");
        let _ = write!(objs, " src/d{}/f{j}.o", j / 10);
        let _ = writeln!(calls, "  s += f_{j}({j});");
    }
    header.push_str("#endif\n");
    let h = inc.join("common.h");
    fs::write(&h, header).at("write", &h)?;
    let main = root.join("main.c");
    let m = format!(
        "#include <stdio.h>\n#include \"common.h\"\nint main(void) {{\n  long s = 0;\n{calls}  printf(\"sum=%ld\\n\", s);\n  return 0;\n}}\n"
    );
    fs::write(&main, m).at("write", &main)?;
    let mk = root.join("Makefile");
    let makefile = format!(
        "CC = cc\nOBJS = {objs}\n\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n%.o: %.c include/common.h\n\t$(CC) -O0 -Iinclude -c -o $@ $<\n"
    );
    fs::write(&mk, makefile).at("write", &mk)?;
    Ok(())
}

pub fn build(job: &Job) -> Result<WorkerReport> {
    let root = sub(&job.dir, "build");
    run_tool(
        Command::new("make")
            .arg("-s")
            .arg("-j")
            .arg(job.nworkers.max(1).to_string())
            .arg("-C")
            .arg(&root),
    )?;
    let mut r = WorkerReport::new(Role::Worker, 0);
    // One job per source file, main.c, and the link.
    r.ops = build_files(job.size) as u64 + 2;
    Ok(r)
}

pub fn check(job: &Job) -> Result<()> {
    match job.workload {
        Workload::Extract => {
            for i in 0..job.nworkers {
                let d = sub(&job.dir, &format!("x{i}"));
                let n = count_entries(&d)?;
                if n != job.inputs.tar_entries {
                    return Err(BenchError::Check(format!(
                        "{} holds {n} entries, the archive has {}",
                        d.display(),
                        job.inputs.tar_entries
                    )));
                }
            }
            Ok(())
        }
        Workload::Punzip => {
            for c in 0..zip_copies(job.size) {
                let d = sub(&job.dir, &format!("c{c}"));
                let n = count_entries(&d)?;
                if n != job.inputs.zip_entries {
                    return Err(BenchError::Check(format!(
                        "{} holds {n} entries, the archive has {}",
                        d.display(),
                        job.inputs.zip_entries
                    )));
                }
            }
            Ok(())
        }
        Workload::Build => {
            let prog = sub(&job.dir, "build/prog");
            let out = run_tool(&mut Command::new(&prog))?;
            let want = format!("sum={}\n", expected_sum(build_files(job.size)));
            if out.stdout != want.as_bytes() {
                return Err(BenchError::Check(format!(
                    "built program printed {:?}, expected {want:?}",
                    String::from_utf8_lossy(&out.stdout)
                )));
            }
            Ok(())
        }
        _ => unreachable!("apps::check called for another workload"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run_tiny;
    use super::*;
    use crate::util::have_tool;

    #[test]
    fn tar_listing_counts_implied_parents_once() {
        assert_eq!(tar_listing_entries("./\n./a/\n./a/b\n./a/c\n"), 3);
        assert_eq!(tar_listing_entries("x/y/z\n"), 3);
    }

    #[test]
    fn extract_reproduces_the_generated_tree_in_every_copy() {
        if !have_tool("tar") {
            eprintln!("skipped: tar not installed");
            return;
        }
        let (_t, job, reports) = run_tiny(Workload::Extract, 2);
        assert!(job.inputs.tar_entries > source_files(Size::Tiny) as u64);
        assert_eq!(reports[1].ops, job.inputs.tar_entries);
    }

    #[test]
    fn punzip_extracts_every_copy_once() {
        if !have_tool("zip") || !have_tool("unzip") {
            eprintln!("skipped: zip/unzip not installed (apt-get install zip unzip)");
            return;
        }
        let (_t, job, reports) = run_tiny(Workload::Punzip, 2);
        let copies: u64 = reports.iter().map(|r| r.get("copies")).sum();
        assert_eq!(copies, zip_copies(Size::Tiny) as u64);
        assert_eq!(job.inputs.zip_entries, man_files(Size::Tiny) as u64 + 1);
    }

    #[test]
    fn build_produces_a_runnable_binary_printing_the_expected_sum() {
        if !have_tool("make") || !have_tool("cc") {
            eprintln!("skipped: make/cc not installed");
            return;
        }
        let (_t, job, reports) = run_tiny(Workload::Build, 2);
        assert_eq!(reports[0].ops, build_files(Size::Tiny) as u64 + 2);
        assert!(job.dir.join("build/prog").exists());
    }
}
