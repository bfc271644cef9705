//! A memory-bandwidth probe: the read (and copy) bandwidth this machine
//! reaches with plain, vectorizable Rust loops, the ceiling the GEMV
//! benchmarks are compared with.
//!
//! The read pass sums the buffer as `u64` lanes into eight independent
//! accumulators (the compiler turns this into SIMD adds, far faster than
//! DRAM), split into one contiguous slice per thread, each slice read as
//! some number of sequential streams side by side; the sum goes through
//! [`core::hint::black_box`] so the loads cannot be removed. Which number
//! of streams reads fastest depends on the machine's prefetchers: on one
//! Intel Xeon build machine one stream reached ~10 GB/s on one core and
//! four ~16–18 GB/s, while on an AMD EPYC (Zen) build machine one stream
//! reads ~25 GB/s and four only ~10. So the probe times every count of
//! [`STREAM_COUNTS`] and reports the fastest: a ceiling on both. A figure
//! is the median of several passes, in GB/s (10⁹ bytes per second).

use std::thread;
use std::time::{Duration, Instant};
use std::vec::Vec;

use core::hint::black_box;

/// Lanes summed side by side: eight `u64` accumulators.
const LANES: usize = 8;

/// A buffer allocated and touched once, read by [`BandwidthProbe::read_pass`].
#[derive(Debug)]
pub struct BandwidthProbe {
    buf: Vec<u64>,
}

impl BandwidthProbe {
    /// Allocates `bytes` (rounded down to whole 64-byte lines, at least one)
    /// and writes every element, so every page is mapped before timing.
    pub fn new(bytes: usize) -> BandwidthProbe {
        let words = (bytes / (8 * LANES)).max(1) * LANES;
        // Huge pages where the OS grants them, as the backend's buffers
        // (`crate::pages`): a ceiling has to read as fast as they can.
        let mut buf: Vec<u64> = crate::pages::zeroed_vec(words);
        for (i, x) in buf.iter_mut().enumerate() {
            *x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        BandwidthProbe { buf }
    }

    /// The buffer size in bytes.
    pub fn bytes(&self) -> usize {
        self.buf.len() * 8
    }

    /// One read-only pass over the whole buffer, split into `threads`
    /// (≥ 1) contiguous slices, one per scoped thread (the calling thread
    /// takes the first one), each read as `streams` (≥ 1) sequential
    /// streams side by side. Returns the wrapping sum of all elements,
    /// already passed through [`black_box`].
    pub fn read_pass(&self, threads: usize, streams: usize) -> u64 {
        let threads = threads.max(1);
        let per = self.buf.len().div_ceil(threads).div_ceil(LANES) * LANES;
        let mut parts = self.buf.chunks(per.max(LANES));
        let first = parts.next().unwrap_or(&[]);
        let total = thread::scope(|s| {
            let handles: Vec<_> = parts
                .map(|p| s.spawn(move || sum_u64(p, streams)))
                .collect();
            let mut total = sum_u64(first, streams);
            for h in handles {
                total = total.wrapping_add(h.join().unwrap_or(0));
            }
            total
        });
        black_box(total)
    }

    /// The median read bandwidth of `reps` (≥ 1) timed [`Self::read_pass`]es
    /// with `threads` threads and `streams` streams a thread, in GB/s,
    /// after one untimed pass.
    pub fn read_with(&self, threads: usize, streams: usize, reps: usize) -> f64 {
        black_box(self.read_pass(threads, streams));
        let times: Vec<Duration> = (0..reps.max(1))
            .map(|_| {
                let t = Instant::now();
                black_box(self.read_pass(threads, streams));
                t.elapsed()
            })
            .collect();
        gb_per_s(self.bytes(), median(times))
    }

    /// The count of [`STREAM_COUNTS`] that reads fastest with `threads`
    /// threads ([`Self::read_with`], `reps` passes each) and its GB/s.
    pub fn best_streams(&self, threads: usize, reps: usize) -> (usize, f64) {
        STREAM_COUNTS
            .iter()
            .map(|&s| (s, self.read_with(threads, s, reps)))
            .fold((1, 0.0), |best, r| if r.1 > best.1 { r } else { best })
    }

    /// The read bandwidth with `threads` threads in GB/s: the fastest
    /// access pattern's median ([`Self::best_streams`]).
    pub fn read(&self, threads: usize, reps: usize) -> f64 {
        self.best_streams(threads, reps).1
    }

    /// One copy of the first half of the buffer into a second buffer of the
    /// same size (`dst`, allocated and touched by the caller), split across
    /// `threads` threads. Moves `2 · dst.len() · 8` bytes (read + write;
    /// write-allocate traffic not counted).
    fn copy_pass(&self, dst: &mut [u64], threads: usize) {
        let threads = threads.max(1);
        let src = &self.buf[..dst.len()];
        let per = dst.len().div_ceil(threads).max(1);
        thread::scope(|s| {
            for (d, sr) in dst.chunks_mut(per).zip(src.chunks(per)) {
                s.spawn(move || d.copy_from_slice(sr));
            }
        });
        black_box(&*dst);
    }

    /// The median copy bandwidth of `reps` (≥ 1) passes with `threads`
    /// threads, in GB/s, counting bytes read plus bytes written. Allocates a
    /// destination of half the probe's size for the duration of the call.
    pub fn copy(&self, threads: usize, reps: usize) -> f64 {
        let mut dst = std::vec![1u64; self.buf.len() / 2];
        self.copy_pass(&mut dst, threads);
        let times: Vec<Duration> = (0..reps.max(1))
            .map(|_| {
                let t = Instant::now();
                self.copy_pass(&mut dst, threads);
                t.elapsed()
            })
            .collect();
        gb_per_s(dst.len() * 8 * 2, median(times))
    }
}

/// The numbers of sequential streams a thread reads side by side that the
/// probe tries (see the module docs).
pub const STREAM_COUNTS: [usize; 4] = [1, 2, 4, 8];

/// The wrapping sum of `xs` over eight independent lanes (vectorizable),
/// read as `streams` equal sequential streams walked in lockstep, one
/// 64-byte line of each per step: on some machines several streams keep
/// more cache-line requests in flight than one (the hardware prefetchers
/// follow each), as a GEMV over several weight rows at once does; on others
/// one stream is the fastest.
fn sum_u64(xs: &[u64], streams: usize) -> u64 {
    let streams = streams.max(1);
    let mut acc = [0u64; LANES];
    let stream_len = xs.len() / (streams * LANES) * LANES;
    let (body, rest) = xs.split_at(stream_len * streams);
    if stream_len > 0 {
        let streams: Vec<&[u64]> = body.chunks_exact(stream_len).collect();
        for at in (0..stream_len).step_by(LANES) {
            for st in &streams {
                for (a, x) in acc.iter_mut().zip(&st[at..at + LANES]) {
                    *a = a.wrapping_add(*x);
                }
            }
        }
    }
    let mut chunks = rest.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*x);
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0u64, |s, x| s.wrapping_add(*x));
    acc.iter().fold(tail, |s, a| s.wrapping_add(*a))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn gb_per_s(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64().max(1e-12) / 1e9
}

/// The read bandwidth in GB/s (10⁹ bytes/s) of a read-only sum over a
/// buffer of `bytes` (use ≥ 1 GiB to measure DRAM rather than cache),
/// allocated and touched once, split across `threads` threads: the median of
/// `reps` passes of the fastest access pattern (1, 2, 4 or 8 streams a
/// thread).
pub fn read_bandwidth(bytes: usize, threads: usize, reps: usize) -> f64 {
    BandwidthProbe::new(bytes).read(threads, reps)
}

/// The copy bandwidth in GB/s (bytes read plus bytes written) of copying
/// `bytes / 2` into a second buffer, split across `threads` threads: the
/// median of `reps` passes.
pub fn copy_bandwidth(bytes: usize, threads: usize, reps: usize) -> f64 {
    BandwidthProbe::new(bytes).copy(threads, reps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_is_exact() {
        for n in [0u64, 7, 64, 1003, 4096 + 65] {
            let xs: Vec<u64> = (0..n).collect();
            for s in STREAM_COUNTS {
                assert_eq!(sum_u64(&xs, s), n * n.saturating_sub(1) / 2, "{n} {s}");
            }
        }
        let p = BandwidthProbe::new(1 << 16);
        let expect = p.buf.iter().fold(0u64, |s, x| s.wrapping_add(*x));
        for t in 1..=3 {
            for s in STREAM_COUNTS {
                assert_eq!(p.read_pass(t, s), expect, "{t} threads {s} streams");
            }
        }
    }

    #[test]
    fn bandwidth_is_finite_and_positive() {
        for t in [1, 2] {
            let r = read_bandwidth(4 << 20, t, 3);
            assert!(r.is_finite() && r > 0.0, "read {r} GB/s with {t} threads");
            let c = copy_bandwidth(4 << 20, t, 3);
            assert!(c.is_finite() && c > 0.0, "copy {c} GB/s with {t} threads");
        }
    }
}
