//! atoll bench (WIP)
pub mod util;
pub mod workloads;
