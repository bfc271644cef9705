//! What the epilogue chain adds to a bare GEMV.

use crate::data::{DEFAULT_SHAPES, randv, weight_copies};
use crate::gemv::{BATCHINGS, BatchInput, batch_per_call};
use crate::timing::{median, time_calls};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_cuda::{
    CudaBackend, CudaError, DeviceVec, DeviceWeights, GemvJob, L2_AHEAD_DEFAULT, LaunchOptions,
};

/// [`epilogue_cost`] of Q4_0 weights at both default shapes, and of Q4_K
/// at 4096 × 14336 (`--epilogue-only`).
pub(crate) fn epilogue_costs(be: &CudaBackend) -> Result<(), CudaError> {
    for (m, k) in DEFAULT_SHAPES {
        let ws = weight_copies(be, DType::Q4_0, m, k)?;
        epilogue_costs_at(be, &ws, m, k)?;
    }
    let (m, k) = DEFAULT_SHAPES[0];
    epilogue_costs_at(be, &weight_copies(be, DType::Q4_K, m, k)?, m, k)
}

/// The epilogue's cost over the weight copies `ws` (`m × k`; Q4_0: the
/// shortest call at 4096 × 14336, where a fixed cost weighs most): every
/// mode at 4096 rows, GGML's elsewhere.
pub(crate) fn epilogue_costs_at(
    be: &CudaBackend,
    ws: &[DeviceWeights],
    m: usize,
    k: usize,
) -> Result<(), CudaError> {
    for mode in [ActQuant::F32, ActQuant::ggml(ws[0].dtype())] {
        if m == 4096 || mode != ActQuant::F32 {
            epilogue_cost(be, ws, mode, m, k)?;
        }
    }
    Ok(())
}

/// The cost of the epilogue silu·mul + residual over a bare GEMV of the
/// weights `ws` (`m × k`, rotated) with activations fed per `mode`: bare,
/// fused with the operands loaded after the block's sums and when it starts
/// (`LaunchOptions::early_operands`), the latter also with the generic
/// chain instead of its fixed kernel (`LaunchOptions::fixed_epilogues`
/// off), taking turns, and unfused (3
/// element-wise launches after the GEMV); in a quantized mode also the GEMV
/// alone on activations quantized beforehand.
fn epilogue_cost(
    be: &CudaBackend,
    ws: &[DeviceWeights],
    mode: ActQuant,
    m: usize,
    k: usize,
) -> Result<(), CudaError> {
    let x = be.upload(&randv(k, 4))?;
    let gate_like = be.upload(&randv(m, 5))?;
    let residual = be.upload(&randv(m, 6))?;
    let mut y = be.alloc(m)?;
    let epi = Epilogue::NONE
        .then_act(Activation::Silu)
        .and_then(|e| e.then_mul())
        .and_then(|e| e.then_add())?;
    let ops = [&gate_like, &residual];
    let n = ws.len();
    let q = (mode != ActQuant::F32)
        .then(|| be.quantize_acts(mode, &x, 1))
        .transpose()?;
    let saved = be.options();
    let late = LaunchOptions {
        early_operands: false,
        ..saved
    };
    let early = LaunchOptions {
        early_operands: true,
        fixed_epilogues: true,
        ..saved
    };
    let generic = LaunchOptions {
        fixed_epilogues: false,
        ..early
    };
    // Bare, fused with the operands loaded late and early (the fixed chain's
    // kernel, and the generic chain), taking turns; with `alone` the GEMV on
    // activations quantized beforehand.
    let time = |alone: bool, epi: &Epilogue, ops: &[&DeviceVec], y: &mut DeviceVec| {
        time_calls(be, n * 2, 9, |i| {
            if alone {
                be.gemv_quantized_batch(
                    q.as_ref().expect("quantized"),
                    &mut [fused_cuda::GemvJob::new(&ws[i % n], y).with_epilogue(epi, ops)],
                )
            } else {
                be.gemv_batch(
                    &x,
                    1,
                    mode,
                    &mut [GemvJob::new(&ws[i % n], y).with_epilogue(epi, ops)],
                )
            }
        })
    };
    let mut t: [Vec<f64>; 4] = Default::default();
    let mut t_alone: [Vec<f64>; 4] = Default::default();
    for _round in 0..3 {
        for (slot, o) in [(0, saved), (1, late), (2, early), (3, generic)] {
            be.set_options(o);
            let (e, ops): (&Epilogue, &[&DeviceVec]) = if slot == 0 {
                (&Epilogue::NONE, &[])
            } else {
                (&epi, &ops)
            };
            t[slot].push(time(false, e, ops, &mut y)?);
            if mode != ActQuant::F32 {
                t_alone[slot].push(time(true, e, ops, &mut y)?);
            }
        }
    }
    // Each stage alone, then pairs of them (operands early), taking turns
    // with the bare GEMV: which part of the chain costs; in a quantized
    // mode also with the GEMV alone (activations quantized beforehand). The
    // chains with kernels of their own (add, silu·mul + add) also with the
    // generic chain.
    let one: [(&str, Epilogue, Vec<&DeviceVec>, LaunchOptions); 10] = [
        ("bare", Epilogue::NONE, vec![], early),
        // The chain's control flow without arithmetic.
        (
            "identity",
            Epilogue::NONE.then_act(Activation::Identity)?,
            vec![],
            early,
        ),
        (
            "silu",
            Epilogue::NONE.then_act(Activation::Silu)?,
            vec![],
            early,
        ),
        ("mul", Epilogue::NONE.then_mul()?, vec![&gate_like], early),
        (
            "add (fixed)",
            Epilogue::NONE.then_add()?,
            vec![&residual],
            early,
        ),
        (
            "add (generic)",
            Epilogue::NONE.then_add()?,
            vec![&residual],
            generic,
        ),
        (
            "silu·mul",
            Epilogue::NONE.then_act(Activation::Silu)?.then_mul()?,
            vec![&gate_like],
            early,
        ),
        (
            "mul + add",
            Epilogue::NONE.then_mul()?.then_add()?,
            vec![&gate_like, &residual],
            early,
        ),
        ("silu·mul + add (fixed)", epi, ops.to_vec(), early),
        ("silu·mul + add (generic)", epi, ops.to_vec(), generic),
    ];
    let alone_modes: &[bool] = if mode == ActQuant::F32 {
        &[false]
    } else {
        &[false, true]
    };
    for &alone in alone_modes {
        let mut t_one: [Vec<f64>; 10] = Default::default();
        for _round in 0..3 {
            for (slot, (_, e, o, opts)) in one.iter().enumerate() {
                be.set_options(*opts);
                t_one[slot].push(time(alone, e, o, &mut y)?);
            }
        }
        let t_one = t_one.map(median);
        let stages: Vec<String> = one
            .iter()
            .zip(t_one)
            .skip(1)
            .map(|((name, _, _, _), t)| {
                format!(
                    "{name} {:.2} µs ({:+.1}%)",
                    t * 1e3,
                    100.0 * (t / t_one[0] - 1.0)
                )
            })
            .collect();
        println!(
            "Epilogue stages one at a time and in pairs ({mode:?}{}, operands early): bare {:.2} µs; {}",
            if alone { ", GEMV alone" } else { "" },
            t_one[0] * 1e3,
            stages.join(", ")
        );
    }
    be.set_options(saved);
    let [bare, late_t, early_t, generic_t] = t.map(median);
    let mut t1 = be.alloc(m)?;
    let mut t2 = be.alloc(m)?;
    let unfused = time_calls(be, n * 2, 25, |i| {
        be.gemv_batch(&x, 1, mode, &mut [GemvJob::new(&ws[i % n], &mut y)])?;
        be.elementwise(
            fused_cuda::Elementwise::Unary(Activation::Silu, &y),
            &mut t1,
        )?;
        be.elementwise(fused_cuda::Elementwise::Mul(&t1, &gate_like), &mut t2)?;
        be.elementwise(fused_cuda::Elementwise::Add(&t2, &residual), &mut t1)
    })?;
    let dtype = ws[0].dtype();
    let pct = |t: f64| 100.0 * (t / bare - 1.0);
    println!(
        "\nEpilogue silu·mul + residual, {dtype} {m} × {k}, {mode:?} activations, 1 column: \
         bare GEMV {:.2} µs; fused epilogue, operands loaded after the sums {:.2} µs ({:+.1}%), \
         loaded when the block starts {:.2} µs ({:+.1}%), the same with the generic chain \
         {:.2} µs ({:+.1}%); unfused (GEMV + 3 element-wise launches) {:.2} µs",
        bare * 1e3,
        late_t * 1e3,
        pct(late_t),
        early_t * 1e3,
        pct(early_t),
        generic_t * 1e3,
        pct(generic_t),
        unfused * 1e3
    );
    // Batched with overlap, and grouped (independent calls, one output
    // each; operands early), bare and fused taking turns.
    be.set_options(early);
    for (what, batching) in [("with overlap", BATCHINGS[1]), ("grouped", BATCHINGS[2])] {
        let mut t_batch: [Vec<f64>; 2] = Default::default();
        for _round in 0..3 {
            let none = &Epilogue::NONE;
            let input = BatchInput::Vector {
                x: &x,
                n_cols: 1,
                mode,
            };
            t_batch[0].push(batch_per_call(be, ws, input, batching, none, &[])?);
            t_batch[1].push(batch_per_call(be, ws, input, batching, &epi, &ops)?);
        }
        let [bare_b, fused_b] = t_batch.map(median);
        println!(
            "Batched {what} ({mode:?} activations, one quantizer per batch where quantized; \
             {n} independent calls, one output each): bare {:.2} µs/call, fused silu·mul + \
             residual {:.2} µs/call ({:+.1}%)",
            bare_b * 1e3,
            fused_b * 1e3,
            100.0 * (fused_b / bare_b - 1.0)
        );
    }
    be.set_options(saved);
    if mode != ActQuant::F32 {
        let [bare, late_t, early_t, generic_t] = t_alone.map(median);
        println!(
            "GEMV alone (activations quantized beforehand): bare {:.2} µs, fused late {:.2} µs \
             ({:+.1}%), early {:.2} µs ({:+.1}%), early with the generic chain {:.2} µs \
             ({:+.1}%)",
            bare * 1e3,
            late_t * 1e3,
            100.0 * (late_t / bare - 1.0),
            early_t * 1e3,
            100.0 * (early_t / bare - 1.0),
            generic_t * 1e3,
            100.0 * (generic_t / bare - 1.0)
        );
    }
    // As a device plan runs a chain of GEMVs (`LaunchOptions::l2_ahead`):
    // each call asking L2 for the next call's first weights as its blocks
    // start; bare and fused taking turns.
    let ahead_bytes = L2_AHEAD_DEFAULT.min(ws[0].bytes());
    let time_ahead = |alone: bool, epi: &Epilogue, ops: &[&DeviceVec], y: &mut DeviceVec| {
        time_calls(be, n * 2, 9, |i| {
            let job = GemvJob::new(&ws[i % n], y)
                .with_epilogue(epi, ops)
                .with_l2_ahead(&ws[(i + 1) % n], mode, ahead_bytes);
            match (alone, &q) {
                (true, Some(q)) => be.gemv_quantized_batch(q, &mut [job]),
                _ => be.gemv_batch(&x, 1, mode, &mut [job]),
            }
        })
    };
    for &alone in alone_modes {
        let mut t_ahead: [Vec<f64>; 2] = Default::default();
        for _round in 0..3 {
            t_ahead[0].push(time_ahead(alone, &Epilogue::NONE, &[], &mut y)?);
            t_ahead[1].push(time_ahead(alone, &epi, &ops, &mut y)?);
        }
        let [bare_a, fused_a] = t_ahead.map(median);
        println!(
            "With the L2 look-ahead ({} MiB of the next call's weights{}): bare {:.2} µs, \
             fused silu·mul + residual {:.2} µs ({:+.1}%)",
            ahead_bytes >> 20,
            if alone { ", GEMV alone" } else { "" },
            bare_a * 1e3,
            fused_a * 1e3,
            100.0 * (fused_a / bare_a - 1.0)
        );
    }
    println!();
    Ok(())
}
