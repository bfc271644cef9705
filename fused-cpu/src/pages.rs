//! Large zeroed allocations backed by huge pages where the OS grants them.
//!
//! A GEMV streams its weights once per call, so every 4 KiB page of them
//! costs a TLB miss and a page walk, and the hardware prefetchers stop at
//! each page's end. On Linux with transparent huge pages in `madvise` mode
//! (a common default) memory is only backed by 2 MiB pages when asked for:
//! measured on a 2-vCPU AMD EPYC (Zen 4), one thread read 24–25 GB/s from
//! 4 KiB pages and 31–32 GB/s from huge ones, and Q4_1 / Q8_0 GEMVs at
//! 16384 × 8192 went from 26.0 / 23.5 to 28.7 / 25.1 GB/s. So the CPU
//! backend's resident buffers and the bandwidth probe are allocated here.
//! Elsewhere (other systems, huge pages off) this is a plain zeroed `Vec`.

use std::vec::Vec;

use bytemuck::Zeroable;

/// The huge page size asked for.
const HUGE: usize = 2 << 20;

/// `n` zeroed elements. Allocations of at least one huge page are marked
/// for huge pages before any of them is touched (a fresh zeroed allocation
/// of that size is mapped lazily, so its pages are first faulted in after
/// the advice, as huge pages where the kernel has them). Best effort: a
/// refusal leaves ordinary pages.
pub fn zeroed_vec<T: Zeroable>(n: usize) -> Vec<T> {
    // `alloc_zeroed` underneath: large blocks come fresh from the OS,
    // untouched (`vec![x; n]` of a generic `x` would write every page).
    let v: Vec<T> = bytemuck::allocation::zeroed_vec(n);
    advise_huge(v.as_ptr().cast(), core::mem::size_of_val(v.as_slice()));
    v
}

/// Marks the whole 2 MiB-aligned pages inside `[p, p + len)` for huge
/// pages (Linux `MADV_HUGEPAGE`); nothing elsewhere.
fn advise_huge(p: *const u8, len: usize) {
    let start = (p as usize).next_multiple_of(HUGE);
    let end = (p as usize).saturating_add(len) / HUGE * HUGE;
    if end <= start {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `start..end` lies inside one live allocation of the caller's
    // (whole pages, aligned to 2 MiB); `MADV_HUGEPAGE` changes only how
    // those pages are backed, never their contents or their mapping, and
    // its result is ignored (the advice is optional).
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vector_is_zeroed_and_writable_whatever_its_size() {
        for n in [0usize, 1, 4095, (HUGE / 4) * 3 + 17] {
            let mut v: Vec<u32> = zeroed_vec(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 0));
            v.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
        }
    }
}
