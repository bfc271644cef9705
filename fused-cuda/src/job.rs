//! [`GemvJob`]: one GEMV of a batch over shared activations
//! ([`CudaBackend::gemv_batch`](crate::CudaBackend::gemv_batch)); plain
//! borrows of device memory, the same with and without the `cuda` feature.

use crate::{DeviceActs, DeviceVec, DeviceWeights};
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;

/// One GEMV of a batch: `y = epilogue(W·x)`, or the gated
/// `y = epilogue(act(W_g·x) ⊙ (W_u·x))`, over the batch's activations.
///
/// The borrows are what make a batch safe to overlap: every job's output
/// is borrowed mutably for the whole batch, so no output can be another
/// job's weights, operands or output, nor the batch's activations.
pub struct GemvJob<'a> {
    /// The weights (the gate's, for the gated form).
    pub(crate) w: &'a DeviceWeights,
    /// The gated form: the up weights (same shape and format as `w`) and
    /// the activation applied to the gate.
    pub(crate) glu: Option<(&'a DeviceWeights, Activation)>,
    /// The epilogue chain applied before the store.
    pub(crate) epilogue: &'a Epilogue,
    /// The epilogue's operands, by slot.
    pub(crate) operands: &'a [&'a DeviceVec],
    /// The output: `n_cols` columns of `w.rows()` floats.
    pub(crate) y: &'a mut DeviceVec,
    /// Also the output quantized, for the next integer GEMV: exactly what
    /// [`CudaBackend::quantize_acts`](crate::CudaBackend::quantize_acts) of
    /// `y` would hold, written by this GEMV's own launch (no quantizer
    /// launch). One column of `w.rows()`, on quantized activations only.
    pub(crate) quantized_output: Option<&'a mut DeviceActs>,
    /// The next GEMV's first weights, asked of L2 by this one
    /// ([`GemvJob::with_l2_ahead`]).
    pub(crate) l2_ahead: Option<L2AheadHint<'a>>,
}

/// When each block of a GEMV asks L2 for its share of the next GEMV's
/// weights (the lab's `GemvJob::with_l2_ahead_at`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "lab"), allow(dead_code, unreachable_pub))]
pub enum AheadAt {
    /// When the block starts (the default: as fast or faster on the H200,
    /// BENCHMARKS.md).
    #[default]
    Start,
    /// Once the block's own weights have all arrived: the request reaches
    /// memory behind this GEMV's stream.
    End,
}

/// What a GEMV asks L2 for on behalf of the GEMV after it: the first
/// `bytes` of `next`'s weights in the layout a GEMV fed per `next_mode`
/// reads (the integer layout for quantized activations, else the float
/// one). `bytes` is rounded down to a multiple of 16 and may not exceed
/// that layout's length. A hint: results do not change, only where the
/// next GEMV finds its first weights.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct L2AheadHint<'a> {
    /// The next GEMV's weights.
    pub(crate) next: &'a DeviceWeights,
    /// How the next GEMV's activations are fed (which layout it reads).
    pub(crate) next_mode: ActQuant,
    /// How many of its first bytes to ask for.
    pub(crate) bytes: usize,
    /// When.
    pub(crate) at: AheadAt,
}

impl std::fmt::Debug for GemvJob<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GemvJob")
            .field("w", &(self.w.rows(), self.w.cols()))
            .field("glu", &self.glu.map(|(_, act)| act))
            .field("epilogue", self.epilogue)
            .field("operands", &self.operands.len())
            .field("y", &self.y.len())
            .field("quantized_output", &self.quantized_output.is_some())
            .field("l2_ahead", &self.l2_ahead.map(|h| (h.bytes, h.at)))
            .finish()
    }
}

impl<'a> GemvJob<'a> {
    /// `y = W·x`, no epilogue.
    pub fn new(w: &'a DeviceWeights, y: &'a mut DeviceVec) -> GemvJob<'a> {
        GemvJob {
            w,
            glu: None,
            epilogue: &Epilogue::NONE,
            operands: &[],
            y,
            quantized_output: None,
            l2_ahead: None,
        }
    }

    /// The same job with the epilogue `epilogue` over `operands`.
    pub fn with_epilogue(
        self,
        epilogue: &'a Epilogue,
        operands: &'a [&'a DeviceVec],
    ) -> GemvJob<'a> {
        GemvJob {
            epilogue,
            operands,
            ..self
        }
    }

    /// The same job also writing its output quantized into `acts` (one
    /// column of `w.rows()`, in the mode the next GEMV's weights take:
    /// `CudaBackend::alloc_acts`). Lab: slower than the quantizer launch
    /// on the H200.
    #[cfg(feature = "lab")]
    pub fn with_quantized_output(self, acts: &'a mut DeviceActs) -> GemvJob<'a> {
        GemvJob {
            quantized_output: Some(acts),
            ..self
        }
    }

    /// The same job asking L2 for the first `bytes` of `next`'s weights
    /// (the layout a GEMV fed per `next_mode` reads) as its blocks start
    /// (the default: as its blocks start), so that the memory keeps
    /// streaming across the handoff to the next GEMV.
    pub fn with_l2_ahead(
        self,
        next: &'a DeviceWeights,
        next_mode: ActQuant,
        bytes: usize,
    ) -> GemvJob<'a> {
        self.l2_ahead_at(next, next_mode, bytes, AheadAt::Start)
    }

    /// [`GemvJob::with_l2_ahead`], asked for when `at` says.
    #[cfg(feature = "lab")]
    pub fn with_l2_ahead_at(
        self,
        next: &'a DeviceWeights,
        next_mode: ActQuant,
        bytes: usize,
        at: AheadAt,
    ) -> GemvJob<'a> {
        self.l2_ahead_at(next, next_mode, bytes, at)
    }

    fn l2_ahead_at(
        self,
        next: &'a DeviceWeights,
        next_mode: ActQuant,
        bytes: usize,
        at: AheadAt,
    ) -> GemvJob<'a> {
        GemvJob {
            l2_ahead: Some(L2AheadHint {
                next,
                next_mode,
                bytes,
                at,
            }),
            ..self
        }
    }

    /// The same job in the gated form: `act(W·x) ⊙ (up·x)`.
    pub fn with_glu(self, up: &'a DeviceWeights, act: Activation) -> GemvJob<'a> {
        GemvJob {
            glu: Some((up, act)),
            ..self
        }
    }
}

/// One unfused element-wise kernel over device vectors, written into the
/// output [`CudaBackend::elementwise`](crate::CudaBackend::elementwise)
/// takes (as long as every input but a repeated operand). Each uses the
/// same device function as the GEMV epilogue's stage, so a fused chain and
/// the same chain of these kernels agree bit for bit.
#[derive(Clone, Copy, Debug)]
pub enum Elementwise<'a> {
    /// `out = a + b`.
    Add(&'a DeviceVec, &'a DeviceVec),
    /// `out = a · b`.
    Mul(&'a DeviceVec, &'a DeviceVec),
    /// `out[i] = a[i] · b[i mod b.len()]` (`b` repeated along `a`: the sign
    /// multiply of an unfused signed FWHT).
    MulCyclic(&'a DeviceVec, &'a DeviceVec),
    /// `out = act(a)`.
    Unary(Activation, &'a DeviceVec),
    /// `out = act(gate) · up`.
    Glu(Activation, &'a DeviceVec, &'a DeviceVec),
    /// `out = a + bias[row]` (column-major, `bias.len()` rows).
    AddRowBias(&'a DeviceVec, &'a DeviceVec),
    /// `out = a`, by the driver's device-to-device copy.
    Copy(&'a DeviceVec),
}
