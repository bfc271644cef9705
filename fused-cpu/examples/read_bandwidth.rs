//! The CPU's read bandwidth, as the benchmarks' ceiling: for each thread
//! count given (default 1 and 2), the fastest access pattern of
//! `fused_cpu::probe` over a 1 GiB buffer, one JSON line each:
//!
//! ```sh
//! cargo run --release -p fused-cpu --features lab --example read_bandwidth -- 1 2
//! ```
//!
//! prints `{"threads": 1, "streams": 1, "read_gbs": 27.1}` and so on.

use fused_cpu::probe::BandwidthProbe;

fn main() {
    let threads: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .filter(|&t| t > 0)
        .collect();
    let threads = if threads.is_empty() {
        vec![1, 2]
    } else {
        threads
    };
    let probe = BandwidthProbe::new(1 << 30);
    for t in threads {
        let (streams, gbs) = probe.best_streams(t, 5);
        println!("{{\"threads\": {t}, \"streams\": {streams}, \"read_gbs\": {gbs:.2}}}");
    }
}
