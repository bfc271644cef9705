//! fused-vulkan-bench: device-timed medians (timestamp queries) of the copy
//! bandwidth ceiling, signed FWHT fused vs unfused, and GEMV.
//!
//! `fused-vulkan-bench [REPS] [MIB] [sweep|fwht|quantize|plans]`: REPS timed
//! runs per case (default 9), MIB MiB of FWHT input (default 64); `sweep`
//! also times FWHT plans and the Q8-mode GEMV shapes (barrier between calls)
//! of a small grid, `fwht` the FWHT plans only, `quantize` the activation
//! quantizer only, in its default shape and a grid of launch shapes,
//! `plans` the ceiling and the decode-layer plans only.
//!
//! The decode-layer plans (last in the default run): fused-testkit's decode
//! layer (q/k/v, attention output + residual, gated feed-forward + residual;
//! Q4_0 weights, f32 and GGML activations) planned fused and unfused, each
//! plan compiled through the backend contract (`Backend::compile`) and
//! timed by `ResidentPlan::time_once`: H=1024/F=2816 (7 MB of weights: in
//! the H200's L2 after the first run), and with MIB ≥ 64 also
//! H=4096/F=11008 (114 MB); GB/s of weight bytes.
//!
//! Quantized weights are timed with f32 activations (the `F32` mode) and
//! with activations quantized as GGML does (`Q8_0`, `Q8_1` or `Q8_K` per
//! format; quantized once before timing, the quantizer timed on its own
//! line): F16, Q8_0, Q4_0 and Q4_K at 4096 × 14336 and 32768 × 8192, the
//! other formats at 4096 × 14336.
//!
//! The ceiling is the faster of two device-to-device copies of 512 MiB (or
//! the device's largest storage buffer, if smaller):
//! `vkCmdCopyBuffer` and a compute shader with 16-byte loads and stores
//! (bytes read plus bytes written). GEMVs rotate over enough weight copies
//! (at least four, at least 2 × 60 MB: the H200's L2 twice) that every call
//! reads memory: rounds of one call per copy, back to back (no barrier) or
//! with a barrier between calls. Every timed submission runs about 4 ms
//! (passes or rounds repeated) so that the GPU stays busy and its driver
//! keeps the clocks up.

use fused_core::DType;
use fused_core::acts::{ActQuant, GemvMode};
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::planner::{Plan, plan};
use fused_testkit::layer::DecodeLayer;
use fused_vulkan::timing::{self, GemvBench, Timing};
use fused_vulkan::{ContextOptions, FwhtVariant, GemvShape, QuantizeShape, VulkanBackend};

fn line(what: &str, t: Timing, ceiling: f64) {
    println!(
        "{what:<60} {:>10.1} us  {:>8.1} GB/s  {:>5.1} % of ceiling",
        t.median_ns / 1e3,
        t.gb_per_s(),
        100.0 * t.gb_per_s() / ceiling
    );
}

/// Times `g` with activations fed per `mode` in its default shape, back to
/// back and with a barrier between calls (after a line naming the shape);
/// the shape and the case's name.
fn time_gemv(
    b: &VulkanBackend,
    g: &mut GemvBench,
    mode: ActQuant,
    reps: usize,
    ceiling: f64,
) -> Result<(GemvShape, String), Box<dyn std::error::Error>> {
    let (dtype, (m, k)) = (g.dtype(), g.shape());
    g.set_mode(mode)?;
    let shape = b.gemv_shape(dtype, mode, 1, false)?;
    println!(
        "GEMV {dtype:?} {mode:?}-mode shape: workgroup {} rows {} unroll {} lanes {}",
        shape.workgroup, shape.rows, shape.unroll, shape.lanes
    );
    let what = format!(
        "GEMV {dtype:?} x {mode:?} {m}x{k}, {} copies, {} calls",
        g.copies(),
        g.calls()
    );
    line(
        &format!("{what}, back to back"),
        g.time(None, false, reps)?,
        ceiling,
    );
    line(
        &format!("{what}, barrier between"),
        g.time(None, true, reps)?,
        ceiling,
    );
    Ok((shape, what))
}

/// The shapes the sweep times: with f32 activations, and in the Q8 mode
/// (`lanes`: the picked lanes, also tried with 1 and half).
fn sweep_shapes(subgroup_reduce: bool, lanes: Option<u32>) -> Vec<GemvShape> {
    let mut v = Vec::new();
    if let Some(l) = lanes {
        let mut ls = vec![l, l / 2, 1];
        ls.retain(|&v| v >= 1);
        ls.dedup();
        for lanes in ls {
            for (workgroup, rows, unroll) in [
                (128, 1, 2),
                (128, 2, 1),
                (128, 2, 2),
                (128, 4, 1),
                (128, 4, 2),
                (64, 2, 2),
                (64, 4, 2),
                (256, 1, 2),
                (256, 2, 1),
                (256, 2, 2),
                (256, 4, 1),
                (512, 2, 1),
            ] {
                v.push(GemvShape {
                    workgroup,
                    rows,
                    unroll,
                    subgroup_reduce,
                    lanes,
                });
            }
        }
        return v;
    }
    for (workgroup, rows, unroll) in [
        (128, 2, 2),
        (128, 4, 1),
        (128, 4, 2),
        (128, 4, 4),
        (128, 8, 1),
        (128, 8, 2),
        (64, 4, 2),
        (64, 8, 2),
        (256, 2, 4),
        (256, 4, 2),
        (256, 8, 1),
        (512, 4, 1),
    ] {
        v.push(GemvShape {
            workgroup,
            rows,
            unroll,
            subgroup_reduce,
            lanes: 1,
        });
    }
    v
}

/// The K values the quantizer lines time (those of the GEMV shapes).
const QUANTIZE_KS: [usize; 2] = [14336, 8192];

/// The activation quantizer alone: its default shape, then every shape of
/// a grid (time only: one dispatch moves too few bytes for a bandwidth).
fn quantize_sweep(b: &mut VulkanBackend, reps: usize) -> Result<(), Box<dyn std::error::Error>> {
    // For scale: a shader copy of one column's f32 values, about the
    // shortest dispatch there is.
    let bytes = 4 * QUANTIZE_KS[1] as u64;
    let floor = timing::copy_shader(b, bytes, reps)?;
    let default = b.tuning();
    println!(
        "copy {bytes} bytes, compute shader (a minimal dispatch) {:>10.2} us",
        floor.median_ns / 1e3
    );
    for k in QUANTIZE_KS {
        for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
            let t = timing::quantize(b, mode, k, 1, reps)?;
            println!(
                "quantize {mode:?} activations, K={k}, 1 column, default shape {:>10.2} us",
                t.median_ns / 1e3
            );
            for values_per_thread in [4, 8, 16, 32] {
                for workgroup in [32, 64, 128, 256] {
                    let shape = QuantizeShape {
                        workgroup,
                        values_per_thread,
                    };
                    // Shapes the shader cannot take are skipped.
                    if b.set_tuning(default.with_quantize_shape(mode, shape))
                        .is_err()
                    {
                        continue;
                    }
                    let timed = timing::quantize(b, mode, k, 1, reps);
                    b.set_tuning(default)?;
                    if let Ok(t) = timed {
                        println!(
                            "  sweep quantize {mode:?} K={k}: {values_per_thread} values per thread, workgroup {workgroup}: {:>8.2} us",
                            t.median_ns / 1e3
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// The decode layers the plans section times (hidden, FFN): the small one
/// always, the medium one too with `mib` at least the default 64.
fn plan_shapes(mib: usize) -> &'static [(usize, usize)] {
    if mib >= 64 {
        &[(1024, 2816), (4096, 11008)]
    } else {
        &[(1024, 2816)]
    }
}

/// How long a plan runs untimed before its timed runs.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(200);

/// fused-testkit's decode layer of each of `shapes` (Q4_0 weights), planned
/// fused and unfused by the core planner, each plan compiled through
/// [`Backend::compile`], written once and timed by
/// [`ResidentPlan::time_once`] (the residual stream restored before each
/// run, untimed) `reps` times after [`WARM_UP`] of untimed runs: the
/// median, GB/s of weight bytes, the fused/unfused ratio, launches and
/// barriers per run.
fn plans(
    b: &VulkanBackend,
    shapes: &[(usize, usize)],
    reps: usize,
    ceiling: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let dtype = DType::Q4_0;
    let max_range = b.context().info().max_storage_range() as usize;
    for &(h, f) in shapes {
        let layer = DecodeLayer::new(dtype, h, f, 41);
        let sizes = layer.mem.sizes();
        if sizes.iter().any(|&s| s > max_range) {
            println!(
                "plan decode layer {dtype:?} H={h} F={f}: skipped: a buffer exceeds maxStorageBufferRange {max_range}"
            );
            continue;
        }
        let bytes = layer
            .weights
            .iter()
            .map(|t| (t.byte_extent().end - t.byte_extent().start) as u64)
            .sum();
        let both = [
            ("fused", plan(&layer.graph)),
            ("unfused", Plan::unfused(&layer.graph)),
        ];
        for mode in [GemvMode::F32, GemvMode::Ggml] {
            let mut medians = [0.0; 2];
            for ((name, p), median) in both.iter().zip(&mut medians) {
                let mut rp = Backend::compile(b, &layer.graph, p, mode, &sizes)?;
                rp.write_all(&layer.mem)?;
                // Untimed runs first, so that the driver raises the clocks.
                let warm = std::time::Instant::now();
                while warm.elapsed() < WARM_UP {
                    rp.time_once()?;
                }
                let mut ns = (0..reps.max(1))
                    .map(|_| Ok(rp.time_once()?.best().as_secs_f64() * 1e9))
                    .collect::<Result<Vec<f64>, fused_vulkan::VulkanError>>()?;
                ns.sort_by(f64::total_cmp);
                *median = ns[ns.len() / 2];
                line(
                    &format!("plan decode layer {dtype:?} x {mode:?} H={h} F={f}, {name}"),
                    Timing {
                        median_ns: *median,
                        bytes,
                    },
                    ceiling,
                );
                let s = rp.stats();
                println!(
                    "  {name} plan: {} dispatches, {} barriers, {} kernel steps per run{}",
                    s.launches,
                    s.barriers,
                    s.kernel_steps,
                    if s.host_steps {
                        " (run step by step on the host: the device executor refused it)"
                    } else {
                        ""
                    }
                );
            }
            println!(
                "{:<60} {:>10.2}x",
                "  fused time / unfused time",
                medians[0] / medians[1]
            );
        }
    }
    Ok(())
}

/// An error naming every message the validation layer reported, if any.
fn validation_clean(b: &VulkanBackend) -> Result<(), Box<dyn std::error::Error>> {
    let msgs = b.context().validation_messages();
    if !msgs.is_empty() {
        return Err(format!("{} validation messages: {}", msgs.len(), msgs.join("\n")).into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(9);
    let mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let sweep_arg = args.next();
    // `sweep`: FWHT plans and Q8-mode GEMV shapes; `fwht`: FWHT plans only.
    let sweep = sweep_arg.as_deref() == Some("sweep");
    let sweep_fwht = sweep || sweep_arg.as_deref() == Some("fwht");
    // The validation layer on with FUSED_VK_VALIDATION set to anything but 0.
    let validation = std::env::var_os("FUSED_VK_VALIDATION").is_some_and(|v| v != "0");
    let mut b = VulkanBackend::with_options(ContextOptions {
        validation,
        staged_buffers: false,
    })?;
    let default = b.tuning();
    let info = b.context().info().clone();
    let picked = b.fwht_plan(1024)?;
    println!(
        "device: {} ({:?}), subgroup {} ops {:?}, 16-bit storage {}, integer dot {}, FWHT variant {:?} {:?}, {} timed runs per case, medians",
        info.name(),
        info.device_type(),
        info.subgroup_size(),
        info.subgroup_ops(),
        info.storage_16bit(),
        info.integer_dot(),
        picked.variant,
        picked,
        reps
    );
    if sweep_arg.as_deref() == Some("quantize") {
        return quantize_sweep(&mut b, reps);
    }
    // 512 MiB, or the most a storage buffer takes (lavapipe: 128 MiB).
    let max_range = u64::from(info.max_storage_range());
    let copy_bytes = (512u64 << 20).min(max_range & !((1 << 20) - 1));
    let copy_mib = copy_bytes >> 20;
    let cmd = timing::copy(&b, copy_bytes, reps)?;
    let shader = timing::copy_shader(&b, copy_bytes, reps)?;
    let ceiling = cmd.gb_per_s().max(shader.gb_per_s());
    line(
        &format!("copy {copy_mib} MiB, vkCmdCopyBuffer"),
        cmd,
        ceiling,
    );
    line(
        &format!("copy {copy_mib} MiB, compute shader (uvec4)"),
        shader,
        ceiling,
    );
    println!(
        "ceiling: {ceiling:.1} GB/s ({})",
        if shader.gb_per_s() >= cmd.gb_per_s() {
            "the compute-shader copy, the faster"
        } else {
            "vkCmdCopyBuffer, the faster"
        }
    );
    if sweep_arg.as_deref() == Some("plans") {
        plans(&b, plan_shapes(mib), reps, ceiling)?;
        return validation_clean(&b);
    }
    let floats = (mib << 20) / 4;
    let n = 1024;
    let mut variants = vec![picked.variant];
    if variants[0] == FwhtVariant::Shuffle {
        variants.push(FwhtVariant::Shared);
    }
    for variant in variants {
        let forced = default.with_fwht_variant(Some(variant));
        b.set_tuning(forced)?;
        let fused = timing::fwht(&b, n, floats, true, reps)?;
        let unfused = timing::fwht(&b, n, floats, false, reps)?;
        line(
            &format!("FWHT N={n} signed {mib} MiB {variant:?}, fused"),
            fused,
            ceiling,
        );
        line(
            &format!("FWHT N={n} signed {mib} MiB {variant:?}, mul+barrier+FWHT"),
            unfused,
            ceiling,
        );
        println!(
            "{:<60} {:>10.2}x",
            "  fused time / unfused time",
            fused.median_ns / unfused.median_ns
        );
        if sweep_fwht {
            for (per_thread, min_wg, slabs) in [
                (4, 128, 1),
                (4, 256, 1),
                (8, 256, 1),
                (8, 128, 2),
                (32, 64, 1),
                (32, 256, 1),
                (32, 128, 2),
                (32, 128, 4),
                (32, 64, 4),
                (16, 128, 1),
                (16, 128, 4),
                (8, 128, 1),
            ] {
                let run = b
                    .set_tuning(forced.with_fwht_shape(per_thread, min_wg, slabs))
                    .and_then(|()| b.fwht_plan(n))
                    .and_then(|plan| timing::fwht(&b, n, floats, true, reps).map(|t| (plan, t)));
                let (plan, t) = match run {
                    Ok(v) => v,
                    Err(e) => {
                        println!(
                            "  sweep FWHT {variant:?} {per_thread} values, workgroup {min_wg}, {slabs} slabs: {e}"
                        );
                        continue;
                    }
                };
                println!(
                    "  sweep FWHT {variant:?} fused, {} threads per row, {} values each, workgroup {}, {} slabs: {:>8.1} GB/s {:>5.1} %",
                    plan.threads_per_row,
                    plan.values_per_thread,
                    plan.workgroup,
                    plan.slabs,
                    t.gb_per_s(),
                    100.0 * t.gb_per_s() / ceiling
                );
            }
        }
    }
    b.set_tuning(default)?;
    // The floor of a call: a GEMV that moves almost nothing (128 × 256 F16,
    // 64 KiB), 256 calls per submission, with and without a barrier
    // between calls. A bigger GEMV cannot take less than its bytes at the
    // ceiling plus (with barriers) this.
    let tiny = GemvBench::with_copies(&b, DType::F16, 128, 256, 4, 64)?;
    for ordered in [false, true] {
        line(
            &format!(
                "floor: GEMV F16 128x256, {} calls, {}",
                tiny.calls(),
                if ordered {
                    "barrier between"
                } else {
                    "back to back"
                }
            ),
            tiny.time(None, ordered, reps)?,
            ceiling,
        );
    }
    drop(tiny);
    for (m, k) in [(4096, 14336), (32768, 8192)] {
        for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
            line(
                &format!("quantize {mode:?} activations, K={k}, 1 column"),
                timing::quantize(&b, mode, k, 1, reps)?,
                ceiling,
            );
        }
        for dtype in [DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K] {
            let bytes = dtype.row_bytes(k)? * m;
            if bytes as u64 > max_range {
                println!(
                    "GEMV {dtype:?} {m}x{k}: skipped: its {bytes} bytes of weights exceed \
                     maxStorageBufferRange {max_range}"
                );
                continue;
            }
            let mut g = GemvBench::new(&b, dtype, m, k)?;
            let modes = if dtype == DType::F16 {
                vec![ActQuant::F32]
            } else {
                vec![ActQuant::F32, ActQuant::ggml(dtype)]
            };
            for mode in modes {
                let (shape, what) = time_gemv(&b, &mut g, mode, reps, ceiling)?;
                if matches!(dtype, DType::Q8_0 | DType::Q4_0) && info.storage_16bit() {
                    line(
                        &format!("{what}, back to back, 32-bit loads"),
                        g.time_loads(None, false, reps, false)?,
                        ceiling,
                    );
                }
                // The f32-mode shapes were swept before (BENCHMARKS.md).
                if sweep && mode != ActQuant::F32 {
                    let lanes = Some(shape.lanes);
                    let mut best: Option<(GemvShape, Timing)> = None;
                    for s in sweep_shapes(shape.subgroup_reduce, lanes) {
                        let t = match g.time(Some(s), true, reps) {
                            Ok(t) => t,
                            Err(e) => {
                                println!("  sweep {dtype:?} {mode:?} {s:?}: {e}");
                                continue;
                            }
                        };
                        println!(
                            "  sweep {dtype:?} {mode:?} {m}x{k} wg {:>3} rows {} unroll {} lanes {}: barrier between {:>8.1} GB/s {:>5.1} %",
                            s.workgroup,
                            s.rows,
                            s.unroll,
                            s.lanes,
                            t.gb_per_s(),
                            100.0 * t.gb_per_s() / ceiling
                        );
                        if best.is_none_or(|(_, bt)| t.median_ns < bt.median_ns) {
                            best = Some((s, t));
                        }
                    }
                    if let Some((s, t)) = best {
                        println!(
                            "  best {dtype:?} {mode:?} {m}x{k} (barrier between): {s:?} {:.1} GB/s {:.1} %",
                            t.gb_per_s(),
                            100.0 * t.gb_per_s() / ceiling
                        );
                    }
                }
            }
        }
    }
    // The formats without a tuned shader (gemv.comp's BF16, gemv_blocks.comp),
    // at 4096 × 14336 in both activation modes.
    let (m, k) = (4096, 14336);
    for dtype in [
        DType::F32,
        DType::BF16,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::IQ4_NL,
        DType::Q5_K,
        DType::Q6_K,
        DType::TQ2_0,
    ] {
        if (dtype.row_bytes(k)? * m) as u64 > max_range {
            println!("GEMV {dtype:?} {m}x{k}: skipped: its weights exceed maxStorageBufferRange");
            continue;
        }
        let mut g = GemvBench::new(&b, dtype, m, k)?;
        let modes = if dtype.is_quantized() {
            vec![ActQuant::F32, ActQuant::ggml(dtype)]
        } else {
            vec![ActQuant::F32]
        };
        for mode in modes {
            time_gemv(&b, &mut g, mode, reps, ceiling)?;
        }
    }
    plans(&b, plan_shapes(mib), reps, ceiling)?;
    // The same copy again: a much slower one means the device's clocks
    // changed during the run and the numbers above are not comparable.
    line(
        &format!("copy {copy_mib} MiB, compute shader, again at the end"),
        timing::copy_shader(&b, copy_bytes, reps)?,
        ceiling,
    );
    validation_clean(&b)
}
