//! Every transfer variant between this process and a forked receiver,
//! bytes checked after the round trips (the benchmark's own check), and a
//! receiver that refuses descriptors a strong share must not carry.
//!
//! One `#[test]`: it forks, which wants no other test thread running.

use std::os::fd::OwnedFd;

use atoll_cosh::bench::{self, Variant};
use atoll_cosh::ticket::{Carried, Part};
use atoll_cosh::{sys, Config, Cosh, CoshError, Mode, Parcel, Strength, Ticket};

fn strong_share_of(fd: OwnedFd, len: u64) -> Parcel {
    Parcel {
        ticket: Ticket {
            mode: Mode::Share,
            strength: Strength::Strong,
            len,
            parts: vec![Part::Remap {
                block: 0,
                block_len: len,
                sealed: true,
                off: 0,
                len,
            }],
            inline_len: 0,
        },
        blocks: vec![Carried::Fd(fd)],
        inline: Vec::new(),
        inline_block: None,
    }
}

#[test]
fn every_variant_round_trips_between_processes_and_forged_shares_are_refused() {
    let r = bench::run(&bench::Config {
        sizes: vec![4096, 64 << 10],
        variants: Variant::ALL.to_vec(),
        iters: 5,
        repeat: 1,
    })
    .expect("every round trip brought the bytes back unchanged");
    assert_eq!(r.rows.len(), Variant::ALL.len() * 2);

    let mut c = Cosh::new(Config::default());
    let d = c.domain();
    // A "strong share" of a block that is not write-sealed: the sender
    // could still write it under us.
    let page = sys::page_size();
    let unsealed = sys::memfd(page).unwrap();
    assert!(matches!(
        c.attach_recv(d, strong_share_of(unsealed, page as u64)),
        Err(CoshError::Protocol(_))
    ));
    // A descriptor that is not a sealable memfd at all.
    let file: OwnedFd = std::fs::File::open("/proc/self/stat").unwrap().into();
    assert!(matches!(
        c.attach_recv(d, strong_share_of(file, page as u64)),
        Err(CoshError::Protocol(_))
    ));
    // A block shorter than announced (reads past its end would fault).
    let short = sys::memfd(page).unwrap();
    sys::seal_write(std::os::fd::AsFd::as_fd(&short)).unwrap();
    assert!(matches!(
        c.attach_recv(d, strong_share_of(short, 4 * page as u64)),
        Err(CoshError::Protocol(_))
    ));
    assert_eq!(c.stats().imported_blocks, 0);
}
