//! The backend-contract suite: checks written once over
//! [`fused_core::backend::Backend`], run by every backend crate through
//! [`crate::contract_suite!`]. Each check panics, naming the case, on the
//! first failure; a case the backend has no kernel for
//! ([`Backend::supports`]) is printed as `skipped: <why>` and not counted
//! as run.
//!
//! What they hold every backend to: fused equals unfused bit for bit; both
//! equal the core's reference (bit for bit where the backend says so,
//! [`fused_core::backend::Capabilities::bit_exact_reference`], else within
//! an NMSE budget); fusion runs fewer kernel steps; a resident plan can be
//! written in part, run again and restored; bad input is an error, never a
//! panic.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, PlanStats, ResidentPlan};
use fused_core::element::Activation;
use fused_core::fwht::FwhtDesc;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, Step, plan};
use fused_core::reference::eval::{eval_graph, eval_plan};
use fused_core::tensor::{BufferId, TensorDesc};

use crate::compare::{assert_bits_eq, first_bit_difference, nmse};
use crate::data::{weight_dtypes, weights};
use crate::layer::DecodeLayer;
use crate::rng::Rng;

/// NMSE budget against the same-quantization reference for a backend that
/// accumulates in another order (f32 sums reordered; integer block sums
/// exact).
const NMSE_REORDERED: f64 = 1e-6;

/// The formats of the decode-layer check: a float format, the one 8-bit
/// and two 4-bit block formats, and a 6-bit K-quant.
const LAYER_DTYPES: [DType; 5] = [
    DType::F16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_K,
    DType::Q6_K,
];

/// Both activation modes.
const MODES: [GemvMode; 2] = [GemvMode::F32, GemvMode::Ggml];

/// Compiles `p` (made for `g`) on `b`, writes `mem`, runs it once and
/// reads every buffer back: the memory afterwards and what the run issued.
pub fn run_once<B: Backend>(
    b: &B,
    g: &Graph,
    p: &Plan,
    mode: GemvMode,
    mem: &Memory,
) -> Result<(Memory, PlanStats), B::Error> {
    run_resident(b.compile(g, p, mode, &mem.sizes())?, mem)
}

/// Writes `mem` into the compiled plan `rp`, runs it once and reads every
/// buffer back: the memory afterwards and what the run issued. For tests
/// that build a backend's device plan themselves (no host fallback).
pub fn run_resident<P: ResidentPlan>(
    mut rp: P,
    mem: &Memory,
) -> Result<(Memory, PlanStats), P::Error> {
    rp.write_all(mem)?;
    rp.run()?;
    let mut out = mem.clone();
    rp.read_all(&mut out)?;
    Ok((out, rp.stats()))
}

/// Whether `b` runs `p` and the unfused graph in `mode`; prints why not.
fn supported<B: Backend>(b: &B, g: &Graph, p: &Plan, mode: GemvMode, case: &str) -> bool {
    match b
        .supports(g, p, mode)
        .and_then(|()| b.supports(g, &Plan::unfused(g), mode))
    {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: {} {case}: {e}", b.name());
            false
        }
    }
}

/// Checks `got` against `want`, the core's reference run of the same
/// plan: bit for bit where `b` says so, else within the NMSE budget.
fn check_reference<B: Backend>(b: &B, got: &[f32], want: &[f32], case: &str) {
    if b.capabilities().bit_exact_reference {
        assert_bits_eq(
            got,
            want,
            &format!("{} {case}: against the reference", b.name()),
        );
    } else {
        let e = nmse(got, want);
        assert!(
            e <= NMSE_REORDERED,
            "{} {case}: NMSE {e:e} against the reference (budget {NMSE_REORDERED:e})",
            b.name()
        );
    }
}

/// Fused and unfused runs of `g` on `b`: their outputs equal bit for bit,
/// the fused output equals the reference, and the fused plan runs fewer
/// kernel steps. Returns `false` where `b` lacks a kernel (skipped).
fn fused_against_unfused<B: Backend>(
    b: &B,
    g: &Graph,
    mem: &Memory,
    out: NodeId,
    mode: GemvMode,
    case: &str,
) -> bool {
    fused_against_unfused_all(b, g, mem, &[out], mode, case)
}

/// [`fused_against_unfused`] for several outputs.
fn fused_against_unfused_all<B: Backend>(
    b: &B,
    g: &Graph,
    mem: &Memory,
    outs: &[NodeId],
    mode: GemvMode,
    case: &str,
) -> bool {
    let fused = plan(g);
    if !supported(b, g, &fused, mode, case) {
        return false;
    }
    let name = b.name();
    let run =
        |p: &Plan| run_once(b, g, p, mode, mem).unwrap_or_else(|e| panic!("{name} {case}: {e}"));
    let (mf, sf) = run(&fused);
    let (mu, su) = run(&Plan::unfused(g));
    let mut want = mem.clone();
    eval_plan(g, &fused, &mut want, mode).expect("the reference runs the plan");
    for &out in outs {
        let t = g.tensor(out).expect("a node");
        let got = mf.read(t).expect("an f32 output");
        assert_bits_eq(
            &got,
            &mu.read(t).expect("an f32 output"),
            &format!("{name} {case}: fused against unfused (output {out})"),
        );
        check_reference(b, &got, &want.read(t).expect("an f32 output"), case);
    }
    assert!(
        fused.fused_steps() > 0 && sf.kernel_steps < su.kernel_steps,
        "{name} {case}: fused {sf:?}, unfused {su:?}"
    );
    assert!(
        sf.barriers <= su.barriers,
        "{name} {case}: fused {sf:?}, unfused {su:?}"
    );
    true
}

/// A decode layer (q/k/v, attention output + residual, gated feed-forward
/// + residual) in five weight formats and both activation modes.
pub fn decode_layer_fused_equals_unfused<B: Backend>(b: &B) {
    let mut ran = 0;
    for (i, dtype) in LAYER_DTYPES.into_iter().enumerate() {
        let layer = DecodeLayer::new(dtype, 256, 512, 10 + i as u64);
        for mode in MODES {
            let case = format!("decode layer {dtype} {mode:?}");
            ran += usize::from(fused_against_unfused(
                b,
                &layer.graph,
                &layer.mem,
                layer.out,
                mode,
                &case,
            ));
        }
    }
    assert!(ran > 0, "{}: no decode-layer case ran", b.name());
}

/// `mul(rms_norm(x), g)` read by q, k and v (v with a residual add) and,
/// from a second norm, by a GLU's gate and up: every reader takes the norm
/// as its GEMV prologue, and fused equals unfused bit for bit, in five
/// weight formats, both activation modes, 1 and 2 columns. A backend
/// without the norm kernels skips every case with its reason (and nothing
/// else may be missing).
pub fn norm_prologue_fused_equals_unfused<B: Backend>(b: &B) {
    let (k, m, ffn) = (256, 64, 96);
    let max = b.capabilities().max_cols.min(2);
    let (mut ran, mut norm_refused) = (0, false);
    for (i, dtype) in LAYER_DTYPES.into_iter().enumerate() {
        for cols in 1..=max {
            let mut rng = Rng::new(77 + i as u64 * 5 + cols as u64);
            let mut g = Graph::new();
            let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
            let mut wnext = 0;
            let mut weight = |g: &mut Graph, rng: &mut Rng, rows: usize| {
                let rb = dtype.row_bytes(k).expect("whole blocks");
                let t = TensorDesc::contiguous(dtype, [k, rows, 1, 1], BufferId(0), wnext)
                    .expect("a weight tensor");
                wnext += (rb * rows).next_multiple_of(256);
                inits.push((t, weights(rng, dtype, rows, k)));
                g.input(t).expect("an input")
            };
            let (wq, wk, wv) = (
                weight(&mut g, &mut rng, m),
                weight(&mut g, &mut rng, m / 2),
                weight(&mut g, &mut rng, m / 2),
            );
            let (wg, wu) = (weight(&mut g, &mut rng, ffn), weight(&mut g, &mut rng, ffn));
            let mut anext = 0;
            let mut act = |n: usize| {
                let p = Place::at(1, anext);
                anext += (4 * n).next_multiple_of(256);
                p
            };
            let mut input = |g: &mut Graph, ne: [usize; 4], p: Place, rng: &mut Rng| {
                let t = TensorDesc::contiguous(DType::F32, ne, p.buffer, p.offset).expect("input");
                let v = rng.vec(ne.iter().product());
                inits.push((t, v.iter().flat_map(|x| x.to_le_bytes()).collect()));
                g.input(t).expect("an input")
            };
            let xs = [k, cols, 1, 1];
            let x = input(&mut g, xs, act(k * cols), &mut rng);
            let ga = input(&mut g, [k, 1, 1, 1], act(k), &mut rng);
            let gf = input(&mut g, [k, 1, 1, 1], act(k), &mut rng);
            let r = input(&mut g, [m / 2, cols, 1, 1], act(m / 2 * cols), &mut rng);
            let mut build = |g: &mut Graph| -> Result<Vec<NodeId>, fused_core::Error> {
                let n = g.rms_norm(x, 1e-5, act(k * cols))?;
                let xn = g.mul(n, ga, act(k * cols))?;
                let q = g.mul_mat(wq, xn, act(m * cols))?;
                let kk = g.mul_mat(wk, xn, act(m / 2 * cols))?;
                let v = g.mul_mat(wv, xn, act(m / 2 * cols))?;
                let v = g.add(v, r, act(m / 2 * cols))?;
                let n2 = g.rms_norm(x, 1e-6, act(k * cols))?;
                let xf = g.mul(n2, gf, act(k * cols))?;
                let gate = g.mul_mat(wg, xf, act(ffn * cols))?;
                let up = g.mul_mat(wu, xf, act(ffn * cols))?;
                let h = g.glu(Activation::Silu, gate, up, act(ffn * cols))?;
                let outs = vec![q, kk, v, h];
                for &o in &outs {
                    g.mark_output(o)?;
                }
                Ok(outs)
            };
            let outs = build(&mut g).expect("a well-formed graph");
            let mut mem = Memory::new(&[wnext, anext]);
            for (t, bytes) in &inits {
                mem.write_rows(t, bytes).expect("inside the buffers");
            }
            let p = plan(&g);
            assert_eq!(p.prologue_nodes.len(), 4, "{:#?}", p);
            for mode in MODES {
                let case = format!("norm prologue {dtype} {cols} cols {mode:?}");
                if let Err(e) = b.supports(&g, &p, mode) {
                    norm_refused |= matches!(
                        e,
                        fused_core::Error::Unsupported(fused_core::error::Unsupported::Operation(
                            fused_core::lower::RMS_NORM
                        ))
                    );
                    eprintln!("skipped: {} {case}: {e}", b.name());
                    continue;
                }
                ran += usize::from(fused_against_unfused_all(b, &g, &mem, &outs, mode, &case));
            }
        }
    }
    assert!(
        ran > 0 || norm_refused,
        "{}: no norm-prologue case ran, and the norm was not what was missing",
        b.name()
    );
}

/// `out = silu(W·x) ⊙ u + r` for every weight format, 1, 3 and the most
/// columns one GEMV takes (up to 8), both activation modes: one fused
/// step with a three-stage epilogue.
pub fn every_weight_format_with_an_epilogue<B: Backend>(b: &B) {
    let (k, m) = (256, 67);
    let max = b.capabilities().max_cols.min(8);
    let mut cols_set = vec![1, 3.min(max), max];
    cols_set.dedup();
    let mut ran = 0;
    for dtype in weight_dtypes() {
        for &cols in &cols_set {
            let mut rng = Rng::new(dtype.ggml_id() as u64 * 31 + cols as u64);
            let mut g = Graph::new();
            let wb = weights(&mut rng, dtype, m, k);
            let w = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), 0).expect("weights");
            let mut next = 0;
            let mut place = |n: usize| {
                let p = Place::at(1, next);
                next += (4 * n).next_multiple_of(64);
                p
            };
            let mut input = |g: &mut Graph,
                             ne: [usize; 4],
                             inits: &mut Vec<(TensorDesc, Vec<f32>)>,
                             rng: &mut Rng| {
                let p = place(ne.iter().product());
                let t =
                    TensorDesc::contiguous(DType::F32, ne, p.buffer, p.offset).expect("an input");
                inits.push((t, rng.vec(ne.iter().product())));
                g.input(t).expect("an input")
            };
            let mut inits = Vec::new();
            let wn = g.input(w).expect("weights");
            let x = input(&mut g, [k, cols, 1, 1], &mut inits, &mut rng);
            let u = input(&mut g, [m, cols, 1, 1], &mut inits, &mut rng);
            let r = input(&mut g, [m, cols, 1, 1], &mut inits, &mut rng);
            let (py, ps, pt, po) = (
                place(m * cols),
                place(m * cols),
                place(m * cols),
                place(m * cols),
            );
            let y = g.mul_mat(wn, x, py).expect("a matmul");
            let s = g.unary(Activation::Silu, y, ps).expect("silu");
            let t = g.mul(s, u, pt).expect("mul");
            let out = g.add(t, r, po).expect("add");
            g.mark_output(out).expect("an output");
            let mut mem = Memory::new(&[wb.len(), next]);
            mem.write_rows(&w, &wb).expect("weights fit");
            for (t, v) in &inits {
                mem.write(t, v).expect("inputs fit");
            }
            let p = plan(&g);
            assert!(
                matches!(&p.steps[..], [Step::Gemv(s)] if s.epilogue.len() == 3),
                "{dtype} x{cols}: {:?}",
                p.steps
            );
            for mode in MODES {
                let case = format!("gemv {dtype} {m}x{k}x{cols} silu*mul+add {mode:?}");
                ran += usize::from(fused_against_unfused(b, &g, &mem, out, mode, &case));
            }
        }
    }
    assert!(ran > 0, "{}: no GEMV case ran", b.name());
}

/// `H · (x ⊙ s)` as one signed FWHT, for block sizes 32, 256 and 2048
/// (rows of one and of several blocks, two columns).
pub fn signed_fwht_equals_sign_multiply_then_transform<B: Backend>(b: &B) {
    for (n, k) in [(32, 64), (256, 256), (2048, 4096)] {
        let cols = 2;
        let mut rng = Rng::new(n as u64);
        let mut g = Graph::new();
        let x_t = TensorDesc::contiguous(DType::F32, [k, cols, 1, 1], BufferId(1), 0).expect("x");
        let s_at = 4 * k * cols;
        let s_t =
            TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), s_at).expect("signs");
        let x = g.input(x_t).expect("x");
        let s = g.input(s_t).expect("signs");
        let m_at = s_at + 4 * k;
        let mut src = g.mul(x, s, Place::at(1, m_at)).expect("mul");
        if k != n {
            src = g.reshape(src, [n, k / n * cols, 1, 1]).expect("reshape");
        }
        let h_t =
            TensorDesc::strided(DType::F32, [n, n, 1, 1], [4, 0, 0, 0], BufferId(0), 0).expect("H");
        let h = g.input(h_t).expect("H");
        let out_at = m_at + 4 * k * cols;
        let out = g
            .mul_mat_hadamard(h, src, Place::at(1, out_at))
            .expect("hadamard");
        g.mark_output(out).expect("an output");
        let mut mem = Memory::new(&[4 * n, out_at + 4 * k * cols]);
        mem.write(&x_t, &rng.vec(k * cols)).expect("x fits");
        mem.write(&s_t, &rng.signs(k)).expect("signs fit");
        let p = plan(&g);
        assert!(
            matches!(&p.steps[..], [Step::SignedFwht(f)] if f.desc == FwhtDesc::new(n).and_then(|d| d.with_signs(k)).expect("a size")),
            "n {n}: {:?}",
            p.steps
        );
        let case = format!("signed fwht n {n} k {k} x{cols}");
        fused_against_unfused(b, &g, &mem, out, GemvMode::F32, &case);
    }
}

/// A run updates the residual stream in place; restoring the inputs makes
/// the next run (and a timed one) give the first run's bits again.
pub fn restored_inputs_make_runs_repeatable<B: Backend>(b: &B) {
    let layer = DecodeLayer::new(DType::Q4_0, 256, 512, 3);
    let (g, p) = (&layer.graph, plan(&layer.graph));
    let out = *g.tensor(layer.out).expect("a node");
    let name = b.name();
    let mut rp = b
        .compile(g, &p, GemvMode::F32, &layer.mem.sizes())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    rp.write_all(&layer.mem).expect("written");
    rp.run().expect("a run");
    let once = rp.read_f32(&out).expect("read");
    let mut into = vec![f32::NAN; once.len()];
    rp.read_f32_into(&out, &mut into).expect("read into");
    assert_bits_eq(&into, &once, &format!("{name}: read_f32_into"));
    rp.run().expect("a second run");
    let twice = rp.read_f32(&out).expect("read");
    assert!(
        first_bit_difference(&once, &twice).is_some(),
        "{name}: a second run must add the layer to the residual stream again"
    );
    rp.restore_inputs().expect("restored");
    rp.run().expect("a run after the restore");
    assert_bits_eq(
        &rp.read_f32(&out).expect("read"),
        &once,
        &format!("{name}: after restore_inputs"),
    );
    let t = rp.time_once().expect("a timed run");
    assert!(t.best().as_nanos() > 0, "{name}: {t:?}");
    if b.capabilities().device_timer {
        assert!(
            t.device.is_some(),
            "{name}: a device timer but no device time: {t:?}"
        );
    }
    assert_bits_eq(
        &rp.read_f32(&out).expect("read"),
        &once,
        &format!("{name}: after time_once"),
    );
}

/// Weights written again (whole, then half of the rows) after a run are
/// the weights the next run uses.
pub fn rewritten_weights_are_used<B: Backend>(b: &B) {
    let (k, m, dtype) = (256, 64, DType::Q4_0);
    let mut rng = Rng::new(5);
    let mut g = Graph::new();
    let w = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), 0).expect("weights");
    let x = TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), 0).expect("x");
    let wn = g.input(w).expect("weights");
    let xn = g.input(x).expect("x");
    let y = g.mul_mat(wn, xn, Place::at(1, 4 * k)).expect("a matmul");
    g.mark_output(y).expect("an output");
    let rb = dtype.row_bytes(k).expect("whole blocks");
    let mut mem = Memory::new(&[m * rb, 4 * (k + m)]);
    mem.write_rows(&w, &weights(&mut rng, dtype, m, k))
        .expect("fits");
    mem.write(&x, &rng.vec(k)).expect("fits");
    let p = plan(&g);
    let yt = *g.tensor(y).expect("a node");
    let name = b.name();
    let mut rp = b
        .compile(&g, &p, GemvMode::F32, &mem.sizes())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    rp.write_all(&mem).expect("written");
    rp.run().expect("a run");
    let first = rp.read_f32(&yt).expect("read");
    let expect = |mem: &Memory| {
        let mut r = mem.clone();
        eval_graph(&g, &mut r, GemvMode::F32).expect("the reference");
        r.read(&yt).expect("read")
    };
    let all = weights(&mut rng, dtype, m, k);
    mem.write_rows(&w, &all).expect("fits");
    rp.write(BufferId(0), 0, &all).expect("weights rewritten");
    rp.run().expect("a run");
    let second = rp.read_f32(&yt).expect("read");
    assert!(
        first_bit_difference(&first, &second).is_some(),
        "{name}: new weights, same output"
    );
    let e = nmse(&second, &expect(&mem));
    assert!(e <= NMSE_REORDERED, "{name}: whole rewrite: NMSE {e:e}");
    let half = weights(&mut rng, dtype, m / 2, k);
    let at = rb * m / 2;
    rp.write(BufferId(0), at, &half)
        .expect("half the rows rewritten");
    let mut all = all;
    all[at..].copy_from_slice(&half);
    mem.write_rows(&w, &all).expect("fits");
    rp.run().expect("a run");
    let third = rp.read_f32(&yt).expect("read");
    assert_bits_eq(
        &third[..m / 2],
        &second[..m / 2],
        &format!("{name}: rows not rewritten"),
    );
    let e = nmse(&third, &expect(&mem));
    assert!(e <= NMSE_REORDERED, "{name}: partial rewrite: NMSE {e:e}");
}

/// Writes and reads of part of a buffer touch only their bytes: a write
/// at the start, one in the middle and a read of a middle range, in every
/// buffer of a plan (a backend that staged a partial write through a copy
/// of the whole buffer once replaced the rest of it, so that a runtime
/// writing its input at the start of the activations' buffer erased the
/// norm weights after it).
pub fn partial_writes_touch_only_their_bytes<B: Backend>(b: &B) {
    let layer = DecodeLayer::new(DType::Q4_0, 256, 512, 6);
    let (g, p) = (&layer.graph, plan(&layer.graph));
    let name = b.name();
    let mut rp = b
        .compile(g, &p, GemvMode::F32, &layer.mem.sizes())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    rp.write_all(&layer.mem).expect("written");
    let sizes = rp.buffer_sizes().to_vec();
    for (i, &size) in sizes.iter().enumerate() {
        assert!(size >= 64, "{name}: buffer {i} of {size} bytes");
        let id = BufferId(u32::try_from(i).expect("a few buffers"));
        let mut want: Vec<u8> = (0..size).map(|j| (j * 31 + i * 7) as u8).collect();
        rp.write(id, 0, &want).expect("a whole buffer");
        want[..12].fill(0xa5);
        rp.write(id, 0, &want[..12]).expect("its first bytes");
        let mid = size / 2;
        want[mid..mid + 20].fill(0x5a);
        rp.write(id, mid, &want[mid..mid + 20])
            .expect("bytes in the middle");
        let mut back = vec![0u8; size];
        rp.read(id, 0, &mut back).expect("the whole buffer");
        assert!(
            back == want,
            "{name}: buffer {i}: a partial write changed other bytes (first at {:?})",
            back.iter().zip(&want).position(|(a, b)| a != b)
        );
        let mut part = vec![0u8; 16];
        rp.read(id, mid - 4, &mut part)
            .expect("bytes in the middle");
        assert_eq!(
            part,
            want[mid - 4..mid + 12],
            "{name}: buffer {i}: a partial read"
        );
    }
}

/// A GEMV over an empty reduction (K = 0) is legal in the core: every dot
/// product is zero, so `silu(W·x) + r` is `r`. A backend computes it, bit
/// for bit like the reference, or refuses it through
/// [`Backend::supports`] with its reason; it never fails at run time or
/// panics.
pub fn empty_reduction_gives_the_epilogue_of_zero<B: Backend>(b: &B) {
    let name = b.name();
    let m = 64;
    for dtype in [DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K] {
        let mut g = Graph::new();
        let w = TensorDesc::contiguous(dtype, [0, m, 1, 1], BufferId(0), 0).expect("weights");
        let x = TensorDesc::contiguous(DType::F32, [0, 1, 1, 1], BufferId(1), 0).expect("x");
        let r = TensorDesc::contiguous(DType::F32, [m, 1, 1, 1], BufferId(1), 0).expect("r");
        let (wn, xn, rn) = (
            g.input(w).expect("weights"),
            g.input(x).expect("x"),
            g.input(r).expect("r"),
        );
        let y = g.mul_mat(wn, xn, Place::at(1, 4 * m)).expect("a matmul");
        let s = g
            .unary(Activation::Silu, y, Place::at(1, 8 * m))
            .expect("silu");
        let out = g.add(s, rn, Place::at(1, 12 * m)).expect("add");
        g.mark_output(out).expect("an output");
        let mut mem = Memory::new(&[0, 16 * m]);
        let mut rng = Rng::new(7);
        let rv = rng.vec(m);
        mem.write(&r, &rv).expect("r fits");
        for mode in MODES {
            let case = format!("gemv {dtype} {m}x0 silu+add {mode:?}");
            if !fused_against_unfused(b, &g, &mem, out, mode, &case) {
                continue;
            }
            let (got, _) = run_once(b, &g, &plan(&g), mode, &mem)
                .unwrap_or_else(|e| panic!("{name} {case}: {e}"));
            let t = g.tensor(out).expect("a node");
            assert_bits_eq(
                &got.read(t).expect("an f32 output"),
                &rv,
                &format!("{name} {case}: silu(0) + r"),
            );
        }
    }
}

/// Bad buffers, ranges and tensors are errors, never panics.
pub fn bad_input_is_a_typed_error<B: Backend>(b: &B) {
    let layer = DecodeLayer::new(DType::Q4_0, 256, 512, 4);
    let (g, p) = (&layer.graph, plan(&layer.graph));
    let sizes = layer.mem.sizes();
    let name = b.name();
    // Buffers too small for the graph's tensors: refused by compile, or
    // at the latest by the run.
    let small: Vec<usize> = sizes.iter().map(|s| s / 2).collect();
    let r = b.compile(g, &p, GemvMode::F32, &small).and_then(|mut rp| {
        let mem = Memory::new(&small);
        rp.write_all(&mem)?;
        rp.run()
    });
    assert!(r.is_err(), "{name}: buffers half the size ran");
    let mut rp = b
        .compile(g, &p, GemvMode::F32, &sizes)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    rp.write_all(&layer.mem).expect("written");
    let n = sizes.len() as u32;
    assert!(
        rp.write(BufferId(n), 0, &[0; 4]).is_err(),
        "{name}: a buffer that does not exist"
    );
    assert!(
        rp.write(BufferId(1), sizes[1] - 2, &[0; 4]).is_err(),
        "{name}: a write past the end"
    );
    assert!(
        rp.write(BufferId(1), usize::MAX, &[0; 4]).is_err(),
        "{name}: an offset that overflows"
    );
    let mut out = [0u8; 8];
    assert!(
        rp.read(BufferId(1), sizes[1] - 4, &mut out).is_err(),
        "{name}: a read past the end"
    );
    assert!(
        rp.read(BufferId(n), 0, &mut out).is_err(),
        "{name}: a read of no buffer"
    );
    assert!(
        rp.read_f32(&layer.weights[0]).is_err(),
        "{name}: Q4_0 read as f32"
    );
    let h = *g.tensor(layer.input).expect("a node");
    let e = rp
        .write_f32(&h, &[0.0; 3])
        .expect_err("three values for 256");
    assert!(!e.to_string().is_empty());
    assert!(
        rp.read_f32_into(&h, &mut [0.0; 255]).is_err(),
        "{name}: 256 values read into 255"
    );
    assert!(
        rp.read_f32_into(
            &layer.weights[0],
            &mut vec![0.0; layer.weights[0].n_elements()]
        )
        .is_err(),
        "{name}: Q4_0 read into f32"
    );
    assert!(
        rp.write_all(&Memory::new(&[1, 1])).is_err(),
        "{name}: memory of other sizes"
    );
    // Still usable after the refusals.
    rp.write_all(&layer.mem).expect("written");
    rp.run().expect("a run");
    assert_eq!(rp.read_f32(&h).expect("read").len(), 256);
}

/// The decode ops of one attention step, as a whole-token plan replays
/// them: RoPE of q and k from a table, k and v appended to caches kept as
/// state (k's RoPE and both appends one fused step), attention over the
/// cache, and an argmax, with the position a value written before each
/// run. Six runs (the last at a position past
/// the cache, which is clamped) on one resident plan match the reference
/// run the same way: RoPE, the row writes and the argmax bit for bit, the
/// attention bit for bit where the backend says so, else within the NMSE
/// budget. A restore leaves the caches as the runs wrote them.
pub fn decode_ops_match_the_reference<B: Backend>(b: &B) {
    use fused_core::decode::RopeMode;
    let (d, n_head, n_kv, rows, vocab) = (8, 4, 2, 5, 37);
    let f = |n: usize| 4 * n;
    let t = |ne: [usize; 4], buf: u32, at: usize| {
        TensorDesc::contiguous(DType::F32, ne, BufferId(buf), at).expect("a tensor")
    };
    // Buffer 0: inputs; 1: the caches; 2: results.
    let (q_at, k_at, v_at) = (0, f(d * n_head), f(d * n_head + d * n_kv));
    let table_at = f(d * n_head + 2 * d * n_kv);
    let pos_at = table_at + f(d * rows);
    let logits_at = pos_at + 4;
    let in_size = logits_at + f(2 * vocab);
    let cache = f(d * n_kv * rows);
    let mut g = Graph::new();
    let q = g.input(t([d, n_head, 1, 1], 0, q_at)).expect("q");
    let k = g.input(t([d, n_kv, 1, 1], 0, k_at)).expect("k");
    let v = g.input(t([d * n_kv, 1, 1, 1], 0, v_at)).expect("v");
    let table = g.input(t([d, rows, 1, 1], 0, table_at)).expect("table");
    let pos = g.input(t([1, 1, 1, 1], 0, pos_at)).expect("pos");
    let logits = g.input(t([vocab, 2, 1, 1], 0, logits_at)).expect("logits");
    let kc = g.state(t([d, n_kv, rows, 1], 1, 0)).expect("k cache");
    let vc = g.state(t([d, n_kv, rows, 1], 1, cache)).expect("v cache");
    let kc_rows = g.reshape(kc, [d * n_kv, rows, 1, 1]).expect("rows");
    let vc_rows = g.reshape(vc, [d * n_kv, rows, 1, 1]).expect("rows");
    let qr = g
        .rope(RopeMode::Adjacent, q, table, pos, Place::at(2, 0))
        .expect("rope q");
    let kr = g
        .rope(RopeMode::Halves, k, table, pos, Place::at(2, f(d * n_head)))
        .expect("rope k");
    let kw = g
        .set_row(kc_rows, kr, pos, Place::at(1, 0))
        .expect("k append");
    let vw = g
        .set_row(vc_rows, v, pos, Place::at(1, cache))
        .expect("v append");
    let kw3 = g.reshape(kw, [d, n_kv, rows, 1]).expect("3-D");
    let vw3 = g.reshape(vw, [d, n_kv, rows, 1]).expect("3-D");
    let att_at = f(d * n_head + d * n_kv);
    let att = g
        .attention(qr, kw3, vw3, pos, 0.35, Place::at(2, att_at))
        .expect("attention");
    let best = g
        .argmax(logits, Place::at(2, att_at + f(d * n_head)))
        .expect("argmax");
    // k's RoPE is no output: the planner writes it straight into the key
    // cache row with the v row write in one step (q's RoPE, in the other
    // pair mode, stays apart); the caches show what it computed.
    for id in [qr, att, best] {
        g.mark_output(id).expect("an output");
    }
    let mut mem = Memory::new(&[in_size, 2 * cache, att_at + f(d * n_head + 2)]);
    let mut rng = Rng::new(37);
    let angles: Vec<f32> = (0..rows * d / 2)
        .flat_map(|i| {
            let a = 0.37 * i as f32;
            [a.cos(), a.sin()]
        })
        .collect();
    mem.write(g.tensor(table).expect("a node"), &angles)
        .expect("fits");
    let p = plan(&g);
    assert!(
        p.steps.iter().any(|s| matches!(s, Step::KvAppend(f)
            if f.k_rope == kr && f.q_rope.is_none() && f.v_write.is_some())),
        "the key/value append fuses: {:?}",
        p.steps
    );
    let name = b.name();
    if let Err(e) = b.supports(&g, &p, GemvMode::F32) {
        eprintln!("skipped: {name} decode ops: {e}");
        return;
    }
    let mut rp = b
        .compile(&g, &p, GemvMode::F32, &mem.sizes())
        .unwrap_or_else(|e| panic!("{name} decode ops: {e}"));
    rp.write_all(&mem).expect("written");
    let caches = TensorDesc::contiguous(DType::F32, [2 * cache / 4, 1, 1, 1], BufferId(1), 0)
        .expect("both caches");
    for (run, position) in [0.0f32, 1.0, 2.0, 3.0, 4.0, 9.0].into_iter().enumerate() {
        let case = format!("decode ops, run {run} at position {position}");
        for (id, n) in [
            (q, d * n_head),
            (k, d * n_kv),
            (v, d * n_kv),
            (logits, 2 * vocab),
        ] {
            let mut x = rng.vec(n);
            if id == logits {
                // A tie and a NaN: the first maximum wins, NaN never does.
                x[3] = 9.0;
                x[20] = 9.0;
                x[vocab] = f32::NAN;
            }
            let td = *g.tensor(id).expect("a node");
            mem.write(&td, &x).expect("fits");
            rp.write_f32(&td, &x).expect("written");
        }
        let pt = *g.tensor(pos).expect("a node");
        mem.write(&pt, &[position]).expect("fits");
        rp.write_f32(&pt, &[position]).expect("written");
        eval_graph(&g, &mut mem, GemvMode::F32).expect("the reference");
        rp.run().unwrap_or_else(|e| panic!("{name} {case}: {e}"));
        for id in [qr, best] {
            let td = g.tensor(id).expect("a node");
            assert_bits_eq(
                &rp.read_f32(td).expect("read"),
                &mem.read(td).expect("read"),
                &format!("{name} {case}: {}", g.node(id).expect("a node").op().name()),
            );
        }
        let chosen = mem.read(g.tensor(best).expect("a node")).expect("read");
        assert!(
            chosen[0] == 3.0 && chosen[1] != 0.0,
            "{name} {case}: the reference's argmax {chosen:?}: the first of a tie, never NaN"
        );
        assert_bits_eq(
            &rp.read_f32(&caches).expect("read"),
            &mem.read(&caches).expect("read"),
            &format!("{name} {case}: the caches"),
        );
        let ta = g.tensor(att).expect("a node");
        check_reference(
            b,
            &rp.read_f32(ta).expect("read"),
            &mem.read(ta).expect("read"),
            &case,
        );
    }
    rp.restore_inputs().expect("restored");
    assert_bits_eq(
        &rp.read_f32(&caches).expect("read"),
        &mem.read(&caches).expect("read"),
        &format!("{name}: the caches after restore_inputs"),
    );
}

/// A plan recorded for replay ([`ResidentPlan::record_for_replay`]: a CUDA
/// graph) computes what it computed before, run after run, and counts the
/// same work.
pub fn recorded_runs_equal_issued_runs<B: Backend>(b: &B) {
    let layer = DecodeLayer::new(DType::Q4_0, 256, 512, 8);
    let (g, p) = (&layer.graph, plan(&layer.graph));
    let out = *g.tensor(layer.out).expect("a node");
    let name = b.name();
    let mut rp = b
        .compile(g, &p, GemvMode::Ggml, &layer.mem.sizes())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    rp.write_all(&layer.mem).expect("written");
    rp.run().expect("a run");
    let issued = rp.read_f32(&out).expect("read");
    let stats = rp.stats();
    let recorded = rp
        .record_for_replay()
        .unwrap_or_else(|e| panic!("{name}: recording: {e}"));
    eprintln!("{name}: recorded for replay: {recorded}");
    for run in 0..2 {
        rp.restore_inputs().expect("restored");
        rp.run().expect("a replayed run");
        assert_bits_eq(
            &rp.read_f32(&out).expect("read"),
            &issued,
            &format!("{name}: replayed run {run}"),
        );
    }
    assert_eq!(rp.stats().launches, stats.launches, "{name}");
}
