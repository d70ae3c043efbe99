//! The `atoll` command: the driver of atoll instances.
//!
//! Layer map:
//! * this crate is the top: it parses the command line (`args`), turns it
//!   into an instance configuration and core placement (`config`), boots
//!   the file servers *in this process* through `atoll_server::Instance`,
//!   and starts programs as clients (`launch`): with `libatoll_preload.so`
//!   preloaded and `ATOLL_SOCKET` naming the instance's boot socket, so the
//!   client library (`atoll-client`, inside the preload) attaches to it;
//! * `run` drives one command from boot to teardown; `admin` handles
//!   detached instances (`boot`, `status`, `stop`, `list`), found through
//!   their `instance.json` (`registry`) and queried over the boot socket
//!   (`bootctl`, the administrative half of `atoll_proto::boot`);
//! * `signals` turns SIGINT/SIGTERM/SIGHUP into relaying plus an orderly
//!   shutdown, `report` renders statistics, `sys` holds the crate's only
//!   `unsafe` code, `bench` hands over to `atoll-bench`;
//! * `node` joins hosts into one image (proxies over `atoll-transport`).
//!
//! Exit statuses: the command's own status for `run`/`exec` (128+N after
//! signal N, 127/126 when it cannot be started), 2 for bad usage, 1 for
//! other errors, which are reported on one line as `atoll: error: …`.

mod admin;
mod args;
mod bench;
mod bootctl;
mod config;
mod docgen;
mod foreign;
mod launch;
mod node;
mod registry;
mod report;
mod run;
mod shape;
mod signals;
mod sys;
mod top;
mod tracecmd;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command};

fn main() {
    std::process::exit(real_main());
}

fn real_main() -> i32 {
    // What a dead image's loader wrote, copied by this process's client
    // as it started (`BootRequest::Caught`): nothing is left to do.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(atoll_proto::boot::LOADER_DRAIN))
    {
        return 0;
    }
    init_logging();
    // A file server process started by an instance (hidden: never typed).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(atoll_server::process::SUBCOMMAND))
    {
        return atoll_server::process::child_main();
    }
    // The proxy of a program exec'd on another host (hidden as well).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(atoll_sched::nodes::REMOTE_SPAWN))
    {
        return node::remote_spawn(std::env::args_os().skip(2).collect());
    }
    // The watcher of such a proxy (hidden as well).
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(node::REMOTE_WATCH)) {
        return node::remote_watch(std::env::args_os().skip(2).collect());
    }
    // A program that cannot load the client library, behind relays of its
    // atoll descriptors (hidden as well).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(atoll_proto::boot::FOREIGN))
    {
        return foreign::main(std::env::args_os().skip(2).collect());
    }
    // A scheduling server process (hidden as well).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(atoll_sched::process::SUBCOMMAND))
    {
        return atoll_sched::process::child_main();
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return clap_error(e),
    };
    let result = match cli.command {
        Command::Run(a) => run::run(*a),
        Command::Boot(a) => admin::boot(a),
        Command::Exec(a) => run::exec(a),
        Command::Node(a) => node::node(a),
        Command::Status(a) => admin::status(a),
        Command::Stop(a) => admin::stop(a),
        Command::Chaos(a) => admin::chaos(a),
        Command::Scale(a) => admin::scale(a),
        Command::List(a) => admin::list(a),
        Command::Bench(a) => bench::bench(a.args),
        Command::Top(a) => top::top(a),
        Command::Trace(t) => tracecmd::run(t),
        Command::Man(a) => docgen::write_man_pages(&a.out).map(|files| {
            for f in files {
                println!("{}", a.out.join(f).display());
            }
            0
        }),
        Command::Completions(a) => {
            docgen::write_completions(a.shell, &mut std::io::stdout().lock()).map(|()| 0)
        }
        Command::Syscalls => {
            let page = docgen::syscalls_page();
            std::io::Write::write_all(&mut std::io::stdout().lock(), page.as_bytes())
                .map(|()| 0)
                .map_err(Into::into)
        }
        Command::BenchWorker(a) => bench::worker(a.args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("atoll: error: {e:#}");
            exit_code_for(&e)
        }
    }
}

/// 2 for usage errors, the carried status for commands that could not
/// start, 1 otherwise.
fn exit_code_for(e: &anyhow::Error) -> i32 {
    if e.downcast_ref::<config::UsageError>().is_some()
        || e.downcast_ref::<atoll_bench::html::UsageError>().is_some()
    {
        2
    } else if let Some(x) = e.downcast_ref::<launch::ExitWith>() {
        x.code
    } else {
        1
    }
}

/// Help and version go to stdout as clap renders them; every other parse
/// error becomes one line on stderr and exit status 2.
fn clap_error(e: clap::Error) -> i32 {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            e.exit_code()
        }
        _ => {
            // The first paragraph of clap's message, joined into one line.
            let rendered = e.render().to_string();
            let msg = rendered
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            let help = match std::env::args().nth(1) {
                Some(sub) if Cli::command().find_subcommand(&sub).is_some() => {
                    format!("atoll {sub} --help")
                }
                _ => "atoll --help".to_string(),
            };
            eprintln!("atoll: error: {msg} (see '{help}')");
            2
        }
    }
}

/// `ATOLL_LOG=debug` (any `tracing` filter) enables diagnostics on stderr;
/// by default only warnings are shown.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ATOLL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
