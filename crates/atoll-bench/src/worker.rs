//! The hidden `atoll bench-worker` subcommand: one process of one phase of
//! one workload. It uses nothing but `std::fs` and standard programs, so
//! when started with an atoll instance's environment the preload library
//! intercepts every call.
//!
//! Protocol with the harness (run phase, `--barrier`):
//!
//! ```text
//!   worker → stdout  "ready\n"
//!   stdin  EOF       start barrier: the harness closes the pipe's last
//!                    write end, releasing all workers at once
//!   worker → stdout  one JSON line: WorkerReport   (the timed part ends)
//!   worker           exits; status 0 = success
//! ```

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::Context;

use crate::workloads::{Inputs, Job, Role, Size, Workload};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    Setup,
    Run,
    Check,
    Clean,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Run => "run",
            Phase::Check => "check",
            Phase::Clean => "clean",
        }
    }
}

/// Arguments of `atoll bench-worker` (not meant to be typed by people).
#[derive(clap::Args, Clone, Debug)]
pub struct WorkerArgs {
    #[arg(long, value_enum)]
    pub phase: Phase,
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// The run directory on the system under test.
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long, value_enum, default_value = "quick")]
    pub size: Size,
    #[arg(long, default_value_t = 1)]
    pub nworkers: usize,
    #[arg(long, default_value_t = 0)]
    pub index: usize,
    #[arg(long, value_enum, default_value = "worker")]
    pub role: Role,
    #[arg(long)]
    pub tarball: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub tar_entries: u64,
    #[arg(long)]
    pub zip: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub zip_entries: u64,
    /// `extract-debian`'s cached tarball, the members it extracts and the
    /// entries they make.
    #[arg(long)]
    pub debian_tar: Option<PathBuf>,
    #[arg(long, value_delimiter = ',')]
    pub debian_members: Vec<String>,
    #[arg(long, default_value_t = 0)]
    pub debian_entries: u64,
    /// Print "ready" and wait for EOF on stdin before running.
    #[arg(long)]
    pub barrier: bool,
    /// Confine this process (and what it starts) to these CPUs.
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Do not ask for distributed directories (see `Job::distribute`).
    #[arg(long)]
    pub no_distribute: bool,
}

impl WorkerArgs {
    pub fn job(&self) -> Job {
        Job {
            workload: self.workload,
            size: self.size,
            dir: self.dir.clone(),
            nworkers: self.nworkers,
            distribute: !self.no_distribute,
            inputs: Inputs {
                tarball: self.tarball.clone(),
                tar_entries: self.tar_entries,
                zip: self.zip.clone(),
                zip_entries: self.zip_entries,
                debian_tar: self.debian_tar.clone(),
                debian_members: self.debian_members.clone(),
                debian_entries: self.debian_entries,
            },
        }
    }

    /// The command line that reproduces `self` (without the subcommand).
    pub fn to_args(&self) -> Vec<OsString> {
        use clap::ValueEnum;
        let val = |v: &dyn Fn() -> Option<clap::builder::PossibleValue>| {
            OsString::from(v().expect("no skipped variants").get_name())
        };
        let mut a: Vec<OsString> = vec![
            "--phase".into(),
            self.phase.name().into(),
            "--workload".into(),
            self.workload.name().into(),
            "--dir".into(),
            self.dir.clone().into(),
            "--size".into(),
            val(&|| self.size.to_possible_value()),
            "--nworkers".into(),
            self.nworkers.to_string().into(),
            "--index".into(),
            self.index.to_string().into(),
            "--role".into(),
            val(&|| self.role.to_possible_value()),
        ];
        if let Some(t) = &self.tarball {
            a.extend(["--tarball".into(), t.clone().into()]);
            a.extend(["--tar-entries".into(), self.tar_entries.to_string().into()]);
        }
        if let Some(z) = &self.zip {
            a.extend(["--zip".into(), z.clone().into()]);
            a.extend(["--zip-entries".into(), self.zip_entries.to_string().into()]);
        }
        if let Some(t) = &self.debian_tar {
            a.extend(["--debian-tar".into(), t.clone().into()]);
            a.extend([
                "--debian-entries".into(),
                self.debian_entries.to_string().into(),
            ]);
            if !self.debian_members.is_empty() {
                a.extend([
                    "--debian-members".into(),
                    self.debian_members.join(",").into(),
                ]);
            }
        }
        if self.barrier {
            a.push("--barrier".into());
        }
        if self.no_distribute {
            a.push("--no-distribute".into());
        }
        if !self.cpus.is_empty() {
            let list: Vec<String> = self.cpus.iter().map(|c| c.to_string()).collect();
            a.extend(["--cpus".into(), list.join(",").into()]);
        }
        a
    }

    pub fn for_job(job: &Job, phase: Phase, role: Role, index: usize) -> WorkerArgs {
        WorkerArgs {
            phase,
            workload: job.workload,
            dir: job.dir.clone(),
            size: job.size,
            nworkers: job.nworkers,
            index,
            role,
            tarball: job.inputs.tarball.clone(),
            tar_entries: job.inputs.tar_entries,
            zip: job.inputs.zip.clone(),
            zip_entries: job.inputs.zip_entries,
            debian_tar: job.inputs.debian_tar.clone(),
            debian_members: job.inputs.debian_members.clone(),
            debian_entries: job.inputs.debian_entries,
            barrier: phase == Phase::Run,
            cpus: vec![],
            no_distribute: !job.distribute,
        }
    }
}

/// Entry point of `atoll bench-worker`.
pub fn worker_main(args: WorkerArgs) -> anyhow::Result<()> {
    if !args.cpus.is_empty() {
        let mut set = rustix::thread::CpuSet::new();
        for &c in &args.cpus {
            anyhow::ensure!(c < rustix::thread::CpuSet::MAX_CPU, "no CPU {c}");
            set.set(c);
        }
        rustix::thread::sched_setaffinity(None, &set).context("confining to --cpus")?;
    }
    let job = args.job();
    let what = format!(
        "{} {} of {}",
        args.workload.name(),
        args.phase.name(),
        args.dir.display()
    );
    match args.phase {
        Phase::Setup => job.setup().with_context(|| what.clone())?,
        Phase::Check => job.check().with_context(|| what.clone())?,
        Phase::Clean => job.clean().with_context(|| what.clone())?,
        Phase::Run => {
            let mut out = std::io::stdout().lock();
            if args.barrier {
                writeln!(out, "ready")?;
                out.flush()?;
                let mut sink = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut sink)
                    .context("waiting on the start barrier")?;
            }
            let report = job
                .run(args.role, args.index)
                .with_context(|| what.clone())?;
            writeln!(out, "{}", serde_json::to_string(&report)?)?;
            out.flush()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        w: WorkerArgs,
    }

    #[test]
    fn worker_args_round_trip_through_the_command_line() {
        let job = Job {
            workload: Workload::PfindSparse,
            size: Size::Tiny,
            dir: "/atoll/x y".into(),
            nworkers: 3,
            distribute: false,
            inputs: Inputs {
                tarball: Some("/tmp/a.tgz".into()),
                tar_entries: 9,
                zip: None,
                zip_entries: 0,
                debian_tar: Some("/cache/glibc-source_2.36-9.tar".into()),
                debian_members: vec!["glibc-2.36/elf".into(), "glibc-2.36/time".into()],
                debian_entries: 791,
            },
        };
        let mut a = WorkerArgs::for_job(&job, Phase::Run, Role::Qman, 2);
        a.cpus = vec![0, 3];
        let mut argv: Vec<OsString> = vec!["w".into()];
        argv.extend(a.to_args());
        let back = Cli::parse_from(argv).w;
        assert_eq!(back.to_args(), a.to_args());
        assert_eq!(back.job().dir, job.dir);
        assert_eq!(back.job().inputs, job.inputs);
        assert!(!back.job().distribute);
        assert!(back.barrier);
        assert_eq!(back.role, Role::Qman);
        assert_eq!(back.cpus, vec![0, 3]);
    }
}
