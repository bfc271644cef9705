//! Signed FWHT fused against sign multiply + FWHT.

use crate::data::randv;
use crate::timing::time_calls;
use fused_core::fwht::FwhtDesc;
use fused_cuda::{CudaBackend, CudaError};

/// Signed FWHT at N = 1024 and 32768 over 64 MiB: unsigned, signed and
/// fused, sign multiply then FWHT.
pub(crate) fn fwht_table(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    println!("\n## Signed FWHT on 64 MiB of f32 (bytes read + written)\n");
    println!(
        "| N | variant | launches | µs | GB/s (64 MiB in + 64 MiB out) | % of copy |\n| ---: | --- | ---: | ---: | ---: | ---: |"
    );
    let total = 16 << 20; // 64 MiB of f32
    let x = be.upload(&randv(total, 8))?;
    let mut out = be.alloc(total)?;
    let mut mid = be.alloc(total)?;
    for n in [1024usize, 32768] {
        let signs = be.upload(
            &randv(n, 9)
                .iter()
                .map(|v| if *v < 0.0 { -1.0 } else { 1.0 })
                .collect::<Vec<f32>>(),
        )?;
        let plain = FwhtDesc::new(n)?;
        let signed = plain.with_signs(n)?;
        let io = 2.0 * (total * 4) as f64;
        let t_plain = time_calls(be, 10, 20, |_| be.fwht(&plain, &x, None, &mut out))?;
        let t_fused = time_calls(be, 10, 20, |_| be.fwht(&signed, &x, Some(&signs), &mut out))?;
        let t_unfused = time_calls(be, 10, 20, |_| {
            be.elementwise(fused_cuda::Elementwise::MulCyclic(&x, &signs), &mut mid)?;
            be.fwht(&plain, &mid, None, &mut out)
        })?;
        for (name, launches, t) in [
            ("unsigned FWHT", 1, t_plain),
            ("signed, fused", 1, t_fused),
            ("sign multiply + FWHT", 2, t_unfused),
        ] {
            let gbs = io / t / 1e6;
            println!(
                "| {n} | {name} | {launches} | {:.1} | {gbs:.0} | {:.0}% |",
                t * 1e3,
                100.0 * gbs / ceiling
            );
        }
    }
    drop((x, out, mid));
    Ok(())
}
