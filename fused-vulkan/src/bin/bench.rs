//! fused-vulkan-bench: device-timed medians (timestamp queries) of the copy
//! bandwidth ceiling, signed FWHT fused vs unfused, and GEMV.
//!
//! `fused-vulkan-bench [REPS] [MIB]`: REPS timed runs per case (default 9),
//! MIB MiB of FWHT input (default 64).

use fused_core::DType;
use fused_vulkan::timing::{self, Timing};
use fused_vulkan::{ContextOptions, FwhtVariant, VulkanBackend};

fn line(what: &str, t: Timing) {
    println!(
        "{what:<52} {:>10.1} us  {:>8.2} GB/s",
        t.median_ns / 1e3,
        t.gb_per_s()
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(9);
    let mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let b = VulkanBackend::with_options(ContextOptions::from_env())?;
    let info = b.context().info();
    println!(
        "device: {} ({:?}), subgroup {}, FWHT variant {:?}, {} timed runs per case, medians",
        info.name,
        info.device_type,
        info.subgroup_size,
        b.fwht_variant(),
        reps
    );
    let bytes = (mib as u64) << 20;
    line(&format!("copy {mib} MiB"), timing::copy(&b, bytes, reps)?);
    let floats = (mib << 20) / 4;
    let n = 1024;
    let mut variants = vec![b.fwht_variant()];
    if variants[0] == FwhtVariant::Shuffle {
        variants.push(FwhtVariant::Shared);
    }
    for variant in variants {
        let fused = timing::fwht(&b, variant, n, floats, true, reps)?;
        let unfused = timing::fwht(&b, variant, n, floats, false, reps)?;
        line(
            &format!("FWHT N={n} signed {mib} MiB {variant:?}, fused"),
            fused,
        );
        line(
            &format!("FWHT N={n} signed {mib} MiB {variant:?}, mul+barrier+FWHT"),
            unfused,
        );
        println!(
            "{:<52} {:>10.2}x",
            "  fused speed-up",
            unfused.median_ns / fused.median_ns
        );
    }
    let (m, k) = (4096, 14336);
    for dtype in [DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K] {
        line(
            &format!("GEMV {dtype:?} {m}x{k}, 1 column"),
            timing::gemv(&b, dtype, m, k, reps)?,
        );
    }
    let msgs = b.context().validation_messages();
    if !msgs.is_empty() {
        return Err(format!("{} validation messages: {}", msgs.len(), msgs.join("\n")).into());
    }
    Ok(())
}
