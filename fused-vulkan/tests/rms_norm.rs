//! RMS normalisation (`rms_norm.comp`): the host-slice kernel against
//! `fused_core::norm` (its reduction order; the shader's square root and
//! division within a few ulps), the unfused op on the device plan (in
//! place and not) bit for bit the host-slice executor, and the GEMV norm
//! prologue with the normed input shared by several readers; no
//! validation message.

mod common;

use common::{assert_no_validation_messages, backend_or_skip, data, nmse};
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_core::exec::Executor;
use fused_core::graph::{Graph, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, plan};
use fused_core::quant::quantize_row;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_testkit::layer::NormQkv;
use fused_testkit::suite::run_resident;
use fused_vulkan::DevicePlan;

/// Every element within `ulps` units in the last place (relative) of the
/// core's value, and the whole within a tiny NMSE.
fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 8.0 * f32::EPSILON * w.abs() + f32::MIN_POSITIVE;
        assert!((g - w).abs() <= tol, "{what}: [{i}] {g:e} against {w:e}");
    }
    assert!(nmse(got, want) <= 1e-12, "{what}");
}

#[test]
fn host_slice_norm_follows_the_core_definition() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    for k in [1, 5, 31, 32, 33, 64, 100, 4096, 5003] {
        for cols in 1..=3 {
            let x: Vec<f32> = data(k * cols, k as u64 + cols as u64)
                .iter()
                .map(|v| v * 40.0)
                .collect();
            let g = data(k, 3 * k as u64);
            for (gamma, eps) in [(None, 1e-5f32), (Some(&g[..]), 1e-6), (None, 0.0)] {
                let mut got = vec![0.0; k * cols];
                b.rms_norm(k, eps, &x, gamma, &mut got).unwrap();
                let mut want = vec![0.0; k * cols];
                fused_core::norm::rms_norm(k, eps, &x, gamma, &mut want).unwrap();
                let w = if gamma.is_some() { "weighted" } else { "plain" };
                assert_close(&got, &want, &format!("K={k} cols={cols} {w} eps={eps}"));
            }
        }
    }
    // Lengths that are not whole columns are refused.
    let mut y = vec![0.0; 10];
    assert!(b.rms_norm(4, 1e-5, &[1.0; 10], None, &mut y).is_err());
    assert_no_validation_messages(&b);
}

#[test]
fn device_plan_norm_equals_the_host_slice_executor() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (k, n) = (300, 3);
    let mut g = Graph::new();
    let x = g
        .input(TensorDesc::contiguous(DType::F32, [k, n, 1, 1], BufferId(0), 0).unwrap())
        .unwrap();
    let y = g
        .input(TensorDesc::contiguous(DType::F32, [k, n, 1, 1], BufferId(0), 4096).unwrap())
        .unwrap();
    // Out of place, then in place over `y`.
    let a = g.rms_norm(x, 1e-5, Place::at(1, 0)).unwrap();
    let c = g.rms_norm(y, 1e-6, Place::at(0, 4096)).unwrap();
    g.mark_output(a).unwrap();
    g.mark_output(c).unwrap();
    let mut mem = Memory::new(&[8192, 4096]);
    mem.write(g.tensor(x).unwrap(), &data(k * n, 1)).unwrap();
    mem.write(g.tensor(y).unwrap(), &data(k * n, 2)).unwrap();
    let p = Plan::unfused(&g);
    let mut want = mem.clone();
    Executor::new(&b, GemvMode::F32)
        .run(&g, &p, &mut want)
        .unwrap();
    let mut dp = DevicePlan::new(&b, &g, &p, GemvMode::F32, &mem.sizes()).unwrap();
    dp.write_all(&mem).unwrap();
    dp.run().unwrap();
    let mut got = mem.clone();
    dp.read_all(&mut got).unwrap();
    for o in [a, c] {
        let t = g.tensor(o).unwrap();
        let (gv, wv) = (got.read(t).unwrap(), want.read(t).unwrap());
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&gv), bits(&wv), "output {o}");
    }
    assert_no_validation_messages(&b);
}

/// q, k and v read one normed product: the prologue is dispatched once
/// (f32, or quantized with the norm in the quantizer) and its scratch read
/// by the three GEMVs, in both activation modes,
/// equal to the unfused plan bit for bit.
#[test]
fn one_norm_feeds_several_gemvs() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (k, m) = (256, 32);
    let rb = DType::Q8_0.row_bytes(k).unwrap();
    let mut wb = vec![0u8; 3 * m * rb];
    quantize_row(DType::Q8_0, &data(3 * m * k, 7), &mut wb).unwrap();
    let NormQkv {
        graph: g,
        mem,
        outs,
    } = NormQkv::new(DType::Q8_0, (k, m), &wb, &data(k, 8), &data(k, 9)).unwrap();
    let fused = plan(&g);
    assert_eq!(fused.prologue_nodes.len(), 2, "{fused:?}");
    for mode in [GemvMode::F32, GemvMode::Ggml] {
        let run = |p: &Plan| {
            let dp = DevicePlan::new(&b, &g, p, mode, &mem.sizes()).unwrap();
            run_resident(dp, &mem).unwrap()
        };
        let (mf, sf) = run(&fused);
        let (mu, su) = run(&Plan::unfused(&g));
        for &o in &outs {
            let t = g.tensor(o).unwrap();
            let bits = |m: &Memory| {
                m.read(t)
                    .unwrap()
                    .iter()
                    .map(|f| f.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&mf), bits(&mu), "{mode:?} output {o}");
        }
        // One norm (in GGML's mode the quantizer's norm variant), three
        // GEMVs, one barrier between them.
        let q = u64::from(mode == GemvMode::Ggml);
        assert_eq!(sf.launches, 4, "{mode:?} {sf:?}");
        assert_eq!(sf.barriers, 1, "{mode:?} {sf:?}");
        assert_eq!(sf.quantizations, q, "{mode:?} {sf:?}");
        assert!(sf.barriers <= su.barriers, "{sf:?} {su:?}");
    }
    assert_no_validation_messages(&b);
}

/// The quantizer's norm variant in every tested shape (workgroups smaller
/// than the 32 partials, several columns a workgroup, several workgroups
/// a column) for Q8_0, Q8_1 and Q8_K activations: the fused plan equals
/// the unfused one bit for bit.
#[cfg(feature = "lab")]
#[test]
fn every_quantizer_shape_norms_as_the_unfused_plan() {
    use fused_core::acts::ActQuant;
    use fused_vulkan::{QuantizeShape, Tuning};
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    // 5.5 of the norm's 512-value segments: several rounds of a
    // workgroup's groups of 32 invocations, the last one ragged.
    let (k, m, n) = (2816, 16, 3);
    let xs = k * n * 4;
    let at = |i: usize| Place::at(1, xs + k * 4 + i * xs);
    let mut ran = 0;
    for (dtype, mode) in [
        (DType::Q8_0, ActQuant::Q8_0),
        (DType::Q4_1, ActQuant::Q8_1),
        (DType::Q4_K, ActQuant::Q8_K),
    ] {
        let rb = dtype.row_bytes(k).unwrap();
        let mut g = Graph::new();
        let w = g
            .input(TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), 0).unwrap())
            .unwrap();
        let x = g
            .input(TensorDesc::contiguous(DType::F32, [k, n, 1, 1], BufferId(1), 0).unwrap())
            .unwrap();
        let gamma = g
            .input(TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), xs).unwrap())
            .unwrap();
        let nrm = g.rms_norm(x, 1e-6, at(0)).unwrap();
        let xn = g.mul(nrm, gamma, at(1)).unwrap();
        let y = g.mul_mat(w, xn, at(2)).unwrap();
        g.mark_output(y).unwrap();
        let mut mem = Memory::new(&[m * rb, xs + k * 4 + 3 * xs]);
        let wv = data(m * k, 11);
        quantize_row(dtype, &wv, mem.buffer_mut(BufferId(0)).unwrap()).unwrap();
        let xv: Vec<f32> = data(k * n, 12).iter().map(|v| v * 3.0).collect();
        mem.write(g.tensor(x).unwrap(), &xv).unwrap();
        mem.write(g.tensor(gamma).unwrap(), &data(k, 13)).unwrap();
        let fused = plan(&g);
        assert_eq!(fused.prologue_nodes.len(), 2, "{fused:?}");
        for workgroup in [8, 16, 64, 256] {
            for values_per_thread in [4, 8, 32] {
                let shape = QuantizeShape {
                    workgroup,
                    values_per_thread,
                };
                if b.set_tuning(Tuning::default().with_quantize_shape(mode, shape))
                    .is_err()
                {
                    continue; // not a shape of this format
                }
                let run = |p: &Plan| {
                    let dp = DevicePlan::new(&b, &g, p, GemvMode::Ggml, &mem.sizes()).unwrap();
                    let (out, _) = run_resident(dp, &mem).unwrap();
                    out.read(g.tensor(y).unwrap()).unwrap()
                };
                let (f, u) = (run(&fused), run(&Plan::unfused(&g)));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&f), bits(&u), "{dtype} {shape:?}");
                ran += 1;
            }
        }
    }
    b.set_tuning(Tuning::default()).unwrap();
    assert!(ran >= 6, "{ran} shapes ran");
    assert_no_validation_messages(&b);
}
