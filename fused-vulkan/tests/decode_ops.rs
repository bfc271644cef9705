//! The decode ops (RoPE, row writes into KV caches kept as state,
//! attention, argmax) on the device plan, not the host fallback: one
//! command buffer recorded once and replayed at positions written into
//! device memory before each run, against the core's reference evaluator.
//! RoPE, the row writes and argmax bit for bit; attention within NMSE
//! 1e-6, over a context short enough for one pass and one long enough for
//! split attention; no validation message. The key/value append as the
//! planner fuses it (q's and k's RoPE, k's and v's rows): one dispatch,
//! with the same results.

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
use fused_core::planner::{FusedKvAppend, Plan, Step as PlanStep, plan};
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

/// A context of 3000 rows (twelve attention splits and the pass joining
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
    check_step(&b, s, 9, &[0.0, 255.0, 256.0, 1500.0, 2999.0, 5000.0]);
    assert_no_validation_messages(&b);
}

/// Grouped-query heads served together, one attention workgroup per
/// key/value head and split: Llama-3-8B's group of 4 with heads of 128
/// values over 1500 rows (six splits), and positions at 0, on both sides
/// of a split boundary, at the last row and past it.
#[test]
fn attention_serves_a_group_of_four_query_heads_together() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let s = Shape {
        head_dim: 128,
        n_head: 8,
        n_kv: 2,
        rows: 1500,
        vocab: 37,
    };
    // Attention in two passes, argmax in one.
    let positions = [0.0, 255.0, 256.0, 700.0, 1499.0, 1e9];
    check_step(&b, s, 8, &positions);
    assert_no_validation_messages(&b);
}

/// A group that is not a power of two (SmolLM2's 9 query heads over 3
/// key/value heads), and groups of 1 and 8, over several splits.
#[test]
fn attention_serves_groups_of_three_one_and_eight() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    for (head_dim, n_head, n_kv) in [(64, 9, 3), (64, 3, 3), (128, 8, 1)] {
        let s = Shape {
            head_dim,
            n_head,
            n_kv,
            rows: 700,
            vocab: 37,
        };
        check_step(&b, s, 8, &[0.0, 255.0, 256.0, 511.0, 699.0, 1e9]);
    }
    assert_no_validation_messages(&b);
}

/// The scores with one invocation a row (the variant of devices without
/// subgroup shuffles) over the same groups.
#[cfg(feature = "lab")]
#[test]
fn attention_without_shuffles_serves_the_same_groups() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    b.set_tuning(b.tuning().with_attention_shuffle(false))
        .unwrap();
    for (head_dim, n_head, n_kv) in [(128, 8, 2), (64, 9, 3), (96, 4, 4), (128, 8, 1)] {
        let s = Shape {
            head_dim,
            n_head,
            n_kv,
            rows: 700,
            vocab: 37,
        };
        check_step(&b, s, 8, &[0.0, 255.0, 256.0, 699.0, 1e9]);
    }
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

/// Which parts of the fused key/value append a test graph has.
#[derive(Clone, Copy, Debug)]
struct AppendCase {
    /// q's RoPE mode (k's is `Adjacent`: q joins when they agree).
    q_mode: RopeMode,
    /// q's RoPE written over q itself.
    q_in_place: bool,
    /// The v row write is there (and joins).
    with_v: bool,
}

/// The attention inputs of one decode step as the planner fuses them:
/// RoPE of q and of k, k's appended to its cache, v appended to its own
/// (where the case has it), attention over both. Head size 64, four query
/// heads over two key/value heads, caches of 40 rows and a table of 43
/// (a position past the caches is clamped to each one's own rows). Most
/// tensors lie 4 bytes past a 16-byte boundary.
struct Append {
    g: Graph,
    mem: Memory,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    pos: NodeId,
    q_rope: NodeId,
    k_rope: NodeId,
    att: NodeId,
    caches: TensorDesc,
}

const APPEND_D: usize = 64;
const APPEND_HEADS: usize = 4;
const APPEND_KV: usize = 2;
const APPEND_ROWS: usize = 40;
const APPEND_TABLE_ROWS: usize = 43;

fn kv_append_step(c: AppendCase) -> Append {
    let (d, n_head, n_kv, rows) = (APPEND_D, APPEND_HEADS, APPEND_KV, APPEND_ROWS);
    let f = |n: usize| 4 * n;
    let kv = d * n_kv;
    let q_at = 4;
    let k_at = (q_at + f(d * n_head)).next_multiple_of(16) + 4;
    let v_at = (k_at + f(kv)).next_multiple_of(16) + 4;
    let table_at = (v_at + f(kv)).next_multiple_of(16);
    let pos_at = table_at + f(d * APPEND_TABLE_ROWS) + 4;
    let in_size = pos_at + 4;
    let cache = f(kv * rows);
    let (kc_at, vc_at) = (4, 4 + cache);
    let mut g = Graph::new();
    let q = g.input(f32t([d, n_head, 1, 1], 0, q_at)).unwrap();
    let k = g.input(f32t([d, n_kv, 1, 1], 0, k_at)).unwrap();
    let v = g.input(f32t([kv, 1, 1, 1], 0, v_at)).unwrap();
    let table = g
        .input(f32t([d, APPEND_TABLE_ROWS, 1, 1], 0, table_at))
        .unwrap();
    let pos = g.input(f32t([1, 1, 1, 1], 0, pos_at)).unwrap();
    let kc = g.state(f32t([kv, rows, 1, 1], 1, kc_at)).unwrap();
    let vc = g.state(f32t([kv, rows, 1, 1], 1, vc_at)).unwrap();
    let q_place = if c.q_in_place {
        Place::at(0, q_at)
    } else {
        Place::at(2, 4)
    };
    let q_rope = g.rope(c.q_mode, q, table, pos, q_place).unwrap();
    let kr_at = (4 + f(d * n_head)).next_multiple_of(16) + 4;
    let k_rope = g
        .rope(RopeMode::Adjacent, k, table, pos, Place::at(2, kr_at))
        .unwrap();
    let kw = g.set_row(kc, k_rope, pos, Place::at(1, kc_at)).unwrap();
    let vw = if c.with_v {
        g.set_row(vc, v, pos, Place::at(1, vc_at)).unwrap()
    } else {
        vc
    };
    let k3 = g.reshape(kw, [d, n_kv, rows, 1]).unwrap();
    let v3 = g.reshape(vw, [d, n_kv, rows, 1]).unwrap();
    let att_at = (kr_at + f(kv)).next_multiple_of(16) + 4;
    let scale = 1.0 / (d as f32).sqrt();
    let att = g
        .attention(q_rope, k3, v3, pos, scale, Place::at(2, att_at))
        .unwrap();
    g.mark_output(att).unwrap();
    let mut mem = Memory::new(&[in_size, 4 + 2 * cache, att_at + f(d * n_head)]);
    let angles: Vec<f32> = (0..APPEND_TABLE_ROWS)
        .flat_map(|p| {
            (0..d / 2).flat_map(move |i| {
                let theta = p as f32 * 10000f32.powf(-2.0 * i as f32 / d as f32);
                [theta.cos(), theta.sin()]
            })
        })
        .collect();
    mem.write(g.tensor(table).unwrap(), &angles).unwrap();
    let caches = f32t([2 * kv * rows, 1, 1, 1], 1, kc_at);
    mem.write(&caches, &data(2 * kv * rows, 7)).unwrap();
    Append {
        g,
        mem,
        q,
        k,
        v,
        pos,
        q_rope,
        k_rope,
        att,
        caches,
    }
}

/// Plans the case's graph, checks that the planner fused what the case
/// says, compiles it and its unfused plan on `b` as device plans, checks
/// that the fused step is one dispatch, and runs the fused plan at each of
/// `positions` against the reference: q's RoPE and both caches bit for
/// bit, attention within NMSE 1e-6, and k's RoPE tensor never written.
fn check_kv_append(b: &VulkanBackend, c: AppendCase, positions: &[f32]) {
    let Append {
        g,
        mut mem,
        q,
        k,
        v,
        pos,
        q_rope,
        k_rope,
        att,
        caches,
    } = kv_append_step(c);
    let p = plan(&g);
    let fused: Vec<&FusedKvAppend> = p
        .steps
        .iter()
        .filter_map(|s| match s {
            PlanStep::KvAppend(f) => Some(f),
            _ => None,
        })
        .collect();
    let [f] = fused[..] else {
        panic!("{c:?}: one fused key/value append: {:?}", p.steps);
    };
    let q_joins = c.q_mode == RopeMode::Adjacent;
    assert_eq!(f.k_rope, k_rope, "{c:?}");
    assert_eq!(f.q_rope.is_some(), q_joins, "{c:?}: {f:?}");
    assert_eq!(f.v_write.is_some(), c.with_v, "{c:?}: {f:?}");
    let compile = |p: &Plan| {
        let rp = b.compile(&g, p, GemvMode::F32, &mem.sizes()).unwrap();
        assert!(
            matches!(rp, Resident::Device(_)),
            "{c:?}: fell back to the host plan: {:?}",
            rp.fallback_reason()
        );
        assert!(!rp.stats().host_steps, "{c:?}: {:?}", rp.stats());
        assert_eq!(rp.stats().copies, 0, "{c:?}: {:?}", rp.stats());
        rp
    };
    let mut rp = compile(&p);
    let unfused = compile(&Plan::unfused(&g)).stats().launches;
    // The parts of the step: k's RoPE and row write, and the q RoPE and v
    // row write that joined, one dispatch each when unfused.
    let parts = 2 + u64::from(q_joins) + u64::from(c.with_v);
    assert_eq!(
        unfused - rp.stats().launches,
        parts - 1,
        "{c:?}: the step is one dispatch ({} fused, {unfused} unfused)",
        rp.stats().launches
    );
    rp.write_all(&mem).unwrap();
    let (kv, qn) = (APPEND_D * APPEND_KV, APPEND_D * APPEND_HEADS);
    for (run, &position) in positions.iter().enumerate() {
        let case = format!("{c:?}, run {run} at position {position}");
        let mut vx = data(kv, 30 + run as u64);
        // Words moved as they are: a subnormal and a negative zero.
        vx[3] = f32::from_bits(1);
        vx[5] = -0.0;
        for (id, x) in [
            (q, data(qn, 10 + run as u64)),
            (k, data(kv, 20 + run as u64)),
            (v, vx),
            (pos, vec![position]),
        ] {
            let t = *g.tensor(id).unwrap();
            mem.write(&t, &x).unwrap();
            rp.write_f32(&t, &x).unwrap();
        }
        eval_graph(&g, &mut mem, GemvMode::F32).unwrap();
        rp.run().unwrap();
        for (what, t) in [("q's RoPE", *g.tensor(q_rope).unwrap()), ("caches", caches)] {
            let (got, want) = (rp.read_f32(&t).unwrap(), mem.read(&t).unwrap());
            assert_eq!(first_bit_difference(&got, &want), None, "{case}: {what}");
        }
        let t = g.tensor(att).unwrap();
        let (got, want) = (rp.read_f32(t).unwrap(), mem.read(t).unwrap());
        assert!(want.iter().all(|x| x.is_finite()), "{case}: reference");
        let e = nmse(&got, &want);
        assert!(e <= 1e-6, "{case}: attention NMSE {e:e}");
        let kr = rp.read_f32(g.tensor(k_rope).unwrap()).unwrap();
        assert!(
            kr.iter().all(|x| x.to_bits() == 0),
            "{case}: k's RoPE tensor written"
        );
    }
}

/// Positions of every kind: the first rows, a fraction, the last row, past
/// the caches but within the table, far past both, negative and NaN.
const APPEND_POSITIONS: [f32; 9] = [0.0, 1.0, 2.5, 39.0, 41.0, 1e9, -3.0, f32::NAN, 17.0];

/// RoPE of q and k, k's and v's rows: one dispatch; q's RoPE both apart
/// and in place.
#[test]
fn the_key_value_append_is_one_dispatch_with_q_and_v() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    for q_in_place in [false, true] {
        let c = AppendCase {
            q_mode: RopeMode::Adjacent,
            q_in_place,
            with_v: true,
        };
        check_kv_append(&b, c, &APPEND_POSITIONS);
    }
    assert_no_validation_messages(&b);
}

/// q's RoPE in another mode stays its own dispatch; k and v fuse.
#[test]
fn the_key_value_append_without_q() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let c = AppendCase {
        q_mode: RopeMode::Halves,
        q_in_place: false,
        with_v: true,
    };
    check_kv_append(&b, c, &APPEND_POSITIONS);
    assert_no_validation_messages(&b);
}

/// No v row write: q and k fuse.
#[test]
fn the_key_value_append_without_v() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let c = AppendCase {
        q_mode: RopeMode::Adjacent,
        q_in_place: true,
        with_v: false,
    };
    check_kv_append(&b, c, &APPEND_POSITIONS);
    assert_no_validation_messages(&b);
}

/// The fused step on device-local buffers reached through staging copies.
#[test]
fn the_key_value_append_on_staged_device_buffers() {
    let Some(b) = backend_with_or_skip(ContextOptions {
        validation: validation(),
        staged_buffers: true,
    }) else {
        return;
    };
    let c = AppendCase {
        q_mode: RopeMode::Adjacent,
        q_in_place: false,
        with_v: true,
    };
    check_kv_append(&b, c, &[5.0, 39.0, 100.0]);
    assert_no_validation_messages(&b);
}

/// A fused step whose q RoPE writes over k (which the planner never
/// makes, built here by hand) is refused as unsupported before anything
/// is recorded: the plan falls back to the host, whole.
#[test]
fn a_key_value_append_writing_over_its_sources_falls_back_to_the_host_plan() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (d, heads, rows) = (8, 2, 4);
    let mut g = Graph::new();
    let q = g.input(f32t([d, heads, 1, 1], 0, 0)).unwrap();
    let k = g.input(f32t([d, heads, 1, 1], 0, 64)).unwrap();
    let table = g.input(f32t([d, rows, 1, 1], 0, 128)).unwrap();
    let pos = g.input(f32t([1, 1, 1, 1], 0, 256)).unwrap();
    let kc = g.state(f32t([d * heads, rows, 1, 1], 1, 0)).unwrap();
    let qr = g
        .rope(RopeMode::Adjacent, q, table, pos, Place::at(0, 64))
        .unwrap();
    let kr = g
        .rope(RopeMode::Adjacent, k, table, pos, Place::at(2, 0))
        .unwrap();
    let kw = g.set_row(kc, kr, pos, Place::at(1, 0)).unwrap();
    g.mark_output(qr).unwrap();
    let nodes = vec![qr, kr, kw];
    let mut p = Plan::unfused(&g);
    p.steps
        .retain(|s| !s.nodes().iter().any(|n| nodes.contains(n)));
    p.steps.push(PlanStep::KvAppend(FusedKvAppend {
        mode: RopeMode::Adjacent,
        table,
        pos,
        k_rope: kr,
        k_write: kw,
        q_rope: Some(qr),
        v_write: None,
        nodes,
    }));
    let rp = b.compile(&g, &p, GemvMode::F32, &[260, 256, 64]).unwrap();
    let reason = rp.fallback_reason();
    assert!(
        matches!(reason, Some(fused_core::Error::Unsupported(_)))
            && reason.is_some_and(|e| e.to_string().contains("key/value append")),
        "{reason:?}"
    );
    assert!(rp.stats().host_steps);
    assert_no_validation_messages(&b);
}
