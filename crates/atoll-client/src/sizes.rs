//! A file's size without a message, for `lseek(fd, off, SEEK_END)`: the
//! owner of each regular file a client asked the size of publishes it in
//! the control block's size board (`atoll_msg::sizes`), before the reply
//! of every request that changes it; the client reads the file's slot and
//! asks the server only when the slot holds another file, an older
//! incarnation's size, or is being written.
//!
//! Only a description whose offset lives here (`hybrid`) gains: a shared
//! one's offset is the server's, which a `SEEK_END` must move anyway.
//! Never where the board cannot be right: in incoherent and copy islands
//! (the process's own writes may not be at the server yet), for a
//! program on another host than the file's server (`atoll node`: its
//! control block is not the server's), and under `--without size-board`.

use atoll_proto::boot::Island;

use crate::counters;
use crate::fdtable::DescRef;
use crate::session::Client;

/// May this process read sizes from the board at all?
pub fn enabled(c: &Client) -> bool {
    !c.info.without.size_board && c.info.island == Island::Coherent && !c.info.remote
}

/// The size of `d`'s file as its server published it, if the board says
/// it; `None`: ask the server. Hot path: two loads of the server's
/// generation and state, one slot's four words.
pub fn end_of(c: &Client, d: &DescRef) -> Option<u64> {
    if !enabled(c) {
        return None;
    }
    let ino = d.ino();
    let server = ino.owner();
    let near = &c.info.node_members;
    if !near.is_empty() && !near.contains(&(server as u32)) {
        return None; // served on another host
    }
    match c.control().published_size(server, ino.0) {
        Some(size) => {
            counters::bump(&counters::SIZE_BOARD_HITS);
            Some(size)
        }
        None => {
            counters::bump(&counters::SIZE_BOARD_MISSES);
            None
        }
    }
}
