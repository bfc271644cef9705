//! The decode ops (RoPE, row writes into KV caches kept as state,
//! attention, argmax) on the device plan, not the host fallback: one
//! command buffer recorded once and replayed at positions written into
//! device memory before each run, against the core's reference evaluator.
//! RoPE, the row writes and argmax bit for bit; attention within NMSE
//! 1e-6, over a context short enough for one pass and one long enough for
//! split attention; no validation message. The key/value append as the
//! planner fuses it (q's and k's RoPE, k's and v's rows): one dispatch,
//! with the same results.
//!
//! The graphs are [`fused_testkit::decode::DecodeOps`], laid out here.

mod common;

use common::{
    assert_no_validation_messages, backend_or_skip, backend_with_or_skip, data,
    first_bit_difference, validation,
};
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, Resident, ResidentPlan};
use fused_core::decode::RopeMode;
use fused_core::graph::{Graph, Place};
use fused_core::planner::{FusedKvAppend, Plan, Step as PlanStep, plan};
use fused_testkit::decode::{
    ArgmaxLayout, DecodeOps, DecodeOpsLayout, InputOffsets, ValueRow, f32_tensor,
};
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

/// Runs `test` on `device`, then fails if the validation layer reported
/// anything; nothing where the device did not open (the skip is
/// reported).
fn on(device: Option<VulkanBackend>, test: impl FnOnce(&mut VulkanBackend)) {
    if let Some(mut b) = device {
        test(&mut b);
        assert_no_validation_messages(&b);
    }
}

/// The device with its buffers device-local, reached through staging
/// copies (as on a discrete GPU), or a reported skip.
fn staged_device() -> Option<VulkanBackend> {
    backend_with_or_skip(ContextOptions {
        validation: validation(),
        staged_buffers: true,
    })
}

/// Fails unless `got` equals `want` bit for bit, NaN payloads included.
fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(first_bit_difference(got, want), None, "{what}");
}

/// `p` (made for `ops`) compiled on `b`, asserted to be the device plan
/// (not the host fallback) with no host step and every tensor bound in
/// place (no copy).
fn device_plan<'b>(
    b: &'b VulkanBackend,
    ops: &DecodeOps,
    p: &Plan,
    case: &str,
) -> <VulkanBackend as Backend>::Plan<'b> {
    let rp = b
        .compile(&ops.graph, p, GemvMode::F32, &ops.mem.sizes())
        .unwrap();
    assert!(
        matches!(rp, Resident::Device(_)),
        "{case}: fell back to the host plan: {:?}",
        rp.fallback_reason()
    );
    let stats = rp.stats();
    assert!(!stats.host_steps, "{case}: {stats:?}");
    assert_eq!(
        stats.copies, 0,
        "{case}: every tensor bound in place: {stats:?}"
    );
    rp
}

/// RoPE of q in place (Adjacent) and of k (Halves), both appended to
/// caches kept as state, attention over them, argmax over two columns of
/// logits, and a row write that is not in place (the v cache with k's row,
/// into a buffer of its own). Several tensors lie 4 bytes past a 16-byte
/// boundary, so that the kernels reach them through wider bindings.
fn decode_step(s: Shape) -> DecodeOps {
    let Shape {
        head_dim: d,
        n_head,
        n_kv,
        rows,
        vocab,
    } = s;
    let f = |n: usize| 4 * n;
    let kv = d * n_kv;
    let q = 0;
    let k = f(d * n_head) + 4;
    let v = (k + f(kv)).next_multiple_of(16);
    let table = v + f(kv);
    let pos = table + f(d * rows) + 4;
    let logits_at = (pos + 4).next_multiple_of(16);
    let cache = f(kv * rows);
    let att_at = f(d * n_kv + 4);
    let best_at = att_at + f(d * n_head) + 4;
    let layout = DecodeOpsLayout {
        inputs: InputOffsets {
            q,
            k,
            v,
            table,
            pos,
        },
        argmax: Some(ArgmaxLayout {
            vocab,
            logits_at,
            argmax_at: Place::at(2, best_at),
        }),
        caches_as_heads: true,
        q_rope_at: Place::at(0, q),
        k_rope_at: Place::at(2, 4),
        k_row_over_values_at: Some(Place::at(3, 4)),
        attention_at: Place::at(2, att_at),
        ropes_are_outputs: true,
        buffer_sizes: vec![
            logits_at + f(2 * vocab),
            2 * cache,
            best_at + f(2),
            4 + cache,
        ],
        ..DecodeOpsLayout::packed(d, n_head, n_kv, rows, rows)
    };
    // Caches full of earlier tokens, so that a late position attends over
    // values, not zeros.
    DecodeOps::new(layout, |n| data(n, 5))
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
/// with the reference after each run: both RoPEs, the argmax, the row
/// write into its own buffer and the caches bit for bit.
fn check_step(b: &VulkanBackend, s: Shape, launches: u64, positions: &[f32]) {
    let mut ops = decode_step(s);
    let case = format!("{s:?}");
    let mut rp = device_plan(b, &ops, &plan(&ops.graph), &case);
    let stats = rp.stats();
    assert_eq!(stats.launches, launches, "{case}: {stats:?}");
    rp.write_all(&ops.mem).unwrap();
    let (argmax, side) = (ops.argmax.unwrap(), ops.k_row_over_values.unwrap());
    let mut exact: Vec<_> = [ops.q_rope, ops.k_rope, argmax, side]
        .into_iter()
        .map(|id| {
            let name = ops.graph.node(id).unwrap().op().name();
            (format!("{name} (node {})", id.index()), ops.tensor(id))
        })
        .collect();
    exact.push(("caches".into(), ops.caches));
    let kv = s.head_dim * s.n_kv;
    for (run, &position) in positions.iter().enumerate() {
        let inputs = [
            (ops.q, data(s.head_dim * s.n_head, 10 + run as u64)),
            (ops.k, data(kv, 20 + run as u64)),
            (ops.v, data(kv, 30 + run as u64)),
            (ops.logits.unwrap(), logits(s.vocab, run)),
        ];
        ops.write_inputs(&mut rp, &inputs, position);
        let case = format!("{case}, run {run} at position {position}");
        ops.run_and_compare(&mut rp, |rp| rp.run(), &exact, assert_same_bits, &case);
    }
    // The caches are state: a restore leaves them as the runs wrote them.
    rp.restore_inputs().unwrap();
    let caches = &ops.caches;
    let (got, want) = (rp.read_f32(caches).unwrap(), ops.mem.read(caches).unwrap());
    assert_same_bits(&got, &want, "caches after restore");
}

/// [`check_step`] over caches of 700 rows (several attention splits) and
/// logits of 37 values, for heads of each `(head_dim, n_head, n_kv)` of
/// `groups`: attention in two passes, argmax in one.
fn check_groups(b: &VulkanBackend, groups: &[(usize, usize, usize)], positions: &[f32]) {
    for &(head_dim, n_head, n_kv) in groups {
        let s = Shape {
            head_dim,
            n_head,
            n_kv,
            rows: 700,
            vocab: 37,
        };
        check_step(b, s, 8, positions);
    }
}

/// A short context (one attention pass, one argmax pass a column), a
/// head of 96 values (not dividing the workgroup) and one key/value head
/// for every query head.
#[test]
fn decode_ops_run_on_the_device_over_a_short_context() {
    let s = Shape {
        head_dim: 96,
        n_head: 4,
        n_kv: 1,
        rows: 32,
        vocab: 37,
    };
    // Two RoPEs, three row writes, attention, argmax.
    let positions = [0.0, 1.0, 2.5, 31.0, 1e9, -3.0, f32::NAN, 17.0];
    on(backend_or_skip(), |b| check_step(b, s, 7, &positions));
}

/// A context of 3000 rows (94 attention splits, each an even share of the
/// rows in use, and the pass joining them; contexts from one row to the
/// whole cache and past it) and a Llama-3 vocabulary of 128256 values
/// (argmax in 32 splits and a joining pass), grouped-query heads.
#[test]
fn decode_ops_run_on_the_device_over_a_long_context() {
    let s = Shape {
        head_dim: 64,
        n_head: 8,
        n_kv: 2,
        rows: 3000,
        vocab: 128_256,
    };
    // Attention and argmax in two passes each.
    let positions = [0.0, 255.0, 256.0, 1500.0, 2999.0, 5000.0];
    on(backend_or_skip(), |b| check_step(b, s, 9, &positions));
}

/// One query head over 70000 rows: 274 splits (a split takes at most 256
/// rows, whatever the tuning aims at), of which the joining pass weighs
/// more than one workgroup's worth (all 274 live at the last row).
#[test]
fn attention_joins_more_splits_than_a_workgroup_holds() {
    let s = Shape {
        head_dim: 64,
        n_head: 1,
        n_kv: 1,
        rows: 70_000,
        vocab: 37,
    };
    // Attention in two passes, argmax in one.
    let positions = [69_999.0, 300.0];
    on(backend_or_skip(), |b| check_step(b, s, 8, &positions));
}

/// Grouped-query heads served together, one attention workgroup per
/// key/value head and split: Llama-3-8B's group of 4 with heads of 128
/// values over 1500 rows (47 splits), and positions from the first row to
/// the last and past it.
#[test]
fn attention_serves_a_group_of_four_query_heads_together() {
    let s = Shape {
        head_dim: 128,
        n_head: 8,
        n_kv: 2,
        rows: 1500,
        vocab: 37,
    };
    // Attention in two passes, argmax in one.
    let positions = [0.0, 255.0, 256.0, 700.0, 1499.0, 1e9];
    on(backend_or_skip(), |b| check_step(b, s, 8, &positions));
}

/// A group that is not a power of two (SmolLM2's 9 query heads over 3
/// key/value heads), and groups of 1 and 8, over several splits.
#[test]
fn attention_serves_groups_of_three_one_and_eight() {
    let groups = [(64, 9, 3), (64, 3, 3), (128, 8, 1)];
    let positions = [0.0, 255.0, 256.0, 511.0, 699.0, 1e9];
    on(backend_or_skip(), |b| check_groups(b, &groups, &positions));
}

/// The scores with one invocation a row (the variant of devices without
/// subgroup shuffles) over the same groups.
#[cfg(feature = "lab")]
#[test]
fn attention_without_shuffles_serves_the_same_groups() {
    let groups = [(128, 8, 2), (64, 9, 3), (96, 4, 4), (128, 8, 1)];
    let positions = [0.0, 255.0, 256.0, 699.0, 1e9];
    on(backend_or_skip(), |b| {
        b.set_tuning(b.tuning().with_attention_shuffle(false))
            .unwrap();
        check_groups(b, &groups, &positions);
    });
}

/// Splits aimed at one workgroup (the fewest: one per 256 rows) and at
/// 4096 (the most: one per 32 rows) over the same groups: the joining pass
/// takes any count.
#[cfg(feature = "lab")]
#[test]
fn attention_takes_the_fewest_and_the_most_splits() {
    let groups = [(128, 8, 2), (64, 9, 3)];
    let positions = [0.0, 31.0, 255.0, 256.0, 699.0, 1e9];
    for aim in [1, 4096] {
        on(backend_or_skip(), |b| {
            b.set_tuning(b.tuning().with_attention_workgroups(aim))
                .unwrap();
            check_groups(b, &groups, &positions);
        });
    }
}

/// Device-local buffers reached through staging copies (as on a discrete
/// GPU): the position and the inputs written before each run by staged
/// partial writes, the results read back the same way.
#[test]
fn decode_ops_run_on_staged_device_buffers() {
    let s = Shape {
        head_dim: 32,
        n_head: 4,
        n_kv: 2,
        rows: 600,
        vocab: 5000,
    };
    on(staged_device(), |b| {
        check_step(b, s, 9, &[3.0, 599.0, 512.0])
    });
}

/// Heads longer than the attention kernel's workgroup are refused as
/// unsupported before anything is recorded: the plan falls back to the
/// host, whole.
#[test]
fn attention_heads_over_256_values_fall_back_to_the_host_plan() {
    on(backend_or_skip(), |b| {
        let step = decode_step(Shape {
            head_dim: 320,
            n_head: 2,
            n_kv: 1,
            rows: 8,
            vocab: 37,
        });
        let p = plan(&step.graph);
        let rp = b
            .compile(&step.graph, &p, GemvMode::F32, &step.mem.sizes())
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
    });
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

/// Every part joins: q's RoPE (written apart from q) and v's row.
const APPEND_ALL: AppendCase = AppendCase {
    q_mode: RopeMode::Adjacent,
    q_in_place: false,
    with_v: true,
};

const APPEND_D: usize = 64;
const APPEND_HEADS: usize = 4;
const APPEND_KV: usize = 2;
const APPEND_ROWS: usize = 40;
const APPEND_TABLE_ROWS: usize = 43;

/// The attention inputs of one decode step as the planner fuses them:
/// RoPE of q and of k, k's appended to its cache, v appended to its own
/// (where the case has it), attention over both. Head size 64, four query
/// heads over two key/value heads, caches of 40 rows and a table of 43
/// (a position past the caches is clamped to each one's own rows). Most
/// tensors lie 4 bytes past a 16-byte boundary.
fn kv_append_step(c: AppendCase) -> DecodeOps {
    let (d, n_head, n_kv, rows) = (APPEND_D, APPEND_HEADS, APPEND_KV, APPEND_ROWS);
    let f = |n: usize| 4 * n;
    let kv = d * n_kv;
    let q = 4;
    let k = (q + f(d * n_head)).next_multiple_of(16) + 4;
    let v = (k + f(kv)).next_multiple_of(16) + 4;
    let table = (v + f(kv)).next_multiple_of(16);
    let pos = table + f(d * APPEND_TABLE_ROWS) + 4;
    let cache = f(kv * rows);
    let kr_at = (4 + f(d * n_head)).next_multiple_of(16) + 4;
    let att_at = (kr_at + f(kv)).next_multiple_of(16) + 4;
    let layout = DecodeOpsLayout {
        inputs: InputOffsets {
            q,
            k,
            v,
            table,
            pos,
        },
        caches_at: 4,
        q_mode: c.q_mode,
        q_rope_at: if c.q_in_place {
            Place::at(0, q)
        } else {
            Place::at(2, 4)
        },
        k_mode: RopeMode::Adjacent,
        k_rope_at: Place::at(2, kr_at),
        v_row: if c.with_v {
            ValueRow::InPlace
        } else {
            ValueRow::Absent
        },
        attention_at: Place::at(2, att_at),
        buffer_sizes: vec![pos + 4, 4 + 2 * cache, att_at + f(d * n_head)],
        ..DecodeOpsLayout::packed(d, n_head, n_kv, rows, APPEND_TABLE_ROWS)
    };
    DecodeOps::new(layout, |n| data(n, 7))
}

/// Plans the case's graph, checks that the planner fused what the case
/// says, compiles it and its unfused plan on `b` as device plans, checks
/// that the fused step is one dispatch (none inside the attention), and
/// runs the fused plan at each of `positions` against the reference: q's
/// RoPE and both caches bit for bit, attention within NMSE 1e-6, and k's
/// RoPE tensor never written.
fn check_kv_append(b: &VulkanBackend, c: AppendCase, positions: &[f32]) {
    let mut ops = kv_append_step(c);
    let case = format!("{c:?}");
    let p = plan(&ops.graph);
    ops.assert_planned_kv_append(&p, &case);
    let mut rp = device_plan(b, &ops, &p, &case);
    let unfused = device_plan(b, &ops, &Plan::unfused(&ops.graph), &case)
        .stats()
        .launches;
    // The fused step replaces k's RoPE and row write, and the q RoPE and
    // v row write that joined, one dispatch each when unfused; where q and
    // v joined and q's RoPE lies apart from q, the attention's split pass
    // takes the step on and its own dispatch goes too.
    let in_attention = ops.kv_append_takes_q() && c.with_v && !c.q_in_place;
    assert_eq!(
        unfused - rp.stats().launches,
        ops.kv_append_saves() + u64::from(in_attention),
        "{case}: the step is one dispatch ({} fused, {unfused} unfused)",
        rp.stats().launches
    );
    rp.write_all(&ops.mem).unwrap();
    let exact = [
        ("q's RoPE".to_string(), ops.tensor(ops.q_rope)),
        ("caches".to_string(), ops.caches),
    ];
    let k_rope = ops.tensor(ops.k_rope);
    let (kv, qn) = (APPEND_D * APPEND_KV, APPEND_D * APPEND_HEADS);
    for (run, &position) in positions.iter().enumerate() {
        let mut vx = data(kv, 30 + run as u64);
        // Words moved as they are: a subnormal and a negative zero.
        vx[3] = f32::from_bits(1);
        vx[5] = -0.0;
        let inputs = [
            (ops.q, data(qn, 10 + run as u64)),
            (ops.k, data(kv, 20 + run as u64)),
            (ops.v, vx),
        ];
        ops.write_inputs(&mut rp, &inputs, position);
        let case = format!("{case}, run {run} at position {position}");
        ops.run_and_compare(&mut rp, |rp| rp.run(), &exact, assert_same_bits, &case);
        let kr = rp.read_f32(&k_rope).unwrap();
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
    on(backend_or_skip(), |b| {
        for q_in_place in [false, true] {
            let c = AppendCase {
                q_in_place,
                ..APPEND_ALL
            };
            check_kv_append(b, c, &APPEND_POSITIONS);
        }
    });
}

/// q's RoPE in another mode stays its own dispatch; k and v fuse.
#[test]
fn the_key_value_append_without_q() {
    let c = AppendCase {
        q_mode: RopeMode::Halves,
        ..APPEND_ALL
    };
    on(backend_or_skip(), |b| {
        check_kv_append(b, c, &APPEND_POSITIONS)
    });
}

/// No v row write: q and k fuse.
#[test]
fn the_key_value_append_without_v() {
    let c = AppendCase {
        q_in_place: true,
        with_v: false,
        ..APPEND_ALL
    };
    on(backend_or_skip(), |b| {
        check_kv_append(b, c, &APPEND_POSITIONS)
    });
}

/// The fused step on device-local buffers reached through staging copies.
#[test]
fn the_key_value_append_on_staged_device_buffers() {
    on(staged_device(), |b| {
        check_kv_append(b, APPEND_ALL, &[5.0, 39.0, 100.0])
    });
}

/// A fused step whose q RoPE writes over k (which the planner never
/// makes, built here by hand) is refused as unsupported before anything
/// is recorded: the plan falls back to the host, whole.
#[test]
fn a_key_value_append_writing_over_its_sources_falls_back_to_the_host_plan() {
    on(backend_or_skip(), |b| {
        let (d, heads, rows) = (8, 2, 4);
        let mut g = Graph::new();
        let q = g.input(f32_tensor([d, heads, 1, 1], 0, 0)).unwrap();
        let k = g.input(f32_tensor([d, heads, 1, 1], 0, 64)).unwrap();
        let table = g.input(f32_tensor([d, rows, 1, 1], 0, 128)).unwrap();
        let pos = g.input(f32_tensor([1, 1, 1, 1], 0, 256)).unwrap();
        let kc = g.state(f32_tensor([d * heads, rows, 1, 1], 1, 0)).unwrap();
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
    });
}
