//! The core's self-check (a section of the `test` mode): reference GEMV vs f64, FWHT round trip, and a
//! decode layer's fused plan vs its unfused graph.

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::acts::GemvMode;
use fused_core::epilogue::Epilogue;
use fused_core::fwht::{FwhtDesc, fwht};
use fused_core::planner::plan;
use fused_core::quant::quantize_row;
use fused_core::reference::eval::{eval_graph, eval_plan};
use fused_core::reference::gemv::{gemm, gemm_f64};
use fused_core::weights::WeightMatrix;

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
/// signed-FWHT-rotated projection, residuals in place) evaluated by the
/// reference unfused and as planned: (fused steps, kernel steps, bit-identical).
fn decode_layer(dtype: DType, mode: GemvMode) -> Result<(usize, usize, bool), fused_core::Error> {
    let s = crate::stack::build_stack(dtype, 1, 256, 512, 0xdec0de)?;
    let p = plan(&s.graph);
    let mut unfused = s.mem.clone();
    let mut fused = s.mem.clone();
    eval_graph(&s.graph, &mut unfused, mode)?;
    eval_plan(&s.graph, &p, &mut fused, mode)?;
    let out = s.graph.tensor(s.out)?;
    let same =
        crate::metrics::first_bit_difference(&unfused.read(out)?, &fused.read(out)?).is_none();
    Ok((p.fused_steps(), p.kernel_steps(&s.graph), same))
}
