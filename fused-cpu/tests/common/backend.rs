//! Fused vs unfused on the threaded backend: an epilogue chain bound into a
//! GEMV, and the same chain run as separate element-wise steps.

use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::{BoundEpilogue, Epilogue};
use fused_core::job::GemvJob;
use fused_core::weights::GluWeights;
use fused_cpu::CpuBackend;

use super::bits;

/// The epilogue `act → [× mul] → + res → + row bias` with its operands.
pub(crate) struct Chain<'a> {
    /// The activation applied first.
    pub(crate) act: Activation,
    /// The element-wise factor, if the chain multiplies.
    pub(crate) mul: Option<&'a [f32]>,
    /// The residual added.
    pub(crate) res: &'a [f32],
    /// The per-row bias added last.
    pub(crate) bias: &'a [f32],
}

impl<'a> Chain<'a> {
    /// The chain bound for an `m × n` output, to fuse into a GEMV.
    pub(crate) fn bind(&self, m: usize, n: usize) -> BoundEpilogue<'a> {
        let mut epi = Epilogue::NONE.then_act(self.act).unwrap();
        let mut operands = Vec::new();
        if let Some(mul) = self.mul {
            epi = epi.then_mul().unwrap();
            operands.push(mul);
        }
        let epi = epi.then_add().and_then(|e| e.then_row_bias()).unwrap();
        operands.extend([self.res, self.bias]);
        epi.bind(&operands, m, n).unwrap()
    }

    /// The chain applied to the plain GEMV output `y` one element-wise
    /// kernel of `be` at a time (the unfused graph).
    pub(crate) fn unfused(&self, be: &CpuBackend, y: &[f32]) -> Vec<f32> {
        let (mut a, mut b) = (vec![0.0f32; y.len()], vec![0.0f32; y.len()]);
        be.unary(self.act, y, &mut a).unwrap();
        if let Some(mul) = self.mul {
            be.mul(&a, mul, &mut b).unwrap();
            core::mem::swap(&mut a, &mut b);
        }
        be.add(&a, self.res, &mut b).unwrap();
        be.add_row_bias(&b, self.bias, &mut a).unwrap();
        a
    }
}

/// `act(gate) · up + res` one element-wise kernel of `be` at a time: the
/// unfused GLU with a residual, from the two plain GEMV outputs.
pub(crate) fn glu_add_unfused(
    be: &CpuBackend,
    act: Activation,
    gate: &[f32],
    up: &[f32],
    res: &[f32],
) -> Vec<f32> {
    let (mut t, mut out) = (vec![0.0f32; gate.len()], vec![0.0f32; gate.len()]);
    be.glu(act, gate, up, &mut t).unwrap();
    be.add(&t, res, &mut out).unwrap();
    out
}

/// The GLU of `pair` (`act`) over the `n` columns of `x` in `mode`, plus the
/// residual `res`: fused into one `gemv_glu`, and unfused as two plain GEMVs
/// then [`glu_add_unfused`]. Returns (fused, unfused).
pub(crate) fn glu_add_fused_and_unfused(
    be: &CpuBackend,
    pair: &GluWeights<'_>,
    act: Activation,
    x: &[f32],
    n: usize,
    mode: ActQuant,
    res: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let m = pair.gate().rows();
    let bound = Epilogue::NONE
        .then_add()
        .unwrap()
        .bind(&[res], m, n)
        .unwrap();
    let mut fused = vec![0.0f32; m * n];
    be.gemv(
        &GemvJob::gated(pair.gate(), pair.up(), act, x, n)
            .with_mode(mode)
            .with_bound(&bound),
        &mut fused,
    )
    .unwrap();
    let none = Epilogue::NONE.bind(&[], m, n).unwrap();
    let (mut g, mut u) = (vec![0.0f32; m * n], vec![0.0f32; m * n]);
    be.gemv(
        &GemvJob::new(pair.gate(), x, n)
            .with_mode(mode)
            .with_bound(&none),
        &mut g,
    )
    .unwrap();
    be.gemv(
        &GemvJob::new(pair.up(), x, n)
            .with_mode(mode)
            .with_bound(&none),
        &mut u,
    )
    .unwrap();
    (fused, glu_add_unfused(be, act, &g, &u, res))
}

/// Asserts, for every activation `act`, that a GEMV (`gemv(epilogue, out)`)
/// with `act → × mul → + res → + row bias` fused equals, bit for bit, the
/// plain GEMV followed by the [`Chain::unfused`] steps on `be`; the output is
/// `m × n`.
pub(crate) fn assert_every_chain_fuses(
    be: &CpuBackend,
    [mul, res, bias]: [&[f32]; 3],
    m: usize,
    n: usize,
    mut gemv: impl FnMut(&BoundEpilogue<'_>, &mut [f32]),
    case: &str,
) {
    let none = Epilogue::NONE.bind(&[], m, n).unwrap();
    for act in Activation::ALL {
        let chain = Chain {
            act,
            mul: Some(mul),
            res,
            bias,
        };
        let mut fused = vec![0.0f32; m * n];
        gemv(&chain.bind(m, n), &mut fused);
        let mut y = vec![0.0f32; m * n];
        gemv(&none, &mut y);
        let unfused = chain.unfused(be, &y);
        assert_eq!(bits(&fused), bits(&unfused), "{case} {act}");
    }
}
