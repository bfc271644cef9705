//! The cost of one parallel region (an empty task per chunk, then the join)
//! on `fused_cpu::pool::WorkerPool` beside rayon's `install` + `par_iter`,
//! with 1 and 2 threads: back to back, and after the caller was busy for
//! 50 µs (as between two kernels of a decode step). This is the barrier a
//! fused epilogue saves.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use fused_cpu::pool::WorkerPool;
use rayon::prelude::*;

/// Chunks per region (the backend uses about four per thread).
const CHUNKS: usize = 8;

fn busy(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Times `region` alone, `iters` times, each preceded by `gap` of caller
/// work that is not timed.
fn timed(iters: u64, gap: Duration, mut region: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        busy(gap);
        let t = Instant::now();
        region();
        total += t.elapsed();
    }
    total
}

fn regions(c: &mut Criterion) {
    let mut g = c.benchmark_group("region");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for threads in [1usize, 2] {
        let ours = WorkerPool::new(threads, "bench").expect("pool");
        let theirs = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("rayon pool");
        let chunks: Vec<usize> = (0..CHUNKS).collect();
        for (gap_name, gap) in [
            ("b2b", Duration::ZERO),
            ("gap50us", Duration::from_micros(50)),
        ] {
            g.bench_function(format!("worker_pool/{threads}t/{gap_name}"), |b| {
                b.iter_custom(|iters| {
                    timed(iters, gap, || {
                        ours.run(CHUNKS, &|i| {
                            black_box(i);
                        })
                    })
                })
            });
            g.bench_function(format!("rayon/{threads}t/{gap_name}"), |b| {
                b.iter_custom(|iters| {
                    timed(iters, gap, || {
                        theirs.install(|| {
                            chunks.par_iter().for_each(|i| {
                                black_box(i);
                            })
                        })
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, regions);
criterion_main!(benches);
