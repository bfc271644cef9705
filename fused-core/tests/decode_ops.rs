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
