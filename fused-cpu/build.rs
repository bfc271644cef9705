//! Sets `fused_arm_dsp` on Armv7E-M targets (`thumbv7em-*`: Cortex-M4 and
//! Cortex-M7), whose every core has the DSP extension: the DSP kernels
//! (`kernels::arm_dsp`) and `Isa::ArmDsp` are built there. Stable Rust has
//! no `target_feature = "dsp"` cfg, so the target's name is what says it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fused_arm_dsp)");
    println!("cargo::rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.starts_with("thumbv7em-") {
        println!("cargo::rustc-cfg=fused_arm_dsp");
    }
}
