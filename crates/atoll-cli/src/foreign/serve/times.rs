//! File times for a filtered program: `utimensat`, and the older
//! `utime`, `utimes` and `futimesat`, on files in the mount.

use super::{calls, seccomp, Answer, Notif, Place, Supervisor};
use Answer::{Done, Kernel};

/// The times argument of `utime` (`struct utimbuf`: two `time_t`) or of
/// `utimes`/`futimesat` (two `struct timeval`).
#[derive(Clone, Copy)]
pub enum OldTimes {
    Utimbuf,
    Timeval,
}

impl OldTimes {
    fn size(self) -> usize {
        match self {
            OldTimes::Utimbuf => 16,
            OldTimes::Timeval => 32,
        }
    }
}

impl Supervisor {
    pub(super) fn utimensat(&mut self, n: &Notif) -> Result<Answer, i32> {
        let a = n.args;
        let place = if a[1] == 0 {
            self.place(n, a[0], 0, true)?
        } else {
            self.place(n, a[0], a[1], a[3] as i32 & libc::AT_EMPTY_PATH != 0)?
        };
        if place == Place::Kernel {
            return Ok(Kernel);
        }
        let times = if a[2] == 0 {
            None
        } else {
            let mut b = [0u8; 32];
            seccomp::read_mem(n.pid, a[2], &mut b)?;
            let w = |k: usize| i64::from_ne_bytes(b[k * 8..k * 8 + 8].try_into().unwrap());
            Some([(w(0), w(1)), (w(2), w(3))])
        };
        let nofollow = a[3] as i32 & libc::AT_SYMLINK_NOFOLLOW;
        self.set_times(place, times, nofollow)
    }

    /// `utime`/`utimes`/`futimesat`: the times at `ptr` (NULL: now) in
    /// their older layouts, checked as the kernel checks them
    /// (`do_futimesat`: microseconds out of range are `EINVAL`).
    pub(super) fn old_times(
        &mut self,
        n: &Notif,
        place: Place,
        ptr: u64,
        layout: OldTimes,
    ) -> Result<Answer, i32> {
        if place == Place::Kernel {
            return Ok(Kernel);
        }
        let times = if ptr == 0 {
            None
        } else {
            let mut b = [0u8; 32];
            let b = &mut b[..layout.size()];
            seccomp::read_mem(n.pid, ptr, b)?;
            let w = |k: usize| i64::from_ne_bytes(b[k * 8..k * 8 + 8].try_into().unwrap());
            Some(match layout {
                OldTimes::Utimbuf => [(w(0), 0), (w(1), 0)],
                OldTimes::Timeval => {
                    if !(0..1_000_000).contains(&w(1)) || !(0..1_000_000).contains(&w(3)) {
                        return Err(libc::EINVAL);
                    }
                    [(w(0), w(1) * 1000), (w(2), w(3) * 1000)]
                }
            })
        };
        self.set_times(place, times, 0)
    }

    /// Set the times of the file `place` names. Through a descriptor of a
    /// file open for writing, what the program wrote goes back first: the
    /// write-back at its `close` then finds nothing new and leaves the
    /// times as set.
    fn set_times(
        &mut self,
        place: Place,
        times: Option<[(i64, i64); 2]>,
        nofollow: i32,
    ) -> Result<Answer, i32> {
        let path = match place {
            Place::Kernel => return Ok(Kernel),
            Place::Here(p) => p,
            Place::Desc(k) => {
                self.files.write_back(k);
                self.files.path_of(&self.paths, k).ok_or(libc::EBADF)?
            }
        };
        Ok(Done(calls::utimens(&path, times, nofollow)))
    }
}
