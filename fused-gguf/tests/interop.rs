//! A file written by another writer: `tests/data/gguf-py.gguf`, made by
//! llama.cpp's Python package (`gguf` 0.19.0, `tests/data/make_gguf_py.py`),
//! reads back as that package's own reader sees it.

use fused_core::DType;
use fused_gguf::{Gguf, GgufError, Value};

const FILE: &[u8] = include_bytes!("data/gguf-py.gguf");

#[test]
fn a_file_from_gguf_py_reads_as_gguf_py_reads_it() {
    let g = Gguf::parse(FILE).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);

    // name, dims, type id, file offset, bytes: what gguf's GGUFReader printed.
    let want: [(&str, &[u64], u32, u64, u64); 6] = [
        ("token_embd.weight", &[64, 3], 0, 832, 768),
        ("blk.0.attn_norm.weight", &[64], 1, 1600, 128),
        ("blk.0.ffn_up.weight", &[64, 2], 8, 1728, 136),
        ("blk.0.ffn_down.weight", &[256, 2], 12, 1888, 288),
        ("blk.0.ffn_gate.weight", &[256, 3], 16, 2176, 198),
        ("blk.0.attn_q.weight", &[32, 2], 39, 2400, 34),
    ];
    assert_eq!(g.tensors().len(), want.len());
    for (t, (name, dims, ty, off, len)) in g.tensors().iter().zip(want) {
        assert_eq!(
            (
                t.name(),
                t.dims(),
                t.ggml_type(),
                t.file_offset(),
                t.byte_len()
            ),
            (name, dims, ty, off, len)
        );
    }
    let embd = g.tensor("token_embd.weight").unwrap();
    let row2: Vec<f32> = embd
        .rows(2, 1)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(row2, (128..192).map(|x| x as f32).collect::<Vec<_>>());
    assert_eq!(
        g.tensor("blk.0.ffn_down.weight").unwrap().dtype(),
        Ok(DType::Q4_K)
    );
    assert_eq!(
        g.tensor("blk.0.attn_q.weight").unwrap().dtype(),
        Err(GgufError::UnsupportedType {
            tensor: "blk.0.attn_q.weight".into(),
            type_name: "mxfp4",
            type_id: 39
        })
    );

    assert_eq!(g.get_str("general.architecture"), Ok("llama"));
    assert_eq!(g.get("u8"), Some(&Value::U8(200)));
    assert_eq!(g.get("i8"), Some(&Value::I8(-100)));
    assert_eq!(g.get("u16"), Some(&Value::U16(60000)));
    assert_eq!(g.get("i16"), Some(&Value::I16(-30000)));
    assert_eq!(g.get_u32("u32"), Ok(4_000_000_000));
    assert_eq!(g.get_i32("i32"), Ok(-2_000_000_000));
    assert_eq!(g.get_f32("f32"), Ok(-1.5));
    assert_eq!(g.get_bool("b"), Ok(true));
    assert_eq!(g.get_str("s"), Ok("héllo"));
    assert_eq!(g.get_u64("u64"), Ok(u64::MAX));
    assert_eq!(g.get("i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(g.get("f64"), Some(&Value::F64(3.25)));
    let tokens: Vec<_> = g.get_array("tokens").unwrap().strings().unwrap().collect();
    assert_eq!(tokens, ["<s>", "</s>", "x"]);
    let scores: Vec<_> = g.get_array("scores").unwrap().f32s().unwrap().collect();
    assert_eq!(scores, [0.5, -1.0]);
    let nested: Vec<Vec<&str>> = g
        .get_array("nested")
        .unwrap()
        .arrays()
        .unwrap()
        .map(|a| a.strings().unwrap().collect())
        .collect();
    assert_eq!(nested, [vec!["a", "b"], vec!["c"]]);
}
