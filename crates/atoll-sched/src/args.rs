//! An exec's arguments and environment cross to the scheduling server as
//! a Cosh transfer (Cosh §5), not as bytes inside the `Exec` packet.
//!
//! The proxy puts `argv` and `envp` in an aggregate and *moves* it,
//! strongly, to the server: the `Exec` packet carries the ticket and the
//! blocks' descriptors (`FdRole::Args`), and long lists travel as sealed
//! memfds the server maps read-only instead of being copied through the
//! socket — so an exec is no longer kept local because its environment
//! does not fit in a packet. The server accepts only a strong move (what
//! the proxy promised to give up), as a pipe reader does, and reads the
//! lists from the aggregate it received.

use std::os::fd::OwnedFd;

use atoll_cosh::{Config, Cosh, Mode, Parcel, Strength, Ticket};
use serde::{Deserialize, Serialize};

use crate::wire::{ExecSpec, FdRole};

/// What the `Exec` packet says of the transfer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ArgsTransfer {
    pub ticket: Ticket,
    /// The bytes copied rather than remapped (short lists).
    pub inline: Vec<u8>,
}

/// The proxy's side: the lists as a parcel to send (keep `cosh` alive
/// until the packet is sent: it owns the blocks).
pub fn pack(
    cosh: &mut Cosh,
    argv: &[Vec<u8>],
    envp: &[Vec<u8>],
) -> Result<Parcel, atoll_cosh::CoshError> {
    let bytes = postcard::to_allocvec(&(argv, envp))
        .map_err(|_| atoll_cosh::CoshError::Protocol("argument lists do not encode"))?;
    let d = cosh.domain();
    let agg = cosh.alloc(d, bytes.len())?;
    cosh.write(agg, 0, &bytes)?;
    cosh.attach_transfer(agg, Mode::Move, Strength::Strong)
}

/// A fresh transfer library for one exec.
pub fn library() -> Cosh {
    Cosh::new(Config::default())
}

/// The server's side: take the `Args` descriptors out of `fds` (and their
/// roles out of `spec`), receive the transfer and fill `spec.argv` and
/// `spec.envp`. An `Exec` without a transfer keeps its inline lists.
pub fn unpack(spec: &mut ExecSpec, fds: Vec<OwnedFd>) -> Result<Vec<OwnedFd>, String> {
    let Some(t) = spec.args.take() else {
        return Ok(fds);
    };
    if fds.len() != spec.fds.len() {
        return Err("descriptors and roles differ".into());
    }
    let mut kept = Vec::with_capacity(fds.len());
    let mut roles = Vec::with_capacity(fds.len());
    let mut blocks = Vec::new();
    for (fd, role) in fds.into_iter().zip(spec.fds.drain(..)) {
        match role {
            FdRole::Args => blocks.push(fd),
            r => {
                kept.push(fd);
                roles.push(r);
            }
        }
    }
    spec.fds = roles;
    if t.ticket.mode != Mode::Move || t.ticket.strength != Strength::Strong {
        return Err("arguments must be moved, strongly".into());
    }
    let mut cosh = library();
    let d = cosh.domain();
    let got = cosh
        .attach_recv(d, Parcel::received(t.ticket, blocks, t.inline))
        .map_err(|e| format!("argument transfer refused: {e}"))?;
    let bytes = cosh.to_vec(got.agg).map_err(|e| e.to_string())?;
    let (argv, envp): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
        postcard::from_bytes(&bytes).map_err(|_| "argument lists do not decode".to_string())?;
    spec.argv = argv;
    spec.envp = envp;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(argv: Vec<Vec<u8>>, envp: Vec<Vec<u8>>) -> ExecSpec {
        let mut cosh = library();
        let parcel = pack(&mut cosh, &argv, &envp).unwrap();
        let fds: Vec<OwnedFd> = parcel
            .descriptors()
            .into_iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect();
        let mut spec = ExecSpec {
            argv: vec![],
            envp: vec![],
            fds: fds.iter().map(|_| FdRole::Args).collect(),
            args: Some(ArgsTransfer {
                ticket: parcel.ticket.clone(),
                inline: parcel.inline.clone(),
            }),
            ..ExecSpec::default()
        };
        drop(parcel);
        drop(cosh);
        let kept = unpack(&mut spec, fds).unwrap();
        assert!(kept.is_empty() && spec.fds.is_empty() && spec.args.is_none());
        assert_eq!((spec.argv.clone(), spec.envp.clone()), (argv, envp));
        spec
    }

    #[test]
    fn short_and_long_lists_arrive_whole() {
        roundtrip(vec![b"true".to_vec()], vec![b"A=1".to_vec()]);
        // A megabyte of environment: past any packet, carried by blocks.
        let big: Vec<Vec<u8>> = (0..1024)
            .map(|i| format!("V{i}={}", "x".repeat(1000)).into_bytes())
            .collect();
        roundtrip(vec![b"env".to_vec(), vec![]], big);
    }

    #[test]
    fn a_weak_or_copied_transfer_is_refused() {
        let mut cosh = library();
        let d = cosh.domain();
        let agg = cosh.alloc(d, 16).unwrap();
        let parcel = cosh
            .attach_transfer(agg, Mode::Copy, Strength::Strong)
            .unwrap();
        let mut spec = ExecSpec {
            args: Some(ArgsTransfer {
                ticket: parcel.ticket.clone(),
                inline: parcel.inline.clone(),
            }),
            ..ExecSpec::default()
        };
        let err = unpack(&mut spec, vec![]).unwrap_err();
        assert!(err.contains("moved"), "{err}");
    }
}
