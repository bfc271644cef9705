//! The ceiling: what a device-to-device copy moves.

use crate::data::randv;
use crate::timing::time_calls;
use fused_cuda::{CudaBackend, CudaError};

/// The device-to-device copy of 1 GiB (bytes read + written), by
/// `cuMemcpyDtoDAsync` and by a 16-byte copy kernel: the faster is the
/// ceiling every % of copy below is against.
pub(crate) fn copy_ceiling(be: &CudaBackend) -> Result<f64, CudaError> {
    let n = 256 << 20; // 1 GiB of f32 per buffer
    let a = be.upload(&randv(n, 1))?;
    let mut b = be.alloc(n)?;
    let bytes = 2.0 * (n * 4) as f64; // read + written
    let t_memcpy = time_calls(be, 5, 20, |_| {
        be.elementwise(fused_cuda::Elementwise::Copy(&a), &mut b)
    })?;
    let t_kernel = time_calls(be, 5, 20, |_| be.copy_kernel(&a, &mut b))?;
    let bw_memcpy = bytes / t_memcpy / 1e6;
    let bw_kernel = bytes / t_kernel / 1e6;
    let ceiling = bw_memcpy.max(bw_kernel);
    drop((a, b));
    println!("## Copy ceiling (1 GiB → 1 GiB, bytes read + written)\n");
    println!("| copy | ms | GB/s |\n| --- | ---: | ---: |");
    println!("| cuMemcpyDtoDAsync | {t_memcpy:.3} | {bw_memcpy:.0} |");
    println!("| copy kernel (16-byte) | {t_kernel:.3} | {bw_kernel:.0} |");
    println!("\nceiling used below: {ceiling:.0} GB/s\n");
    Ok(ceiling)
}
