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

mod common;

use common::{Rng, backend_or_skip};
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::decode::RopeMode;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, Step, plan};
use fused_core::reference::eval::eval_graph;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_cuda::{CudaError, DevicePlan, Submission};
use fused_testkit::compare::{assert_bits_eq, nmse};

/// The attention's budget against the reference (its `expf` and order
/// differ from the core's).
const NMSE_BUDGET: f64 = 1e-6;

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
/// short cache of many heads (one split, positions past it clamped).
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

/// A decode step's ops over caches of `shape`, with its host memory.
struct Decode {
    g: Graph,
    mem: Memory,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    pos: NodeId,
    logits: NodeId,
    /// What is compared bit for bit: both RoPEs, the argmax, the caches.
    exact: Vec<TensorDesc>,
    att: TensorDesc,
}

/// Bytes of `n` f32.
const fn f(n: usize) -> usize {
    4 * n
}

fn tensor(ne: [usize; 4], buf: u32, at: usize) -> TensorDesc {
    TensorDesc::contiguous(DType::F32, ne, BufferId(buf), at).unwrap()
}

impl Decode {
    /// Buffer 0: inputs; 1: the caches (state); 2: results; 3: the copied
    /// value cache.
    fn new(s: Shape, rng: &mut Rng) -> Decode {
        let Shape {
            head_dim: d,
            n_head,
            n_kv,
            rows,
            ..
        } = s;
        let (kv, qd) = (d * n_kv, d * n_head);
        let (q_at, k_at, v_at) = (0, f(qd), f(qd + kv));
        let table_at = f(qd + 2 * kv);
        let pos_at = table_at + f(d * rows);
        let logits_at = pos_at + 4;
        let in_size = logits_at + f(2 * VOCAB);
        let cache = f(kv * rows);
        let (kr_at, att_at, best_at) = (0, f(kv), f(kv + qd));
        let out_size = best_at + f(2);
        let mut g = Graph::new();
        let q = g.input(tensor([d, n_head, 1, 1], 0, q_at)).unwrap();
        let k = g.input(tensor([d, n_kv, 1, 1], 0, k_at)).unwrap();
        let v = g.input(tensor([kv, 1, 1, 1], 0, v_at)).unwrap();
        let table = g.input(tensor([d, rows, 1, 1], 0, table_at)).unwrap();
        let pos = g.input(tensor([1, 1, 1, 1], 0, pos_at)).unwrap();
        let logits = g.input(tensor([VOCAB, 2, 1, 1], 0, logits_at)).unwrap();
        let kc = g.state(tensor([kv, rows, 1, 1], 1, 0)).unwrap();
        let vc = g.state(tensor([kv, rows, 1, 1], 1, cache)).unwrap();
        let qr_place = if s.rope_in_place {
            Place::at(0, q_at)
        } else {
            Place::at(2, att_at)
        };
        let qr = g.rope(RopeMode::Adjacent, q, table, pos, qr_place).unwrap();
        let kr = g
            .rope(RopeMode::Halves, k, table, pos, Place::at(2, kr_at))
            .unwrap();
        let kw = g.set_row(kc, kr, pos, Place::at(1, 0)).unwrap();
        let v_place = if s.values_copied {
            Place::at(3, 0)
        } else {
            Place::at(1, cache)
        };
        let vw = g.set_row(vc, v, pos, v_place).unwrap();
        let kw3 = g.reshape(kw, [d, n_kv, rows, 1]).unwrap();
        let vw3 = g.reshape(vw, [d, n_kv, rows, 1]).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        let att = g
            .attention(qr, kw3, vw3, pos, scale, Place::at(2, att_at))
            .unwrap();
        let best = g.argmax(logits, Place::at(2, best_at)).unwrap();
        for id in [qr, kr, att, best] {
            g.mark_output(id).unwrap();
        }
        let mut mem = Memory::new(&[in_size, 2 * cache, out_size, cache]);
        // Llama's angles: position p, pair i at p · 10000^(−2i/d).
        let angles: Vec<f32> = (0..rows * d / 2)
            .flat_map(|i| {
                let (p, pair) = (i / (d / 2), i % (d / 2));
                let a = p as f32 * 10000f32.powf(-2.0 * pair as f32 / d as f32);
                [a.cos(), a.sin()]
            })
            .collect();
        mem.write(g.tensor(table).unwrap(), &angles).unwrap();
        // Caches filled, so that long contexts attend to something.
        let caches = tensor([2 * kv * rows, 1, 1, 1], 1, 0);
        mem.write(&caches, &rng.vec(2 * kv * rows)).unwrap();
        let t = |id: NodeId| *g.tensor(id).unwrap();
        let exact = vec![t(qr), t(kr), t(best), t(vw), caches];
        let att = t(att);
        Decode {
            g,
            mem,
            q,
            k,
            v,
            pos,
            logits,
            exact,
            att,
        }
    }

    /// Writes run `run`'s inputs at `position` into the host memory and
    /// `rp`, runs the reference on the host memory and the plan by
    /// `submit`, and compares.
    fn step<P: ResidentPlan<Error = CudaError>>(
        &mut self,
        rp: &mut P,
        submit: impl FnOnce(&mut P) -> Result<(), CudaError>,
        run: usize,
        position: f32,
        rng: &mut Rng,
        case: &str,
    ) {
        let case = format!("{case}, run {run} at position {position}");
        for id in [self.q, self.k, self.v, self.logits] {
            let td = *self.g.tensor(id).unwrap();
            let mut x = rng.vec(td.n_elements());
            if id == self.q {
                // Peaked scores: a softmax that is not nearly flat.
                x.iter_mut().for_each(|v| *v *= 4.0);
            }
            if id == self.logits {
                logits(&mut x, run);
            }
            self.mem.write(&td, &x).unwrap();
            rp.write_f32(&td, &x).unwrap();
        }
        let pt = *self.g.tensor(self.pos).unwrap();
        self.mem.write(&pt, &[position]).unwrap();
        rp.write_f32(&pt, &[position]).unwrap();
        eval_graph(&self.g, &mut self.mem, GemvMode::F32).unwrap();
        submit(rp).unwrap_or_else(|e| panic!("{case}: {e}"));
        for (i, t) in self.exact.iter().enumerate() {
            assert_bits_eq(
                &rp.read_f32(t).unwrap(),
                &self.mem.read(t).unwrap(),
                &format!("{case}: exact output {i}"),
            );
        }
        let (got, want) = (
            rp.read_f32(&self.att).unwrap(),
            self.mem.read(&self.att).unwrap(),
        );
        assert!(want.iter().all(|w| w.is_finite()), "{case}: the reference");
        let e = nmse(&got, &want);
        assert!(
            e <= NMSE_BUDGET,
            "{case}: attention NMSE {e:e} (budget {NMSE_BUDGET:e})"
        );
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

/// Through the backend contract: a device plan, not the host fallback,
/// seven launches (the attention's split and combine) and no copies; each
/// run enqueued launch by launch.
#[test]
fn decode_ops_run_on_the_device_plan_and_match_the_reference() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(61);
    for s in SHAPES {
        let mut dec = Decode::new(s, &mut rng);
        let p = plan(&dec.g);
        let mut rp = be
            .compile(&dec.g, &p, GemvMode::F32, &dec.mem.sizes())
            .unwrap();
        let why = rp.fallback_reason();
        assert!(why.is_none(), "{s:?}: the host plan, because {why:?}");
        let st = rp.stats();
        assert!(!st.host_steps, "{s:?}: {st:?}");
        assert_eq!((st.launches, st.copies), (7, 0), "{s:?}: {st:?}");
        rp.write_all(&dec.mem).unwrap();
        for (run, position) in positions(s.rows).into_iter().enumerate() {
            let case = format!("{s:?} stream");
            dec.step(&mut rp, |rp| rp.run(), run, position, &mut rng, &case);
        }
    }
}

/// The same steps replayed from one CUDA graph captured before the first:
/// every position comes from memory, none from the launches.
#[test]
fn one_captured_graph_serves_every_position() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(62);
    for s in SHAPES {
        let mut dec = Decode::new(s, &mut rng);
        let p = plan(&dec.g);
        let mut dp = DevicePlan::new(&be, &dec.g, &p, GemvMode::F32, &dec.mem.sizes()).unwrap();
        dp.write_all(&dec.mem).unwrap();
        dp.capture_graph().unwrap();
        for (run, position) in positions(s.rows).into_iter().enumerate() {
            let case = format!("{s:?} graph");
            let submit = |dp: &mut DevicePlan<'_>| dp.run_as(Submission::Graph);
            dec.step(&mut dp, submit, run, position, &mut rng, &case);
        }
    }
}

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

impl Append {
    /// Whether the planner joins q's RoPE to the step (same pair mode).
    fn q_joins(&self) -> bool {
        self.q_mode == self.k_mode
    }

    /// Launches the fused step saves: one for each part past the first.
    fn saved(&self) -> u64 {
        1 + u64::from(self.q_joins()) + u64::from(self.with_v)
    }
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

/// A key/value append graph of `shape` with its host memory.
struct AppendGraph {
    g: Graph,
    mem: Memory,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    pos: NodeId,
    qr: NodeId,
    kr: NodeId,
    kw: NodeId,
    vw: Option<NodeId>,
    /// What is compared bit for bit: q's RoPE and both caches.
    exact: Vec<TensorDesc>,
    att: TensorDesc,
}

impl AppendGraph {
    /// Buffer 0: inputs; 1: the caches (state); 2: results (the k RoPE's
    /// own tensor first, which the fused step leaves unwritten).
    fn new(s: Append, rng: &mut Rng) -> AppendGraph {
        let Append {
            head_dim: d,
            n_head,
            n_kv,
            rows,
            table_rows,
            ..
        } = s;
        let (kv, qd) = (d * n_kv, d * n_head);
        let (q_at, k_at, v_at) = (0, f(qd), f(qd + kv));
        let table_at = f(qd + 2 * kv);
        let pos_at = table_at + f(d * table_rows);
        let in_size = pos_at + 4;
        let cache = f(kv * rows);
        let (kr_at, qr_at, att_at) = (0, f(kv), f(kv + qd));
        let out_size = att_at + f(qd);
        let mut g = Graph::new();
        let q = g.input(tensor([d, n_head, 1, 1], 0, q_at)).unwrap();
        let k = g.input(tensor([d, n_kv, 1, 1], 0, k_at)).unwrap();
        let v = g.input(tensor([kv, 1, 1, 1], 0, v_at)).unwrap();
        let table = g.input(tensor([d, table_rows, 1, 1], 0, table_at)).unwrap();
        let pos = g.input(tensor([1, 1, 1, 1], 0, pos_at)).unwrap();
        let kc = g.state(tensor([kv, rows, 1, 1], 1, 0)).unwrap();
        let vc = g.state(tensor([kv, rows, 1, 1], 1, cache)).unwrap();
        let qr_place = if s.q_in_place {
            Place::at(0, q_at)
        } else {
            Place::at(2, qr_at)
        };
        let qr = g.rope(s.q_mode, q, table, pos, qr_place).unwrap();
        let kr = g
            .rope(s.k_mode, k, table, pos, Place::at(2, kr_at))
            .unwrap();
        let kw = g.set_row(kc, kr, pos, Place::at(1, 0)).unwrap();
        let vw = s
            .with_v
            .then(|| g.set_row(vc, v, pos, Place::at(1, cache)).unwrap());
        let kw3 = g.reshape(kw, [d, n_kv, rows, 1]).unwrap();
        let vw3 = g.reshape(vw.unwrap_or(vc), [d, n_kv, rows, 1]).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        let att = g
            .attention(qr, kw3, vw3, pos, scale, Place::at(2, att_at))
            .unwrap();
        g.mark_output(att).unwrap();
        let mut mem = Memory::new(&[in_size, 2 * cache, out_size]);
        let angles: Vec<f32> = (0..table_rows * d / 2)
            .flat_map(|i| {
                let (p, pair) = (i / (d / 2), i % (d / 2));
                let a = p as f32 * 10000f32.powf(-2.0 * pair as f32 / d as f32);
                [a.cos(), a.sin()]
            })
            .collect();
        mem.write(g.tensor(table).unwrap(), &angles).unwrap();
        let caches = tensor([2 * kv * rows, 1, 1, 1], 1, 0);
        mem.write(&caches, &rng.vec(2 * kv * rows)).unwrap();
        let t = |id: NodeId| *g.tensor(id).unwrap();
        let exact = vec![t(qr), t(kc), t(vc)];
        let att = t(att);
        AppendGraph {
            g,
            mem,
            q,
            k,
            v,
            pos,
            qr,
            kr,
            kw,
            vw,
            exact,
            att,
        }
    }

    /// The planner's plan, asserted to hold one key/value append that
    /// joins q's RoPE where its pair mode is k's and the v row where the
    /// graph writes one.
    fn fused_plan(&self, s: Append) -> Plan {
        let p = plan(&self.g);
        let steps: Vec<_> = p
            .steps
            .iter()
            .filter_map(|st| match st {
                Step::KvAppend(f) => Some(f),
                _ => None,
            })
            .collect();
        let [step] = steps[..] else {
            panic!("{s:?}: not one key/value append in {:?}", p.steps);
        };
        assert_eq!(
            (step.q_rope, step.k_rope, step.k_write, step.v_write),
            (s.q_joins().then_some(self.qr), self.kr, self.kw, self.vw),
            "{s:?}"
        );
        p
    }

    /// Writes fresh q, k and v and `position` into the host memory and
    /// `rp`, runs the reference and the plan, and compares.
    fn step<P: ResidentPlan<Error = CudaError>>(
        &mut self,
        rp: &mut P,
        submit: impl FnOnce(&mut P) -> Result<(), CudaError>,
        position: f32,
        rng: &mut Rng,
        case: &str,
    ) {
        let case = format!("{case} at position {position}");
        for id in [self.q, self.k, self.v] {
            let td = *self.g.tensor(id).unwrap();
            let mut x = rng.vec(td.n_elements());
            if id == self.q {
                x.iter_mut().for_each(|v| *v *= 4.0);
            }
            self.mem.write(&td, &x).unwrap();
            rp.write_f32(&td, &x).unwrap();
        }
        let pt = *self.g.tensor(self.pos).unwrap();
        self.mem.write(&pt, &[position]).unwrap();
        rp.write_f32(&pt, &[position]).unwrap();
        eval_graph(&self.g, &mut self.mem, GemvMode::F32).unwrap();
        submit(rp).unwrap_or_else(|e| panic!("{case}: {e}"));
        for (t, what) in self
            .exact
            .iter()
            .zip(["q's RoPE", "key cache", "value cache"])
        {
            assert_bits_eq(
                &rp.read_f32(t).unwrap(),
                &self.mem.read(t).unwrap(),
                &format!("{case}: {what}"),
            );
        }
        let (got, want) = (
            rp.read_f32(&self.att).unwrap(),
            self.mem.read(&self.att).unwrap(),
        );
        assert!(want.iter().all(|w| w.is_finite()), "{case}: the reference");
        let e = nmse(&got, &want);
        assert!(
            e <= NMSE_BUDGET,
            "{case}: attention NMSE {e:e} (budget {NMSE_BUDGET:e})"
        );
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
        AppendGraph::new(s, &mut rng).fused_plan(s);
    }
    let Some(be) = backend_or_skip() else { return };
    for s in APPENDS {
        let mut app = AppendGraph::new(s, &mut rng);
        let p = app.fused_plan(s);
        let sizes = app.mem.sizes();
        let unfused = Plan::unfused(&app.g);
        let mut stats = Vec::new();
        for (pl, name) in [(&unfused, "unfused"), (&p, "fused")] {
            let rp = be.compile(&app.g, pl, GemvMode::F32, &sizes).unwrap();
            let why = rp.fallback_reason();
            assert!(
                why.is_none(),
                "{s:?} {name}: the host plan, because {why:?}"
            );
            let st = rp.stats();
            assert!(!st.host_steps, "{s:?} {name}: {st:?}");
            assert_eq!(st.copies, 0, "{s:?} {name}: {st:?}");
            stats.push(st);
        }
        assert_eq!(
            stats[0].launches - stats[1].launches,
            s.saved(),
            "{s:?}: unfused {:?}, fused {:?}",
            stats[0],
            stats[1]
        );
        let last = (s.rows - 1) as f32;
        let mut at = positions(s.rows);
        at.extend([last + 1.0, s.table_rows as f32]);
        let mut rp = be.compile(&app.g, &p, GemvMode::F32, &sizes).unwrap();
        rp.write_all(&app.mem).unwrap();
        for &position in &at {
            let case = format!("{s:?} stream");
            app.step(&mut rp, |rp| rp.run(), position, &mut rng, &case);
        }
        let mut dp = DevicePlan::new(&be, &app.g, &p, GemvMode::F32, &sizes).unwrap();
        dp.write_all(&app.mem).unwrap();
        dp.capture_graph().unwrap();
        for &position in &at {
            let case = format!("{s:?} graph");
            let submit = |dp: &mut DevicePlan<'_>| dp.run_as(Submission::Graph);
            app.step(&mut dp, submit, position, &mut rng, &case);
        }
    }
}
