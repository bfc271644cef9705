//! Kernel launches at the level of device addresses: a [`Launch`] names one
//! kernel (or one device-to-device copy), its grid and its arguments, with
//! every buffer as a raw device address (plus byte offset already added).
//!
//! Both front ends build them: the [`DeviceVec`](crate::DeviceVec) entry
//! points of [`CudaBackend`](crate::CudaBackend) after the core's checks,
//! and the device plan (`plan_exec.rs`) once per step when it is built; the
//! kernel each takes is the kernel choice's (`kernel_choice.rs`) for the
//! backend's [`Tuning`]. The backend's `enqueue` is the one place that turns
//! a [`Launch`] into a driver call, so the kernel names, grids and argument
//! lists exist once.

use crate::MAX_COLS;
use crate::error::{CudaError, u32_of};
use crate::kernel_choice::{f16_shape, gemv_rows_per_block, gemvq_kernel_name, gemvq_shape};
use crate::params::{
    ATTN_COMBINE, ATTN_MAX_SPLITS, ATTN_QMODE_Q8_K, ArgmaxParams, ArgmaxTail, AttnParams, EW_BLOCK,
    EpiParams, FwhtParams, GemvParams, GemvQParams, GroupJobs, KvAppendParams, L2Ahead, NormParams,
    NormQuantParams, QUANT_BLOCK, QuantOut, QuantParams, RopeParams, SetRowParams, act_code,
};
use crate::qacts::QactsLayout;
use crate::schedule::{Deps, LaunchKind};
use crate::tuning::Tuning;
use fused_core::acts::ActQuant;
use fused_core::decode::MAX_ARGMAX_LEN;
use fused_core::element::Activation;
use fused_core::error::Unsupported;
use fused_core::fwht::FwhtDesc;
use fused_core::look_ahead::{AheadCommand, look_ahead_windows};
use fused_core::{DType, Error};

/// Threads per block of the warp FWHT kernels.
const FWHT_WARP_BLOCK: u32 = 256;
/// Threads per block (one row each) of the shared-memory FWHT kernels.
const FWHT_BLOCK_THREADS: u32 = 1024;
/// Largest N of the warp FWHT kernels.
const FWHT_WARP_MAX_N: usize = 1024;

/// The alignment, in bytes, the GEMV kernels need of their activations
/// (16-byte vector loads, `ld_x4` in `kernels/gemv.cu`).
pub(crate) const GEMV_X_ALIGN: u64 = 16;
/// The alignment of every f32 address the kernels read or write.
pub(crate) const F32_ALIGN: u64 = 4;

/// Whether a GEMV of `rows` rows and `n_cols` columns launches anything
/// (not when either is 0); more than [`MAX_COLS`] columns is an error.
fn gemv_has_work(rows: usize, n_cols: usize) -> Result<bool, CudaError> {
    if n_cols > MAX_COLS {
        return Err(Error::LengthMismatch {
            what: "GEMV columns (the CUDA kernels take 1..=8)",
            expected: MAX_COLS,
            actual: n_cols,
        }
        .into());
    }
    Ok(n_cols != 0 && rows != 0)
}

/// Element counts of the element-wise kernels: below 2^31 (their grid-stride
/// index is a u32).
pub(crate) fn ew_len(n: usize) -> Result<u32, CudaError> {
    if n > i32::MAX as usize {
        return Err(Error::Overflow {
            what: "element-wise length as the kernel's index",
        }
        .into());
    }
    Ok(n as u32)
}

fn refused(what: &'static str) -> Error {
    Error::Unsupported(Unsupported::Operation(what))
}

/// Whether a GEMV of `rows` rows and `n_cols` columns (on quantized
/// activations where `int`) may also write its output quantized as
/// `out` ([`Launch::set_quant_out`]): integer kernels, one column, `out`
/// one column of `rows`.
pub(crate) fn check_quant_out(
    rows: usize,
    n_cols: usize,
    int: bool,
    out: &QactsLayout,
) -> Result<(), Error> {
    if !int {
        return Err(refused(
            "a quantized GEMV output from f32 activations (integer kernels only)",
        ));
    }
    if n_cols != 1 || out.n_cols != 1 {
        return Err(refused("a quantized GEMV output of more than one column"));
    }
    if rows != out.k {
        return Err(Error::LengthMismatch {
            what: "quantized GEMV output (the GEMV's rows)",
            expected: rows,
            actual: out.k,
        });
    }
    Ok(())
}

/// One element-wise kernel of `kernels/elementwise.cu` with its device
/// addresses (f32 arrays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EwKernel {
    /// `out = a + b`.
    Add { a: u64, b: u64, out: u64 },
    /// `out = a · b`.
    Mul { a: u64, b: u64, out: u64 },
    /// `out[i] = a[i] · b[i mod b_len]`.
    MulCyclic {
        a: u64,
        b: u64,
        out: u64,
        b_len: u32,
    },
    /// `out = act(a)` (`act`: the kernels' activation code).
    Unary { act: u32, a: u64, out: u64 },
    /// `out = act(gate) · up`.
    Glu {
        act: u32,
        gate: u64,
        up: u64,
        out: u64,
    },
    /// `out[i] = a[i] + bias[i mod rows]`.
    AddRowBias {
        a: u64,
        bias: u64,
        out: u64,
        rows: u32,
    },
    /// `out = a` in 16-byte units (`n` counts float4s).
    Copy4 { a: u64, out: u64 },
}

impl EwKernel {
    /// The kernel's symbol.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            EwKernel::Add { .. } => "fused_ew_add",
            EwKernel::Mul { .. } => "fused_ew_mul",
            EwKernel::MulCyclic { .. } => "fused_ew_mul_cyclic",
            EwKernel::Unary { .. } => "fused_ew_unary",
            EwKernel::Glu { .. } => "fused_ew_glu",
            EwKernel::AddRowBias { .. } => "fused_ew_add_row_bias",
            EwKernel::Copy4 { .. } => "fused_ew_copy4",
        }
    }

    /// `out = act(a)` for an [`Activation`].
    pub(crate) fn unary(act: Activation, a: u64, out: u64) -> EwKernel {
        EwKernel::Unary {
            act: act_code(act),
            a,
            out,
        }
    }

    /// `out = act(gate) · up` for an [`Activation`].
    pub(crate) fn glu(act: Activation, gate: u64, up: u64, out: u64) -> EwKernel {
        EwKernel::Glu {
            act: act_code(act),
            gate,
            up,
            out,
        }
    }
}

/// One launch (or device-to-device copy), ready to enqueue.
#[derive(Clone, Debug)]
pub(crate) enum Launch {
    /// A GEMV (gated when `params.w_up` is not 0).
    Gemv {
        name: String,
        grid: u32,
        params: GemvParams,
        /// Whether it may overlap ([`LaunchKind::of_gemv`]).
        kind: LaunchKind,
        /// The weight bytes it streams (both matrices of a gated GEMV).
        weight_bytes: u64,
        /// The weights' format.
        dtype: DType,
    },
    /// A (signed) FWHT of every row.
    Fwht {
        name: String,
        grid: u32,
        block: u32,
        shared: u32,
        params: FwhtParams,
    },
    /// An activation quantizer.
    Quantize {
        name: &'static str,
        grid: u32,
        params: QuantParams,
        /// The next GEMV's weights its blocks ask L2 for (`chain_l2_ahead`).
        ahead: L2Ahead,
    },
    /// RMS normalisation of every column (`fused_rms_norm`).
    RmsNorm { grid: u32, params: NormParams },
    /// A norm prologue fused into the activation quantizer.
    NormQuantize {
        name: &'static str,
        grid: u32,
        params: NormQuantParams,
        /// As `Quantize::ahead`.
        ahead: L2Ahead,
    },
    /// An integer GEMV on quantized activations (gated when `params.w_up`
    /// is not 0).
    GemvQ {
        name: String,
        grid: u32,
        params: GemvQParams,
        /// Whether it may overlap ([`LaunchKind::of_gemv`]).
        kind: LaunchKind,
        /// The weight bytes it streams (in GGML's layout).
        weight_bytes: u64,
        /// Activation columns.
        n_cols: usize,
    },
    /// Independent one-column GEMVs of one kernel shape in one grid
    /// (`src/group.rs`).
    Group {
        name: String,
        grid: u32,
        jobs: GroupJobs,
        /// Whether it may overlap ([`LaunchKind::of_gemv`] of all its
        /// jobs' weights).
        kind: LaunchKind,
        /// The weight bytes of all its jobs.
        weight_bytes: u64,
    },
    /// An element-wise kernel over `n` elements (float4s for `Copy4`).
    Ew { kernel: EwKernel, n: u32 },
    /// RoPE at the position the kernel reads (`fused_rope`; `src/decode.rs`).
    Rope { grid: u32, params: RopeParams },
    /// A row written at the position the kernel reads (`fused_set_row`).
    SetRow { grid: u32, params: SetRowParams },
    /// The key/value append at the position the kernel reads
    /// (`fused_kv_append`).
    KvAppend { grid: u32, params: KvAppendParams },
    /// One of an attention's two kernels: a split kernel `name`
    /// (`fused_attn_split_e*_g*`) or the combine (`fused_attn_combine`).
    Attention {
        name: String,
        grid: u32,
        block: u32,
        params: AttnParams,
        /// As `Quantize::ahead`.
        ahead: L2Ahead,
    },
    /// The index of each column's maximum (`fused_argmax`).
    ArgMax { grid: u32, params: ArgmaxParams },
    /// `bytes` bytes from `src` to `dst` (`cuMemcpyDtoDAsync`).
    Copy { src: u64, dst: u64, bytes: usize },
}

/// The GEMV of one call: what [`Launch::gemv`] needs besides addresses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GemvShape {
    /// Weight format (one of [`crate::GEMV_DTYPES`]).
    pub(crate) dtype: DType,
    /// Output rows `M`.
    pub(crate) rows: usize,
    /// Inner dimension `K`.
    pub(crate) cols: usize,
    /// Bytes of one weight row.
    pub(crate) row_bytes: usize,
    /// Activation columns (1..=[`MAX_COLS`]).
    pub(crate) n_cols: usize,
}

impl Launch {
    /// The GEMV `y = epi(act(W·x) [⊙ (W_up·x)])` with weights at `w` (and
    /// `w_up`, same shape and format, for the gated form) in the kernels'
    /// layout, activations at `x`, output at `y`, in the kernel `tuning`
    /// picks; `None` when there is nothing to compute (no rows or no
    /// columns). The caller has checked the lengths against `shape` and the
    /// epilogue's operands.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv(
        tuning: &Tuning,
        shape: GemvShape,
        w: u64,
        w_up: Option<u64>,
        act: Activation,
        x: u64,
        y: u64,
        epi: EpiParams,
    ) -> Result<Option<Launch>, CudaError> {
        let GemvShape {
            dtype,
            rows: m,
            cols: k,
            row_bytes,
            n_cols,
        } = shape;
        if !gemv_has_work(m, n_cols)? {
            return Ok(None);
        }
        let params = GemvParams {
            w,
            w_up: w_up.unwrap_or(0),
            x,
            y,
            rows: u32_of("weight rows", m)?,
            k: u32_of("weight columns", k)?,
            row_bytes: u32_of("weight row bytes", row_bytes)?,
            glu_act: act_code(act),
            deps: Deps::Wait,
            pad: 0,
            epi,
            ahead: L2Ahead::default(),
            argmax: ArgmaxTail::default(),
        };
        let shape = (dtype == DType::F16)
            .then(|| f16_shape(k, n_cols, tuning))
            .flatten();
        let (r, tag) = match shape {
            Some((r, tag)) => (r, format!("_{tag}")),
            None => (gemv_rows_per_block(dtype, n_cols), String::new()),
        };
        let name = format!(
            "fused_gemv_{}{}{tag}_c{n_cols}",
            if w_up.is_some() { "glu_" } else { "" },
            dtype.name()
        );
        let grid = u32_of("GEMV grid", m.div_ceil(r))?;
        let matrices = 1 + u64::from(w_up.is_some());
        let weight_bytes = matrices * (m * row_bytes) as u64;
        Ok(Some(Launch::Gemv {
            name,
            grid,
            params,
            kind: LaunchKind::of_gemv(weight_bytes, n_cols),
            weight_bytes,
            dtype,
        }))
    }

    /// The quantizer of the `layout.n_cols` activation columns at `x` into
    /// the buffer at `q` (laid out as `layout`); `None` when empty.
    pub(crate) fn quantize(
        layout: &QactsLayout,
        x: u64,
        q: u64,
    ) -> Result<Option<Launch>, CudaError> {
        let blocks = layout.blocks();
        if blocks == 0 {
            return Ok(None);
        }
        let params = QuantParams {
            x,
            codes: q,
            scales: q + layout.scales as u64,
            sums: q + layout.sums as u64,
            k: u32_of("activation column", layout.k)?,
            n_blocks: u32_of("activation blocks", blocks)?,
            interleave: u32::from(layout.interleaved()),
            pad: 0,
        };
        let name = match layout.mode {
            ActQuant::Q8_K => "fused_quantize_q8_K",
            ActQuant::Q8_1 => "fused_quantize_q8_1",
            _ => "fused_quantize_q8_0",
        };
        let grid = u32_of(
            "quantizer grid",
            blocks.div_ceil((QUANT_BLOCK / 32) as usize),
        )?;
        Ok(Some(Launch::Quantize {
            name,
            grid,
            params,
            ahead: L2Ahead::default(),
        }))
    }

    /// `y = x·s` per column of `k` values (`(x·s)·g` with a weight at
    /// `g`), `n` columns, as `fused_core::norm` defines it; `None` when
    /// there are no columns. `y` may be `x`.
    pub(crate) fn rms_norm(
        k: usize,
        n: usize,
        eps: f32,
        x: u64,
        g: Option<u64>,
        y: u64,
    ) -> Result<Option<Launch>, CudaError> {
        if n == 0 {
            return Ok(None);
        }
        let params = NormParams {
            x,
            g: g.unwrap_or(0),
            y,
            k: u32_of("norm column", k)?,
            n_cols: u32_of("norm columns", n)?,
            eps,
            pad: 0,
        };
        let grid = u32_of("norm grid", n.div_ceil((QUANT_BLOCK / 32) as usize))?;
        Ok(Some(Launch::RmsNorm { grid, params }))
    }

    /// The activations `(x·s)·g` of the `layout.n_cols` columns at `x`
    /// (the norm prologue of a GEMV, weight at `g`) quantized into the
    /// buffer at `q` as `layout` in one launch, a block per 8 quantizer
    /// blocks of a column; `None` when empty.
    pub(crate) fn norm_quantize(
        layout: &QactsLayout,
        eps: f32,
        x: u64,
        g: u64,
        q: u64,
    ) -> Result<Option<Launch>, CudaError> {
        let Some(Launch::Quantize {
            grid: _, params, ..
        }) = Launch::quantize(layout, x, q)?
        else {
            return Ok(None);
        };
        let name = match layout.mode {
            ActQuant::Q8_K => "fused_norm_quantize_q8_K",
            ActQuant::Q8_1 => "fused_norm_quantize_q8_1",
            _ => "fused_norm_quantize_q8_0",
        };
        let n_cols = u32_of("norm columns", layout.n_cols)?;
        // kernels/gemv.cu, norm_quantize: a warp per quantizer block.
        let per_col = params.n_blocks / n_cols.max(1);
        let grid = n_cols
            .checked_mul(per_col.div_ceil(8))
            .ok_or(Error::Overflow {
                what: "norm quantizer blocks",
            })?;
        Ok(Some(Launch::NormQuantize {
            name,
            grid,
            params: NormQuantParams {
                q: params,
                g,
                eps,
                n_cols,
            },
            ahead: L2Ahead::default(),
        }))
    }

    /// The integer GEMV `y = epi(act(W·x) [⊙ (W_up·x)])` with weights at `w`
    /// (and `w_up`) in the integer layout (`layout::to_device_int`) and the
    /// activations quantized at `q` (laid out as `layout`, whose mode the
    /// caller has checked against the format), in the kernel `tuning`
    /// picks; `None` for nothing to do.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_q(
        tuning: &Tuning,
        dtype: DType,
        rows: usize,
        layout: &QactsLayout,
        w: u64,
        w_up: Option<u64>,
        act: Activation,
        q: u64,
        y: u64,
        epi: EpiParams,
    ) -> Result<Option<Launch>, CudaError> {
        let n_cols = layout.n_cols;
        if !gemv_has_work(rows, n_cols)? {
            return Ok(None);
        }
        let params = GemvQParams {
            w,
            w_up: w_up.unwrap_or(0),
            codes: q,
            scales: q + layout.scales as u64,
            sums: q + layout.sums as u64,
            y,
            rows: u32_of("weight rows", rows)?,
            k: u32_of("weight columns", layout.k)?,
            glu_act: act_code(act),
            deps: Deps::Wait,
            epi,
            qout: QuantOut::default(),
            ahead: L2Ahead::default(),
            kv: KvAppendParams::default(),
            argmax: ArgmaxTail::default(),
        };
        let glu = w_up.is_some();
        let shape = gemvq_shape(dtype, n_cols, rows, layout.k, glu, tuning);
        let name = gemvq_kernel_name(dtype, glu, shape, n_cols);
        let grid = u32_of("GEMV grid", rows.div_ceil(shape.rows))?;
        // The weights' bytes in GGML's layout (the integer layout's differ
        // by the scales' packing only).
        let matrices = 1 + u64::from(w_up.is_some());
        let row_bytes = dtype.row_bytes(layout.k).map_err(CudaError::from)?;
        let weight_bytes = matrices * (rows * row_bytes) as u64;
        Ok(Some(Launch::GemvQ {
            name,
            grid,
            params,
            kind: LaunchKind::of_gemv(weight_bytes, n_cols),
            weight_bytes,
            n_cols,
        }))
    }

    /// Makes this integer GEMV also write its output quantized as `layout`
    /// into the buffer at `q` (zeroed counters included, as every complete
    /// launch leaves them): one column, `layout.k` its rows, a multiple of
    /// the mode's block. The codes are those that [`Launch::quantize`] of
    /// the output would write (`quantize_output` in `kernels/gemv.cu`).
    /// Anything else is [`Unsupported`](fused_core::error::Unsupported).
    pub(crate) fn set_quant_out(&mut self, layout: &QactsLayout, q: u64) -> Result<(), CudaError> {
        let Launch::GemvQ { params, n_cols, .. } = self else {
            return Err(refused("a quantized GEMV output on other than an integer GEMV").into());
        };
        check_quant_out(params.rows as usize, *n_cols, true, layout)?;
        let Some(Launch::Quantize { params: qp, .. }) = Launch::quantize(layout, 0, q)? else {
            return Ok(()); // no rows: the GEMV launches nothing either
        };
        let mode = match layout.mode {
            ActQuant::Q8_0 => 1,
            ActQuant::Q8_1 => 2,
            _ => 3,
        };
        params.qout = QuantOut {
            q: qp,
            counters: q + layout.counters as u64,
            mode,
            pad: 0,
        };
        Ok(())
    }

    /// Makes this attention combine also write its output quantized as
    /// `layout` into the buffer at `q` (as the quantizer kernel does): one
    /// column over all the heads, of Q8_0 or Q8_1 (a warp per block; heads
    /// of a multiple of 32 values) or Q8_K (a combine block per quantizer
    /// block, taking the 256 / head size heads of one; heads of 32, 64, 128
    /// or 256 values, and those heads' splits at most `ATTN_MAX_SPLITS`).
    /// `false`, changing nothing, where it is not so (a split kernel among
    /// them).
    pub(crate) fn set_attention_quant_out(
        &mut self,
        layout: &QactsLayout,
        q: u64,
    ) -> Result<bool, CudaError> {
        let Some(qmode) = self.attention_quant_mode(layout) else {
            return Ok(false);
        };
        let Some(Launch::Quantize { params: qp, .. }) = Launch::quantize(layout, 0, q)? else {
            return Ok(false);
        };
        if let Launch::Attention { params, grid, .. } = self {
            params.qmode = qmode;
            params.qout = qp;
            if qmode == ATTN_QMODE_Q8_K {
                // Whole heads a quantizer block (attention_quant_mode).
                *grid = params.n_head * params.head_dim / 256;
            }
        }
        Ok(true)
    }

    /// The combine's `qmode` for writing its output quantized as `layout`
    /// ([`Launch::set_attention_quant_out`]), `None` where it cannot.
    pub(crate) fn attention_quant_mode(&self, layout: &QactsLayout) -> Option<u32> {
        let Launch::Attention { name, params, .. } = self else {
            return None;
        };
        let heads = params.n_head as usize * params.head_dim as usize;
        let whole = layout.n_cols == 1 && layout.k == heads && params.head_dim.is_multiple_of(32);
        match layout.mode {
            _ if name != ATTN_COMBINE || !whole || layout.blocks() == 0 => None,
            ActQuant::Q8_0 => Some(1),
            ActQuant::Q8_1 => Some(2),
            // A Q8_K block of whole heads (k a multiple of 256: the layout),
            // whose splits' weights fit the kernel's shared arrays.
            ActQuant::Q8_K
                if 256 % params.head_dim == 0
                    && (256 / params.head_dim) * params.splits <= ATTN_MAX_SPLITS as u32 =>
            {
                Some(ATTN_QMODE_Q8_K)
            }
            _ => None,
        }
    }

    /// Makes this integer GEMV also do the key/value append `kv`
    /// (`kv_tail` in `kernels/gemv.cu`), whose q, k and v parts are runs of
    /// its output rows, each from an even row, with RoPE pairs `(2i, 2i +
    /// 1)`: one column, plain (not gated), and blocks of an even number of
    /// rows (as the kernel `tuning` picks). `false`, changing nothing,
    /// where it is not so.
    pub(crate) fn set_kv_tail(
        &mut self,
        tuning: &Tuning,
        dtype: DType,
        kv: &KvAppendParams,
    ) -> bool {
        let Launch::GemvQ { params, n_cols, .. } = self else {
            return false;
        };
        let rows = params.rows as usize;
        let r = gemvq_shape(dtype, *n_cols, rows, params.k as usize, false, tuning).rows;
        let part = |at: u64, n: u64, even: bool| {
            let y = params.y;
            let i = at.wrapping_sub(y) / 4;
            at >= y
                && (at - y).is_multiple_of(4)
                && i + n <= rows as u64
                && (!even || i.is_multiple_of(2))
        };
        let fits = *n_cols == 1
            && params.w_up == 0
            && r.is_multiple_of(2)
            && kv.mode == 0
            && kv.k != 0
            && part(kv.k, 2 * u64::from(kv.k_pairs), true)
            && (kv.q == 0 || part(kv.q, 2 * u64::from(kv.q_pairs), true))
            && (kv.v == 0 || part(kv.v, u64::from(kv.v_n), false));
        if fits {
            params.kv = *kv;
        }
        fits
    }

    /// Makes this GEMV also write the index of its largest output as an
    /// f32 to `tail.out` (`argmax_tail` in `kernels/gemv.cu`), as the
    /// argmax launch would: one column, plain (not gated), at most
    /// [`MAX_ARGMAX_LEN`] rows. `false`, changing nothing, where it is not
    /// so.
    pub(crate) fn set_argmax_tail(&mut self, tail: ArgmaxTail) -> bool {
        let (one_col, rows, w_up, slot) = match self {
            // The float kernels' names end in their column count.
            Launch::Gemv { params, name, .. } => (
                name.ends_with("_c1"),
                params.rows,
                params.w_up,
                &mut params.argmax,
            ),
            Launch::GemvQ { params, n_cols, .. } => {
                (*n_cols == 1, params.rows, params.w_up, &mut params.argmax)
            }
            _ => return false,
        };
        let fits = one_col && w_up == 0 && rows as usize <= MAX_ARGMAX_LEN && tail.out != 0;
        if fits {
            *slot = tail;
        }
        fits
    }

    /// The FWHT of `rows` rows of `desc.n()` at `x` (signs at `signs`) into
    /// `out`; `None` for no rows. The caller has run `desc.check`.
    pub(crate) fn fwht(
        desc: &FwhtDesc,
        rows: usize,
        x: u64,
        signs: Option<u64>,
        out: u64,
    ) -> Result<Option<Launch>, CudaError> {
        if rows == 0 {
            return Ok(None);
        }
        let n = desc.n();
        let params = FwhtParams {
            x,
            signs: signs.unwrap_or(0),
            out,
            rows: u32_of("FWHT rows", rows)?,
            n: n as u32,
            sign_blocks: desc.sign_blocks().unwrap_or(1) as u32,
            scale: desc.scale(),
        };
        let (name, grid, block, shared) = if n <= FWHT_WARP_MAX_N {
            let e = (n / 32).max(1);
            let rows_per_warp = 32 / (n / e);
            let warps = rows.div_ceil(rows_per_warp);
            let grid = warps.div_ceil((FWHT_WARP_BLOCK / 32) as usize);
            (format!("fused_fwht_warp_e{e}"), grid, FWHT_WARP_BLOCK, 0)
        } else {
            let e = n / FWHT_BLOCK_THREADS as usize;
            (
                format!("fused_fwht_block_e{e}"),
                rows,
                FWHT_BLOCK_THREADS,
                n * 4,
            )
        };
        Ok(Some(Launch::Fwht {
            name,
            grid: u32_of("FWHT grid", grid)?,
            block,
            shared: u32_of("FWHT shared memory", shared)?,
            params,
        }))
    }

    /// What this launch is for [`crate::schedule::overlap_deps`].
    pub(crate) fn kind(&self) -> LaunchKind {
        match self {
            Launch::Gemv { kind, .. } | Launch::GemvQ { kind, .. } | Launch::Group { kind, .. } => {
                *kind
            }
            Launch::Copy { .. } => LaunchKind::Copy,
            _ => LaunchKind::Kernel,
        }
    }

    /// Makes this GEMV ask L2 for `ahead` (the next GEMV's first weights;
    /// `kernels/common.cuh`: l2_ahead). Other launches ignore it.
    pub(crate) fn set_l2_ahead(&mut self, ahead: L2Ahead) {
        match self {
            Launch::Gemv { params, .. } => params.ahead = ahead,
            Launch::GemvQ { params, .. } => params.ahead = ahead,
            Launch::Quantize { ahead: a, .. }
            | Launch::NormQuantize { ahead: a, .. }
            | Launch::Attention { ahead: a, .. } => *a = ahead,
            _ => {}
        }
    }

    /// Orders this launch against the kernel before it on the stream as
    /// `deps` (GEMV launches; the other kernels always wait first).
    pub(crate) fn set_deps(&mut self, deps: Deps) {
        match self {
            Launch::Gemv { params, .. } => params.deps = deps,
            Launch::GemvQ { params, .. } => params.deps = deps,
            Launch::Group { jobs, .. } => jobs.set_deps(deps),
            _ => {}
        }
    }

    /// The grid of a kernel launch (0 for a copy; an element-wise kernel's
    /// is derived at launch).
    pub(crate) fn grid(&self) -> u32 {
        match self {
            Launch::Gemv { grid, .. }
            | Launch::GemvQ { grid, .. }
            | Launch::Group { grid, .. }
            | Launch::Fwht { grid, .. }
            | Launch::Quantize { grid, .. }
            | Launch::RmsNorm { grid, .. }
            | Launch::NormQuantize { grid, .. }
            | Launch::Rope { grid, .. }
            | Launch::SetRow { grid, .. }
            | Launch::KvAppend { grid, .. }
            | Launch::Attention { grid, .. }
            | Launch::ArgMax { grid, .. } => *grid,
            Launch::Ew { n, .. } => n.div_ceil(EW_BLOCK),
            Launch::Copy { .. } => 0,
        }
    }

    /// The kernel a launch runs as planned (the tuning may run a copy of
    /// it under another symbol), or `copy` for a device-to-device copy.
    pub(crate) fn kernel(&self) -> &str {
        match self {
            Launch::Gemv { name, .. }
            | Launch::GemvQ { name, .. }
            | Launch::Group { name, .. }
            | Launch::Fwht { name, .. }
            | Launch::Attention { name, .. } => name,
            Launch::Quantize { name, .. } | Launch::NormQuantize { name, .. } => name,
            Launch::RmsNorm { .. } => "fused_rms_norm",
            Launch::Ew { kernel, .. } => kernel.name(),
            Launch::Rope { .. } => "fused_rope",
            Launch::SetRow { .. } => "fused_set_row",
            Launch::KvAppend { .. } => "fused_kv_append",
            Launch::ArgMax { .. } => "fused_argmax",
            Launch::Copy { .. } => "copy",
        }
    }

    /// The weight bytes a GEMV launch streams (0 for other launches).
    pub(crate) fn weight_bytes(&self) -> u64 {
        match self {
            Launch::Gemv { weight_bytes, .. }
            | Launch::GemvQ { weight_bytes, .. }
            | Launch::Group { weight_bytes, .. } => *weight_bytes,
            _ => 0,
        }
    }

    /// Whether this launch is a GEMV (or a group of them).
    fn is_gemv(&self) -> bool {
        matches!(
            self,
            Launch::Gemv { .. } | Launch::GemvQ { .. } | Launch::Group { .. }
        )
    }

    /// The address and length of the weights that this GEMV reads first
    /// (the gate's, for the gated form: one matrix of
    /// [`Launch::weight_bytes`]); `None` for other launches and for group
    /// launches (their first job's length is not kept).
    fn first_weights(&self) -> Option<(u64, u64)> {
        let (w, gated, bytes) = match self {
            Launch::Gemv {
                params,
                weight_bytes,
                ..
            } => (params.w, params.w_up != 0, *weight_bytes),
            Launch::GemvQ {
                params,
                weight_bytes,
                ..
            } => (params.w, params.w_up != 0, *weight_bytes),
            _ => return None,
        };
        Some((w, bytes / (1 + u64::from(gated))))
    }

    /// The parameters of a float-activation GEMV launch.
    pub(crate) fn gemv_params(&self) -> Option<GemvParams> {
        match self {
            Launch::Gemv { params, .. } => Some(*params),
            _ => None,
        }
    }

    /// The parameters of an integer GEMV launch.
    pub(crate) fn gemvq_params(&self) -> Option<GemvQParams> {
        match self {
            Launch::GemvQ { params, .. } => Some(*params),
            _ => None,
        }
    }

    /// A device-to-device copy of `bytes` bytes inside a run of kernels:
    /// the crate's 16-byte copy kernel where both addresses and the size
    /// are multiples of 16 (a kernel takes part in programmatic dependent
    /// launch, a copy-engine transfer does not), else (also past the
    /// kernel's 2^31 elements) `cuMemcpyDtoDAsync`.
    pub(crate) fn device_copy(src: u64, dst: u64, bytes: usize) -> Launch {
        let aligned = src.is_multiple_of(16) && dst.is_multiple_of(16) && bytes.is_multiple_of(16);
        let kernel = EwKernel::Copy4 { a: src, out: dst };
        match Launch::ew(kernel, bytes / 16) {
            Ok(Some(l)) if aligned => l,
            _ => Launch::Copy { src, dst, bytes },
        }
    }

    /// An element-wise kernel over `n` elements; `None` when `n` is 0.
    pub(crate) fn ew(kernel: EwKernel, n: usize) -> Result<Option<Launch>, CudaError> {
        let n = ew_len(n)?;
        Ok((n > 0).then_some(Launch::Ew { kernel, n }))
    }
}

/// Makes every integer GEMV of `launches` ask L2, as its blocks start,
/// for the first `bytes` (at most the matrix, rounded down to 16) of the
/// weights of the next GEMV among `launches` (the tuning's L2 look-ahead bytes):
/// those bytes then stream in while the GEMV's tail, the launches between
/// them and the next GEMV's start go by. Float GEMVs do not ask (on the
/// H200 they ran no faster so), nor, at a reach of 1, does a GEMV whose
/// next GEMV is a group launch or that has none. Each quantizer, norm quantizer and attention
/// kernel between two GEMVs then asks for the next `between` bytes of the
/// same weights (0: none), in launch order, so that the memory streams
/// weights while these short kernels run. Where the next GEMV's weights
/// are all asked for, a launch goes on with the GEMV after it if that is
/// within `reach` GEMVs (`fused_core::look_ahead`; 1: the next only).
pub(crate) fn chain_l2_ahead(
    launches: &mut [Launch],
    bytes: usize,
    between: usize,
    reach: usize,
) -> Result<(), CudaError> {
    // A gated GEMV's window is its gate's: the kernel takes one window.
    let firsts: Vec<Option<(u64, u64)>> = launches.iter().map(Launch::first_weights).collect();
    let parts: Vec<Option<[u64; 1]>> = firsts.iter().map(|f| f.map(|(_, len)| [len])).collect();
    let commands: Vec<AheadCommand<'_>> = launches
        .iter()
        .zip(&parts)
        .map(|(l, part)| {
            let ask = match l {
                Launch::GemvQ { .. } => bytes,
                Launch::Quantize { .. }
                | Launch::NormQuantize { .. }
                | Launch::Attention { .. } => between,
                _ => 0,
            } as u64;
            if l.is_gemv() {
                let parts = part.as_ref().map_or(&[][..], |p| &p[..]);
                AheadCommand::Gemv { parts, ask }
            } else {
                AheadCommand::Between { ask }
            }
        })
        .collect();
    let windows = look_ahead_windows(&commands, reach, 16);
    for (l, ws) in launches.iter_mut().zip(windows) {
        for w in ws {
            if let Some((addr, _)) = firsts[w.gemv] {
                l.set_l2_ahead(L2Ahead::new(
                    addr + w.offset,
                    w.len as usize,
                    L2Ahead::START,
                )?);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::Tuning;

    /// The tuned table.
    const T: Tuning = Tuning::DEFAULT;
    use crate::tuning::OVERLAP_MAX_WEIGHT_BYTES;
    use fused_core::epilogue::Epilogue;

    fn shape(dtype: DType, rows: usize, n_cols: usize) -> GemvShape {
        GemvShape {
            dtype,
            rows,
            cols: 1024,
            row_bytes: dtype.row_bytes(1024).unwrap(),
            n_cols,
        }
    }

    fn epi() -> EpiParams {
        EpiParams::new(&Epilogue::NONE, |_| 0)
    }

    /// A one-column integer GEMV of `rows` × 1024 `dtype` weights at `w`
    /// (gated with the up weights at `up`) on GGML's activations.
    fn int_gemv(dtype: DType, rows: usize, w: u64, up: Option<u64>) -> Launch {
        let layout = QactsLayout::new(ActQuant::ggml(dtype), 1024, 1).unwrap();
        let id = Activation::Identity;
        Launch::gemv_q(&T, dtype, rows, &layout, w, up, id, 0x9000, 0xa000, epi())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn integer_gemvs_ask_l2_for_the_next_gemvs_first_weights() {
        let id = Activation::Identity;
        let q = int_gemv;
        let f16 = Launch::gemv(
            &T,
            shape(DType::F16, 16, 1),
            0x4000,
            None,
            id,
            0xb000,
            0xc000,
            epi(),
        )
        .unwrap()
        .unwrap();
        let add = EwKernel::Add {
            a: 0xd000,
            b: 0xe000,
            out: 0xf000,
        };
        let q8_row = DType::Q8_0.row_bytes(1024).unwrap() as u64;
        let ahead = |l: &Launch| match l {
            Launch::GemvQ { params, .. } => Some(params.ahead),
            Launch::Gemv { params, .. } => Some(params.ahead),
            _ => None,
        };
        for (bytes, want_b) in [(1000usize, 992u64), (1 << 30, 32 * q8_row)] {
            let mut ls = vec![
                q(DType::Q4_0, 64, 0x1000, None),
                Launch::ew(add, 100).unwrap().unwrap(),
                // Gated: the gate's matrix (32 rows) is what it reads first.
                q(DType::Q8_0, 32, 0x2000, Some(0x3000)),
                f16.clone(),
                q(DType::Q4_0, 64, 0x5000, None),
            ];
            chain_l2_ahead(&mut ls, bytes, 0, 1).unwrap();
            let a = |addr, bytes| {
                Some(L2Ahead {
                    addr,
                    bytes,
                    at: L2Ahead::START,
                })
            };
            assert_eq!(ahead(&ls[0]), a(0x2000, want_b as u32), "{bytes}");
            assert_eq!(ahead(&ls[1]), None);
            let f16_bytes = 16 * DType::F16.row_bytes(1024).unwrap() as u64;
            assert_eq!(
                ahead(&ls[2]),
                a(0x4000, (bytes as u64).min(f16_bytes) as u32 / 16 * 16)
            );
            // A float GEMV does not ask; the last GEMV has none to ask for.
            assert_eq!(ahead(&ls[3]), Some(L2Ahead::default()));
            assert_eq!(ahead(&ls[4]), Some(L2Ahead::default()));
        }
        let mut ls = vec![
            q(DType::Q4_0, 64, 0x1000, None),
            q(DType::Q4_0, 64, 0x5000, None),
        ];
        chain_l2_ahead(&mut ls, 0, 0, 1).unwrap();
        assert_eq!(ahead(&ls[0]), Some(L2Ahead::default()), "0 bytes: off");
    }

    #[test]
    fn the_kernels_between_two_gemvs_ask_for_the_next_weights_in_turn() {
        let row = DType::Q4_0.row_bytes(1024).unwrap() as u64;
        let layout = QactsLayout::new(ActQuant::Q8_0, 1024, 1).unwrap();
        let q = |w| int_gemv(DType::Q4_0, 64, w, None);
        let quantize = || Launch::quantize(&layout, 0xb000, 0xc000).unwrap().unwrap();
        let asked = |l: &Launch| match l {
            Launch::GemvQ { params, .. } => params.ahead,
            Launch::Quantize { ahead, .. } => *ahead,
            _ => unreachable!(),
        };
        let at = |addr, bytes| L2Ahead {
            addr,
            bytes,
            at: L2Ahead::START,
        };
        // 64 rows of the next GEMV: 1024 bytes asked by the GEMV, then
        // 2048 by each kernel between, the last one what is left.
        let mut ls = vec![
            q(0x1000),
            quantize(),
            quantize(),
            quantize(),
            quantize(),
            q(0x100000),
        ];
        chain_l2_ahead(&mut ls, 1024, 2048, 1).unwrap();
        let len = 64 * row;
        assert_eq!(asked(&ls[0]), at(0x100000, 1024));
        assert_eq!(asked(&ls[1]), at(0x100000 + 1024, 2048));
        assert_eq!(
            asked(&ls[2]),
            at(0x100000 + 3072, (len - 3072).min(2048) as u32 / 16 * 16)
        );
        let rest = len.saturating_sub(5120) / 16 * 16;
        assert_eq!(asked(&ls[3]).bytes as u64, rest.min(2048));
        assert_eq!(
            asked(&ls[5]),
            L2Ahead::default(),
            "the last GEMV has none next"
        );
        // Nothing between asked for: the kernels ask for nothing.
        let mut ls = vec![q(0x1000), quantize(), q(0x100000)];
        chain_l2_ahead(&mut ls, 1024, 0, 1).unwrap();
        assert_eq!(asked(&ls[1]), L2Ahead::default());
        // The next GEMV's weights all asked for: a reach of 2 goes on into
        // the GEMV after it; a reach of 1 asks for nothing more.
        let fresh = || vec![q(0x1000), quantize(), quantize(), q(0x100000), q(0x200000)];
        let mut one = fresh();
        chain_l2_ahead(&mut one, 1024, 1 << 20, 1).unwrap();
        assert_eq!(asked(&one[1]), at(0x100000 + 1024, (len - 1024) as u32));
        assert_eq!(asked(&one[2]), L2Ahead::default());
        let mut two = fresh();
        chain_l2_ahead(&mut two, 1024, 1 << 20, 2).unwrap();
        assert_eq!(asked(&two[1]), asked(&one[1]));
        assert_eq!(asked(&two[2]), at(0x200000, len as u32));
        assert_eq!(
            asked(&two[3]),
            L2Ahead::default(),
            "the GEMV after asked for whole"
        );
    }

    #[test]
    fn gemv_launches_overlap_by_the_weights_they_stream_and_their_columns() {
        let id = Activation::Identity;
        // Q8_0 rows of K = 1024 are 1088 bytes: the most rows within the
        // bound, one more, and half as many gated (two matrices).
        let row = DType::Q8_0.row_bytes(1024).unwrap() as u64;
        let most = (OVERLAP_MAX_WEIGHT_BYTES / row) as usize;
        let layout = |n_cols| QactsLayout::new(ActQuant::Q8_0, 1024, n_cols).unwrap();
        for (rows, glu, n_cols, want) in [
            (most, false, 1, LaunchKind::Gemv),
            (most + 1, false, 1, LaunchKind::Kernel),
            (most / 2, true, 1, LaunchKind::Gemv),
            (most / 2 + 1, true, 1, LaunchKind::Kernel),
            (16, false, 2, LaunchKind::Kernel),
        ] {
            let up = glu.then_some(5);
            let what = format!("{rows} rows, gated {glu}, {n_cols} columns");
            let f = Launch::gemv(&T, shape(DType::Q8_0, rows, n_cols), 1, up, id, 2, 3, epi());
            assert_eq!(f.unwrap().unwrap().kind(), want, "{what}");
            let q = Launch::gemv_q(
                &T,
                DType::Q8_0,
                rows,
                &layout(n_cols),
                1,
                up,
                id,
                2,
                3,
                epi(),
            );
            assert_eq!(q.unwrap().unwrap().kind(), want, "{what}, integer");
        }
        let copy = Launch::Copy {
            src: 1,
            dst: 2,
            bytes: 4,
        };
        assert_eq!(copy.kind(), LaunchKind::Copy);
        let ew = Launch::ew(EwKernel::Add { a: 1, b: 2, out: 3 }, 8)
            .unwrap()
            .unwrap();
        assert_eq!(ew.kind(), LaunchKind::Kernel);
    }

    #[test]
    fn device_copies_run_as_the_copy_kernel_where_16_byte_aligned() {
        let kernel = Launch::device_copy(256, 512, 4096);
        assert!(
            matches!(
                kernel,
                Launch::Ew {
                    kernel: EwKernel::Copy4 { a: 256, out: 512 },
                    n: 256
                }
            ),
            "{kernel:?}"
        );
        for (src, dst, bytes) in [
            (260, 512, 4096),
            (256, 520, 4096),
            (256, 512, 4100),
            (256, 512, 8),
            (0, 16, 16 << 31),
        ] {
            let l = Launch::device_copy(src, dst, bytes);
            assert!(
                matches!(l, Launch::Copy { src: s, dst: d, bytes: b } if (s, d, b) == (src, dst, bytes)),
                "{src} {dst} {bytes}: {l:?}"
            );
        }
    }

    #[test]
    fn gemv_launches_name_the_kernel_and_cover_every_row() {
        let id = Activation::Identity;
        let l = Launch::gemv(&T, shape(DType::Q4_0, 257, 1), 1, None, id, 2, 3, epi()).unwrap();
        let Some(Launch::Gemv {
            name, grid, params, ..
        }) = l
        else {
            panic!("{l:?}")
        };
        assert_eq!(name, "fused_gemv_q4_0_c1");
        assert_eq!(grid, 129, "2 rows per block");
        assert_eq!((params.w, params.w_up, params.x, params.y), (1, 0, 2, 3));
        let l = Launch::gemv(&T, shape(DType::F16, 10, 3), 1, Some(5), id, 2, 3, epi()).unwrap();
        let Some(Launch::Gemv {
            name, grid, params, ..
        }) = l
        else {
            panic!("{l:?}")
        };
        assert_eq!(name, "fused_gemv_glu_f16_c3");
        assert_eq!((grid, params.w_up), (10, 5));
    }

    #[test]
    fn one_column_f16_launches_name_the_chosen_kernel_and_cover_every_row() {
        let id = Activation::Identity;
        for (k, glu) in [(4096, false), (8192, true), (14336, true)] {
            let sh = GemvShape {
                dtype: DType::F16,
                rows: 7,
                cols: k,
                row_bytes: 2 * k,
                n_cols: 1,
            };
            let l = Launch::gemv(&T, sh, 1, glu.then_some(5), id, 2, 3, epi()).unwrap();
            let Some(Launch::Gemv { name, grid, .. }) = l else {
                panic!("{l:?}")
            };
            let (r, tag) =
                f16_shape(k, 1, &T).map_or((1, String::new()), |(r, t)| (r, format!("_{t}")));
            let glu = if glu { "glu_" } else { "" };
            assert_eq!(name, format!("fused_gemv_{glu}f16{tag}_c1"), "K = {k}");
            assert_eq!(grid as usize, 7usize.div_ceil(r), "K = {k}");
        }
        // BF16 shares the code but keeps the default shape (not measured).
        let sh = GemvShape {
            dtype: DType::BF16,
            rows: 7,
            cols: 14336,
            row_bytes: 2 * 14336,
            n_cols: 1,
        };
        let l = Launch::gemv(&T, sh, 1, None, id, 2, 3, epi()).unwrap();
        assert!(matches!(l, Some(Launch::Gemv { ref name, .. }) if name == "fused_gemv_bf16_c1"));
    }

    #[test]
    fn a_norm_quantizer_launches_a_block_per_8_quantizer_blocks_of_a_column() {
        let grid = |mode, k, n_cols| {
            let l = QactsLayout::new(mode, k, n_cols).unwrap();
            match Launch::norm_quantize(&l, 1e-5, 7, 8, 4096) {
                Ok(Some(Launch::NormQuantize { grid, params, .. })) => {
                    assert_eq!(params.n_cols as usize, n_cols);
                    grid
                }
                other => panic!("{other:?}"),
            }
        };
        // 128 blocks of 32 in a column of 4096: 16 blocks of 8 warps.
        assert_eq!(grid(ActQuant::Q8_0, 4096, 1), 16);
        // 3 blocks of 32 a column: one block each.
        assert_eq!(grid(ActQuant::Q8_1, 96, 2), 2);
        // 2 blocks of 256 a column, 3 columns.
        assert_eq!(grid(ActQuant::Q8_K, 512, 3), 3);
        // 18 blocks of 256 (4608 values): 3 blocks.
        assert_eq!(grid(ActQuant::Q8_K, 4608, 1), 3);
    }

    #[test]
    fn integer_gemv_and_quantizer_launches_point_into_the_activation_buffer() {
        let id = Activation::Identity;
        let l = QactsLayout::new(ActQuant::Q8_K, 512, 3).unwrap();
        let Ok(Some(Launch::Quantize {
            name, grid, params, ..
        })) = Launch::quantize(&l, 7, 4096)
        else {
            panic!()
        };
        // 6 blocks of 256, one warp each, 8 warps per block; scales after
        // the 1536 codes, sums after the 6 scales (padded to 16 bytes).
        assert_eq!((name, grid, params.n_blocks), ("fused_quantize_q8_K", 1, 6));
        assert_eq!((params.scales, params.sums), (4096 + 1536, 4096 + 1568));
        let Ok(Some(Launch::GemvQ {
            name, grid, params, ..
        })) = Launch::gemv_q(&T, DType::Q4_K, 9, &l, 1, Some(2), id, 4096, 3, epi())
        else {
            panic!()
        };
        assert_eq!((name.as_str(), grid), ("fused_gemvq_glu_q4_K_r2_c3", 5));
        assert_eq!(
            (params.codes, params.sums, params.k),
            (4096, 4096 + 1568, 512)
        );
        assert!(matches!(
            Launch::gemv_q(&T, DType::Q4_K, 0, &l, 1, None, id, 4096, 3, epi()),
            Ok(None)
        ));
    }

    #[test]
    fn the_key_value_tail_rides_only_where_a_block_holds_every_pair() {
        let id = Activation::Identity;
        // q (8 rows), k (4), v (4) stacked from row 0 of y at 1 << 20.
        let y = 1u64 << 20;
        let kv = KvAppendParams {
            q: y,
            q_out: 7,
            k: y + 4 * 8,
            k_cache: 8,
            v: y + 4 * 12,
            v_cache: 9,
            q_pairs: 4,
            k_pairs: 2,
            v_n: 4,
            head_dim: 4,
            ..KvAppendParams::default()
        };
        let gemv = |dtype, rows, cols, up| {
            let l = QactsLayout::new(ActQuant::Q8_0, 256, cols).unwrap();
            Launch::gemv_q(&T, dtype, rows, &l, 1, up, id, 2, y, epi())
                .unwrap()
                .unwrap()
        };
        let mut l = gemv(DType::Q4_0, 16, 1, None);
        assert!(l.set_kv_tail(&T, DType::Q4_0, &kv));
        assert_eq!(l.gemvq_params().map(|p| p.kv.k), Some(kv.k));
        // k from an odd row, NeoX pairs, parts past the rows, two columns,
        // a gated GEMV, float activations: refused, nothing set.
        let refused = [
            KvAppendParams { k: y + 4 * 9, ..kv },
            KvAppendParams { mode: 1, ..kv },
            KvAppendParams { v_n: 5, ..kv },
        ];
        for bad in refused {
            let mut l = gemv(DType::Q4_0, 16, 1, None);
            assert!(!l.set_kv_tail(&T, DType::Q4_0, &bad), "{bad:?}");
            assert_eq!(l.gemvq_params().map(|p| p.kv.k), Some(0));
        }
        assert!(!gemv(DType::Q8_0, 16, 2, None).set_kv_tail(&T, DType::Q8_0, &kv));
        assert!(!gemv(DType::Q8_0, 16, 1, Some(3)).set_kv_tail(&T, DType::Q8_0, &kv));
        let f = Launch::gemv(&T, shape(DType::F16, 16, 1), 1, None, id, 2, y, epi());
        assert!(!f.unwrap().unwrap().set_kv_tail(&T, DType::F16, &kv));
    }

    #[test]
    fn empty_launches_are_none_and_bad_ones_typed_errors() {
        let id = Activation::Identity;
        assert!(matches!(
            Launch::gemv(&T, shape(DType::Q8_0, 0, 1), 1, None, id, 2, 3, epi()),
            Ok(None)
        ));
        assert!(matches!(
            Launch::gemv(&T, shape(DType::Q8_0, 4, 9), 1, None, id, 2, 3, epi()),
            Err(CudaError::Core(Error::LengthMismatch { .. }))
        ));
        let k = EwKernel::Copy4 { a: 1, out: 2 };
        assert!(matches!(Launch::ew(k, 0), Ok(None)));
        assert!(matches!(
            Launch::ew(k, 1 << 31),
            Err(CudaError::Core(Error::Overflow { .. }))
        ));
        let d = FwhtDesc::new(64).unwrap();
        assert!(matches!(Launch::fwht(&d, 0, 1, None, 2), Ok(None)));
    }

    #[test]
    fn fwht_launches_pick_the_warp_or_block_kernel() {
        let d = FwhtDesc::new(64).unwrap();
        let Ok(Some(Launch::Fwht {
            name, grid, shared, ..
        })) = Launch::fwht(&d, 100, 1, None, 2)
        else {
            panic!()
        };
        // 64 = 32 lanes × 2: a warp per row, 8 warps per block.
        assert_eq!((name.as_str(), grid, shared), ("fused_fwht_warp_e2", 13, 0));
        let d = FwhtDesc::new(4096).unwrap();
        let Ok(Some(Launch::Fwht {
            name,
            grid,
            block,
            shared,
            ..
        })) = Launch::fwht(&d, 3, 1, None, 2)
        else {
            panic!()
        };
        assert_eq!(
            (name.as_str(), grid, block, shared),
            ("fused_fwht_block_e4", 3, 1024, 4096 * 4)
        );
    }
}
