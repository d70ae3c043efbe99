//! This server's side of the size board (`atoll_msg::sizes`): the sizes
//! of regular files it owns, published where clients read them without a
//! message (`SEEK_END`).
//!
//! A file takes its slot when a client asks its size by message (a
//! `SEEK_END` `Seek`, a `GetAttr`): the next ask is then answered from
//! the board. From then on every change of its size is published before
//! the reply of the request that made it, which is what makes the board
//! as fresh as the message: the writes' grants (`data`), `Inode::truncate`
//! from `SetAttr`, `O_TRUNC` and `fallocate`. Slots are direct-mapped, so
//! a file that takes a slot evicts the one there; a freed inode leaves its
//! slot empty.
//!
//! The server keeps its own mirror of which inode holds each slot and
//! never reads the board back (clients could scribble on it). A board is
//! attached only once the incarnation's generation is set
//! ([`FileServer::attach_size_board`]): a journal replay before that
//! publishes nothing, and what an older incarnation published is refused
//! by readers for its generation. Under `cfg(test)` every request ends
//! with [`FileServer::check_size_board`], so a path that changes a size
//! without publishing fails the server's unit tests.

use std::rc::Rc;

use atoll_msg::{slot_of, Control, SIZE_SLOTS};
use atoll_proto::{FileType, InodeId};

use super::FileServer;
use crate::store::BlockStore;

/// The board of one server incarnation, and the mirror of its slots.
pub(super) struct SizeBoard {
    control: Rc<Control>,
    index: usize,
    generation: u64,
    /// Raw inode id held by each slot (0: none), as this server wrote it.
    held: Box<[u64]>,
}

impl SizeBoard {
    fn new(control: Rc<Control>, index: usize, generation: u64) -> SizeBoard {
        SizeBoard {
            control,
            index,
            generation,
            held: vec![0; SIZE_SLOTS].into_boxed_slice(),
        }
    }

    fn publish(&mut self, k: usize, ino: u64, size: u64) {
        self.held[k] = ino;
        self.control
            .size_slot(self.index, k)
            .publish(ino, size, self.generation);
    }
}

impl<S: BlockStore> FileServer<S> {
    /// Publish sizes in `control`'s board from now on, as incarnation
    /// `generation` of this server (the value `Control::advance_generation`
    /// returned for it).
    pub fn attach_size_board(&mut self, control: Rc<Control>, generation: u64) {
        self.leases = Some(super::leases::LeaseBoard::new(
            control.clone(),
            self.cfg.index,
            generation,
        ));
        self.sizes = Some(SizeBoard::new(control, self.cfg.index, generation));
    }

    /// A test server publishes in a control block of its own, so that
    /// every unit test checks the board (`check_size_board`).
    #[cfg(test)]
    pub(super) fn attach_private_size_board(&mut self) {
        let (_fd, control) = Control::create(self.cfg.index + 1).expect("a control block");
        let g = control.advance_generation(self.cfg.index);
        self.attach_size_board(Rc::new(control), g);
    }

    /// `ino`'s size may have changed: publish it if it holds its slot.
    pub(super) fn size_changed(&mut self, ino: InodeId) {
        // A size change is a change of what a block list says (`leases`).
        self.lease_sync(ino);
        let Some(b) = self.sizes.as_mut() else {
            return;
        };
        let k = slot_of(ino.0);
        if b.held[k] == ino.0 {
            let size = self.inodes.get(&ino).map_or(0, |i| i.size);
            b.publish(k, ino.0, size);
        }
    }

    /// A client asked `ino`'s size by message: give it its slot, so that
    /// the next ask needs none. Only regular files (a directory's size is
    /// not its end for `lseek`).
    pub(super) fn claim_size_slot(&mut self, ino: InodeId) {
        let Some(b) = self.sizes.as_mut() else {
            return;
        };
        match self.inodes.get(&ino) {
            Some(i) if i.ftype == FileType::Regular => b.publish(slot_of(ino.0), ino.0, i.size),
            _ => {}
        }
    }

    /// `ino` was freed: its slot, if it holds it, holds nobody.
    pub(super) fn size_slot_freed(&mut self, ino: InodeId) {
        self.lease_freed(ino);
        let Some(b) = self.sizes.as_mut() else {
            return;
        };
        let k = slot_of(ino.0);
        if b.held[k] == ino.0 {
            b.publish(k, 0, 0);
        }
    }

    /// This incarnation stops serving: it empties the slots it holds
    /// and publishes no more.
    pub fn retire_size_board(&mut self) {
        self.forget_size_slots();
        self.sizes = None;
        self.leases = None;
    }

    /// The state is replaced (`image`): the slots held name inodes of
    /// the old one, so they hold nobody now.
    pub(super) fn forget_size_slots(&mut self) {
        self.forget_lease_slots();
        let Some(b) = self.sizes.as_mut() else {
            return;
        };
        for k in 0..SIZE_SLOTS {
            if b.held[k] != 0 {
                b.publish(k, 0, 0);
            }
        }
    }

    /// Every slot this server holds says what its inode's size is, and
    /// none names a freed inode (after each request, in tests).
    #[cfg(test)]
    pub(super) fn check_size_board(&self) {
        let Some(b) = self.sizes.as_ref() else {
            return;
        };
        for (k, &ino) in b.held.iter().enumerate().filter(|(_, &i)| i != 0) {
            let i = self.inodes.get(&InodeId(ino));
            assert!(i.is_some(), "slot {k} names freed inode {ino:#x}");
            let want = i.map_or(0, |i| i.size);
            let got = b.control.published_size(b.index, ino);
            assert_eq!(
                got,
                Some(want),
                "slot {k} of inode {ino:#x}: a size change was not published"
            );
        }
    }

    /// The size published for `ino`, as a client would read it (tests).
    #[cfg(test)]
    pub(super) fn published_size(&self, ino: InodeId) -> Option<u64> {
        let b = self.sizes.as_ref()?;
        b.control.published_size(b.index, ino.0)
    }
}
