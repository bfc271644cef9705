//! The device-resident plan executor ([`DevicePlan`]) against the
//! host-slice executor (the core's `Executor` over `CudaBackend`): the same
//! kernels, so every buffer must come out bit for bit the same, fused and
//! unfused, through the stream and through a CUDA graph replay; launch and
//! copy counts; typed refusals; timed re-runs that start from the same
//! inputs. On the first CUDA device (skipped without one).

mod common;

use common::{Rng, assert_bits_eq, backend_or_skip};
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_core::element::Activation;
use fused_core::exec::Executor;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, plan};
use fused_core::quant::quantize_row;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::{DType, Error};
use fused_cuda::{CudaBackend, CudaError, DevicePlan, DevicePlanStats, LaunchOptions, Submission};

/// Hidden and FFN sizes of the test layer (whole Q4_0 tiles and a rest).
const H: usize = 1280;
const F: usize = 2304;

fn data(n: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed).vec_scaled(n, 1.0)
}

/// `m × k` values of `seed` quantized into `dtype`, row by row.
fn quantized(dtype: DType, k: usize, m: usize, seed: u64) -> Vec<u8> {
    let rb = dtype.row_bytes(k).unwrap();
    let scale = 1.0 / (k as f32).sqrt();
    let v: Vec<f32> = data(k * m, seed).iter().map(|x| x * scale).collect();
    let mut bytes = vec![0u8; rb * m];
    for (src, dst) in v.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
        quantize_row(dtype, src, dst).unwrap();
    }
    bytes
}

/// A decode layer: `h += W_o · attn(h)`, then `h += W_d · (silu(W_g·h) ⊙
/// (W_u·h))`, the residual stream updated in place at byte 0 of buffer 1;
/// weights of `dtype` in buffer 0, `attn` an opaque copy.
fn decode_layer(dtype: DType) -> (Graph, Memory, NodeId) {
    let mut g = Graph::new();
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let mut wnext = 0;
    let mut weight = |g: &mut Graph, k: usize, m: usize, seed: u64| {
        let rb = dtype.row_bytes(k).unwrap();
        let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), wnext).unwrap();
        wnext += (rb * m).next_multiple_of(256);
        inits.push((t, quantized(dtype, k, m, seed)));
        g.input(t).unwrap()
    };
    let w_o = weight(&mut g, H, H, 1);
    let w_g = weight(&mut g, H, F, 2);
    let w_u = weight(&mut g, H, F, 3);
    let w_d = weight(&mut g, F, H, 4);
    let mut anext = 4 * H;
    let mut act = |n: usize| {
        let p = Place::at(1, anext);
        anext += 4 * n;
        p
    };
    let res = Place::at(1, 0);
    let h = TensorDesc::contiguous(DType::F32, [H, 1, 1, 1], BufferId(1), 0).unwrap();
    let hv: Vec<u8> = data(H, 9).iter().flat_map(|v| v.to_le_bytes()).collect();
    inits.push((h, hv));
    let h = g.input(h).unwrap();
    let vec = [H, 1, 1, 1];
    let attn = g.other("attention", &[h], vec, act(H)).unwrap();
    let o = g.mul_mat(w_o, attn, act(H)).unwrap();
    let h1 = g.add(o, h, res).unwrap();
    let gate = g.mul_mat(w_g, h1, act(F)).unwrap();
    let up = g.mul_mat(w_u, h1, act(F)).unwrap();
    let a = g.glu(Activation::Silu, gate, up, act(F)).unwrap();
    let down = g.mul_mat(w_d, a, act(H)).unwrap();
    let h2 = g.add(down, h1, res).unwrap();
    g.mark_output(h2).unwrap();
    let mut mem = Memory::new(&[wnext, anext]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes).unwrap();
    }
    (g, mem, h2)
}

/// Runs `p` through the host-slice executor.
fn host_run(b: &CudaBackend, g: &Graph, p: &Plan, mem: &Memory) -> Memory {
    host_run_in(b, g, p, mem, GemvMode::F32)
}

/// Runs `p` through the host-slice executor with GEMV activations per `mode`.
fn host_run_in(b: &CudaBackend, g: &Graph, p: &Plan, mem: &Memory, mode: GemvMode) -> Memory {
    let mut m = mem.clone();
    Executor::new(b, mode).run(g, p, &mut m).unwrap();
    m
}

/// The tests of this file run one at a time: one of them captures a CUDA
/// graph, and while a stream of the (shared, primary) context is captured,
/// other threads' launches and synchronisations in that context were seen
/// to fail now and then ("unknown error") on the H200.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `p` once as a device plan; its memory afterwards, its counts, and
/// the launches the backend counted for the run.
fn device_run(
    b: &CudaBackend,
    g: &Graph,
    p: &Plan,
    mem: &Memory,
) -> (Memory, DevicePlanStats, u64) {
    device_run_in(b, g, p, mem, GemvMode::F32)
}

/// [`device_run`] with GEMV activations per `mode`.
fn device_run_in(
    b: &CudaBackend,
    g: &Graph,
    p: &Plan,
    mem: &Memory,
    mode: GemvMode,
) -> (Memory, DevicePlanStats, u64) {
    let mut dp = DevicePlan::new(b, g, p, mode, &mem.sizes()).unwrap();
    dp.write_all(mem).unwrap();
    let before = common::launches(b);
    dp.run().unwrap();
    let launched = common::launches(b) - before;
    let mut out = mem.clone();
    dp.read_all(&mut out).unwrap();
    (out, dp.device_stats(), launched)
}

fn assert_same_memory(got: &Memory, want: &Memory, what: &str) {
    for i in 0u32.. {
        let (Ok(g), Ok(w)) = (got.buffer(BufferId(i)), want.buffer(BufferId(i))) else {
            break;
        };
        if g != w {
            let first = g.iter().zip(w).position(|(a, b)| a != b);
            panic!("{what}: buffer {i} differs (first byte {first:?})");
        }
    }
}

fn f32s(mem: &Memory, g: &Graph, id: NodeId) -> Vec<f32> {
    mem.read(g.tensor(id).unwrap()).unwrap()
}

#[test]
fn decode_layer_equals_the_host_slice_executor_bit_for_bit() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    // GemvMode::Ggml: Q4_0 with Q8_0 activations, Q5_1 with Q8_1 and Q6_K
    // with Q8_K, quantized on the device once per GEMV input (the gated
    // GEMV once for both weights; the unfused gate and up GEMVs, which read
    // the same input, once for both too). With LaunchOptions::overlap the
    // unfused up GEMV runs alongside the gate GEMV; with
    // LaunchOptions::group the two are one launch. With
    // LaunchOptions::fold_quantizers the fused plan's o-projection and
    // gated GEMV write their outputs quantized for the next GEMV, so only
    // the first input has a quantizer launch (the unfused plan's GEMV
    // inputs come from element-wise kernels: nothing to fold).
    let cases = [
        (DType::F16, GemvMode::F32),
        (DType::Q4_0, GemvMode::F32),
        (DType::Q4_0, GemvMode::Ggml),
        (DType::Q5_1, GemvMode::Ggml),
        (DType::Q6_K, GemvMode::Ggml),
    ];
    let saved = b.options();
    let options = [
        (false, false, true),
        (true, false, false),
        (false, true, false),
        (true, true, true),
    ];
    for ((dtype, mode), (overlap, group, fold)) in
        cases.into_iter().flat_map(|c| options.map(|o| (c, o)))
    {
        b.set_options(LaunchOptions {
            overlap,
            group,
            fold_quantizers: fold,
            ..saved
        });
        let (g, mem, out) = decode_layer(dtype);
        let fused = plan(&g);
        let unfused = Plan::unfused(&g);
        assert_eq!(fused.fused_steps(), 3, "{fused:?}");
        let mut outs = Vec::new();
        // (plan, name, quantized inputs, of them produced by a GEMV, GEMVs
        // that may overlap or group with the one before: the unfused up GEMV)
        for (p, name, gemvs, foldable, pairs) in
            [(&fused, "fused", 3, 2, 0), (&unfused, "unfused", 3, 0, 1)]
        {
            let what =
                format!("{dtype} {mode:?} {name}, overlap {overlap}, group {group}, fold {fold}");
            let (overlapping, grouped) = if group { (0, pairs) } else { (pairs, 0) };
            let want = host_run_in(&b, &g, p, &mem, mode);
            let (got, stats, launched) = device_run_in(&b, &g, p, &mem, mode);
            assert_same_memory(&got, &want, &what);
            let kernel_steps = p.kernel_steps(&g) as u64;
            let quantized = mode != GemvMode::F32 && dtype != DType::F16;
            let folded = if quantized && fold { foldable } else { 0 };
            let quantizers = if quantized { gemvs - folded } else { 0 };
            assert_eq!(stats.kernel_steps, kernel_steps, "{what}");
            assert_eq!(stats.quantizations, quantizers, "{what}: quantizers");
            assert_eq!(stats.folded_quantizations, folded, "{what}: folded");
            assert_eq!(stats.overlapping, overlapping, "{what}: overlapping GEMVs");
            assert_eq!(stats.grouped, grouped, "{what}: grouped GEMVs");
            assert_eq!(
                stats.launches,
                kernel_steps + quantizers - grouped,
                "{what}: one launch per step and one per quantizer, less the grouped"
            );
            assert_eq!(stats.copies, 0, "{what}: every tensor is used in place");
            assert_eq!(launched, stats.enqueued(), "{what}: backend counter");
            outs.push(f32s(&got, &g, out));
        }
        assert_bits_eq(
            &outs[0],
            &outs[1],
            &format!("{dtype} {mode:?}: fused vs unfused"),
        );
    }
    b.set_options(saved);
}

#[test]
fn graph_replay_equals_the_stream_run() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    // With LaunchOptions::overlap too: the unfused up GEMV, captured
    // without its wait, runs alongside the gate GEMV; with
    // LaunchOptions::group, in one launch with it.
    let saved = b.options();
    let options = [(false, true), (true, true), (true, false)];
    for (dtype, (overlap, group)) in [DType::F16, DType::Q4_0]
        .into_iter()
        .flat_map(|d| options.map(|o| (d, o)))
    {
        b.set_options(LaunchOptions {
            overlap,
            group,
            ..saved
        });
        let (g, mem, out) = decode_layer(dtype);
        for p in [plan(&g), Plan::unfused(&g)] {
            let what = format!(
                "{dtype} {} fused steps, overlap {overlap}, group {group}",
                p.fused_steps()
            );
            let mut dp = DevicePlan::new(&b, &g, &p, GemvMode::F32, &mem.sizes()).unwrap();
            dp.write_all(&mem).unwrap();
            dp.run().unwrap();
            let mut stream = mem.clone();
            dp.read_all(&mut stream).unwrap();
            assert!(!dp.graph_captured());
            dp.capture_graph().unwrap();
            assert!(dp.graph_captured());
            // Capture enqueues nothing that runs: the buffers are as the
            // stream run left them; restore, then replay.
            dp.restore_inputs().unwrap();
            let before = common::launches(&b);
            dp.run_as(Submission::Graph).unwrap();
            assert_eq!(common::launches(&b) - before, 1, "{what}: one graph launch");
            let mut graph = mem.clone();
            dp.read_all(&mut graph).unwrap();
            assert_same_memory(&graph, &stream, &what);
            // Timed replays start from the same inputs too.
            let times = dp.run_timed(3, Submission::Graph).unwrap();
            assert_eq!(times.len(), 3);
            assert!(times.iter().all(|t| t.is_finite() && *t > 0.0), "{times:?}");
            let timed = dp.read_f32(g.tensor(out).unwrap()).unwrap();
            assert_bits_eq(&timed, &f32s(&stream, &g, out), &what);
        }
    }
    b.set_options(saved);
}

/// A device plan prepares its weights in the one layout its GEMVs read
/// (the float layout for f32 activations, the integer one for quantized
/// activations), so that it holds its graph's buffers, one copy of the
/// weights and a little scratch, not two copies.
#[test]
fn a_plan_holds_one_layout_of_its_weights() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (g, mem, _) = decode_layer(DType::Q4_0);
    let rb = |k: usize| DType::Q4_0.row_bytes(k).unwrap() as u64;
    let weights = rb(H) * H as u64 + 2 * rb(H) * F as u64 + rb(F) * H as u64;
    let buffers: u64 = mem.sizes().iter().map(|&s| s as u64).sum();
    for mode in [GemvMode::F32, GemvMode::Ggml] {
        let dp = DevicePlan::new(&b, &g, &plan(&g), mode, &mem.sizes()).unwrap();
        let held = dp.stats().resident_bytes - buffers;
        assert!(
            (weights..weights + weights / 4).contains(&held),
            "{mode:?}: {held} bytes beside the graph's buffers for {weights} bytes of weights"
        );
    }
}

/// Graphs captured while three other threads, each with its own backend
/// on the same (primary) context, allocate, copy, run, synchronise and
/// free: each capture waits for that work instead of being invalidated by
/// it, the other threads' calls all succeed, and every replay equals the
/// stream run.
#[test]
fn captures_beside_other_threads_driver_work() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (g, mem, out) = decode_layer(DType::Q4_0);
    let p = plan(&g);
    let (want, _, _) = device_run(&b, &g, &p, &mem);
    let want = f32s(&want, &g, out);
    let stop = std::sync::atomic::AtomicBool::new(false);
    /// Stops the workers however the capturing thread leaves the scope.
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let started = std::sync::Barrier::new(4);
    let backends: Vec<CudaBackend> = (0..3).map(|_| CudaBackend::new().unwrap()).collect();
    let (g, p, mem, want, stop, started) = (&g, &p, &mem, &want, &stop, &started);
    std::thread::scope(|s| {
        let workers: Vec<_> = backends
            .into_iter()
            .map(|be| {
                s.spawn(move || {
                    started.wait();
                    // At least one round, then until the captures are done.
                    loop {
                        let (got, _, _) = device_run(&be, g, p, mem);
                        assert_bits_eq(&f32s(&got, g, out), want, "a worker's run");
                        let v = be.upload(want).unwrap();
                        assert_bits_eq(&common::download(&be, &v), want, "a worker's copy");
                        if stop.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                    }
                })
            })
            .collect();
        let stopper = StopOnDrop(stop);
        started.wait();
        for round in 0..8 {
            let mut dp = DevicePlan::new(&b, g, p, GemvMode::F32, &mem.sizes()).unwrap();
            dp.write_all(mem).unwrap();
            dp.capture_graph().unwrap();
            dp.run_as(Submission::Graph).unwrap();
            let got = dp.read_f32(g.tensor(out).unwrap()).unwrap();
            assert_bits_eq(&got, want, &format!("replay {round}"));
        }
        drop(stopper);
        for w in workers {
            w.join().unwrap();
        }
    });
}

#[test]
fn timed_runs_start_from_the_same_inputs() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (g, mem, out) = decode_layer(DType::Q4_0);
    let p = plan(&g);
    let mut dp = DevicePlan::new(&b, &g, &p, GemvMode::F32, &mem.sizes()).unwrap();
    dp.write_all(&mem).unwrap();
    dp.run().unwrap();
    let once = dp.read_f32(g.tensor(out).unwrap()).unwrap();
    // A second run without restoring updates the residual stream again.
    dp.run().unwrap();
    let twice = dp.read_f32(g.tensor(out).unwrap()).unwrap();
    assert!(
        once.iter()
            .zip(&twice)
            .any(|(a, b)| a.to_bits() != b.to_bits()),
        "the second run should have changed the residual stream"
    );
    let times = dp.run_timed(3, Submission::Stream).unwrap();
    assert_eq!(times.len(), 3);
    assert!(times.iter().all(|t| t.is_finite() && *t > 0.0), "{times:?}");
    let timed = dp.read_f32(g.tensor(out).unwrap()).unwrap();
    assert_bits_eq(&timed, &once, "after timed runs");
    // Without the host waiting between restore and run, the same.
    for _ in 0..2 {
        let t = dp.time_once_queued(Submission::Stream).unwrap();
        assert!(t.is_finite() && t > 0.0, "{t}");
    }
    let queued = dp.read_f32(g.tensor(out).unwrap()).unwrap();
    assert_bits_eq(&queued, &once, "after queued timed runs");
}

/// A GEMV whose activations sit at byte 4 of their buffer (the kernel
/// loads them as 16-byte vectors) and whose epilogue operand sits at byte
/// 2 (not even 4-byte aligned): both are copied into scratch buffers first.
#[test]
fn misaligned_tensors_are_copied() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (k, m) = (1024 + 64, 96);
    let mut g = Graph::new();
    let rb = DType::Q4_0.row_bytes(k).unwrap();
    let w = TensorDesc::contiguous(DType::Q4_0, [k, m, 1, 1], BufferId(0), 0).unwrap();
    let x = TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), 4).unwrap();
    let r = TensorDesc::contiguous(DType::F32, [m, 1, 1, 1], BufferId(2), 2).unwrap();
    let (wn, xn, rn) = (
        g.input(w).unwrap(),
        g.input(x).unwrap(),
        g.input(r).unwrap(),
    );
    let y = g.mul_mat(wn, xn, Place::at(1, 8192)).unwrap();
    let y = g.add(y, rn, Place::at(1, 8192)).unwrap();
    g.mark_output(y).unwrap();
    let mut mem = Memory::new(&[rb * m, 8192 + 4 * m, 4 * m + 4]);
    mem.buffer_mut(BufferId(0))
        .unwrap()
        .copy_from_slice(&quantized(DType::Q4_0, k, m, 5));
    mem.write(&x, &data(k, 6)).unwrap();
    mem.write(&r, &data(m, 7)).unwrap();
    let p = plan(&g);
    assert_eq!(p.fused_steps(), 1, "{p:?}");
    let want = host_run(&b, &g, &p, &mem);
    let (got, stats, launched) = device_run(&b, &g, &p, &mem);
    assert_same_memory(&got, &want, "misaligned");
    assert_eq!(stats.launches, 1, "{stats:?}");
    assert_eq!(stats.copies, 2, "{stats:?}");
    assert_eq!(stats.copy_bytes, (4 * k + 4 * m) as u64);
    assert_eq!(launched, 3);
}

/// A GEMV and an FWHT that overwrite their own input: each reads a copy
/// made first (other blocks would otherwise read what one has already
/// written), as the host executor copies an aliased input.
#[test]
fn kernels_that_overwrite_their_input_read_a_copy() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    let k = 256;
    let mut g = Graph::new();
    let w = TensorDesc::contiguous(DType::Q8_0, [k, k, 1, 1], BufferId(0), 0).unwrap();
    let x = TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), 0).unwrap();
    let h = TensorDesc::strided(DType::F32, [k, k, 1, 1], [4, 0, 0, 0], BufferId(2), 0).unwrap();
    let (wn, xn, hn) = (
        g.input(w).unwrap(),
        g.input(x).unwrap(),
        g.input(h).unwrap(),
    );
    let y = g.mul_mat(wn, xn, Place::at(1, 0)).unwrap();
    let z = g.mul_mat_hadamard(hn, y, Place::at(1, 0)).unwrap();
    g.mark_output(z).unwrap();
    let mut mem = Memory::new(&[DType::Q8_0.row_bytes(k).unwrap() * k, 4 * k, 4 * k]);
    mem.buffer_mut(BufferId(0))
        .unwrap()
        .copy_from_slice(&quantized(DType::Q8_0, k, k, 3));
    mem.write(&x, &data(k, 4)).unwrap();
    let p = plan(&g);
    let want = host_run(&b, &g, &p, &mem);
    let (got, stats, _) = device_run(&b, &g, &p, &mem);
    assert_same_memory(&got, &want, "in place");
    assert_eq!(stats.launches, 2);
    assert_eq!(stats.copies, 2, "{stats:?}");
}

#[test]
fn unsupported_plans_are_refused_with_typed_errors() {
    let _serial = serial();
    let Some(b) = backend_or_skip() else {
        return;
    };
    // Q5_0 weights: kernels with f32 activations and with GGML's Q8_0
    // activations.
    let (g5, mem5, _) = decode_layer(DType::Q5_0);
    let build = |mode| DevicePlan::new(&b, &g5, &plan(&g5), mode, &mem5.sizes()).map(|_| ());
    assert_eq!(build(GemvMode::F32), Ok(()));
    assert_eq!(build(GemvMode::Ggml), Ok(()));
    let (g, mem, _) = decode_layer(DType::Q4_0);
    let sz = mem.sizes();
    // An element-wise operand broadcast along a row (not over rows).
    let mut g2 = Graph::new();
    let a = TensorDesc::contiguous(DType::F32, [8, 2, 1, 1], BufferId(0), 0).unwrap();
    let c = TensorDesc::contiguous(DType::F32, [1, 2, 1, 1], BufferId(0), 64).unwrap();
    let (an, cn) = (g2.input(a).unwrap(), g2.input(c).unwrap());
    let y = g2.add(an, cn, Place::at(0, 128)).unwrap();
    g2.mark_output(y).unwrap();
    let r = DevicePlan::new(&b, &g2, &plan(&g2), GemvMode::F32, &[256]).map(|_| ());
    assert!(
        matches!(r, Err(CudaError::Core(Error::Unsupported(_)))),
        "{r:?}"
    );
    // A buffer shorter than its tensors.
    let short = [sz[0], 100];
    let r = DevicePlan::new(&b, &g, &plan(&g), GemvMode::F32, &short).map(|_| ());
    assert!(
        matches!(r, Err(CudaError::Core(Error::BufferTooShort { .. }))),
        "{r:?}"
    );
    // A graph replay before a capture.
    let dp = DevicePlan::new(&b, &g, &plan(&g), GemvMode::F32, &sz).unwrap();
    let r = dp.run_as(Submission::Graph);
    assert!(
        matches!(r, Err(CudaError::Core(Error::Unsupported(_)))),
        "{r:?}"
    );
}
