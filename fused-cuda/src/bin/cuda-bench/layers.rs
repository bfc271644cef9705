//! Decode layers fused against unfused (direct launches and device plans),
//! q/k/v projections, the F16 FFN layer PyTorch also runs.

use crate::data::{ROTATE_BYTES, randv, weight_bytes};
use crate::gemv::BATCHINGS;
use crate::timing::{device_plan, median, plan_ms, report_host, time_calls};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::graph::{Graph, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, plan};
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::weights::WeightMatrix;
use fused_cuda::{
    CudaBackend, CudaError, DeviceActs, DeviceVec, DeviceWeights, GemvJob, LaunchOptions,
    Submission,
};

/// The sections that run device plans (`--plans-only` runs just these):
/// decode layers and q/k/v projections.
pub(crate) fn plans(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    for (dtype, mode) in [
        (DType::Q4_0, GemvMode::Ggml),
        (DType::Q4_0, GemvMode::F32),
        (DType::F16, GemvMode::F32),
    ] {
        plan_layer(be, dtype, mode, ceiling)?;
    }
    for (dtype, mode) in [(DType::Q4_0, GemvMode::Ggml), (DType::F16, GemvMode::F32)] {
        qkv_layers(be, dtype, mode, ceiling)?;
    }
    report_host("decode layers");
    Ok(())
}

/// A Q4_0 decode layer (d = 4096, ff = 11008, 1 token) through the
/// `DeviceVec` entry points with activations fed per `mode`, fused (o-proj
/// with the residual, SiLU-GLU, down with the residual) against unfused
/// (the same GEMV kernels, separate element-wise launches): launches and
/// µs per layer.
pub(crate) fn decode_layer(
    be: &CudaBackend,
    mode: ActQuant,
    ceiling: f64,
) -> Result<(), CudaError> {
    let (d, ff) = (4096usize, 11008usize);
    println!(
        "\n## Decode layer (d = {d}, ff = {ff}, Q4_0, {mode:?} activations, 1 token): o-proj + residual, SiLU-GLU, down + residual\n"
    );

    let dtype = DType::Q4_0;
    struct Layer {
        o: DeviceWeights,
        g: DeviceWeights,
        u: DeviceWeights,
        down: DeviceWeights,
    }
    let mk = |rows, k, seed| -> Result<DeviceWeights, CudaError> {
        let bytes = weight_bytes(dtype, rows, k, seed);
        be.upload_weights(&WeightMatrix::new(dtype, rows, k, &bytes)?)
    };
    let layers = (0..3)
        .map(|l| {
            Ok(Layer {
                o: mk(d, d, 10 + l)?,
                g: mk(ff, d, 20 + l)?,
                u: mk(ff, d, 30 + l)?,
                down: mk(d, ff, 40 + l)?,
            })
        })
        .collect::<Result<Vec<_>, CudaError>>()?;
    let layer_bytes =
        (layers[0].o.bytes() + layers[0].g.bytes() + layers[0].u.bytes() + layers[0].down.bytes())
            as f64;
    let attn = be.upload(&randv(d, 11))?;
    let resid = be.upload(&randv(d, 12))?;
    let mut h = be.alloc(d)?;
    let mut t = be.alloc(d)?;
    let mut gate = be.alloc(ff)?;
    let mut up = be.alloc(ff)?;
    let mut act = be.alloc(ff)?;
    let mut out = be.alloc(d)?;
    let add = Epilogue::NONE.then_add()?;
    let fused_layer = |l: &Layer,
                       h: &mut DeviceVec,
                       act: &mut DeviceVec,
                       out: &mut DeviceVec|
     -> Result<(), CudaError> {
        be.gemv_batch(
            &attn,
            1,
            mode,
            &mut [GemvJob::new(&l.o, h).with_epilogue(&add, &[&resid])],
        )?;
        be.gemv_batch(
            h,
            1,
            mode,
            &mut [fused_cuda::GemvJob::new(&l.g, act).with_glu(&l.u, Activation::Silu)],
        )?;
        be.gemv_batch(
            act,
            1,
            mode,
            &mut [GemvJob::new(&l.down, out).with_epilogue(&add, &[h])],
        )
    };
    // In a quantized mode, also with the o-projection and the gated GEMV
    // writing their outputs quantized for the next GEMV
    // (`GemvJob::with_quantized_output`): one quantizer launch a layer.
    let folded = (mode != ActQuant::F32)
        .then(|| Ok::<_, CudaError>((be.alloc_acts(mode, d, 1)?, be.alloc_acts(mode, ff, 1)?)))
        .transpose()?;
    let folded_layer = |l: &Layer,
                        h: &mut DeviceVec,
                        act: &mut DeviceVec,
                        out: &mut DeviceVec,
                        (qh, qa): &mut (DeviceActs, DeviceActs)|
     -> Result<(), CudaError> {
        let resid_op = [&resid];
        let o = GemvJob::new(&l.o, h).with_epilogue(&add, &resid_op);
        be.gemv_batch(&attn, 1, mode, &mut [o.with_quantized_output(qh)])?;
        let glu = GemvJob::new(&l.g, act).with_glu(&l.u, Activation::Silu);
        be.gemv_quantized_batch(qh, &mut [glu.with_quantized_output(qa)])?;
        be.gemv_quantized_batch(
            qa,
            &mut [fused_cuda::GemvJob::new(&l.down, out).with_epilogue(&add, &[h])],
        )
    };
    be.reset_launches();
    fused_layer(&layers[0], &mut h, &mut act, &mut out)?;
    let launches_fused = be.launches();
    let mut folded = folded
        .map(|mut q| -> Result<_, CudaError> {
            be.reset_launches();
            folded_layer(&layers[0], &mut h, &mut act, &mut out, &mut q)?;
            Ok((q, be.launches()))
        })
        .transpose()?;
    let mut unfused_layer = |l: &Layer| -> Result<(), CudaError> {
        be.gemv_batch(&attn, 1, mode, &mut [GemvJob::new(&l.o, &mut t)])?;
        be.elementwise(fused_cuda::Elementwise::Add(&t, &resid), &mut h)?;
        be.gemv_batch(&h, 1, mode, &mut [GemvJob::new(&l.g, &mut gate)])?;
        be.gemv_batch(&h, 1, mode, &mut [GemvJob::new(&l.u, &mut up)])?;
        be.elementwise(
            fused_cuda::Elementwise::Glu(Activation::Silu, &gate, &up),
            &mut act,
        )?;
        be.gemv_batch(&act, 1, mode, &mut [GemvJob::new(&l.down, &mut t)])?;
        be.elementwise(fused_cuda::Elementwise::Add(&t, &h), &mut out)
    };
    be.reset_launches();
    unfused_layer(&layers[0])?;
    let launches_unfused = be.launches();
    let t_unfused = time_calls(be, 6, 30, |i| unfused_layer(&layers[i % layers.len()]))?;
    let mut h2 = be.alloc(d)?;
    let mut act2 = be.alloc(ff)?;
    let mut out2 = be.alloc(d)?;
    let t_fused = time_calls(be, 6, 30, |i| {
        fused_layer(&layers[i % layers.len()], &mut h2, &mut act2, &mut out2)
    })?;
    let t_folded = match &mut folded {
        Some((q, launches)) => Some((
            *launches,
            time_calls(be, 6, 30, |i| {
                folded_layer(&layers[i % layers.len()], &mut h2, &mut act2, &mut out2, q)
            })?,
        )),
        None => None,
    };
    println!(
        "| variant | launches/layer | µs/layer | weight GB/s | % of copy |\n| --- | ---: | ---: | ---: | ---: |"
    );
    let mut rows = vec![("fused", launches_fused, t_fused)];
    if let Some((launches, tm)) = t_folded {
        rows.insert(0, ("fused, quantizers folded", launches, tm));
    }
    rows.push(("unfused", launches_unfused, t_unfused));
    for (name, launches, tm) in rows {
        let gbs = layer_bytes / tm / 1e6;
        println!(
            "| {name} | {launches} | {:.1} | {gbs:.0} | {:.0}% |",
            tm * 1e3,
            100.0 * gbs / ceiling
        );
    }
    print!("\n(fused/unfused time: {:.3}", t_fused / t_unfused);
    if let Some((_, tm)) = t_folded {
        print!("; with the quantizers folded: {:.3}", tm / t_unfused);
    }
    println!(")");
    Ok(())
}

/// A decode layer as a core graph (`h += W_o · attn(h)`, then `h += W_d ·
/// (silu(W_g·h) ⊙ (W_u·h))`, the residual stream updated in place; weights
/// in buffer 0, activations in buffer 1, `attn` an opaque copy), its
/// memory, and the weight bytes.
fn layer_graph(dtype: DType, d: usize, ff: usize) -> Result<(Graph, Memory, usize), CudaError> {
    let mut g = Graph::new();
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let mut wnext = 0;
    let mut weight = |g: &mut Graph, k: usize, m: usize, seed: u64| -> Result<_, CudaError> {
        let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), wnext)?;
        wnext += (dtype.row_bytes(k)? * m).next_multiple_of(256);
        inits.push((t, weight_bytes(dtype, m, k, seed)));
        Ok(g.input(t)?)
    };
    let w_o = weight(&mut g, d, d, 80)?;
    let w_g = weight(&mut g, d, ff, 81)?;
    let w_u = weight(&mut g, d, ff, 82)?;
    let w_d = weight(&mut g, ff, d, 83)?;
    let mut anext = 4 * d;
    let mut act = |n: usize| {
        let p = Place::at(1, anext);
        anext += (4 * n).next_multiple_of(256);
        p
    };
    let res = Place::at(1, 0);
    let h = TensorDesc::contiguous(DType::F32, [d, 1, 1, 1], BufferId(1), 0)?;
    let hv: Vec<u8> = randv(d, 84).iter().flat_map(|v| v.to_le_bytes()).collect();
    inits.push((h, hv));
    let h = g.input(h)?;
    let attn = g.other("attention", &[h], [d, 1, 1, 1], act(d))?;
    let o = g.mul_mat(w_o, attn, act(d))?;
    let h1 = g.add(o, h, res)?;
    let gate = g.mul_mat(w_g, h1, act(ff))?;
    let up = g.mul_mat(w_u, h1, act(ff))?;
    let a = g.glu(Activation::Silu, gate, up, act(ff))?;
    let down = g.mul_mat(w_d, a, act(d))?;
    let h2 = g.add(down, h1, res)?;
    g.mark_output(h2)?;
    let mut mem = Memory::new(&[wnext, anext]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes)?;
    }
    Ok((g, mem, wnext))
}

/// The decode layer compiled through the backend contract into its device plan,
/// fused and unfused, each run as launches enqueued on the stream and as a
/// CUDA graph replay: µs per layer (median of 50 event-timed runs, the
/// residual stream restored before each, outside the timing) and launches.
fn plan_layer(
    be: &CudaBackend,
    dtype: DType,
    mode: GemvMode,
    ceiling: f64,
) -> Result<(), CudaError> {
    let (d, ff) = (4096usize, 11008usize);
    let acts = mode.act_quant(dtype);
    println!(
        "\n## Decode layer through the device plan ({dtype}, {acts:?} activations, d = {d}, ff = {ff}, 1 token): stream vs CUDA graph\n"
    );
    let (g, mem, weight_bytes) = layer_graph(dtype, d, ff)?;
    let sizes: Vec<usize> = (0u32..2)
        .map(|b| mem.buffer(BufferId(b)).map(<[u8]>::len))
        .collect::<Result<_, _>>()?;
    println!(
        "| plan | launches/layer | stream µs | graph µs | graph/stream | weight GB/s (best) | % of copy |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut best = [0.0f64; 7];
    let saved = be.options();
    // The fused plan also with LaunchOptions::fold_quantizers (no
    // quantizer launch where a GEMV produced the input); the unfused plan also
    // with LaunchOptions::overlap (its up GEMV, on the gate GEMV's input,
    // starts without waiting for the gate GEMV) and LaunchOptions::group
    // (the two GEMVs in one launch).
    let batched = |(overlap, group)| LaunchOptions {
        overlap,
        group,
        ..saved
    };
    let folded = LaunchOptions {
        fold_quantizers: true,
        ..saved
    };
    // Both plans also without LaunchOptions::l2_ahead (each integer GEMV
    // asking L2 for the next GEMV's first weights).
    let no_ahead = |o: LaunchOptions| LaunchOptions { l2_ahead: 0, ..o };
    let rows = [
        ("fused", plan(&g), saved),
        ("fused, quantizers folded", plan(&g), folded),
        ("unfused", Plan::unfused(&g), batched(BATCHINGS[0])),
        ("unfused, overlap", Plan::unfused(&g), batched(BATCHINGS[1])),
        ("unfused, group", Plan::unfused(&g), batched(BATCHINGS[2])),
        ("fused, no L2 look-ahead", plan(&g), no_ahead(saved)),
        (
            "unfused, no L2 look-ahead",
            Plan::unfused(&g),
            no_ahead(batched(BATCHINGS[0])),
        ),
    ];
    for (i, (name, p, options)) in rows.into_iter().enumerate() {
        be.set_options(options);
        let mut dp = device_plan(be, &g, &p, mode, &sizes)?;
        dp.write_all(&mem)?;
        dp.capture_graph()?;
        let (stream, graph) = (
            plan_ms(be, &dp, 50, Submission::Stream)?,
            plan_ms(be, &dp, 50, Submission::Graph)?,
        );
        be.set_options(saved);
        best[i] = stream.min(graph);
        let gbs = weight_bytes as f64 / best[i] / 1e6;
        println!(
            "| {name} | {} ({} quantizers, {} folded) | {:.1} | {:.1} | {:.3} | {gbs:.0} | {:.0}% |",
            dp.device_stats().enqueued(),
            dp.device_stats().quantizations,
            dp.device_stats().folded_quantizations,
            stream * 1e3,
            graph * 1e3,
            graph / stream,
            100.0 * gbs / ceiling
        );
    }
    println!(
        "\n(fused/unfused, best of stream and graph: {:.3}; against the unfused plan with \
         overlap: {:.3}, with overlap and group: {:.3}; the fused plan with folded \
         quantizers against the unfused: {:.3}; L2 look-ahead on / off, fused: {:.3}, \
         unfused: {:.3})",
        best[0] / best[2],
        best[0] / best[3],
        best[0] / best[4],
        best[1] / best[2],
        best[0] / best[5],
        best[2] / best[6]
    );
    Ok(())
}

/// Attention input projections of a stack of decode layers through the
/// device plan: per layer q = W_q·h, k = W_k·h, v = W_v·h (d = 4096, GQA
/// kv = 1024), then an opaque attention node (a device copy of q) that
/// feeds the next layer; 8 layers, so the weights exceed L2. In a quantized
/// mode h is quantized once per layer for the three GEMVs. Timed without
/// and with `LaunchOptions::overlap` (k and v start without waiting for
/// the GEMV before them), and with `LaunchOptions::group` too (the three
/// in one launch), the plans taking turns: µs per layer.
fn qkv_layers(
    be: &CudaBackend,
    dtype: DType,
    mode: GemvMode,
    ceiling: f64,
) -> Result<(), CudaError> {
    let (d, kv, layers) = (4096usize, 1024usize, 8usize);
    let acts = mode.act_quant(dtype);
    println!(
        "\n## Attention input projections through the device plan ({dtype}, {acts:?} activations, \
         d = {d}, kv = {kv}, {layers} layers): without and with overlap, and grouped\n"
    );
    let mut g = Graph::new();
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let (mut wnext, mut anext) = (0usize, 0usize);
    let mut act = |n: usize| {
        let p = Place::at(1, anext);
        anext += (4 * n).next_multiple_of(256);
        p
    };
    let h0 = TensorDesc::contiguous(DType::F32, [d, 1, 1, 1], BufferId(1), act(d).offset)?;
    inits.push((
        h0,
        randv(d, 90).iter().flat_map(|v| v.to_le_bytes()).collect(),
    ));
    let mut h = g.input(h0)?;
    for l in 0..layers as u64 {
        let mut proj = |g: &mut Graph, m: usize, seed: u64| -> Result<_, CudaError> {
            let t = TensorDesc::contiguous(dtype, [d, m, 1, 1], BufferId(0), wnext)?;
            wnext += (dtype.row_bytes(d)? * m).next_multiple_of(256);
            inits.push((t, weight_bytes(dtype, m, d, seed)));
            let w = g.input(t)?;
            Ok(g.mul_mat(w, h, act(m))?)
        };
        let q = proj(&mut g, d, 100 + 3 * l)?;
        let k = proj(&mut g, kv, 101 + 3 * l)?;
        let v = proj(&mut g, kv, 102 + 3 * l)?;
        h = g.other("attention", &[q, k, v], [d, 1, 1, 1], act(d))?;
    }
    g.mark_output(h)?;
    let mut mem = Memory::new(&[wnext, anext]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes)?;
    }
    let sizes = [wnext, anext];
    let p = plan(&g);
    let saved = be.options();
    let mut dps = Vec::new();
    for (overlap, group) in BATCHINGS {
        be.set_options(LaunchOptions {
            overlap,
            group,
            ..saved
        });
        let mut dp = device_plan(be, &g, &p, mode, &sizes)?;
        dp.write_all(&mem)?;
        dp.capture_graph()?;
        dps.push(dp);
    }
    // Rounds taking turns; the options as each plan was captured with.
    let mut t: [[Vec<f64>; 2]; 3] = Default::default();
    for _round in 0..3 {
        for (i, dp) in dps.iter().enumerate() {
            let (overlap, group) = BATCHINGS[i];
            be.set_options(LaunchOptions {
                overlap,
                group,
                ..saved
            });
            for (j, how) in [Submission::Stream, Submission::Graph]
                .into_iter()
                .enumerate()
            {
                t[i][j].push(plan_ms(be, dp, 20, how)?);
            }
        }
    }
    be.set_options(saved);
    println!(
        "| overlap | group | launches/run | quantizers | stream µs/layer | graph µs/layer | weight GB/s (best) | % of copy |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut best = [0.0f64; 3];
    let on = |b: bool| if b { "on" } else { "off" };
    for (i, dp) in dps.iter().enumerate() {
        let [stream, graph] = t[i].clone().map(median);
        best[i] = stream.min(graph);
        let gbs = wnext as f64 / best[i] / 1e6;
        let (overlap, group) = BATCHINGS[i];
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {gbs:.0} | {:.0}% |",
            on(overlap),
            on(group),
            dp.device_stats().enqueued(),
            dp.device_stats().quantizations,
            stream * 1e3 / layers as f64,
            graph * 1e3 / layers as f64,
            100.0 * gbs / ceiling
        );
    }
    println!(
        "\n(against neither, best of stream and graph: with overlap {:.3}, with overlap and \
         group {:.3})",
        best[1] / best[0],
        best[2] / best[0]
    );
    Ok(())
}

/// The F16 FFN decode layer that `fused-cuda/benches/torch_compare.py`
/// measures in PyTorch: `down · (silu(gate·h) ⊙ (up·h)) + h`, d = 4096,
/// ff = 11008, one token, layers rotated over > 240 MB; µs per layer.
pub(crate) fn ffn_f16(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    let (d, ff) = (4096usize, 11008usize);
    println!(
        "\n## F16 FFN decode layer (d = {d}, ff = {ff}, 1 token): down·(silu(gate·h) ⊙ up·h) + h\n"
    );
    let mk = |rows, k, seed| -> Result<DeviceWeights, CudaError> {
        let bytes = weight_bytes(DType::F16, rows, k, seed);
        be.upload_weights(&WeightMatrix::new(DType::F16, rows, k, &bytes)?)
    };
    let layer_bytes = 3 * d * ff * 2;
    let n = ROTATE_BYTES.div_ceil(layer_bytes).max(2);
    let layers = (0..n as u64)
        .map(|l| Ok([mk(ff, d, 50 + l)?, mk(ff, d, 60 + l)?, mk(d, ff, 70 + l)?]))
        .collect::<Result<Vec<_>, CudaError>>()?;
    let h = be.upload(&randv(d, 13))?;
    let (mut gate, mut up, mut act) = (be.alloc(ff)?, be.alloc(ff)?, be.alloc(ff)?);
    let (mut t, mut out) = (be.alloc(d)?, be.alloc(d)?);
    let add = Epilogue::NONE.then_add()?;
    let t_fused = time_calls(be, 2 * n, 30, |i| {
        let [g, u, down] = &layers[i % n];
        be.gemv_batch(
            &h,
            1,
            ActQuant::F32,
            &mut [fused_cuda::GemvJob::new(g, &mut act).with_glu(u, Activation::Silu)],
        )?;
        be.gemv_batch(
            &act,
            1,
            ActQuant::F32,
            &mut [GemvJob::new(down, &mut out).with_epilogue(&add, &[&h])],
        )
    })?;
    let t_unfused = time_calls(be, 2 * n, 30, |i| {
        let [g, u, down] = &layers[i % n];
        be.gemv_batch(&h, 1, ActQuant::F32, &mut [GemvJob::new(g, &mut gate)])?;
        be.gemv_batch(&h, 1, ActQuant::F32, &mut [GemvJob::new(u, &mut up)])?;
        be.elementwise(
            fused_cuda::Elementwise::Glu(Activation::Silu, &gate, &up),
            &mut act,
        )?;
        be.gemv_batch(&act, 1, ActQuant::F32, &mut [GemvJob::new(down, &mut t)])?;
        be.elementwise(fused_cuda::Elementwise::Add(&t, &h), &mut out)
    })?;
    println!(
        "| variant | launches/layer | µs/layer | weight GB/s | % of copy |\n| --- | ---: | ---: | ---: | ---: |"
    );
    for (name, launches, tm) in [("fused", 2, t_fused), ("unfused", 5, t_unfused)] {
        let gbs = layer_bytes as f64 / tm / 1e6;
        println!(
            "| {name} | {launches} | {:.1} | {gbs:.0} | {:.0}% |",
            tm * 1e3,
            100.0 * gbs / ceiling
        );
    }
    println!("\n({n} layer copies; PyTorch: fused-cuda/benches/torch_compare.py)");
    Ok(())
}
