//! The decode ops on the CUDA device plan: RoPE, the KV-cache row writes,
//! attention over a long cache (several splits) and the argmax over a
//! Llama-3 vocabulary, compiled as one device plan (no host steps) and
//! run at positions written before each run (in range, truncated, past
//! the cache, NaN, negative), against the core's reference evaluator:
//! RoPE, the rows and the argmax bit for bit, the attention within NMSE
//! 1e-6. Once launch by launch through the backend contract, once
//! replayed as one captured CUDA graph, which only a position read by the
//! kernels lets serve every token. The planner's fused key/value append
//! (q's and k's RoPE, both row writes) runs as one launch, checked the
//! same way. Skipped without a device.
//!
//! The graphs are [`fused_testkit::decode::DecodeOps`], laid out here.

mod common;

use common::{Rng, backend_or_skip};
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::decode::RopeMode;
use fused_core::graph::Place;
use fused_core::planner::{Plan, plan};
use fused_core::tensor::TensorDesc;
use fused_cuda::{CudaBackend, CudaError, DevicePlan, Submission};
use fused_testkit::compare::assert_bits_eq;
use fused_testkit::decode::{ArgmaxLayout, DecodeOps, DecodeOpsLayout, ValueRow};

/// The Llama-3 vocabulary: the argmax's column length.
const VOCAB: usize = 128_256;

/// One decode graph's shape.
#[derive(Clone, Copy, Debug)]
struct Shape {
    head_dim: usize,
    n_head: usize,
    n_kv: usize,
    /// Cache rows.
    rows: usize,
    /// The query's RoPE written over the query itself.
    rope_in_place: bool,
    /// The value row written into a copy of the cache (not in place).
    values_copied: bool,
}

/// The shapes: a long cache of Llama-like heads (several splits, groups
/// of 4); heads of 80 (lanes partly idle) in a group of 9 (two head slices
/// a block), RoPE in place and a value cache written as a copy; and a
/// short cache of many heads (two splits, the second empty at positions
/// below 32; positions past the cache clamped).
const SHAPES: [Shape; 3] = [
    Shape {
        head_dim: 64,
        n_head: 8,
        n_kv: 2,
        rows: 3000,
        rope_in_place: false,
        values_copied: false,
    },
    Shape {
        head_dim: 80,
        n_head: 9,
        n_kv: 1,
        rows: 700,
        rope_in_place: true,
        values_copied: true,
    },
    Shape {
        head_dim: 128,
        n_head: 32,
        n_kv: 8,
        rows: 40,
        rope_in_place: false,
        values_copied: false,
    },
];

/// One key/value append graph: q's RoPE, k's RoPE into the key cache, the
/// v row into the value cache (or none) and the attention over both.
#[derive(Clone, Copy, Debug)]
struct Append {
    head_dim: usize,
    n_head: usize,
    n_kv: usize,
    /// Cache rows.
    rows: usize,
    /// The table's rows (at least the cache's: positions past the cache
    /// rotate by a row the cache lacks, each clamped into its own rows).
    table_rows: usize,
    q_mode: RopeMode,
    k_mode: RopeMode,
    /// q's RoPE written over q itself.
    q_in_place: bool,
    /// Whether the graph writes the v row (else the value cache is read as
    /// it is).
    with_v: bool,
}

/// All three parts, on a long cache; q in another pair mode (it stays its
/// own launch), a table longer than the cache and heads of 80; q in place,
/// no v write, a short cache of many heads.
const APPENDS: [Append; 3] = [
    Append {
        head_dim: 64,
        n_head: 8,
        n_kv: 2,
        rows: 3000,
        table_rows: 3000,
        q_mode: RopeMode::Halves,
        k_mode: RopeMode::Halves,
        q_in_place: false,
        with_v: true,
    },
    Append {
        head_dim: 80,
        n_head: 9,
        n_kv: 1,
        rows: 700,
        table_rows: 703,
        q_mode: RopeMode::Adjacent,
        k_mode: RopeMode::Halves,
        q_in_place: false,
        with_v: true,
    },
    Append {
        head_dim: 128,
        n_head: 32,
        n_kv: 8,
        rows: 40,
        table_rows: 48,
        q_mode: RopeMode::Adjacent,
        k_mode: RopeMode::Adjacent,
        q_in_place: true,
        with_v: false,
    },
];

/// Bytes of `n` f32.
const fn f(n: usize) -> usize {
    4 * n
}

/// A decode graph and what its runs compare bit for bit (the attention:
/// within the NMSE budget).
struct Checked {
    ops: DecodeOps,
    exact: Vec<(String, TensorDesc)>,
}

impl Checked {
    /// The decode step over caches of `shape`, packed: q's RoPE
    /// (Adjacent), k's (Halves) and its row, v's row, the attention and
    /// the argmax over two Llama-3 columns; buffer 2 holds the results,
    /// buffer 3 the copied value cache. Compares both RoPEs (q's where it
    /// is in place), the argmax, v's row and the caches.
    fn decode(s: Shape, rng: &mut Rng) -> Checked {
        let Shape {
            head_dim: d,
            n_head,
            n_kv,
            rows,
            ..
        } = s;
        let (kv, qd) = (d * n_kv, d * n_head);
        let packed = DecodeOpsLayout::packed(d, n_head, n_kv, rows, rows);
        let logits_at = packed.inputs.end();
        let (att_at, best_at) = (f(kv), f(kv + qd));
        let cache = f(kv * rows);
        let ops = DecodeOps::new(
            DecodeOpsLayout {
                argmax: Some(ArgmaxLayout {
                    vocab: VOCAB,
                    logits_at,
                    argmax_at: Place::at(2, best_at),
                }),
                q_rope_at: if s.rope_in_place {
                    Place::at(0, packed.inputs.q)
                } else {
                    Place::at(2, att_at)
                },
                v_row: if s.values_copied {
                    ValueRow::Copied(Place::at(3, 0))
                } else {
                    ValueRow::InPlace
                },
                attention_at: Place::at(2, att_at),
                ropes_are_outputs: true,
                buffer_sizes: vec![logits_at + f(2 * VOCAB), 2 * cache, best_at + f(2), cache],
                ..packed
            },
            |n| rng.vec(n),
        );
        let t = |id| ops.tensor(id);
        let mut exact = vec![
            ("k's RoPE", t(ops.k_rope)),
            ("the argmax", t(ops.argmax.expect("an argmax"))),
            ("v's row", t(ops.v_row.expect("a v row"))),
            ("the caches", ops.caches),
        ];
        // Not in place, q's RoPE shares its bytes with the attention's
        // output (the attention reads its query where it writes), so after
        // a run they hold the attention, which is checked by its NMSE.
        if s.rope_in_place {
            exact.push(("q's RoPE", t(ops.q_rope)));
        }
        Checked::new(ops, exact)
    }

    /// The key/value append graph of `s`, packed. Compares q's RoPE and
    /// both caches.
    fn append(s: Append, rng: &mut Rng) -> Checked {
        let packed = DecodeOpsLayout::packed(s.head_dim, s.n_head, s.n_kv, s.rows, s.table_rows);
        let ops = DecodeOps::new(
            DecodeOpsLayout {
                q_mode: s.q_mode,
                k_mode: s.k_mode,
                q_rope_at: if s.q_in_place {
                    Place::at(0, packed.inputs.q)
                } else {
                    packed.q_rope_at
                },
                v_row: if s.with_v {
                    ValueRow::InPlace
                } else {
                    ValueRow::Absent
                },
                ..packed
            },
            |n| rng.vec(n),
        );
        let exact = [
            ("q's RoPE", ops.tensor(ops.q_rope)),
            ("the key cache", ops.tensor(ops.key_cache)),
            ("the value cache", ops.tensor(ops.value_cache)),
        ];
        Checked::new(ops, exact)
    }

    fn new(ops: DecodeOps, exact: impl IntoIterator<Item = (&'static str, TensorDesc)>) -> Checked {
        let exact = exact
            .into_iter()
            .map(|(what, t)| (what.to_string(), t))
            .collect();
        Checked { ops, exact }
    }

    /// Runs `rp` by `submit` once at each of `positions`, each run after
    /// writing fresh q (scaled by 4: peaked scores, a softmax that is not
    /// nearly flat), k, v, the logits ([`logits`]) and the position into
    /// the host memory and `rp`, each against the reference.
    fn run_at<P: ResidentPlan<Error = CudaError>>(
        &mut self,
        rp: &mut P,
        mut submit: impl FnMut(&mut P) -> Result<(), CudaError>,
        positions: &[f32],
        rng: &mut Rng,
        case: &str,
    ) {
        let ops = &mut self.ops;
        for (run, &position) in positions.iter().enumerate() {
            let inputs: Vec<_> = [ops.q, ops.k, ops.v]
                .into_iter()
                .chain(ops.logits)
                .map(|id| {
                    let mut x = rng.vec(ops.tensor(id).n_elements());
                    if id == ops.q {
                        x.iter_mut().for_each(|v| *v *= 4.0);
                    }
                    if Some(id) == ops.logits {
                        logits(&mut x, run);
                    }
                    (id, x)
                })
                .collect();
            ops.write_inputs(rp, &inputs, position);
            let case = format!("{case}, run {run} at position {position}");
            ops.run_and_compare(rp, &mut submit, &self.exact, assert_bits_eq, &case);
        }
    }
}

/// Two columns of logits for run `run`: in the first, a maximum tied at
/// two indices that move with the run, NaN at index 0 and around them;
/// in the second, all NaN on odd runs (index 0), else NaN everywhere but
/// a maximum at the very end.
fn logits(x: &mut [f32], run: usize) {
    let (a, b) = (1000 + 4099 * run, 90_000 + 77 * run);
    x[0] = f32::NAN;
    x[a] = 9.0;
    x[b] = 9.0;
    x[a - 1] = f32::NAN;
    x[b + 1] = f32::NAN;
    let second = &mut x[VOCAB..];
    if run % 2 == 1 {
        second.fill(f32::NAN);
    } else {
        second.iter_mut().step_by(3).for_each(|v| *v = f32::NAN);
        second[VOCAB - 1] = 2.0;
    }
}

/// Positions of the runs for a cache of `rows` rows: the first rows, a
/// fraction (truncated), the middle, the last row, past it, NaN and a
/// negative value (row 0).
fn positions(rows: usize) -> Vec<f32> {
    let last = (rows - 1) as f32;
    vec![
        0.0,
        1.0,
        2.0,
        17.9,
        (rows / 2) as f32,
        last,
        last + 2000.0,
        f32::NAN,
        -3.0,
    ]
}

/// `p` (made for `ops`) compiled through the backend contract, asserted to
/// be the device plan (not the host fallback), with no host step and no
/// copy, and written with `ops`' memory.
fn device_plan<'b>(
    be: &'b CudaBackend,
    ops: &DecodeOps,
    p: &Plan,
    case: &str,
) -> <CudaBackend as Backend>::Plan<'b> {
    let mut rp = be
        .compile(&ops.graph, p, GemvMode::F32, &ops.mem.sizes())
        .unwrap();
    let why = rp.fallback_reason();
    assert!(why.is_none(), "{case}: the host plan, because {why:?}");
    let st = rp.stats();
    assert!(!st.host_steps, "{case}: {st:?}");
    assert_eq!(st.copies, 0, "{case}: {st:?}");
    rp.write_all(&ops.mem).unwrap();
    rp
}

/// `p` (made for `ops`) as a device plan written with `ops`' memory, one
/// run captured as a CUDA graph.
fn captured_graph<'b>(be: &'b CudaBackend, ops: &DecodeOps, p: &Plan) -> DevicePlan<'b> {
    let mut dp = DevicePlan::new(be, &ops.graph, p, GemvMode::F32, &ops.mem.sizes()).unwrap();
    dp.write_all(&ops.mem).unwrap();
    dp.capture_graph().unwrap();
    dp
}

/// Runs a plan launch by launch.
fn stream<P: ResidentPlan<Error = CudaError>>(rp: &mut P) -> Result<(), CudaError> {
    rp.run()
}

/// Replays a plan's captured CUDA graph.
fn replay(dp: &mut DevicePlan<'_>) -> Result<(), CudaError> {
    dp.run_as(Submission::Graph)
}

/// Through the backend contract: a device plan, not the host fallback,
/// seven launches (the attention's split and combine) and no copies; each
/// run enqueued launch by launch.
#[test]
fn decode_ops_run_on_the_device_plan_and_match_the_reference() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(61);
    for s in SHAPES {
        let mut dec = Checked::decode(s, &mut rng);
        let case = format!("{s:?}");
        let mut rp = device_plan(&be, &dec.ops, &plan(&dec.ops.graph), &case);
        let st = rp.stats();
        assert_eq!(st.launches, 7, "{case}: {st:?}");
        let case = format!("{case} stream");
        dec.run_at(&mut rp, stream, &positions(s.rows), &mut rng, &case);
    }
}

/// The same steps replayed from one CUDA graph captured before the first:
/// every position comes from memory, none from the launches.
#[test]
fn one_captured_graph_serves_every_position() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(62);
    for s in SHAPES {
        let mut dec = Checked::decode(s, &mut rng);
        let mut dp = captured_graph(&be, &dec.ops, &plan(&dec.ops.graph));
        let case = format!("{s:?} graph");
        dec.run_at(&mut dp, replay, &positions(s.rows), &mut rng, &case);
    }
}

/// The planner's key/value append as one launch of the device plan: the
/// step joins what the shape lets join, the plan saves a launch for each
/// joined part against the unfused plan, and every run matches the
/// reference (q's RoPE and both caches bit for bit) at positions in range,
/// one and more past the cache, NaN and negative; once launch by launch,
/// once replayed from a captured CUDA graph.
#[test]
fn the_key_value_append_is_one_launch_matching_the_reference() {
    let mut rng = Rng::new(63);
    // The planner's part runs without a device too.
    for s in APPENDS {
        let app = Checked::append(s, &mut rng);
        let p = plan(&app.ops.graph);
        app.ops.assert_planned_kv_append(&p, &format!("{s:?}"));
    }
    let Some(be) = backend_or_skip() else { return };
    for s in APPENDS {
        let mut app = Checked::append(s, &mut rng);
        let case = format!("{s:?}");
        let p = plan(&app.ops.graph);
        app.ops.assert_planned_kv_append(&p, &case);
        let unfused = Plan::unfused(&app.ops.graph);
        let unfused = device_plan(&be, &app.ops, &unfused, &format!("{case} unfused")).stats();
        let mut rp = device_plan(&be, &app.ops, &p, &format!("{case} fused"));
        let fused = rp.stats();
        assert_eq!(
            unfused.launches - fused.launches,
            app.ops.kv_append_saves(),
            "{case}: unfused {unfused:?}, fused {fused:?}"
        );
        let last = (s.rows - 1) as f32;
        let mut at = positions(s.rows);
        at.extend([last + 1.0, s.table_rows as f32]);
        app.run_at(&mut rp, stream, &at, &mut rng, &format!("{case} stream"));
        let mut dp = captured_graph(&be, &app.ops, &p);
        app.run_at(&mut dp, replay, &at, &mut rng, &format!("{case} graph"));
    }
}
