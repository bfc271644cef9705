//! The decode ops in a graph: shapes the constructors refuse, the state
//! flag, and the host executor against the reference.

use fused_core::DType;
use fused_core::backend::overwritten_inputs;
use fused_core::decode::RopeMode;
use fused_core::graph::{Graph, Place};
use fused_core::tensor::{BufferId, TensorDesc};

fn f32t(ne: [usize; 4], buf: u32, at: usize) -> TensorDesc {
    TensorDesc::contiguous(DType::F32, ne, BufferId(buf), at).unwrap()
}

#[test]
fn constructors_refuse_shapes_the_ops_cannot_take() {
    let mut g = Graph::new();
    let odd = g.input(f32t([7, 2, 1, 1], 0, 0)).unwrap();
    let x = g.input(f32t([8, 2, 1, 1], 0, 64)).unwrap();
    let table = g.input(f32t([8, 4, 1, 1], 0, 128)).unwrap();
    let short_table = g.input(f32t([6, 4, 1, 1], 0, 256)).unwrap();
    let pos = g.input(f32t([1, 1, 1, 1], 0, 512)).unwrap();
    let two = g.input(f32t([2, 1, 1, 1], 0, 520)).unwrap();
    let half = TensorDesc::contiguous(DType::F16, [8, 2, 1, 1], BufferId(0), 600).unwrap();
    let half = g.input(half).unwrap();
    let at = Place::at(1, 0);
    let rope = |g: &mut Graph, x, t, p| g.rope(RopeMode::Adjacent, x, t, p, at);
    assert!(rope(&mut g, odd, table, pos).is_err(), "odd head size");
    assert!(
        rope(&mut g, x, short_table, pos).is_err(),
        "table rows of another size"
    );
    assert!(
        rope(&mut g, x, table, two).is_err(),
        "a position of two values"
    );
    assert!(rope(&mut g, half, table, pos).is_err(), "F16 input");
    assert!(rope(&mut g, x, table, pos).is_ok());

    let k = g.input(f32t([8, 3, 4, 1], 2, 0)).unwrap();
    let q = g.input(f32t([8, 4, 1, 1], 0, 700)).unwrap();
    // 3 key/value heads do not divide 4 query heads.
    assert!(g.attention(q, k, k, pos, 1.0, at).is_err());
    let k2 = g.input(f32t([8, 2, 4, 1], 2, 0)).unwrap();
    let v_other = g.input(f32t([8, 2, 5, 1], 3, 0)).unwrap();
    assert!(
        g.attention(q, k2, v_other, pos, 1.0, at).is_err(),
        "v of another shape"
    );
    assert!(g.attention(q, k2, k2, pos, 1.0, at).is_ok());

    let cache = g.state(f32t([16, 4, 1, 1], 4, 0)).unwrap();
    let row = g.input(f32t([8, 2, 1, 1], 0, 800)).unwrap();
    let short_row = g.input(f32t([15, 1, 1, 1], 0, 900)).unwrap();
    assert!(g.set_row(cache, short_row, pos, Place::at(4, 0)).is_err());
    // Half over the cache: a partial overlap with a source.
    assert!(g.set_row(cache, row, pos, Place::at(4, 128)).is_err());
    assert!(g.set_row(cache, row, pos, Place::at(4, 0)).is_ok());
    assert!(g.argmax(half, at).is_err());
}

#[test]
fn state_inputs_are_not_kept_pristine_but_other_overwritten_inputs_are() {
    let mut g = Graph::new();
    let cache = g.state(f32t([4, 3, 1, 1], 0, 0)).unwrap();
    let h = g.input(f32t([4, 1, 1, 1], 0, 48)).unwrap();
    let row = g.input(f32t([4, 1, 1, 1], 1, 0)).unwrap();
    let pos = g.input(f32t([1, 1, 1, 1], 1, 16)).unwrap();
    g.set_row(cache, row, pos, Place::at(0, 0)).unwrap();
    g.add(h, row, Place::at(0, 48)).unwrap();
    assert!(g.node(cache).unwrap().is_state());
    let kept = overwritten_inputs(&g);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].1.start, 48);
}

mod kv_append {
    use super::f32t;
    use fused_core::acts::GemvMode;
    use fused_core::decode::RopeMode;
    use fused_core::graph::{Graph, NodeId, Place};
    use fused_core::legality::Refusal;
    use fused_core::memory::Memory;
    use fused_core::planner::{Pattern, Plan, Step, plan};
    use fused_core::reference::eval::{eval_graph, eval_plan};

    /// q `[8, 4]`, k and v `[8, 2]`, a table of 6 rows and the position in
    /// buffer 0; caches `[16, 6]` in buffer 1; results in buffer 2.
    struct Parts {
        g: Graph,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        table: NodeId,
        pos: NodeId,
        other_pos: NodeId,
        kc: NodeId,
        vc: NodeId,
    }

    fn parts() -> Parts {
        let mut g = Graph::new();
        let q = g.input(f32t([8, 4, 1, 1], 0, 0)).unwrap();
        let k = g.input(f32t([8, 2, 1, 1], 0, 128)).unwrap();
        let v = g.input(f32t([16, 1, 1, 1], 0, 192)).unwrap();
        let table = g.input(f32t([8, 6, 1, 1], 0, 256)).unwrap();
        let pos = g.input(f32t([1, 1, 1, 1], 0, 448)).unwrap();
        let other_pos = g.input(f32t([1, 1, 1, 1], 0, 452)).unwrap();
        let kc = g.state(f32t([16, 6, 1, 1], 1, 0)).unwrap();
        let vc = g.state(f32t([16, 6, 1, 1], 1, 384)).unwrap();
        Parts {
            g,
            q,
            k,
            v,
            table,
            pos,
            other_pos,
            kc,
            vc,
        }
    }

    fn refusals(p: &Plan) -> Vec<Refusal> {
        p.refusals
            .iter()
            .filter(|r| r.pattern == Pattern::KvAppend)
            .map(|r| r.reason)
            .collect()
    }

    /// One attention step: q's RoPE (in `q_mode`), k's RoPE and its row
    /// write, the v row write (before the attention, or after it), the
    /// attention over the written caches.
    struct AttentionStep {
        g: Graph,
        /// q, k, v, the table and the position.
        parts: [NodeId; 5],
        qr: NodeId,
        kr: NodeId,
        kw: NodeId,
        vw: NodeId,
        att: NodeId,
    }

    fn attention_step(q_mode: RopeMode, v_after_attention: bool) -> AttentionStep {
        let Parts {
            mut g,
            q,
            k,
            v,
            table,
            pos,
            kc,
            vc,
            ..
        } = parts();
        let qr = g.rope(q_mode, q, table, pos, Place::at(2, 0)).unwrap();
        let kr = g
            .rope(RopeMode::Adjacent, k, table, pos, Place::at(2, 128))
            .unwrap();
        let kw = g.set_row(kc, kr, pos, Place::at(1, 0)).unwrap();
        let write_v = |g: &mut Graph| g.set_row(vc, v, pos, Place::at(1, 384)).unwrap();
        let vw_early = (!v_after_attention).then(|| write_v(&mut g));
        let k3 = g.reshape(kw, [8, 2, 6, 1]).unwrap();
        let v3 = g.reshape(vw_early.unwrap_or(vc), [8, 2, 6, 1]).unwrap();
        let att = g
            .attention(qr, k3, v3, pos, 0.3, Place::at(2, 192))
            .unwrap();
        let vw = vw_early.unwrap_or_else(|| write_v(&mut g));
        g.mark_output(att).unwrap();
        g.mark_output(vw).unwrap();
        AttentionStep {
            g,
            parts: [q, k, v, table, pos],
            qr,
            kr,
            kw,
            vw,
            att,
        }
    }

    #[test]
    fn the_attention_inputs_fuse_into_one_step_with_the_unfused_results() {
        let AttentionStep {
            g,
            parts: [q, k, v, table, pos],
            qr,
            kr,
            kw,
            vw,
            att,
        } = attention_step(RopeMode::Adjacent, false);
        let p = plan(&g);
        let fused: Vec<&Step> = p.steps.iter().filter(|s| s.is_fused()).collect();
        let [Step::KvAppend(f)] = fused[..] else {
            panic!("{:?}", p.steps);
        };
        assert_eq!(
            (f.q_rope, f.k_rope, f.k_write, f.v_write),
            (Some(qr), kr, kw, Some(vw))
        );
        assert_eq!(p.kernel_steps(&g), 2, "{:?}", p.steps);
        let mut mem = Memory::new(&[456, 768, 320]);
        let vals: Vec<f32> = (0..114).map(|i| (i as f32 * 0.37).sin()).collect();
        mem.write(g.tensor(q).unwrap(), &vals[..32]).unwrap();
        mem.write(g.tensor(k).unwrap(), &vals[32..48]).unwrap();
        mem.write(g.tensor(v).unwrap(), &vals[48..64]).unwrap();
        mem.write(g.tensor(table).unwrap(), &vals[64..112]).unwrap();
        for position in [0.0f32, 3.0, 5.0] {
            mem.write(g.tensor(pos).unwrap(), &[position]).unwrap();
            let (mut a, mut b) = (mem.clone(), mem.clone());
            eval_graph(&g, &mut a, GemvMode::F32).unwrap();
            eval_plan(&g, &p, &mut b, GemvMode::F32).unwrap();
            for id in [qr, kw, vw, att] {
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

    /// The parts with k's RoPE added (at the start of buffer 2), and the
    /// RoPE's node.
    fn with_k_rope() -> (Parts, NodeId) {
        let mut p = parts();
        let kr =
            p.g.rope(RopeMode::Adjacent, p.k, p.table, p.pos, Place::at(2, 0))
                .unwrap();
        (p, kr)
    }

    #[test]
    fn each_predicate_refuses_with_its_reason() {
        // The k RoPE is also an output: it must be stored.
        let (mut p, kr) = with_k_rope();
        p.g.set_row(p.kc, kr, p.pos, Place::at(1, 0)).unwrap();
        p.g.mark_output(kr).unwrap();
        assert_eq!(refusals(&plan(&p.g)), [Refusal::GraphOutput { node: kr }]);

        // The row write copies the cache elsewhere.
        let (mut p, kr) = with_k_rope();
        let kw = p.g.set_row(p.kc, kr, p.pos, Place::at(2, 64)).unwrap();
        assert_eq!(
            refusals(&plan(&p.g)),
            [Refusal::RowWriteNotInPlace { node: kw }]
        );

        // The RoPE and the row write read different positions.
        let (mut p, kr) = with_k_rope();
        let kw = p.g.set_row(p.kc, kr, p.other_pos, Place::at(1, 0)).unwrap();
        assert_eq!(refusals(&plan(&p.g)), [Refusal::OtherPosition { node: kw }]);

        // A plain row (no RoPE) is not a key append.
        let mut p = parts();
        p.g.set_row(p.vc, p.v, p.pos, Place::at(1, 384)).unwrap();
        assert_eq!(refusals(&plan(&p.g)), [Refusal::NotARope { node: p.v }]);
    }

    #[test]
    fn partners_join_only_where_legal() {
        // q's RoPE in another mode stays out; the v write after an
        // attention that reads the k cache cannot move past it, so it stays
        // out too, and the k part fuses alone.
        let AttentionStep {
            g,
            parts: [_, _, v, _, _],
            kw,
            ..
        } = attention_step(RopeMode::Halves, true);
        let p = plan(&g);
        let f = p
            .steps
            .iter()
            .find_map(|s| match s {
                Step::KvAppend(f) => Some(f),
                _ => None,
            })
            .expect("the k part fuses");
        assert_eq!((f.q_rope, f.k_write, f.v_write), (None, kw, None));
        // The v write, anchored alone, is no key append.
        assert_eq!(refusals(&p), [Refusal::NotARope { node: v }]);
    }
}

mod kv_append_operands {
    use super::f32t;
    use fused_core::Error;
    use fused_core::decode::RopeMode;
    use fused_core::lower::{KvAppendDims, KvAppendOperands};

    /// q `[8, 4]`, k and v `[8, 2]`, a table of 6 rows of 8, caches of 5
    /// rows of 16.
    fn operands() -> KvAppendOperands {
        KvAppendOperands {
            mode: RopeMode::Adjacent,
            table: f32t([8, 6, 1, 1], 0, 0),
            pos: f32t([1, 1, 1, 1], 0, 192),
            k: f32t([8, 2, 1, 1], 0, 256),
            k_rope: f32t([8, 2, 1, 1], 0, 320),
            k_cache: f32t([16, 5, 1, 1], 1, 0),
            q: Some((f32t([8, 4, 1, 1], 0, 384), f32t([8, 4, 1, 1], 0, 384))),
            v: Some((f32t([16, 1, 1, 1], 0, 512), f32t([16, 5, 1, 1], 2, 0))),
        }
    }

    #[test]
    fn dims_of_operands_that_fit() {
        let d = operands().dims().unwrap();
        let want = KvAppendDims {
            head_dim: 8,
            table_rows: 6,
            q_len: 32,
            k_len: 16,
            k_rows: 5,
            v_len: 16,
            v_rows: 5,
        };
        assert_eq!(d, want);
        let alone = KvAppendOperands {
            q: None,
            v: None,
            ..operands()
        };
        let d = alone.dims().unwrap();
        assert_eq!((d.q_len, d.v_len, d.v_rows), (0, 0, 0));
    }

    #[test]
    fn operands_that_do_not_fit_are_refused_by_name() {
        let what = |a: KvAppendOperands| match a.dims() {
            Err(Error::LengthMismatch { what, .. } | Error::ShapeMismatch { what, .. }) => what,
            other => panic!("expected a size error, got {other:?}"),
        };
        let refused = |edit: fn(&mut KvAppendOperands), named: &str| {
            let mut a = operands();
            edit(&mut a);
            let got = what(a);
            assert!(got.contains(named), "{got:?} should name {named:?}");
        };
        refused(
            |a| (a.table, a.k) = (f32t([7, 6, 1, 1], 0, 0), f32t([7, 2, 1, 1], 0, 256)),
            "even",
        );
        refused(|a| a.pos = f32t([2, 1, 1, 1], 0, 192), "position");
        refused(|a| a.k = f32t([16, 1, 1, 1], 0, 256), "k (");
        refused(
            |a| a.k_rope = f32t([8, 1, 1, 1], 0, 320),
            "RoPE output of k",
        );
        refused(|a| a.k_cache = f32t([8, 10, 1, 1], 1, 0), "key cache");
        refused(
            |a| a.q = a.q.map(|(x, _)| (x, f32t([8, 3, 1, 1], 0, 384))),
            "RoPE output of q",
        );
        refused(
            |a| a.v = a.v.map(|(row, _)| (row, f32t([12, 5, 1, 1], 2, 0))),
            "value cache",
        );
    }
}

#[test]
fn attention_operands_give_their_rows_or_a_named_refusal() {
    use fused_core::Error;
    use fused_core::decode::{AttentionShape, attention_rows};
    let shape = AttentionShape {
        head_dim: 8,
        n_head: 4,
        n_kv: 2,
        scale: 0.25,
    };
    let q = f32t([8, 4, 1, 1], 0, 0);
    let pos = f32t([1, 1, 1, 1], 0, 128);
    let cache = f32t([8, 2, 5, 1], 1, 0);
    assert_eq!(attention_rows(&shape, &q, &cache, &cache, &pos, &q), Ok(5));
    let what = |r: Result<usize, Error>| match r {
        Err(Error::LengthMismatch { what, .. } | Error::ShapeMismatch { what, .. }) => what,
        other => panic!("expected a size error, got {other:?}"),
    };
    let flat = f32t([16, 5, 1, 1], 1, 0);
    assert!(what(attention_rows(&shape, &q, &flat, &cache, &pos, &q)).contains("cache"));
    let empty = f32t([8, 2, 0, 1], 1, 0);
    assert!(what(attention_rows(&shape, &q, &empty, &empty, &pos, &q)).contains("rows > 0"));
    let short_q = f32t([8, 3, 1, 1], 0, 0);
    assert!(what(attention_rows(&shape, &short_q, &cache, &cache, &pos, &q)).contains("query"));
    assert!(what(attention_rows(&shape, &q, &cache, &cache, &pos, &short_q)).contains("output"));
    let two = f32t([2, 1, 1, 1], 0, 128);
    assert!(what(attention_rows(&shape, &q, &cache, &cache, &two, &q)).contains("position"));
}
