//! Epilogue chains compiled into kernels of their own.
//!
//! Every GEMV kernel runs the chain its launch passes (`EpiParams`): at each
//! block's end a loop over the stages, each comparing its kind and its
//! activation code. On the H200 that control flow alone cost about 1 % of a
//! one-column 4096 × 14336 Q4_0 GEMV (an identity activation stage,
//! BENCHMARKS.md 2026-12-04 17:50), as much as the chain's arithmetic. So
//! the chains decode layers use most are also compiled in, stage by stage
//! (`FixedEpi` in `kernels/common.cuh`), into copies of default one-column
//! kernels of the formats decode runs most (`_e<chain>` kernels in
//! `kernels/gemv.cu`, each at its base kernel's blocks per SM). A launch whose chain and kernel have such a copy
//! runs the copy instead: the same stage functions in the same order, so
//! the same bits.

use crate::LaunchOptions;
use crate::params::{EpiParams, STAGE_ACT, STAGE_ADD, STAGE_MUL, act_code};
use fused_core::element::Activation;
use std::borrow::Cow;

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

    /// The suffix of its kernels' names (`EpiAdd`, `EpiSiluMulAdd` in
    /// `kernels/gemv.cu`).
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            FixedChain::Add => "_eadd",
            FixedChain::SiluMulAdd => "_esilu_mul_add",
        }
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
/// `kernels/gemv.cu`): one-column shapes `src/launch.rs` picks by default
/// whose copies run at the base kernel's blocks per SM (the kernel
/// source's comment there says which others were left out and why).
pub(crate) const KERNELS_WITH_FIXED_CHAINS: [&str; 7] = [
    "fused_gemv_f16_u16_c1",
    "fused_gemv_q8_0_c1",
    "fused_gemv_q4_0_c1",
    "fused_gemv_q4_K_c1",
    "fused_gemvq_q4_0_r4_c1_u1",
    "fused_gemvq_q4_K_r2_c1_u1",
    "fused_gemvq_q4_K_r4_c1_u1",
];

/// The kernel that runs a GEMV launch of kernel `name` with epilogue `epi`
/// (its operands loaded early or not as `epi` says): `name`'s copy for the
/// chain where `options.fixed_epilogues` is on, the operands are loaded
/// early (a fixed chain loads them all when its blocks start) and `name`
/// has a copy for `epi`'s chain; else `name`.
pub(crate) fn kernel_name<'a>(
    name: &'a str,
    epi: &EpiParams,
    options: &LaunchOptions,
) -> Cow<'a, str> {
    let chain = FixedChain::of(epi)
        .filter(|_| options.fixed_epilogues && epi.early())
        .filter(|_| KERNELS_WITH_FIXED_CHAINS.contains(&name));
    match chain {
        Some(c) => Cow::Owned(format!("{name}{}", c.suffix())),
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

    #[test]
    fn a_launch_takes_the_copy_only_where_one_exists_and_may_run() {
        let on = LaunchOptions::default();
        let off = LaunchOptions {
            fixed_epilogues: false,
            ..on
        };
        let epi = params(&silu_mul_add(), true);
        for name in KERNELS_WITH_FIXED_CHAINS {
            assert_eq!(
                kernel_name(name, &epi, &on),
                format!("{name}_esilu_mul_add")
            );
            assert_eq!(kernel_name(name, &epi, &off), name);
            // Operands loaded late: the generic chain.
            assert_eq!(
                kernel_name(name, &params(&silu_mul_add(), false), &on),
                name
            );
        }
        let add = params(&Epilogue::NONE.then_add().unwrap(), true);
        assert_eq!(
            kernel_name("fused_gemvq_q4_0_r4_c1_u1", &add, &on),
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
            assert_eq!(kernel_name(name, &epi, &on), name);
        }
    }

    #[test]
    fn the_kernel_source_defines_every_copy() {
        // The copies come from two macros; each listed kernel's copies must
        // be among their instantiations (a launch of a missing one fails).
        let src = include_str!("../kernels/gemv.cu");
        for name in KERNELS_WITH_FIXED_CHAINS {
            let line = match name.strip_prefix("fused_gemvq_") {
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
