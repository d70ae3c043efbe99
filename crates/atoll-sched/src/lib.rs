//! atoll's processes across cores: scheduling servers, placement policies
//! and remote `execve` with proxy processes (Hare §3.6; fos §4.2 spawning).
//!
//! Layer map:
//! * [`wire`] — the messages between a proxy and a scheduling server over
//!   a `SOCK_SEQPACKET` Unix socket, host descriptors as `SCM_RIGHTS`;
//! * [`args`] — the exec's arguments and environment as a Cosh move;
//! * [`creds`] — whose program an exec starts: the sender's identity as
//!   the kernel reports it, and when the exec must stay local instead;
//! * [`server`] — [`Scheds`]: one scheduling server per core (a process,
//!   or a thread of the instance), pinned, started by the driver (`atoll run`/`atoll boot`) beside the
//!   file servers; `spawn` forks and configures the new program;
//! * [`process`] — servers as processes of their own (`atoll
//!   __sched-server`) and the watchdog that restarts them;
//! * [`load`] — the per-core load table the servers publish in shared
//!   memory (read by least-loaded placement, and the exec statistics);
//! * [`nodes`] — placement across hosts (`atoll node`): the node file
//!   and the policy that sends an exec to another node;
//! * [`placement`] — policies (local, random, round-robin, least-loaded)
//!   and the per-process cursor inherited across `fork`/`execve`;
//! * [`proxy`] — the caller's side: hand the exec to a server, become the
//!   proxy that relays signals and exits as the program did;
//! * [`mirror`] — job control across the pair: the server keeps program
//!   and proxy stopped or running together;
//! * `raw` (proxy side) and `spawn`/`load` hold the `unsafe`.
//!
//! Relies on Linux only (pidfds, `close_range`, signalfd, `waitid` and
//! `/proc/<pid>/stat` for job control). Called by
//! `atoll-client` (its `execve` path asks [`placement`] and [`proxy`]) and
//! by `atoll-cli` (starts [`Scheds`], reports [`Scheds::exec_counts`]).
//!
//! `fork` stays on its core (a child inherits the parent's affinity); only
//! `execve` moves. A program started remotely is pinned to its core, so its
//! own local execs stay there.

pub mod args;
pub mod creds;
pub mod load;
pub mod mirror;
pub mod nodes;
pub mod placement;
pub mod process;
pub mod proxy;
pub mod raw;
pub mod server;
mod spawn;
pub mod wire;

pub use load::LoadTable;
pub use placement::{ExecVia, Policy, ENV_PLACEMENT};
pub use proxy::{place_self, remote_exec, Image, PlaceError, RemoteError};
pub use server::{Scheds, LOAD_FILE};
