//! Epilogue chains compiled into kernels of their own.
//!
//! Every GEMV kernel runs the chain its launch passes (`EpiParams`): at each
//! block's end a loop over the stages, each comparing its kind and its
//! activation code. On the H200 that control flow alone cost about 1 % of a
//! one-column 4096 × 14336 Q4_0 GEMV (an identity activation stage,
//! docs/runs/2026-12-04-h200.md, 17:50), as much as the chain's arithmetic. So
//! the chains decode layers use most are also compiled in, stage by stage
//! (`FixedEpi` in `kernels/common.cuh`), into copies of default one-column
//! kernels of the formats decode runs most (`_e<chain>` kernels in
//! `kernels/gemv.cu`, each at its base kernel's blocks per SM). A launch whose chain and kernel have such a copy
//! runs the copy instead: the same stage functions in the same order, so
//! the same bits. A copy runs only where the device fits as many of its
//! blocks on an SM as of its kernel's ([`FixedCopies::probe`]), which the
//! kernels' bounds arrange for the H200's cubin; elsewhere (another GPU,
//! the portable PTX, a kernel changed since) the kernel runs the generic
//! chain.

use crate::error::CudaError;
use crate::params::{EpiParams, STAGE_ACT, STAGE_ADD, STAGE_MUL, act_code};
use fused_core::element::Activation;
use std::borrow::Cow;

/// One fixed-chain copy of a GEMV kernel and whether this device runs it:
/// only where the copy and the kernel it stands for fit the same number of
/// blocks on an SM (occupancy moved results more than the chain did on the
/// H200), else that kernel runs the generic chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "lab"), allow(unreachable_pub))]
pub struct FixedEpilogueCopy {
    /// The kernel the copy stands for.
    pub kernel: &'static str,
    /// The chain compiled into the copy (`add`, `silu_mul_add`).
    pub chain: &'static str,
    /// Blocks per SM of `kernel` on this device.
    pub kernel_blocks_per_sm: u32,
    /// Blocks per SM of the copy on this device.
    pub copy_blocks_per_sm: u32,
}

impl FixedEpilogueCopy {
    /// Whether launches run the copy (same blocks per SM as its kernel).
    #[cfg_attr(not(feature = "lab"), allow(unreachable_pub))]
    pub fn used(&self) -> bool {
        self.kernel_blocks_per_sm == self.copy_blocks_per_sm
    }
}

/// A chain with kernels of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FixedChain {
    /// `v + r`: a residual add.
    Add,
    /// `silu(v)·m + r`.
    SiluMulAdd,
}

impl FixedChain {
    /// Every fixed chain.
    pub(crate) const ALL: [FixedChain; 2] = [FixedChain::Add, FixedChain::SiluMulAdd];

    /// The chain's stages as the kernels' (kind, activation code) pairs.
    fn stages(self) -> &'static [(u32, u32)] {
        const SILU: u32 = act_code(Activation::Silu);
        match self {
            FixedChain::Add => &[(STAGE_ADD, 0)],
            FixedChain::SiluMulAdd => &[(STAGE_ACT, SILU), (STAGE_MUL, 0), (STAGE_ADD, 0)],
        }
    }

    /// The chain's name in its kernels' names (`EpiAdd`, `EpiSiluMulAdd`
    /// in `kernels/gemv.cu`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            FixedChain::Add => "add",
            FixedChain::SiluMulAdd => "silu_mul_add",
        }
    }

    /// The name of `kernel`'s copy for this chain.
    pub(crate) fn copy_of(self, kernel: &str) -> String {
        format!("{kernel}_e{}", self.name())
    }

    /// The fixed chain `epi` runs, if it is one.
    pub(crate) fn of(epi: &EpiParams) -> Option<FixedChain> {
        FixedChain::ALL
            .into_iter()
            .find(|c| epi.stage_codes().eq(c.stages().iter().copied()))
    }
}

/// The kernels that have a copy for every fixed chain
/// (`GEMV_FIXED_EPI_KERNELS`, `GEMVQ_FIXED_EPI_KERNELS` in
/// `kernels/gemv.cu`): one-column shapes `src/kernel_choice.rs` picks by default
/// whose copies run at the base kernel's blocks per SM (the kernel
/// source's comment there says which others were left out and why).
pub(crate) const KERNELS_WITH_FIXED_CHAINS: [&str; 8] = [
    "fused_gemv_f16_u16_c1",
    "fused_gemv_q8_0_c1",
    "fused_gemv_q4_0_c1",
    "fused_gemv_q4_K_c1",
    "fused_gemvq_q4_0_r4_c1_u1",
    "fused_gemvq_q4_K_r2_c1_u1",
    "fused_gemvq_q4_K_r4_c1_u1",
    "fused_gemvq_q4_K_r4s2_c1_u1",
];

/// Every copy of [`KERNELS_WITH_FIXED_CHAINS`] and whether this device runs
/// it.
#[derive(Clone, Debug, Default)]
pub(crate) struct FixedCopies {
    copies: Vec<FixedEpilogueCopy>,
}

impl FixedCopies {
    /// Every copy, with the blocks per SM `blocks_per_sm` gives for a
    /// kernel's name (the driver's occupancy for the GEMV block size).
    pub(crate) fn probe(
        blocks_per_sm: impl Fn(&str) -> Result<u32, CudaError>,
    ) -> Result<FixedCopies, CudaError> {
        let mut copies = Vec::new();
        for kernel in KERNELS_WITH_FIXED_CHAINS {
            let kernel_blocks_per_sm = blocks_per_sm(kernel)?;
            for chain in FixedChain::ALL {
                copies.push(FixedEpilogueCopy {
                    kernel,
                    chain: chain.name(),
                    kernel_blocks_per_sm,
                    copy_blocks_per_sm: blocks_per_sm(&chain.copy_of(kernel))?,
                });
            }
        }
        Ok(FixedCopies { copies })
    }

    /// Every copy (for reports).
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub(crate) fn all(&self) -> &[FixedEpilogueCopy] {
        &self.copies
    }

    /// Whether launches of `kernel` with `chain` may run the copy.
    fn runs(&self, kernel: &str, chain: FixedChain) -> bool {
        self.copies
            .iter()
            .any(|c| c.kernel == kernel && c.chain == chain.name() && c.used())
    }
}

/// The kernel that runs a GEMV launch of kernel `name` with epilogue `epi`
/// (its operands loaded early or not as `epi` says): `name`'s copy for the
/// chain where `on` (the tuning's fixed epilogues), the operands are loaded
/// early (a fixed chain loads them all when its blocks start) and `copies`
/// runs `name`'s copy for `epi`'s chain; else `name`.
pub(crate) fn kernel_name<'a>(
    name: &'a str,
    epi: &EpiParams,
    on: bool,
    copies: &FixedCopies,
) -> Cow<'a, str> {
    let chain = FixedChain::of(epi)
        .filter(|_| on && epi.early())
        .filter(|c| copies.runs(name, *c));
    match chain {
        Some(c) => Cow::Owned(c.copy_of(name)),
        None => Cow::Borrowed(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_core::epilogue::Epilogue;

    fn params(epi: &Epilogue, early: bool) -> EpiParams {
        let mut p = EpiParams::new(epi, |slot| 0x1000 * (slot as u64 + 1));
        p.set_early(early);
        p
    }

    fn silu_mul_add() -> Epilogue {
        Epilogue::NONE
            .then_act(Activation::Silu)
            .and_then(|e| e.then_mul())
            .and_then(|e| e.then_add())
            .unwrap()
    }

    #[test]
    fn the_fixed_chains_are_recognised() {
        let add = Epilogue::NONE.then_add().unwrap();
        assert_eq!(FixedChain::of(&params(&add, true)), Some(FixedChain::Add));
        assert_eq!(
            FixedChain::of(&params(&silu_mul_add(), true)),
            Some(FixedChain::SiluMulAdd)
        );
        let gelu_mul_add = Epilogue::NONE
            .then_act(Activation::GeluTanh)
            .and_then(|e| e.then_mul())
            .and_then(|e| e.then_add())
            .unwrap();
        let others = [
            Epilogue::NONE,
            Epilogue::NONE.then_mul().unwrap(),
            Epilogue::NONE.then_row_bias().unwrap(),
            Epilogue::NONE
                .then_add()
                .and_then(|e| e.then_add())
                .unwrap(),
            gelu_mul_add,
            silu_mul_add().then_act(Activation::Silu).unwrap(),
        ];
        for epi in others {
            assert_eq!(FixedChain::of(&params(&epi, true)), None, "{epi:?}");
        }
    }

    /// Copies probed with 8 blocks an SM for every kernel and copy, but 6
    /// for the silu_mul_add copy of `odd`.
    fn probed(odd: &str) -> FixedCopies {
        let odd_copy = FixedChain::SiluMulAdd.copy_of(odd);
        FixedCopies::probe(|k| Ok(if k == odd_copy { 6 } else { 8 })).unwrap()
    }

    #[test]
    fn a_launch_takes_the_copy_only_where_one_exists_and_may_run() {
        let (on, off) = (true, false);
        let copies = probed("none");
        let epi = params(&silu_mul_add(), true);
        for name in KERNELS_WITH_FIXED_CHAINS {
            assert_eq!(
                kernel_name(name, &epi, on, &copies),
                format!("{name}_esilu_mul_add")
            );
            assert_eq!(kernel_name(name, &epi, off, &copies), name);
            // Operands loaded late: the generic chain.
            let late = params(&silu_mul_add(), false);
            assert_eq!(kernel_name(name, &late, on, &copies), name);
        }
        let add = params(&Epilogue::NONE.then_add().unwrap(), true);
        assert_eq!(
            kernel_name("fused_gemvq_q4_0_r4_c1_u1", &add, on, &copies),
            "fused_gemvq_q4_0_r4_c1_u1_eadd"
        );
        // Kernels without copies: several columns, GLU, groups, other shapes.
        for name in [
            "fused_gemvq_q4_0_r4_c2_u1",
            "fused_gemvq_glu_q4_0_r2_c1_u1",
            "fused_gemvq_group_q4_0_r4_c1_u1",
            "fused_gemvq_q4_0_r2_c1_u1",
            "fused_gemvq_q8_0_r2_c1_u1",
            "fused_gemv_bf16_c1",
            "fused_gemv_f16_c1",
            "fused_gemv_f16_u8_c1",
            "fused_gemv_f16_r2_c1",
        ] {
            assert_eq!(kernel_name(name, &epi, on, &copies), name);
        }
    }

    #[test]
    fn a_copy_at_another_occupancy_than_its_kernel_is_not_run() {
        let on = true;
        let base = "fused_gemvq_q4_0_r4_c1_u1";
        let copies = probed(base);
        assert_eq!(copies.all().len(), 2 * KERNELS_WITH_FIXED_CHAINS.len());
        let unused: Vec<_> = copies.all().iter().filter(|c| !c.used()).collect();
        assert_eq!(unused.len(), 1);
        assert_eq!((unused[0].kernel, unused[0].chain), (base, "silu_mul_add"));
        assert_eq!(
            (unused[0].kernel_blocks_per_sm, unused[0].copy_blocks_per_sm),
            (8, 6)
        );
        // That chain on that kernel runs the generic loop; the other chain
        // and the other kernels keep their copies.
        let epi = params(&silu_mul_add(), true);
        assert_eq!(kernel_name(base, &epi, on, &copies), base);
        assert_eq!(
            kernel_name("fused_gemv_q4_0_c1", &epi, on, &copies),
            "fused_gemv_q4_0_c1_esilu_mul_add"
        );
        let add = params(&Epilogue::NONE.then_add().unwrap(), true);
        assert_eq!(
            kernel_name(base, &add, on, &copies),
            "fused_gemvq_q4_0_r4_c1_u1_eadd"
        );
        // A failed probe is an error, not a silent choice.
        let failed = FixedCopies::probe(|_| Err(CudaError::NotCompiled));
        assert!(failed.is_err());
    }

    #[test]
    fn the_kernel_source_defines_every_copy() {
        // The copies come from two macros (and the row-group kernels' own,
        // which name each copy); each listed kernel's copies must be among
        // their instantiations (a launch of a missing one fails).
        let src = include_str!("../kernels/gemv.cu");
        for name in KERNELS_WITH_FIXED_CHAINS {
            let line = match name.strip_prefix("fused_gemvq_") {
                Some(rest) if rest.contains("s2_") => {
                    for chain in FixedChain::ALL {
                        let copy = chain.copy_of(name);
                        assert!(
                            src.contains(&format!("({copy},")),
                            "{copy} in kernels/gemv.cu"
                        );
                    }
                    continue;
                }
                Some(rest) => {
                    let (fmt, shape) = rest.split_once("_r").expect("rows in the name");
                    let rows = shape.split('_').next().expect("rows");
                    format!("GEMVQ_FIXED_EPI_KERNELS({fmt}, ")
                        + &format!("FMT_{}, {rows}, ", fmt.to_uppercase())
                }
                None => format!("GEMV_FIXED_EPI_KERNELS({name}, "),
            };
            assert!(
                src.contains(&line),
                "{name}: no `{line}` in kernels/gemv.cu"
            );
        }
    }
}
