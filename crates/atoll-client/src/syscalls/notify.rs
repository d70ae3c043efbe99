//! Notification: `inotify_add_watch`, `inotify_rm_watch`, `fanotify_mark`,
//! `name_to_handle_at`. The queues are `inotify`'s and `fanotify`'s; these
//! only pick the calls out.

use super::common::fdarg;
use crate::error::Result;
use crate::session::Client;
use crate::{fanotify, fdtable, inotify, Out};

pub(super) fn inotify_add_watch(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    inotify::add_watch(c, fdarg(a[0]), a[1], a[2] as u32)
}

/// `inotify_add_watch` on an atoll queue (besides an atoll path).
pub(super) fn add_watch_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    fdtable::is_atoll(fdarg(a[0]))
}

pub(super) fn inotify_rm_watch(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    inotify::rm_watch(c, fdarg(a[0]), a[1] as i32)
}

pub(super) fn fanotify_mark(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    fanotify::mark(c, a)
}

/// `fanotify_mark(fd, flags, mask, dirfd, path)` on an atoll group, or of
/// an atoll dirfd alone, with no path (besides an atoll path).
pub(super) fn mark_concerns(_: &Client, _: i64, a: &[u64; 6]) -> bool {
    let at = |i: usize| fdtable::is_atoll(fdarg(a[i]));
    (a[4] == 0 && at(3)) || at(0)
}

pub(super) fn name_to_handle_at(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    fanotify::name_to_handle(c, a)
}
