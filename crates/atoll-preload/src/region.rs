//! Find libatoll's own executable segment: the region Syscall User Dispatch
//! must always let through (our raw system calls, the signal restorer, the
//! clone trampoline, and the client library linked into this object).

use core::ffi::c_void;

/// Bounds `[start, end)` of the executable `PT_LOAD` segment of the loaded
/// object that contains address `addr`, found with `dl_iterate_phdr`.
pub fn exec_segment_containing(addr: usize) -> Option<(usize, usize)> {
    struct Search {
        addr: usize,
        found: Option<(usize, usize)>,
    }

    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Search` passed below, alive for the whole
        // iteration; `info` and its program headers are valid during the
        // callback (dl_iterate_phdr's contract).
        let (search, info) = unsafe { (&mut *(data as *mut Search), &*info) };
        let phdrs = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: as above; `dlpi_phnum` headers follow `dlpi_phdr`.
            unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
        };
        for ph in phdrs {
            if ph.p_type != libc::PT_LOAD || ph.p_flags & libc::PF_X == 0 {
                continue;
            }
            let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
            let end = start + ph.p_memsz as usize;
            if (start..end).contains(&search.addr) {
                search.found = Some((start, end));
                return 1;
            }
        }
        0
    }

    let mut search = Search { addr, found: None };
    // SAFETY: the callback only reads what the loader hands it and writes
    // into `search`, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void);
    }
    search.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_segment_holding_our_own_code() {
        let here = exec_segment_containing as *const () as usize;
        let (start, end) = exec_segment_containing(here).expect("own text segment");
        assert!(start <= here && here < end);
        // The same segment holds the rest of our code too.
        let other = crate::raw::write_all as *const () as usize;
        assert!(start <= other && other < end);
    }

    #[test]
    fn libc_code_is_outside_our_segment() {
        let here = exec_segment_containing as *const () as usize;
        let (start, end) = exec_segment_containing(here).unwrap();
        let libc_fn = libc::getpid as *const () as usize;
        assert!(!(start..end).contains(&libc_fn));
        assert!(exec_segment_containing(libc_fn).is_some());
    }
}
