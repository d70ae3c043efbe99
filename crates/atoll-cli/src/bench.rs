//! `atoll bench` and the hidden `atoll bench-worker`: hand-off to the
//! benchmark harness (crate `atoll-bench`), which parses its own options.
//!
//! The harness knows tmpfs and FUSE by itself; atoll configurations come
//! from here, through its `SystemFactory` trait, because only the driver
//! knows how to boot an instance. Each atoll system boots an instance in
//! this process on `prepare` and shuts it down on `cleanup`; its workers
//! are clients through the usual environment (`launch::ClientEnv`), and on
//! the split configuration they are confined to the application cores.

use std::path::PathBuf;

use anyhow::{Context, Result};
use atoll_bench::{DirModes, System, SystemFactory, Target};
use atoll_proto::boot::PollMode;
use atoll_server::{Instance, InstanceConfig};

use crate::config;
use crate::launch;
use crate::report;

/// Buffer cache of benchmark instances: 1 GiB, or half the RAM if smaller.
fn bench_memory() -> u64 {
    (1u64 << 30).min(crate::args::physical_memory() / 2)
}

/// `atoll bench ARGS…`.
pub fn bench(args: Vec<String>) -> Result<i32> {
    let mut factory = AtollFactory;
    atoll_bench::main_from_args(args, &mut factory)?;
    Ok(0)
}

/// `atoll bench-worker ARGS…`: one worker process of a benchmark.
pub fn worker(args: Vec<String>) -> Result<i32> {
    atoll_bench::worker_main_from_args(args)?;
    Ok(0)
}

/// Boots atoll configurations for the harness.
struct AtollFactory;

impl SystemFactory for AtollFactory {
    fn atoll_default(&mut self) -> Result<Box<dyn System>> {
        self.atoll_dir_modes(DirModes::Centralized)
    }

    fn atoll_dir_modes(&mut self, modes: DirModes) -> Result<Box<dyn System>> {
        let options: Vec<String> = modes.run_options().iter().map(|o| o.to_string()).collect();
        self.atoll_with_options(modes.system(), &options)
    }

    fn atoll_with_options(&mut self, name: &str, options: &[String]) -> Result<Box<dyn System>> {
        // The instance `atoll run [OPTIONS] -- CMD` boots: its own argument
        // parser's defaults, planned as `run` plans them (from this
        // process's usable cores and the load average), with only the
        // given options changed.
        let argv = ["atoll", "run"]
            .iter()
            .map(|s| s.to_string())
            .chain(options.iter().cloned())
            .chain(["--".to_string(), "true".to_string()]);
        let cli = <crate::args::Cli as clap::Parser>::try_parse_from(argv)?;
        let crate::args::Command::Run(run) = cli.command else {
            anyhow::bail!("`atoll run` did not parse as run");
        };
        let plan = config::plan(&run.instance)?;
        eprintln!(
            "atoll bench: {name}: {} server(s) ({}), poll {} ({})",
            plan.config.servers,
            plan.servers_why,
            crate::shape::poll_name(plan.config.poll),
            plan.poll_why
        );
        Ok(Box::new(AtollSystem {
            name: name.into(),
            tuned: false,
            traced: false,
            config: plan.config,
            app_cores: plan.app_cores.unwrap_or_default(),
            instance: None,
            scheds: None,
        }))
    }

    fn atoll(
        &mut self,
        split: bool,
        traced: bool,
        servers: usize,
        without: &[String],
    ) -> Result<Box<dyn System>> {
        let w = atoll_bench::parse_without(without)?;
        let cores = config::usable_cores();
        let (server_cores, app_cores) = config::place(servers, split, &cores)?;
        let mut name = if split {
            "atoll-split".to_string()
        } else if traced {
            "atoll-traced".to_string()
        } else {
            "atoll-timeshare".to_string()
        };
        let default_servers = if split {
            (cores.len() / 2).max(1)
        } else {
            cores.len()
        };
        if servers != default_servers {
            name.push_str(&format!("-{servers}s"));
        }
        for t in without {
            name.push_str(&format!("-no-{t}"));
        }
        let mount = "/atoll".to_string();
        Ok(Box::new(AtollSystem {
            name,
            tuned: true,
            traced,
            config: InstanceConfig {
                servers,
                hosts: 0,
                auto_scale: false,
                room: 0,
                memory: bench_memory(),
                mount,
                poll: if split {
                    PollMode::Spin
                } else {
                    PollMode::Adaptive
                },
                split,
                server_cores,
                island: atoll_proto::boot::Island::Coherent,
                without: w,
                // Distribution is asked for per workload, as Hare §5.4.1
                // does (`Workload::distributes_directories`: the run
                // directory gets `user.atoll.distributed`); the client
                // ignores it with one server or `--without dir-distribution`.
                distribute: Vec::new(),
                adaptive_dirs: false,
                // As `atoll run` does (a traced run uses threads).
                server_exe: (!w.processes).then(crate::config::server_exe),
                fs_policy: Default::default(),
                syscall_sites: Default::default(),
                // The largest trees (`--size full`, dense: 440 000 files)
                // need more than the default one inode per 8 KiB; the
                // tmpfs beside it has the host's default (half the RAM's
                // pages). One per KiB keeps the metadata bound (2 KiB per
                // inode) within twice the cache.
                inodes: Some(bench_memory() / 1024),
                runtime_root: config::default_runtime_root(),
            },
            app_cores: app_cores.unwrap_or_default(),
            instance: None,
            scheds: None,
        }))
    }
}

struct AtollSystem {
    name: String,
    /// Hare's per-workload tuning applies (not for the system `atoll`).
    tuned: bool,
    /// Record a message trace (the events are counted, then dropped).
    traced: bool,
    config: InstanceConfig,
    app_cores: Vec<usize>,
    instance: Option<Instance>,
    /// Scheduling servers, as under `atoll run`: without them every exec
    /// of a worker would stay local (Hare §3.6).
    scheds: Option<atoll_sched::Scheds>,
}

impl System for AtollSystem {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn tuned(&self) -> bool {
        self.tuned
    }

    fn prepare(&mut self) -> Result<Target> {
        let preload = launch::find_preload()?;
        config::ensure_runtime_root(&self.config.runtime_root)?;
        let instance = Instance::boot_with(self.config.clone(), self.traced)
            .context("cannot boot the instance")?;
        let env = launch::ClientEnv {
            socket: instance.socket_path().to_path_buf(),
            mount: self.config.mount.clone(),
            preload,
        };
        let target = Target {
            dir: PathBuf::from(&self.config.mount),
            env: env.vars(),
            cpus: self.app_cores.clone(),
        };
        let app_cores = (!self.app_cores.is_empty()).then_some(self.app_cores.as_slice());
        // Processes when the file servers are (as `atoll run` decides).
        let sched_exe = self.config.server_exe.as_deref();
        self.scheds = crate::run::start_scheds(&instance, app_cores, sched_exe);
        self.instance = Some(instance);
        Ok(target)
    }

    fn cleanup(&mut self) -> Result<()> {
        if let Some(s) = self.scheds.take() {
            s.shutdown();
        }
        if let Some(i) = self.instance.take() {
            i.shutdown();
        }
        Ok(())
    }

    /// `{"messages": total requests, "servers": [per-server stats]}`.
    fn counters(&self) -> Option<serde_json::Value> {
        let stats = self.instance.as_ref()?.stats();
        let messages: u64 = stats.iter().map(|s| s.requests).sum();
        let mut v = report::stats_json(&stats);
        v["messages"] = messages.into();
        Some(v)
    }
}
