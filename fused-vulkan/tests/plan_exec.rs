//! The device-resident plan executor ([`DevicePlan`]) against the
//! host-slice executor (the core's `Executor` over `VulkanBackend`): the
//! same kernels, so every buffer must come out bit for bit the same, fused
//! and unfused; dispatch, barrier and copy counts; typed refusals; timed
//! re-runs that start from the same inputs; no validation message.

mod common;

use common::{
    assert_no_validation_messages, backend_or_skip, backend_with_or_skip, data,
    first_bit_difference, validation,
};
use fused_core::acts::GemvMode;
use fused_core::backend::{PlanStats, ResidentPlan};
use fused_core::element::Activation;
use fused_core::exec::Executor;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, plan};
use fused_core::quant::quantize_row;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::{DType, Error};
use fused_testkit::suite::run_resident;
use fused_vulkan::{ContextOptions, DevicePlan, VulkanBackend, VulkanError};

/// Hidden and FFN sizes of the test layer (whole Q4_0/Q4_K blocks).
const H: usize = 256;
const F: usize = 512;

/// A decode layer: `h += W_o · attn(h)`, then `h += W_d · (silu(W_g·h) ⊙
/// (W_u·h))`, the residual stream updated in place at byte `res_at` of
/// buffer 1; weights of `dtype` in buffer 0, `attn` an opaque copy.
fn decode_layer(dtype: DType, res_at: usize) -> (Graph, Memory, NodeId) {
    let mut g = Graph::new();
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let mut wnext = 0;
    let mut weight = |g: &mut Graph, k: usize, m: usize, seed: u64| {
        let rb = dtype.row_bytes(k).unwrap();
        let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), wnext).unwrap();
        wnext += (rb * m).next_multiple_of(256);
        let scale = 1.0 / (k as f32).sqrt();
        let v: Vec<f32> = data(k * m, seed).iter().map(|x| x * scale).collect();
        let mut bytes = vec![0u8; rb * m];
        for (src, dst) in v.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
            quantize_row(dtype, src, dst).unwrap();
        }
        inits.push((t, bytes));
        g.input(t).unwrap()
    };
    let w_o = weight(&mut g, H, H, 1);
    let w_g = weight(&mut g, H, F, 2);
    let w_u = weight(&mut g, H, F, 3);
    let w_d = weight(&mut g, F, H, 4);
    let mut anext = 4096;
    let mut act = |n: usize| {
        let p = Place::at(1, anext);
        anext += 4 * n;
        p
    };
    let res = Place::at(1, res_at);
    let h = TensorDesc::contiguous(DType::F32, [H, 1, 1, 1], BufferId(1), res_at).unwrap();
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
fn host_run(b: &VulkanBackend, g: &Graph, p: &Plan, mem: &Memory) -> Memory {
    host_run_mode(b, g, p, mem, GemvMode::F32)
}

/// [`host_run`] with the activations fed per `mode`.
fn host_run_mode(b: &VulkanBackend, g: &Graph, p: &Plan, mem: &Memory, mode: GemvMode) -> Memory {
    let mut m = mem.clone();
    Executor::new(b, mode).run(g, p, &mut m).unwrap();
    m
}

/// Runs `p` once as a device plan; its memory afterwards and its counts.
fn device_run(b: &VulkanBackend, g: &Graph, p: &Plan, mem: &Memory) -> (Memory, PlanStats) {
    device_run_mode(b, g, p, mem, GemvMode::F32)
}

/// [`device_run`] with the activations fed per `mode`.
fn device_run_mode(
    b: &VulkanBackend,
    g: &Graph,
    p: &Plan,
    mem: &Memory,
    mode: GemvMode,
) -> (Memory, PlanStats) {
    run_resident(DevicePlan::new(b, g, p, mode, &mem.sizes()).unwrap(), mem).unwrap()
}

fn assert_same_memory(got: &Memory, want: &Memory, what: &str) {
    for i in 0u32.. {
        let (Ok(g), Ok(w)) = (got.buffer(BufferId(i)), want.buffer(BufferId(i))) else {
            break;
        };
        assert!(g == w, "{what}: buffer {i} differs");
    }
}

fn f32s(mem: &Memory, g: &Graph, id: NodeId) -> Vec<f32> {
    mem.read(g.tensor(id).unwrap()).unwrap()
}

#[test]
fn decode_layer_equals_the_host_slice_executor_bit_for_bit() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    for dtype in [DType::F16, DType::Q4_0, DType::Q6_K] {
        let (g, mem, out) = decode_layer(dtype, 0);
        let fused = plan(&g);
        let unfused = Plan::unfused(&g);
        assert_eq!(fused.fused_steps(), 3, "{fused:?}");
        let mut outs = Vec::new();
        for (p, name) in [(&fused, "fused"), (&unfused, "unfused")] {
            let what = format!("{dtype} {name}");
            let want = host_run(&b, &g, p, &mem);
            let (got, stats) = device_run(&b, &g, p, &mem);
            assert_same_memory(&got, &want, &what);
            let kernel_steps = p.kernel_steps(&g) as u64;
            assert_eq!(stats.kernel_steps, kernel_steps, "{what}");
            assert_eq!(stats.launches, kernel_steps, "{what}");
            assert_eq!(stats.copies, 0, "{what}: every tensor is bound in place");
            // Every step reads the one before, except the unfused gate and
            // up projections, which read the same input side by side.
            let independent = if p.fused_steps() == 0 { 1 } else { 0 };
            assert_eq!(stats.barriers, kernel_steps - 1 - independent, "{what}");
            outs.push(f32s(&got, &g, out));
        }
        assert_eq!(
            first_bit_difference(&outs[0], &outs[1]),
            None,
            "{dtype}: fused != unfused"
        );
    }
    assert_no_validation_messages(&b);
}

/// GGML's quantized activations (Q8_0 for Q8_0 and Q4_0 weights, Q8_K for
/// Q4_K): each GEMV step quantizes its input once (a gated step once for
/// both weights; the unfused gate and up steps of one input once for the
/// two) into a reused scratch buffer, then the Q8-mode GEMV reads it; the
/// result equals the host-slice executor's bit for bit, fused and unfused
/// alike.
#[test]
fn quantized_activations_equal_the_host_slice_executor_bit_for_bit() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q4_1] {
        let (g, mem, out) = decode_layer(dtype, 0);
        let fused = plan(&g);
        let unfused = Plan::unfused(&g);
        let mut outs = Vec::new();
        for (p, name) in [(&fused, "fused"), (&unfused, "unfused")] {
            let what = format!("{dtype} {name}");
            let want = host_run_mode(&b, &g, p, &mem, GemvMode::Ggml);
            let (got, stats) = device_run_mode(&b, &g, p, &mem, GemvMode::Ggml);
            assert_same_memory(&got, &want, &what);
            // One quantizer per GEMV input: 3 fused (o, gated gate/up,
            // down), 3 unfused as well (o, gate and up of one input, down),
            // though the unfused plan has 4 GEMV steps.
            let quantizers = 3;
            let kernel_steps = p.kernel_steps(&g) as u64;
            assert_eq!(stats.kernel_steps, kernel_steps, "{what}");
            assert_eq!(stats.launches, kernel_steps + quantizers, "{what}");
            assert_eq!(stats.quantizations, quantizers, "{what}");
            assert_eq!(stats.copies, 0, "{what}");
            outs.push(f32s(&got, &g, out));
        }
        assert_eq!(
            first_bit_difference(&outs[0], &outs[1]),
            None,
            "{dtype}: fused != unfused"
        );
        // Not the f32 mode's bits: the activations were quantized.
        let f32_mode = device_run(&b, &g, &fused, &mem).0;
        assert_ne!(f32s(&f32_mode, &g, out), outs[0], "{dtype}");
    }
    assert_no_validation_messages(&b);
}

/// A GEMV whose input sits at byte 4 of its buffer (not a valid
/// descriptor offset where the device asks for more) and whose epilogue
/// operands live in two buffers (copied into one operand buffer).
#[test]
fn misaligned_tensors_and_spread_operands_are_copied() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (k, m) = (128, 64);
    let mut g = Graph::new();
    let rb = DType::Q4_0.row_bytes(k).unwrap();
    let w = TensorDesc::contiguous(DType::Q4_0, [k, m, 1, 1], BufferId(0), 0).unwrap();
    let x = TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), 4).unwrap();
    let r = TensorDesc::contiguous(DType::F32, [m, 1, 1, 1], BufferId(2), 0).unwrap();
    let s = TensorDesc::contiguous(DType::F32, [m, 1, 1, 1], BufferId(1), 1024).unwrap();
    let (wn, xn, rn, sn) = (
        g.input(w).unwrap(),
        g.input(x).unwrap(),
        g.input(r).unwrap(),
        g.input(s).unwrap(),
    );
    let y = g.mul_mat(wn, xn, Place::at(1, 2048)).unwrap();
    let y = g.add(y, rn, Place::at(1, 2048)).unwrap();
    let y = g.mul(y, sn, Place::at(1, 2048)).unwrap();
    g.mark_output(y).unwrap();
    let mut mem = Memory::new(&[rb * m, 4096, 4 * m]);
    let wv = data(k * m, 5);
    let wb = mem.buffer_mut(BufferId(0)).unwrap();
    for (src, dst) in wv.chunks_exact(k).zip(wb.chunks_exact_mut(rb)) {
        quantize_row(DType::Q4_0, src, dst).unwrap();
    }
    mem.write(&x, &data(k, 6)).unwrap();
    mem.write(&r, &data(m, 7)).unwrap();
    mem.write(&s, &data(m, 8)).unwrap();
    let p = plan(&g);
    assert_eq!(p.fused_steps(), 1, "{p:?}");
    let want = host_run(&b, &g, &p, &mem);
    let (got, stats) = device_run(&b, &g, &p, &mem);
    assert_same_memory(&got, &want, "misaligned");
    // x (byte 4 is never a multiple of the binding alignment, 16 or more)
    // and both operands.
    assert_eq!(stats.copies, 3, "{stats:?}");
    assert_eq!(stats.copy_bytes, (4 * k + 2 * 4 * m) as u64);
    assert_eq!(stats.launches, 1);
    assert_eq!(stats.barriers, 1, "the copies, then the GEMV");
    assert_no_validation_messages(&b);
}

#[test]
fn unsupported_plans_are_refused_with_typed_errors() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (g, mem, _) = decode_layer(DType::Q4_0, 0);
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
        matches!(r, Err(VulkanError::Core(Error::Unsupported(_)))),
        "{r:?}"
    );
    // A buffer shorter than its tensors.
    let short = [sz[0], 100];
    let r = DevicePlan::new(&b, &g, &plan(&g), GemvMode::F32, &short).map(|_| ());
    assert!(
        matches!(r, Err(VulkanError::Core(Error::BufferTooShort { .. }))),
        "{r:?}"
    );
    assert_no_validation_messages(&b);
}

/// Device-local buffers reached through staging copies (as on a discrete
/// GPU): upload, timed re-runs with restored inputs and download agree
/// with the host-slice executor.
#[test]
fn staged_device_buffers_give_the_same_bits() {
    let Some(b) = backend_with_or_skip(ContextOptions {
        validation: validation(),
        staged_buffers: true,
    }) else {
        return;
    };
    #[cfg(feature = "lab")]
    assert!(!b.context().info().host_visible_buffers());
    let (g, mem, _) = decode_layer(DType::Q4_0, 0);
    let p = plan(&g);
    let want = host_run(&b, &g, &p, &mem);
    let mut dp = DevicePlan::new(&b, &g, &p, GemvMode::F32, &mem.sizes()).unwrap();
    dp.write_all(&mem).unwrap();
    dp.time_once().unwrap();
    dp.time_once().unwrap();
    let mut got = mem.clone();
    dp.read_all(&mut got).unwrap();
    assert_same_memory(&got, &want, "staged");
    assert_no_validation_messages(&b);
}

/// Partial writes and reads of device-local buffers (staged copies) touch
/// only their bytes: the contract suite's check on the staged path, which
/// lavapipe's host-visible buffers would not reach.
#[test]
fn staged_partial_writes_touch_only_their_bytes() {
    let Some(b) = backend_with_or_skip(ContextOptions {
        validation: validation(),
        staged_buffers: true,
    }) else {
        return;
    };
    fused_testkit::suite::partial_writes_touch_only_their_bytes(&b);
    assert_no_validation_messages(&b);
}

/// A GEMV and an FWHT that overwrite their own input: each reads a copy
/// made first (other workgroups would otherwise read what one has
/// already written), as the host executor copies an aliased input.
#[test]
fn kernels_that_overwrite_their_input_read_a_copy() {
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
    let rb = DType::Q8_0.row_bytes(k).unwrap();
    let mut mem = Memory::new(&[rb * k, 4 * k, 4 * k]);
    let wv = data(k * k, 3);
    let wb = mem.buffer_mut(BufferId(0)).unwrap();
    for (src, dst) in wv.chunks_exact(k).zip(wb.chunks_exact_mut(rb)) {
        quantize_row(DType::Q8_0, src, dst).unwrap();
    }
    mem.write(&x, &data(k, 4)).unwrap();
    let p = plan(&g);
    let want = host_run(&b, &g, &p, &mem);
    let (got, stats) = device_run(&b, &g, &p, &mem);
    assert_same_memory(&got, &want, "in place");
    assert_eq!(stats.launches, 2);
    assert_eq!(stats.copies, 2, "{stats:?}");
    assert_no_validation_messages(&b);
}

/// The lab's profile of a run: one time per recorded command, each GEMV
/// with the bytes of its weights, and the run computes what a plain run
/// does.
#[cfg(feature = "lab")]
#[test]
fn a_profiled_run_times_every_command_and_computes_the_same() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (g, mem, _) = decode_layer(DType::Q4_0, 0);
    let p = plan(&g);
    let (want, _) = device_run_mode(&b, &g, &p, &mem, GemvMode::Ggml);
    let mut dp = DevicePlan::new(&b, &g, &p, GemvMode::Ggml, &mem.sizes()).unwrap();
    dp.write_all(&mem).unwrap();
    let launches = fused_core::launch_profile::LaunchProfiler::profile_launches(&dp).unwrap();
    let s = dp.device_stats();
    assert_eq!(
        launches.len() as u64,
        s.dispatches + s.look_aheads + s.copies,
        "{launches:?}"
    );
    assert!(
        launches.iter().all(|l| l.ms.is_finite() && l.ms >= 0.0),
        "{launches:?}"
    );
    let rows = |k: usize, m: usize| (DType::Q4_0.row_bytes(k).unwrap() * m) as u64;
    // W_o, then W_g and W_u in one gated launch, then W_d.
    let gemvs: Vec<u64> = launches
        .iter()
        .map(|l| l.weight_bytes)
        .filter(|&w| w > 0)
        .collect();
    assert_eq!(
        gemvs,
        [rows(H, H), 2 * rows(H, F), rows(F, H)],
        "{launches:?}"
    );
    let mut got = mem.clone();
    dp.read_all(&mut got).unwrap();
    assert_same_memory(&got, &want, "profiled run");
    assert_no_validation_messages(&b);
}

/// The L2 look-ahead (the lab's `l2_between`): a read of the next GEMV's
/// weights beside each quantizer before a GEMV (two before the gated GEMV:
/// its gate's and its up's), with no barrier and no counted dispatch more
/// than without, and every bit of the run the same, also where the windows
/// cover the weights whole.
#[cfg(feature = "lab")]
#[test]
fn look_aheads_beside_the_quantizers_add_no_barrier_and_change_no_bit() {
    let (Some(mut b), Some(mut ahead)) = (backend_or_skip(), backend_or_skip()) else {
        return;
    };
    let tuning = b.tuning().with_l2_between(0);
    b.set_tuning(tuning).unwrap();
    let tuning = ahead.tuning().with_l2_between(1024);
    ahead.set_tuning(tuning).unwrap();
    let (g, mem, _) = decode_layer(DType::Q4_0, 0);
    let p = plan(&g);
    let run = |be: &VulkanBackend| {
        let mut dp = DevicePlan::new(be, &g, &p, GemvMode::Ggml, &mem.sizes()).unwrap();
        dp.write_all(&mem).unwrap();
        dp.run().unwrap();
        dp.run().unwrap();
        let mut out = mem.clone();
        dp.read_all(&mut out).unwrap();
        (out, dp.device_stats())
    };
    let (want, off) = run(&b);
    let (got, on) = run(&ahead);
    assert_eq!(off.look_aheads, 0, "{off:?}");
    assert_eq!(on.look_aheads, 4, "{on:?}");
    assert_eq!(
        (on.dispatches, on.barriers, on.quantizations),
        (off.dispatches, off.barriers, off.quantizations),
        "{on:?} against {off:?}"
    );
    assert_same_memory(&got, &want, "with the look-ahead");
    // Windows as large as the weights, reaching two GEMVs ahead: each
    // quantizer reads all of the next GEMV's weights, the same bits.
    let tuning = ahead.tuning().with_l2_between(1 << 30).with_l2_reach(2);
    ahead.set_tuning(tuning).unwrap();
    let (got, whole) = run(&ahead);
    assert_eq!(whole.look_aheads, 4, "{whole:?}");
    assert_same_memory(&got, &want, "with whole windows");
    assert_no_validation_messages(&b);
    assert_no_validation_messages(&ahead);
}

/// On device-local buffers (staged copies) a plan's small inputs and
/// outputs go through host mirrors: rewritten weights (whole, then a few
/// bytes) and a new residual stream (an input the plan overwrites) read
/// back before the run that uploads them, runs after each write, the
/// output and the residual read after each run and after a restore, every
/// byte equal to the same plan's on host-visible buffers.
#[test]
fn small_inputs_and_outputs_through_host_mirrors_keep_every_byte() {
    let (Some(host), Some(staged)) = (
        backend_or_skip(),
        backend_with_or_skip(ContextOptions {
            validation: validation(),
            staged_buffers: true,
        }),
    ) else {
        return;
    };
    let (g, mem, out) = decode_layer(DType::Q4_0, 0);
    let p = plan(&g);
    let w_o = *g.tensor(NodeId(0)).unwrap();
    let rb = DType::Q4_0.row_bytes(H).unwrap();
    let mut plans: Vec<DevicePlan<'_>> = [&host, &staged]
        .map(|b| {
            let mut dp = DevicePlan::new(b, &g, &p, GemvMode::Ggml, &mem.sizes()).unwrap();
            dp.write_all(&mem).unwrap();
            dp
        })
        .into();
    let out_t = *g.tensor(out).unwrap();
    let h_t = TensorDesc::contiguous(DType::F32, [H, 1, 1, 1], BufferId(1), 0).unwrap();
    for round in 0..3u64 {
        let resid: Vec<f32> = data(H, 60 + round);
        let mut rows = vec![0u8; rb * H];
        for (r, src) in rows
            .chunks_exact_mut(rb)
            .zip(data(H * H, 40 + round).chunks_exact(H))
        {
            quantize_row(DType::Q4_0, src, r).unwrap();
        }
        let mut seen = Vec::new();
        for dp in &mut plans {
            dp.write(w_o.buffer(), w_o.offset(), &rows).unwrap();
            // A few bytes in the middle of the matrix: a second write.
            dp.write(w_o.buffer(), w_o.offset() + 100, &[round as u8; 6])
                .unwrap();
            let mut back = vec![0u8; rb * H];
            dp.read(w_o.buffer(), w_o.offset(), &mut back).unwrap();
            let mut whole = vec![0u8; mem.sizes()[0]];
            dp.read(BufferId(0), 0, &mut whole).unwrap();
            dp.write_f32(&h_t, &resid).unwrap();
            let h_written = dp.read_f32(&h_t).unwrap();
            dp.run().unwrap();
            let after_run = [dp.read_f32(&out_t).unwrap(), dp.read_f32(&h_t).unwrap()];
            dp.restore_inputs().unwrap();
            let after_restore = [dp.read_f32(&out_t).unwrap(), dp.read_f32(&h_t).unwrap()];
            dp.run().unwrap();
            let mut all = mem.clone();
            dp.read_all(&mut all).unwrap();
            seen.push((back, whole, after_run, after_restore, all, h_written));
        }
        let (h, s) = (&seen[0], &seen[1]);
        assert!(
            h.0 == s.0 && h.1 == s.1,
            "round {round}: the weights read back"
        );
        assert_eq!(h.0[100..106], [round as u8; 6], "round {round}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&s.5),
            bits(&resid),
            "round {round}: the residual written"
        );
        for i in 0..2 {
            let what = ["the output", "the residual"][i];
            assert_eq!(
                bits(&h.2[i]),
                bits(&s.2[i]),
                "round {round}: {what} after the run"
            );
            assert_eq!(
                bits(&h.3[i]),
                bits(&s.3[i]),
                "round {round}: {what} after the restore"
            );
        }
        assert_eq!(
            bits(&s.3[1]),
            bits(&resid),
            "round {round}: the residual restored"
        );
        assert_ne!(
            bits(&s.2[1]),
            bits(&resid),
            "round {round}: the residual updated"
        );
        assert_same_memory(&s.4, &h.4, &format!("round {round}: everything"));
    }
    assert_no_validation_messages(&host);
    assert_no_validation_messages(&staged);
}
