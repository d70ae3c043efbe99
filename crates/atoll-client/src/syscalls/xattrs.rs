//! Extended attributes: `get`, `set`, `list`, `remove`, each by path
//! (following symlinks), by path without following (`l…`) and by
//! descriptor (`f…`). The work is `meta`'s; these pick the target.

use super::common::fdarg;
use crate::error::Result;
use crate::session::Client;
use crate::{meta, Out};

pub(super) fn getxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_get(c, None, a, true)
}

pub(super) fn lgetxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_get(c, None, a, false)
}

pub(super) fn fgetxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_get(c, Some(fdarg(a[0])), a, true)
}

pub(super) fn setxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_set(c, None, a, true)
}

pub(super) fn lsetxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_set(c, None, a, false)
}

pub(super) fn fsetxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_set(c, Some(fdarg(a[0])), a, true)
}

pub(super) fn listxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_list(c, None, a, true)
}

pub(super) fn llistxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_list(c, None, a, false)
}

pub(super) fn flistxattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_list(c, Some(fdarg(a[0])), a, true)
}

pub(super) fn removexattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_remove(c, None, a, true)
}

pub(super) fn lremovexattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_remove(c, None, a, false)
}

pub(super) fn fremovexattr(c: &'static Client, _: i64, a: &[u64; 6]) -> Result<Out> {
    meta::xattr_remove(c, Some(fdarg(a[0])), a, true)
}
