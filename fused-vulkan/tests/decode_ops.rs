//! The decode ops (RoPE, row writes into KV caches kept as state,
//! attention, argmax) on the device plan, not the host fallback: one
//! command buffer recorded once and replayed at positions written into
//! device memory before each run, against the core's reference evaluator.
//! RoPE, the row writes and argmax bit for bit; attention within NMSE
//! 1e-6, over a context short enough for one pass and one long enough for
//! split attention; no validation message.

mod common;

use common::{
    assert_no_validation_messages, backend_or_skip, backend_with_or_skip, data,
    first_bit_difference, nmse, validation,
};
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, Resident, ResidentPlan};
use fused_core::decode::RopeMode;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::plan;
use fused_core::reference::eval::eval_graph;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_vulkan::{ContextOptions, VulkanBackend};

/// The sizes of one decode step's attention.
#[derive(Clone, Copy, Debug)]
struct Shape {
    head_dim: usize,
    n_head: usize,
    n_kv: usize,
    /// Cache rows (the longest context).
    rows: usize,
    /// Values of each argmax column.
    vocab: usize,
}

/// The graph of one decode step and the nodes a test writes and reads.
struct Step {
    g: Graph,
    mem: Memory,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    pos: NodeId,
    logits: NodeId,
    /// Results compared bit for bit.
    exact: Vec<NodeId>,
    att: NodeId,
    /// Both caches, as one tensor.
    caches: TensorDesc,
}

fn f32t(ne: [usize; 4], buf: u32, at: usize) -> TensorDesc {
    TensorDesc::contiguous(DType::F32, ne, BufferId(buf), at).unwrap()
}

/// RoPE of q in place (Adjacent) and of k (Halves), both appended to
/// caches kept as state, attention over them, argmax over two columns of
/// logits, and a row write that is not in place (the v cache with k's row,
/// into a buffer of its own). Several tensors lie 4 bytes past a 16-byte
/// boundary, so that the kernels reach them through wider bindings.
fn decode_step(s: Shape) -> Step {
    let Shape {
        head_dim: d,
        n_head,
        n_kv,
        rows,
        vocab,
    } = s;
    let f = |n: usize| 4 * n;
    let kv = d * n_kv;
    let q_at = 0;
    let k_at = f(d * n_head) + 4;
    let v_at = (k_at + f(kv)).next_multiple_of(16);
    let table_at = v_at + f(kv);
    let pos_at = table_at + f(d * rows) + 4;
    let logits_at = (pos_at + 4).next_multiple_of(16);
    let in_size = logits_at + f(2 * vocab);
    let cache = f(kv * rows);
    let mut g = Graph::new();
    let q = g.input(f32t([d, n_head, 1, 1], 0, q_at)).unwrap();
    let k = g.input(f32t([d, n_kv, 1, 1], 0, k_at)).unwrap();
    let v = g.input(f32t([kv, 1, 1, 1], 0, v_at)).unwrap();
    let table = g.input(f32t([d, rows, 1, 1], 0, table_at)).unwrap();
    let pos = g.input(f32t([1, 1, 1, 1], 0, pos_at)).unwrap();
    let logits = g.input(f32t([vocab, 2, 1, 1], 0, logits_at)).unwrap();
    let kc = g.state(f32t([d, n_kv, rows, 1], 1, 0)).unwrap();
    let vc = g.state(f32t([d, n_kv, rows, 1], 1, cache)).unwrap();
    let kc_rows = g.reshape(kc, [kv, rows, 1, 1]).unwrap();
    let vc_rows = g.reshape(vc, [kv, rows, 1, 1]).unwrap();
    let qr = g
        .rope(RopeMode::Adjacent, q, table, pos, Place::at(0, q_at))
        .unwrap();
    let kr = g
        .rope(RopeMode::Halves, k, table, pos, Place::at(2, 4))
        .unwrap();
    let kw = g.set_row(kc_rows, kr, pos, Place::at(1, 0)).unwrap();
    let vw = g.set_row(vc_rows, v, pos, Place::at(1, cache)).unwrap();
    let side = g.set_row(vw, kr, pos, Place::at(3, 4)).unwrap();
    let kw3 = g.reshape(kw, [d, n_kv, rows, 1]).unwrap();
    let vw3 = g.reshape(vw, [d, n_kv, rows, 1]).unwrap();
    let att_at = f(d * n_kv + 4);
    let scale = 1.0 / (d as f32).sqrt();
    let att = g
        .attention(qr, kw3, vw3, pos, scale, Place::at(2, att_at))
        .unwrap();
    let best_at = att_at + f(d * n_head) + 4;
    let best = g.argmax(logits, Place::at(2, best_at)).unwrap();
    for id in [qr, kr, att, best, side] {
        g.mark_output(id).unwrap();
    }
    let mut mem = Memory::new(&[in_size, 2 * cache, best_at + f(2), 4 + cache]);
    let angles: Vec<f32> = (0..rows)
        .flat_map(|p| {
            (0..d / 2).flat_map(move |i| {
                let theta = p as f32 * 10000f32.powf(-2.0 * i as f32 / d as f32);
                [theta.cos(), theta.sin()]
            })
        })
        .collect();
    mem.write(g.tensor(table).unwrap(), &angles).unwrap();
    // Caches full of earlier tokens, so that a late position attends over
    // values, not zeros.
    let caches = f32t([2 * kv * rows, 1, 1, 1], 1, 0);
    mem.write(&caches, &data(2 * kv * rows, 5)).unwrap();
    Step {
        g,
        mem,
        q,
        k,
        v,
        pos,
        logits,
        exact: vec![qr, kr, best, side],
        att,
        caches,
    }
}

/// Logits for run `run`: column 0 random with NaNs and a tie of its
/// maximum (the first must win); column 1 either NaN throughout (index 0)
/// or NaN but for a tie on either side of a 4096-value boundary (where the
/// device cuts long columns).
fn logits(vocab: usize, run: usize) -> Vec<f32> {
    let mut x = data(2 * vocab, 100 + run as u64);
    let (t0, t1) = (vocab / 3, 2 * vocab / 3);
    x[t0] = 9.0;
    x[t1] = 9.0;
    x[0] = f32::NAN;
    x[vocab - 1] = f32::NAN;
    let col1 = &mut x[vocab..];
    col1.fill(f32::NAN);
    if run % 2 == 1 && vocab > 4096 {
        col1[4095] = -0.5;
        col1[4096] = -0.5;
    } else if run % 2 == 1 {
        col1[vocab - 1] = -0.5;
    }
    x
}

/// Compiles the step on `b`, checks that it is the device plan of
/// `launches` dispatches, and runs it at each of `positions`, comparing
/// with the reference after each run.
fn check_step(b: &VulkanBackend, s: Shape, launches: u64, positions: &[f32]) {
    let Step {
        g,
        mut mem,
        q,
        k,
        v,
        pos,
        logits: lg,
        exact,
        att,
        caches,
    } = decode_step(s);
    let p = plan(&g);
    let mut rp = b.compile(&g, &p, GemvMode::F32, &mem.sizes()).unwrap();
    assert!(
        matches!(rp, Resident::Device(_)),
        "{s:?}: fell back to the host plan: {:?}",
        rp.fallback_reason()
    );
    let stats = rp.stats();
    assert!(!stats.host_steps, "{stats:?}");
    assert_eq!(stats.launches, launches, "{stats:?}");
    assert_eq!(stats.copies, 0, "every tensor bound in place: {stats:?}");
    rp.write_all(&mem).unwrap();
    let kv = s.head_dim * s.n_kv;
    for (run, &position) in positions.iter().enumerate() {
        let case = format!("{s:?}, run {run} at position {position}");
        for (id, x) in [
            (q, data(s.head_dim * s.n_head, 10 + run as u64)),
            (k, data(kv, 20 + run as u64)),
            (v, data(kv, 30 + run as u64)),
            (lg, logits(s.vocab, run)),
            (pos, vec![position]),
        ] {
            let t = *g.tensor(id).unwrap();
            mem.write(&t, &x).unwrap();
            rp.write_f32(&t, &x).unwrap();
        }
        eval_graph(&g, &mut mem, GemvMode::F32).unwrap();
        rp.run().unwrap();
        for id in exact.iter().copied() {
            let t = g.tensor(id).unwrap();
            let (got, want) = (rp.read_f32(t).unwrap(), mem.read(t).unwrap());
            let name = g.node(id).unwrap().op().name();
            assert_eq!(
                first_bit_difference(&got, &want),
                None,
                "{case}: {name} (node {})",
                id.index()
            );
        }
        let (got, want) = (rp.read_f32(&caches).unwrap(), mem.read(&caches).unwrap());
        assert_eq!(first_bit_difference(&got, &want), None, "{case}: caches");
        let t = g.tensor(att).unwrap();
        let (got, want) = (rp.read_f32(t).unwrap(), mem.read(t).unwrap());
        assert!(want.iter().all(|x| x.is_finite()), "{case}: reference");
        let e = nmse(&got, &want);
        assert!(e <= 1e-6, "{case}: attention NMSE {e:e}");
    }
    // The caches are state: a restore leaves them as the runs wrote them.
    rp.restore_inputs().unwrap();
    let (got, want) = (rp.read_f32(&caches).unwrap(), mem.read(&caches).unwrap());
    assert_eq!(
        first_bit_difference(&got, &want),
        None,
        "caches after restore"
    );
}

/// A short context (one attention pass, one argmax pass a column), a
/// head of 96 values (not dividing the workgroup) and one key/value head
/// for every query head.
#[test]
fn decode_ops_run_on_the_device_over_a_short_context() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let s = Shape {
        head_dim: 96,
        n_head: 4,
        n_kv: 1,
        rows: 40,
        vocab: 37,
    };
    // Two RoPEs, three row writes, attention, argmax.
    check_step(&b, s, 7, &[0.0, 1.0, 2.5, 39.0, 1e9, -3.0, f32::NAN, 17.0]);
    assert_no_validation_messages(&b);
}

/// A context of 3000 rows (six attention splits and the pass joining
/// them; positions on both sides of a split boundary, at the end and past
/// it) and a Llama-3 vocabulary of 128256 values (argmax in 32 splits and
/// a joining pass), grouped-query heads.
#[test]
fn decode_ops_run_on_the_device_over_a_long_context() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let s = Shape {
        head_dim: 64,
        n_head: 8,
        n_kv: 2,
        rows: 3000,
        vocab: 128_256,
    };
    // Attention and argmax in two passes each.
    check_step(&b, s, 9, &[0.0, 511.0, 512.0, 1500.0, 2999.0, 5000.0]);
    assert_no_validation_messages(&b);
}

/// Device-local buffers reached through staging copies (as on a discrete
/// GPU): the position and the inputs written before each run by staged
/// partial writes, the results read back the same way.
#[test]
fn decode_ops_run_on_staged_device_buffers() {
    let Some(b) = backend_with_or_skip(ContextOptions {
        validation: validation(),
        staged_buffers: true,
    }) else {
        return;
    };
    let s = Shape {
        head_dim: 32,
        n_head: 4,
        n_kv: 2,
        rows: 600,
        vocab: 5000,
    };
    check_step(&b, s, 9, &[3.0, 599.0, 512.0]);
    assert_no_validation_messages(&b);
}

/// Heads longer than the attention kernel's workgroup are refused as
/// unsupported before anything is recorded: the plan falls back to the
/// host, whole.
#[test]
fn attention_heads_over_256_values_fall_back_to_the_host_plan() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let step = decode_step(Shape {
        head_dim: 320,
        n_head: 2,
        n_kv: 1,
        rows: 8,
        vocab: 37,
    });
    let p = plan(&step.g);
    let rp = b
        .compile(&step.g, &p, GemvMode::F32, &step.mem.sizes())
        .unwrap();
    assert!(
        matches!(
            rp.fallback_reason(),
            Some(fused_core::Error::Unsupported(_))
        ),
        "{:?}",
        rp.fallback_reason()
    );
    assert!(rp.stats().host_steps);
    assert_no_validation_messages(&b);
}
