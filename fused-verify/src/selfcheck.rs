//! The core's self-check (a section of the `test` mode): reference GEMV vs f64, FWHT round trip, and a
//! decode layer's fused plan vs its unfused graph.

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::fwht::{FwhtDesc, fwht};
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::planner::plan;
use fused_core::quant::quantize_row;
use fused_core::reference::eval::{GemvMode, Memory, eval_graph, eval_plan};
use fused_core::reference::gemv::{ActQuant, WeightMatrix, gemm, gemm_f64};
use fused_core::tensor::TensorDesc;

use crate::cases::Rng;
use crate::metrics::nmse;
use crate::verify::Check;

/// What the self-check found: one check per line.
#[derive(Debug, Default)]
pub struct Report {
    /// The checks, in order.
    pub checks: Vec<Check>,
}

impl Report {
    fn record(&mut self, ok: bool, line: String) {
        self.checks.push(Check {
            name: "selfcheck",
            ok,
            detail: line,
        });
    }
}

/// Runs every check.
pub fn run() -> Report {
    let mut r = Report::default();
    gemv_checks(&mut r);
    fwht_checks(&mut r);
    for dtype in [DType::Q4_0, DType::Q8_0, DType::F16, DType::Q4_K] {
        for mode in [GemvMode::F32, GemvMode::Ggml] {
            match decode_layer(dtype, mode) {
                Ok((fused, total, same)) => r.record(
                    same,
                    format!(
                        "decode layer {dtype:<6} {mode:?}: {fused} fused steps, {total} kernel steps, fused == unfused bit for bit: {same}"
                    ),
                ),
                Err(e) => r.record(false, format!("decode layer {dtype}: {e}")),
            }
        }
    }
    r
}

/// Reference GEMV (f32, and with GGML's activation quantization) against
/// the f64 reference, for every weight format.
fn gemv_checks(r: &mut Report) {
    let (m, k) = (16, 512);
    let mut rng = Rng::new(0x5eed);
    for dtype in DType::ALL.into_iter().filter(|d| d.is_weight_format()) {
        let rb = dtype.row_bytes(k).expect("512 is a whole number of blocks");
        let mut w = vec![0u8; rb * m];
        for row in w.chunks_exact_mut(rb) {
            quantize_row(dtype, &rng.vec(k), row).expect("valid row");
        }
        let x = rng.vec(k);
        let wm = WeightMatrix::new(dtype, m, k, &w).expect("sized above");
        let e = Epilogue::NONE.bind(&[], m, 1).expect("no operands");
        let mut truth = vec![0.0f64; m];
        let mut y = vec![0.0f32; m];
        let res = gemm_f64(&wm, &x, 1, &e, &mut truth).and_then(|_| {
            let mut out = Vec::new();
            let mut modes = vec![ActQuant::F32];
            if ActQuant::ggml(dtype) != ActQuant::F32 {
                modes.push(ActQuant::ggml(dtype));
            }
            for mode in modes {
                gemm(&wm, &x, 1, mode, &e, &mut y)?;
                out.push((mode, nmse(&y, &truth)));
            }
            Ok(out)
        });
        match res {
            Ok(v) => {
                for (mode, err) in v {
                    // f32 accumulation of exact products: ~1e-12; quantized
                    // activations: GGML's mul_mat budget.
                    let tol = if mode == ActQuant::F32 { 1e-10 } else { 5e-4 };
                    r.record(
                        err <= tol,
                        format!(
                            "gemv {dtype:<6} {mode:?}: NMSE vs f64 {err:.2e} (tolerance {tol:.0e})"
                        ),
                    );
                }
            }
            Err(e) => r.record(false, format!("gemv {dtype}: {e}")),
        }
    }
}

/// The signed FWHT followed by the unsigned one and the signs again returns
/// the input, for every N = 2^k.
fn fwht_checks(r: &mut Report) {
    let mut rng = Rng::new(0xf00d);
    let mut worst = 0.0f32;
    let mut ok = true;
    for log_n in 1..=15 {
        let n = 1usize << log_n;
        let x = rng.vec(2 * n);
        let signs: Vec<f32> = (0..n)
            .map(|i| if (i * 7 + 3) % 5 < 2 { -1.0 } else { 1.0 })
            .collect();
        let (mut y, mut z) = (vec![0.0; 2 * n], vec![0.0; 2 * n]);
        let res = FwhtDesc::new(n).and_then(|d| {
            fwht(&d.with_signs(n)?, &x, Some(&signs), &mut y)?;
            fwht(&d, &y, None, &mut z)
        });
        if let Err(e) = res {
            r.record(false, format!("fwht N={n}: {e}"));
            return;
        }
        for (i, (zi, xi)) in z.iter().zip(&x).enumerate() {
            let back = zi * signs[i % n];
            let err = (back - xi).abs();
            worst = worst.max(err);
            // A few ulps of the largest value per butterfly stage.
            ok &= err <= 4.0 * f32::EPSILON * log_n as f32;
        }
    }
    r.record(
        ok,
        format!("fwht N=2..32768: H(H(s*x))*s == x, max abs error {worst:.2e}"),
    );
}

/// A decode layer (o-proj + residual, gate/up GLU, down + residual, and a
/// signed-FWHT-rotated projection): (fused steps, kernel steps, bit-identical).
fn decode_layer(dtype: DType, mode: GemvMode) -> Result<(usize, usize, bool), fused_core::Error> {
    let (h, f, n) = (256, 512, 256);
    let mut rng = Rng::new(0xdec0de);
    let mut g = Graph::new();
    let mut next = 0usize;
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let mut place = |bytes: usize| {
        let p = Place::at(0, next);
        next += bytes.div_ceil(64) * 64;
        p
    };
    let mut input =
        |g: &mut Graph, dtype: DType, ne: [usize; 4], place: &mut dyn FnMut(usize) -> Place| {
            let rb = dtype.row_bytes(ne[0])?;
            let p = place(rb * ne[1]);
            let t = TensorDesc::contiguous(dtype, ne, p.buffer, p.offset)?;
            let mut bytes = vec![0u8; rb * ne[1]];
            for row in bytes.chunks_exact_mut(rb) {
                quantize_row(dtype, &rng.vec(ne[0]), row)?;
            }
            inits.push((t, bytes));
            g.input(t)
        };
    let f32v = |ne: usize| 4 * ne;
    let h0 = input(&mut g, DType::F32, [h, 1, 1, 1], &mut place)?;
    let attn = input(&mut g, DType::F32, [h, 1, 1, 1], &mut place)?;
    let w_o = input(&mut g, dtype, [h, h, 1, 1], &mut place)?;
    let w_g = input(&mut g, dtype, [h, f, 1, 1], &mut place)?;
    let w_u = input(&mut g, dtype, [h, f, 1, 1], &mut place)?;
    let w_d = input(&mut g, dtype, [f, h, 1, 1], &mut place)?;
    let w_r = input(&mut g, dtype, [h, h, 1, 1], &mut place)?;
    let had = input(&mut g, DType::F32, [n, n, 1, 1], &mut place)?;
    let signs = input(&mut g, DType::F32, [h, 1, 1, 1], &mut place)?;
    let o = g.mul_mat(w_o, attn, place(f32v(h)))?;
    let h1 = g.add(o, h0, place(f32v(h)))?;
    let norm = g.other("rms_norm", &[h1], [h, 1, 1, 1], place(f32v(h)))?;
    let gate = g.mul_mat(w_g, norm, place(f32v(f)))?;
    let up = g.mul_mat(w_u, norm, place(f32v(f)))?;
    let act = g.glu(Activation::Silu, gate, up, place(f32v(f)))?;
    let down = g.mul_mat(w_d, act, place(f32v(h)))?;
    let h2 = g.add(down, h1, place(f32v(h)))?;
    let norm2 = g.other("rms_norm", &[h2], [h, 1, 1, 1], place(f32v(h)))?;
    let signed = g.mul(norm2, signs, place(f32v(h)))?;
    let rot = g.mul_mat_hadamard(had, signed, place(f32v(h)))?;
    let proj = g.mul_mat(w_r, rot, place(f32v(h)))?;
    let out = g.add(proj, h2, place(f32v(h)))?;
    g.mark_output(out)?;
    let outs: [NodeId; 1] = [out];

    let p = plan(&g);
    let mut mem = Memory::new(&[next + 64]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes)?;
    }
    let mut fused = mem.clone();
    eval_graph(&g, &mut mem, mode)?;
    eval_plan(&g, &p, &mut fused, mode)?;
    let mut same = true;
    for id in outs {
        let (a, b) = (mem.read(g.tensor(id)?)?, fused.read(g.tensor(id)?)?);
        same &= a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
    }
    Ok((p.fused_steps(), p.kernel_steps(&g), same))
}
