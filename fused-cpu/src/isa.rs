//! Instruction-set selection, detected once at run time.

/// The instruction sets the kernels are written for.
///
/// The order is by architecture family (the portable one, then 32-bit Arm,
/// aarch64 and x86-64) and, within a family, from the baseline to the
/// richest set, so
/// `a >= b` means "`a` has everything `b` has" only for `a`, `b` of one
/// family; [`Isa::is_supported`] is what says whether a set can run here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust: the core's reference arithmetic.
    Scalar,
    /// The DSP extension of Armv7E-M (Cortex-M4, Cortex-M7): `SMLAD` for
    /// the Q4_0 and Q8_0 integer dot products, bit for bit the scalar
    /// kernels. 32-bit Arm only; supported where the build targets
    /// Armv7E-M (`thumbv7em-*`).
    #[cfg(target_arch = "arm")]
    ArmDsp,
    /// aarch64 Advanced SIMD (NEON), the aarch64 baseline (little-endian
    /// targets only).
    Neon,
    /// aarch64 NEON with the dot-product extension (`SDOT`, FEAT_DotProd).
    NeonDotprod,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL with VNNI, on top of AVX2.
    Avx512,
}

impl Isa {
    /// Every ISA, in [`Ord`] order.
    #[cfg(not(target_arch = "arm"))]
    pub const ALL: [Isa; 5] = [
        Isa::Scalar,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::Avx2,
        Isa::Avx512,
    ];
    /// Every ISA, in [`Ord`] order.
    #[cfg(target_arch = "arm")]
    pub const ALL: [Isa; 6] = [
        Isa::Scalar,
        Isa::ArmDsp,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::Avx2,
        Isa::Avx512,
    ];

    /// A short name.
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "arm")]
            Isa::ArmDsp => "arm-dsp",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "neon-dotprod",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Every ISA this machine can run, best last.
    pub fn available() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported())
    }

    /// The best ISA of this machine, detected on the first call and cached.
    ///
    /// Without the `std` feature, only what the build targets statically
    /// (`-C target-feature`) counts. Nothing else (no environment variable)
    /// changes the answer: to run another supported set, name it
    /// (`CpuBackend::with_isa`, `RowKernels::new`).
    pub fn detect() -> Isa {
        detect_cached()
    }

    /// Whether this machine can run `self`: the scalar code always; a SIMD
    /// set when the detected best set is of the same family and at least as
    /// rich.
    pub fn is_supported(self) -> bool {
        let best = Isa::detect();
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "arm")]
            Isa::ArmDsp => best == Isa::ArmDsp,
            Isa::Neon | Isa::NeonDotprod => {
                matches!(best, Isa::Neon | Isa::NeonDotprod) && self <= best
            }
            Isa::Avx2 | Isa::Avx512 => matches!(best, Isa::Avx2 | Isa::Avx512) && self <= best,
        }
    }
}

impl Isa {
    /// Whether every kernel of `self` gives the core's reference bits (the
    /// scalar ISA, and the Arm DSP one, whose integer sums are exact and
    /// whose float operations are the reference's).
    pub(crate) fn is_reference_exact(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "arm")]
            Isa::ArmDsp => true,
            _ => false,
        }
    }
}

impl core::fmt::Display for Isa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

// `$(#[$doc])* fn $name() -> bool` (x86-64 only): whether the x86-64
// feature `$feature` is present, detected at run time (std caches the CPUID
// answer); without the `std` feature, whether the build targets it
// statically.
macro_rules! x86_feature {
    ($(#[$doc:meta])* $name:ident, $feature:tt) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        pub(crate) fn $name() -> bool {
            #[cfg(feature = "std")]
            {
                std::is_x86_feature_detected!($feature)
            }
            #[cfg(not(feature = "std"))]
            {
                cfg!(target_feature = $feature)
            }
        }
    };
}

x86_feature!(
    /// Whether the x86-64 GFNI extension (Galois-field byte affine
    /// transforms) is present: the AVX-512 Q4_0 and Q4_K kernels split
    /// nibbles with it where it is. Detected at run time (std caches the
    /// CPUID answer); without the `std` feature, whether the build targets
    /// it statically.
    has_gfni,
    "gfni"
);

x86_feature!(
    /// Whether AVX-512 VBMI (byte permutes across the whole register) is
    /// present: the AVX-512 Q4_0 kernel gathers its codes with it where it
    /// is (detected as [`has_gfni`]).
    has_vbmi,
    "avx512vbmi"
);

#[cfg(feature = "std")]
fn detect_cached() -> Isa {
    use std::sync::OnceLock;
    static BEST: OnceLock<Isa> = OnceLock::new();
    *BEST.get_or_init(detect_runtime)
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
fn detect_runtime() -> Isa {
    let avx2 = std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c");
    let avx512 = avx2
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512vnni");
    match (avx2, avx512) {
        (_, true) => Isa::Avx512,
        (true, false) => Isa::Avx2,
        _ => Isa::Scalar,
    }
}

#[cfg(all(feature = "std", target_arch = "aarch64", target_endian = "little"))]
fn detect_runtime() -> Isa {
    // NEON is part of every aarch64 Linux/macOS/Windows target.
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        Isa::NeonDotprod
    } else {
        Isa::Neon
    }
}

#[cfg(all(
    feature = "std",
    not(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_endian = "little")
    ))
))]
fn detect_runtime() -> Isa {
    static_arm()
}

/// On 32-bit Arm, [`Isa::ArmDsp`] where the build targets Armv7E-M
/// (`build.rs`); elsewhere, and on Arm without it, [`Isa::Scalar`].
#[cfg(any(
    not(feature = "std"),
    not(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_endian = "little")
    ))
))]
fn static_arm() -> Isa {
    #[cfg(fused_arm_dsp)]
    return Isa::ArmDsp;
    #[cfg(not(fused_arm_dsp))]
    Isa::Scalar
}

#[cfg(not(feature = "std"))]
fn detect_cached() -> Isa {
    if cfg!(all(
        target_arch = "x86_64",
        target_feature = "avx512f",
        target_feature = "avx512bw",
        target_feature = "avx512vl",
        target_feature = "avx512vnni",
        target_feature = "avx2",
        target_feature = "fma",
        target_feature = "f16c"
    )) {
        Isa::Avx512
    } else if cfg!(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma",
        target_feature = "f16c"
    )) {
        Isa::Avx2
    } else if cfg!(all(
        target_arch = "aarch64",
        target_endian = "little",
        target_feature = "neon",
        target_feature = "dotprod"
    )) {
        Isa::NeonDotprod
    } else if cfg!(all(
        target_arch = "aarch64",
        target_endian = "little",
        target_feature = "neon"
    )) {
        Isa::Neon
    } else {
        static_arm()
    }
}
