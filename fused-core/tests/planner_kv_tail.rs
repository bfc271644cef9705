//! The key/value append as the tail of the GEMV that stacks q, k and v:
//! when the planner attaches it, what it refuses and why, and that the
//! plan computes what the graph does, bit for bit.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::decode::RopeMode;
use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::legality::Refusal;
use fused_core::memory::Memory;
use fused_core::planner::{Pattern, Plan, Step, plan};
use fused_core::reference::eval::{eval_graph, eval_plan};
use fused_core::tensor::{BufferId, TensorDesc};

const HEAD: usize = 8;
const Q_DIM: usize = 2 * HEAD;
const KV_DIM: usize = HEAD;
const K: usize = 16;
const ROWS: usize = 4;

fn f32t(ne: [usize; 4], buf: u32, at: usize) -> TensorDesc {
    TensorDesc::contiguous(DType::F32, ne, BufferId(buf), at).unwrap()
}

/// How the test graph differs from the plain stacked layer.
#[derive(Clone, Copy)]
struct Shape {
    mode: RopeMode,
    /// Rows of the product before q (an odd count puts the heads at odd
    /// rows).
    pad: usize,
    /// A node between the product and the append reads q's rows.
    reader_between: bool,
}

const PLAIN: Shape = Shape {
    mode: RopeMode::Adjacent,
    pad: 0,
    reader_between: false,
};

struct Layer {
    g: Graph,
    w: NodeId,
    x: NodeId,
    table: NodeId,
    pos: NodeId,
    qkv: NodeId,
    q_rope: NodeId,
    k_rope: NodeId,
    k_write: NodeId,
    v_write: NodeId,
    attention: NodeId,
    buffers: [usize; 3],
}

/// `qkv = W·x` (q, k and v stacked after `pad` rows), RoPE of q and k,
/// k and v written into row `pos` of their caches, attention over them.
/// Buffer 0 holds the inputs, 1 the results, 2 the caches.
fn layer(s: Shape) -> Layer {
    let m = s.pad + Q_DIM + 2 * KV_DIM;
    let mut g = Graph::new();
    let w = g.input(f32t([K, m, 1, 1], 0, 0)).unwrap();
    let mut at0 = 4 * K * m;
    let mut input = |g: &mut Graph, ne: [usize; 4]| {
        let id = g.input(f32t(ne, 0, at0)).unwrap();
        at0 += 4 * ne.iter().product::<usize>();
        id
    };
    let x = input(&mut g, [K, 1, 1, 1]);
    let table = input(&mut g, [HEAD, ROWS, 1, 1]);
    let pos = input(&mut g, [1, 1, 1, 1]);
    let qkv = g.mul_mat(w, x, Place::at(1, 0)).unwrap();
    let view = |g: &mut Graph, row: usize, n: usize| {
        g.view(qkv, [n, 1, 1, 1], [4, 4 * n, 4 * n, 4 * n], 4 * row)
            .unwrap()
    };
    let q = view(&mut g, s.pad, Q_DIM);
    let k = view(&mut g, s.pad + Q_DIM, KV_DIM);
    let v = view(&mut g, s.pad + Q_DIM + KV_DIM, KV_DIM);
    let mut at1 = 4 * m;
    let mut place = |n: usize| {
        let p = Place::at(1, at1);
        at1 += 4 * n;
        p
    };
    if s.reader_between {
        let r = g.unary(Activation::Silu, q, place(Q_DIM)).unwrap();
        g.mark_output(r).unwrap();
    }
    let q = g.reshape(q, [HEAD, 2, 1, 1]).unwrap();
    let k = g.reshape(k, [HEAD, 1, 1, 1]).unwrap();
    let q_rope = g.rope(s.mode, q, table, pos, place(Q_DIM)).unwrap();
    let k_rope = g.rope(s.mode, k, table, pos, place(KV_DIM)).unwrap();
    let cache_bytes = 4 * KV_DIM * ROWS;
    let keys = g.state(f32t([KV_DIM, ROWS, 1, 1], 2, 0)).unwrap();
    let values = g.state(f32t([KV_DIM, ROWS, 1, 1], 2, cache_bytes)).unwrap();
    let k_write = g.set_row(keys, k_rope, pos, Place::at(2, 0)).unwrap();
    let v_write = g
        .set_row(values, v, pos, Place::at(2, cache_bytes))
        .unwrap();
    let kc = g.reshape(k_write, [HEAD, 1, ROWS, 1]).unwrap();
    let vc = g.reshape(v_write, [HEAD, 1, ROWS, 1]).unwrap();
    let attention = g
        .attention(q_rope, kc, vc, pos, 0.25, place(Q_DIM))
        .unwrap();
    g.mark_output(qkv).unwrap();
    g.mark_output(attention).unwrap();
    Layer {
        g,
        w,
        x,
        table,
        pos,
        qkv,
        q_rope,
        k_rope,
        k_write,
        v_write,
        attention,
        buffers: [at0, at1, 2 * cache_bytes],
    }
}

/// Runs the graph node by node and `p` step by step over the same inputs
/// at several positions (the caches carried from one to the next) and
/// checks every result bit for bit.
fn plan_equals_graph(l: &Layer, p: &Plan) {
    let g = &l.g;
    let mut mem = Memory::new(&l.buffers);
    let vals = |n: usize, f: f32| (0..n).map(|i| (i as f32 * f).sin()).collect::<Vec<f32>>();
    let wt = g.tensor(l.w).unwrap();
    mem.write(wt, &vals(wt.n_elements(), 0.37)).unwrap();
    mem.write(g.tensor(l.x).unwrap(), &vals(K, 0.91)).unwrap();
    mem.write(g.tensor(l.table).unwrap(), &vals(HEAD * ROWS, 0.53))
        .unwrap();
    for position in [0.0f32, 2.0, 3.0] {
        mem.write(g.tensor(l.pos).unwrap(), &[position]).unwrap();
        let (mut a, mut b) = (mem.clone(), mem.clone());
        eval_graph(g, &mut a, GemvMode::F32).unwrap();
        eval_plan(g, p, &mut b, GemvMode::F32).unwrap();
        for id in [l.qkv, l.q_rope, l.k_write, l.v_write, l.attention] {
            let t = g.tensor(id).unwrap();
            assert_eq!(
                a.read(t).unwrap(),
                b.read(t).unwrap(),
                "{id:?} at {position}"
            );
        }
        mem = a;
    }
}

fn kv_refusals(p: &Plan) -> Vec<Refusal> {
    p.refusals
        .iter()
        .filter(|r| r.pattern == Pattern::KvAppend)
        .map(|r| r.reason)
        .collect()
}

#[test]
fn the_append_of_stacked_rows_becomes_the_gemvs_tail() {
    let l = layer(PLAIN);
    let p = plan(&l.g);
    let fused: Vec<&Step> = p.steps.iter().filter(|s| s.is_fused()).collect();
    let [Step::Gemv(f)] = fused[..] else {
        panic!("{:?}", p.steps);
    };
    let kv = f.kv.as_ref().expect("the append as the GEMV's tail");
    assert_eq!(f.out, l.qkv);
    assert_eq!(
        (kv.q_rope, kv.k_rope, kv.k_write, kv.v_write),
        (Some(l.q_rope), l.k_rope, l.k_write, Some(l.v_write))
    );
    for id in [l.qkv, l.q_rope, l.k_rope, l.k_write, l.v_write] {
        assert!(f.nodes.contains(&id), "{id:?} in {:?}", f.nodes);
    }
    assert!(kv_refusals(&p).is_empty(), "{:?}", p.refusals);
    // The GEMV with its tail, then attention.
    assert_eq!(p.kernel_steps(&l.g), 2, "{:?}", p.steps);
    plan_equals_graph(&l, &p);
}

/// The append stays a step of its own, after the GEMV, for `reason`.
fn refused_as(s: Shape, reason: Refusal) {
    let l = layer(s);
    let p = plan(&l.g);
    assert!(kv_refusals(&p).contains(&reason), "{:?}", p.refusals);
    assert!(
        p.steps
            .iter()
            .all(|st| !matches!(st, Step::Gemv(f) if f.kv.is_some())),
        "{:?}",
        p.steps
    );
    assert!(
        p.steps.iter().any(|st| matches!(st, Step::KvAppend(_))),
        "{:?}",
        p.steps
    );
    plan_equals_graph(&l, &p);
}

#[test]
fn pairs_half_a_head_apart_are_not_a_tail() {
    let l = layer(Shape {
        mode: RopeMode::Halves,
        ..PLAIN
    });
    // The q RoPE is the first row checked after k's.
    refused_as(
        Shape {
            mode: RopeMode::Halves,
            ..PLAIN
        },
        Refusal::PairsAcrossTiles { node: l.k_rope },
    );
}

#[test]
fn heads_from_an_odd_row_are_not_a_tail() {
    let s = Shape { pad: 1, ..PLAIN };
    let l = layer(s);
    refused_as(s, Refusal::PairsAcrossTiles { node: l.k_rope });
}

#[test]
fn a_reader_of_the_rows_in_between_keeps_the_append_apart() {
    let s = Shape {
        reader_between: true,
        ..PLAIN
    };
    let l = layer(s);
    let reader = NodeId(l.qkv.0 + 4);
    refused_as(
        s,
        Refusal::ReadsMovedResult {
            reader,
            node: l.qkv,
        },
    );
}
