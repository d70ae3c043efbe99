//! atoll's file servers and instance runtime. STUB: contract only.

use std::path::{Path, PathBuf};

use atoll_proto::boot::{InstanceInfo, PollMode, Without};
use atoll_proto::ServerStats;

/// Everything needed to boot an instance.
#[derive(Clone, Debug)]
pub struct InstanceConfig {
    /// Number of file servers (default: one per core).
    pub servers: usize,
    /// Buffer cache size in bytes (rounded down to whole blocks).
    pub memory: u64,
    /// Absolute mount path (must not exist on the host).
    pub mount: String,
    pub poll: PollMode,
    /// Pin servers to their own cores (the last `servers` cores) and spin.
    pub split: bool,
    /// Cores servers are pinned to, one per server (empty: no pinning).
    pub server_cores: Vec<usize>,
    pub incoherent: bool,
    pub without: Without,
    pub distribute: Vec<String>,
    /// Parent directory for runtime directories (default `$XDG_RUNTIME_DIR/atoll`
    /// or `/tmp/atoll-$UID`).
    pub runtime_root: PathBuf,
}

/// A running instance: servers, boot thread, runtime directory.
pub struct Instance {
    _private: (),
}

impl Instance {
    pub fn boot(_config: InstanceConfig) -> std::io::Result<Instance> {
        todo!()
    }
    pub fn id(&self) -> &str {
        todo!()
    }
    pub fn socket_path(&self) -> &Path {
        todo!()
    }
    pub fn runtime_dir(&self) -> &Path {
        todo!()
    }
    pub fn info(&self) -> &InstanceInfo {
        todo!()
    }
    /// Block until a client sent `BootRequest::Stop`.
    pub fn wait_for_stop_request(&self) {
        todo!()
    }
    pub fn stats(&self) -> Vec<ServerStats> {
        todo!()
    }
    /// Stop servers, remove the runtime directory, release memory.
    pub fn shutdown(self) -> Vec<ServerStats> {
        todo!()
    }
}
