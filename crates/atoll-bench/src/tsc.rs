//! Time-stamp counter access, so round trips can be reported in cycles next
//! to fos's and Hare's numbers (which are in cycles). The only unsafe code
//! of this crate.

/// Read the TSC, if this architecture has one.
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)]
pub fn rdtsc() -> Option<u64> {
    // SAFETY: RDTSC is part of the x86_64 baseline, has no memory operands
    // and no side effects besides reading the counter; the intrinsic is
    // `unsafe` only on older compilers.
    Some(unsafe { core::arch::x86_64::_rdtsc() })
}

#[cfg(not(target_arch = "x86_64"))]
pub fn rdtsc() -> Option<u64> {
    None
}

/// TSC ticks per nanosecond, measured against the monotonic clock over
/// `ms` milliseconds.
pub fn ghz(ms: u64) -> Option<f64> {
    let t0 = std::time::Instant::now();
    let c0 = rdtsc()?;
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let c1 = rdtsc()?;
    let ns = t0.elapsed().as_nanos() as f64;
    (c1 > c0).then(|| (c1 - c0) as f64 / ns)
}

#[cfg(test)]
mod tests {
    #[test]
    fn tsc_advances_if_present() {
        if let (Some(a), Some(b)) = (super::rdtsc(), super::rdtsc()) {
            assert!(b >= a);
            assert!(super::ghz(5).unwrap() > 0.0);
        }
    }
}
