//! An arbitrary GEMV job's parts: format, shape, columns, activation mode,
//! epilogue chain, operand and slice lengths (mostly right, sometimes off),
//! weights either quantized from bounded values or raw fuzzer bytes.

use arbitrary::{Result, Unstructured};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, MAX_STAGES, Stage};

use crate::data;

/// The parts of one GEMV job, owned.
#[derive(Debug)]
pub struct GemvCase {
    /// Weight format (any format, weight or not).
    pub dtype: DType,
    /// Output rows `M`.
    pub m: usize,
    /// Inner dimension `K` (not always a whole number of blocks).
    pub k: usize,
    /// Activation columns.
    pub n_cols: usize,
    /// How activations are fed.
    pub mode: ActQuant,
    /// The gate activation of a gated job, `None` for a plain one.
    pub gated: Option<Activation>,
    /// The epilogue, if `Epilogue::from_stages` took the stages.
    pub epilogue: Option<Epilogue>,
    /// Weight bytes (the gate's for a gated job).
    pub w: Vec<u8>,
    /// The up weights of a gated job.
    pub w_up: Vec<u8>,
    /// Whether the weights come from bounded values (not raw bytes), so
    /// that results can be compared with a tolerance.
    pub sane: bool,
    /// Activations.
    pub x: Vec<f32>,
    /// Epilogue operands, in slot order.
    pub operands: Vec<Vec<f32>>,
    /// Output length.
    pub y_len: usize,
}

/// `exact`, or with probability 1/8 a length a few elements off.
fn skewed(u: &mut Unstructured<'_>, exact: usize) -> Result<usize> {
    Ok(if u.ratio(1, 8)? {
        exact.saturating_add_signed(u.int_in_range(-2..=2)?)
    } else {
        exact
    })
}

/// One stage: an activation or an operand stage on a slot (slots past the
/// table included, which the epilogue must refuse).
fn stage(u: &mut Unstructured<'_>) -> Result<Stage> {
    let slot = if u.ratio(1, 16)? {
        u.int_in_range(0..=12)?
    } else {
        u.int_in_range(0..=3)?
    };
    Ok(match u.int_in_range(0..=3)? {
        0 => Stage::Act(*u.choose(&Activation::ALL)?),
        1 => Stage::Add { slot },
        2 => Stage::Mul { slot },
        _ => Stage::AddRowBias { slot },
    })
}

impl GemvCase {
    /// Reads a case from `u` (small: M ≤ 64, K ≤ 256 mostly, ≤ 8 columns).
    pub fn arbitrary(u: &mut Unstructured<'_>) -> Result<GemvCase> {
        let dtype = *u.choose(&DType::ALL)?;
        let m = u.int_in_range(0..=64usize)?;
        let blocks = u.int_in_range(0..=(256 / dtype.block_len()).max(1))?;
        let k = skewed(u, blocks * dtype.block_len())?;
        let n_cols = u.int_in_range(0..=8usize)?;
        let mode = *u.choose(&[
            ActQuant::F32,
            ActQuant::Q8_0,
            ActQuant::Q8_1,
            ActQuant::Q8_K,
        ])?;
        let mode = if u.ratio(3, 4)? {
            ActQuant::ggml(dtype)
        } else {
            mode
        };
        let gated = if u.ratio(1, 3)? {
            Some(*u.choose(&Activation::ALL)?)
        } else {
            None
        };
        let n_stages = u.int_in_range(0..=MAX_STAGES + 1)?;
        let stages = (0..n_stages)
            .map(|_| stage(u))
            .collect::<Result<Vec<_>>>()?;
        let epilogue = Epilogue::from_stages(&stages).ok();

        let sane = u.ratio(3, 4)?;
        let seed: u32 = u.arbitrary()?;
        let w_bytes = |u: &mut Unstructured<'_>, seed: u32| -> Result<Vec<u8>> {
            let exact = dtype.row_bytes(k).unwrap_or(0).saturating_mul(m);
            Ok(match data::weight_bytes(dtype, m, k, seed) {
                Some(w) if sane => w,
                _ => {
                    let raw = u.bytes(exact.min(u.len()))?;
                    let mut w = raw.to_vec();
                    w.resize(exact, 0);
                    w
                }
            })
        };
        let w = w_bytes(u, seed)?;
        let w_up = w_bytes(u, seed ^ 0x5555)?;
        let x = data::values(skewed(u, k * n_cols)?, seed ^ 1, 1.0);
        let n_ops = match &epilogue {
            Some(e) => skewed(u, e.n_operands())?,
            None => 0,
        };
        let mut operands = Vec::with_capacity(n_ops);
        for i in 0..n_ops {
            let row_bias = epilogue
                .as_ref()
                .is_some_and(|e| e.stages().contains(&Stage::AddRowBias { slot: i as u8 }));
            let len = skewed(u, if row_bias { m } else { m * n_cols })?;
            operands.push(data::values(len, seed ^ (i as u32 + 2), 2.0));
        }
        let y_len = skewed(u, m * n_cols)?;
        Ok(GemvCase {
            dtype,
            m,
            k,
            n_cols,
            mode,
            gated,
            epilogue,
            w,
            w_up,
            sane,
            x,
            operands,
            y_len,
        })
    }
}
