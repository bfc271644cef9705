//! One test per class of hostile file, each asserting the exact error, and a
//! round trip of a valid file.

mod common;

use common::{Builder, T, W, nested_array, small_file};
use fused_core::DType;
use fused_gguf::{Array, Gguf, GgufError, Limits, Value, ValueType, safe_file_stem};

fn err(file: &[u8]) -> GgufError {
    Gguf::parse(file).expect_err("the file must be refused")
}

/// Whether a parsed value is the one written (arrays element by element).
fn same(v: &Value<'_>, w: &W) -> bool {
    match (v, w) {
        (Value::U8(a), W::U8(b)) => a == b,
        (Value::I8(a), W::I8(b)) => a == b,
        (Value::U16(a), W::U16(b)) => a == b,
        (Value::I16(a), W::I16(b)) => a == b,
        (Value::U32(a), W::U32(b)) => a == b,
        (Value::I32(a), W::I32(b)) => a == b,
        (Value::F32(a), W::F32(b)) => a.to_bits() == b.to_bits(),
        (Value::Bool(a), W::Bool(b)) => a == b,
        (Value::String(a), W::Str(b)) => a == b,
        (Value::U64(a), W::U64(b)) => a == b,
        (Value::I64(a), W::I64(b)) => a == b,
        (Value::F64(a), W::F64(b)) => a.to_bits() == b.to_bits(),
        (Value::Array(a), W::Array(elem, items)) => same_array(a, *elem, items),
        _ => false,
    }
}

fn same_array(a: &Array<'_>, elem: u32, items: &[W]) -> bool {
    a.elem_type().id() == elem
        && a.len() == items.len()
        && a.iter().len() == items.len()
        && a.iter().zip(items).all(|(v, w)| same(&v, w))
}

#[test]
fn round_trip_every_value_type_and_several_dtypes() {
    let strs = |xs: &[&str]| W::Array(8, xs.iter().map(|s| W::Str((*s).into())).collect());
    let kv = vec![
        ("u8", W::U8(200)),
        ("i8", W::I8(-100)),
        ("u16", W::U16(60000)),
        ("i16", W::I16(-30000)),
        ("u32", W::U32(4_000_000_000)),
        ("i32", W::I32(-2_000_000_000)),
        ("f32", W::F32(-1.5e-7)),
        ("bool.true", W::Bool(true)),
        ("bool.false", W::Bool(false)),
        ("string", W::Str("héllo, ✓".into())),
        ("empty", W::Str(String::new())),
        ("u64", W::U64(u64::MAX)),
        ("i64", W::I64(i64::MIN)),
        ("f64", W::F64(core::f64::consts::PI)),
        ("tokens", strs(&["<s>", "</s>", "▁the", ""])),
        (
            "scores",
            W::Array(6, vec![W::F32(0.0), W::F32(-1.25), W::F32(f32::MAX)]),
        ),
        ("types", W::Array(5, vec![W::I32(1), W::I32(-3)])),
        ("ids", W::Array(4, vec![W::U32(7), W::U32(u32::MAX)])),
        ("bools", W::Array(7, vec![W::Bool(false), W::Bool(true)])),
        ("u64s", W::Array(10, vec![W::U64(1), W::U64(2)])),
        ("bytes", W::Array(0, vec![W::U8(1), W::U8(2), W::U8(3)])),
        (
            "nested",
            W::Array(
                9,
                vec![
                    strs(&["a", "b"]),
                    W::Array(9, vec![strs(&["deep"]), strs(&[])]),
                    W::Array(6, vec![W::F32(2.0)]),
                ],
            ),
        ),
        ("no.elements", W::Array(12, vec![])),
    ];
    let tensors = vec![
        T::new("token_embd.weight", &[64, 3], 12 - 10), // q4_0
        T::new("blk.0.attn_norm.weight", &[64], 0),
        T::new("blk.0.ffn_up.weight", &[256, 2], 12), // q4_K
        T::new("blk.0.ffn_down.weight", &[32, 2, 2], 8), // q8_0
        T::new("blk.0.attn_q.weight", &[5, 3, 2, 1], 1), // f16
        T::new("blk.0.attn_k.weight", &[7], 30),      // bf16
        T::new("blk.0.ffn_gate.weight", &[256, 1], 10), // q2_K, not a core format
        T::new("empty.weight", &[0, 4], 0),
    ];
    let mut b = Builder::default();
    for (k, v) in &kv {
        b = b.kv(k, v.clone());
    }
    for t in &tensors {
        b = b.tensor(t.clone());
    }
    let file = b.build();
    let g = Gguf::parse(&file).unwrap();

    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.data_offset() % 32, 0);
    assert_eq!(g.metadata().len(), kv.len());
    for ((key, v), (wk, w)) in g.metadata().zip(&kv) {
        assert_eq!(key, *wk);
        assert!(same(v, w), "{key}: {v:?} vs {w:?}");
        assert!(same(g.get(key).unwrap(), w), "{key}");
    }
    assert_eq!(g.get_u32("u32"), Ok(4_000_000_000));
    assert_eq!(g.get_u64("u64"), Ok(u64::MAX));
    assert_eq!(g.get_i32("i32"), Ok(-2_000_000_000));
    assert_eq!(g.get_f32("f32"), Ok(-1.5e-7));
    assert_eq!(g.get_bool("bool.true"), Ok(true));
    assert_eq!(g.get_str("string"), Ok("héllo, ✓"));
    let tokens: Vec<&str> = g.get_array("tokens").unwrap().strings().unwrap().collect();
    assert_eq!(tokens, ["<s>", "</s>", "▁the", ""]);
    let scores: Vec<f32> = g.get_array("scores").unwrap().f32s().unwrap().collect();
    assert_eq!(scores, [0.0, -1.25, f32::MAX]);
    let types: Vec<i32> = g.get_array("types").unwrap().i32s().unwrap().collect();
    assert_eq!(types, [1, -3]);
    let ids: Vec<u32> = g.get_array("ids").unwrap().u32s().unwrap().collect();
    assert_eq!(ids, [7, u32::MAX]);
    let nested = g.get_array("nested").unwrap();
    let inner: Vec<Array<'_>> = nested.arrays().unwrap().collect();
    assert_eq!(inner.len(), 3);
    assert_eq!(inner[0].strings().unwrap().collect::<Vec<_>>(), ["a", "b"]);
    let deep: Vec<Array<'_>> = inner[1].arrays().unwrap().collect();
    assert_eq!(deep[0].strings().unwrap().collect::<Vec<_>>(), ["deep"]);
    assert!(deep[1].is_empty());
    assert_eq!(inner[2].f32s().unwrap().collect::<Vec<_>>(), [2.0]);

    assert_eq!(g.tensors().len(), tensors.len());
    for (t, w) in g.tensors().iter().zip(&tensors) {
        assert_eq!(t.name().as_bytes(), &w.name[..]);
        assert_eq!(t.dims(), &w.dims[..]);
        assert_eq!(t.ggml_type(), w.type_id);
        assert_eq!(t.data(), &w.data[..], "{}", t.name());
        assert_eq!(t.byte_len(), w.data.len() as u64);
        assert_eq!(t.offset() % 32, 0);
        assert_eq!(t.file_offset(), g.data_offset() + t.offset());
        let start = t.file_offset() as usize;
        assert_eq!(&file[start..start + w.data.len()], t.data());
        assert_eq!(g.tensor(t.name()), Some(t));
        assert_eq!(t.n_rows() * t.row_bytes(), t.byte_len());
    }
    let dtypes: Vec<_> = g.tensors().iter().map(|t| t.dtype().ok()).collect();
    assert_eq!(
        dtypes,
        [
            Some(DType::Q4_0),
            Some(DType::F32),
            Some(DType::Q4_K),
            Some(DType::Q8_0),
            Some(DType::F16),
            Some(DType::BF16),
            None,
            Some(DType::F32),
        ]
    );
    let t = g.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(t.ne(), [5, 3, 2, 1]);
    assert_eq!(t.type_name(), "f16");
    assert_eq!(t.n_rows(), 6);
    assert_eq!(t.rows(2, 3).unwrap(), &t.data()[20..50]);
}

#[test]
fn nesting_100_000_deep_is_refused_without_recursion() {
    let file = Builder::default().kv("deep", nested_array(100_000)).build();
    assert_eq!(
        err(&file),
        GgufError::NestingTooDeep {
            key: "deep".into(),
            max: 8
        }
    );
    // The limit itself is allowed, one more is not.
    let ok = Builder::default().kv("deep", nested_array(8)).build();
    assert!(Gguf::parse(&ok).is_ok());
    let nine = Builder::default().kv("deep", nested_array(9)).build();
    assert!(matches!(err(&nine), GgufError::NestingTooDeep { .. }));
    let no_arrays = Limits {
        max_depth: 0,
        ..Limits::default()
    };
    assert!(matches!(
        Gguf::parse_with(&ok, &no_arrays),
        Err(GgufError::NestingTooDeep { max: 0, .. })
    ));
}

#[test]
fn nesting_100_000_deep_walks_on_the_heap_when_allowed() {
    let file = Builder::default().kv("deep", nested_array(100_000)).build();
    let limits = Limits {
        max_depth: usize::MAX,
        ..Limits::default()
    };
    let g = Gguf::parse_with(&file, &limits).unwrap();
    // Descending is a loop too (each step walks what is left to find the
    // element's end, so only the first levels here).
    let mut a = g.get_array("deep").unwrap();
    for _ in 0..100 {
        let mut inner = a.arrays().unwrap();
        assert_eq!(inner.len(), 1);
        a = inner.next().unwrap();
    }
    assert_eq!(a.elem_type(), ValueType::Array);
}

#[test]
fn dims_of_2_pow_32_squared_overflow() {
    let t = T::new("big", &[1], 0);
    let t = T {
        dims: vec![1 << 32, 1 << 32],
        n_dims: 2,
        ..t
    };
    let file = Builder::default().tensor(t.at(0)).build();
    assert_eq!(
        err(&file),
        GgufError::SizeOverflow {
            tensor: "big".into(),
            ne: [1 << 32, 1 << 32, 1, 1]
        }
    );
}

#[test]
fn huge_dims_that_fit_are_out_of_bounds() {
    let t = T {
        dims: vec![1 << 20, 1 << 20],
        n_dims: 2,
        ..T::new("big", &[1], 0)
    };
    let file = Builder::default().tensor(t.at(0)).build();
    let data_start = file.len() as u64;
    assert_eq!(
        err(&file),
        GgufError::OutOfBounds {
            tensor: "big".into(),
            end: data_start + (4 << 40),
            file_len: file.len() as u64
        }
    );
}

#[test]
fn tensor_offset_that_wraps_u64_is_refused() {
    let file = Builder::default()
        .tensor(T::new("w", &[8], 0).at(u64::MAX - 31))
        .build();
    assert_eq!(
        err(&file),
        GgufError::OffsetOverflow {
            tensor: "w".into(),
            offset: u64::MAX - 31,
            size: 32
        }
    );
    let file = Builder::default()
        .alignment(4)
        .tensor(T::new("w", &[1], 0).at(u64::MAX - 3))
        .build();
    assert_eq!(
        err(&file),
        GgufError::OffsetOverflow {
            tensor: "w".into(),
            offset: u64::MAX - 3,
            size: 4
        }
    );
    // Under the default alignment, u64::MAX - 3 is not even aligned.
    let file = Builder::default()
        .tensor(T::new("w", &[1], 0).at(u64::MAX - 3))
        .build();
    assert_eq!(
        err(&file),
        GgufError::MisalignedOffset {
            tensor: "w".into(),
            offset: u64::MAX - 3,
            alignment: 32
        }
    );
}

#[test]
fn alignment_3_and_0_are_refused() {
    for a in [3, 0, 96, u32::MAX] {
        let file = Builder::default()
            .alignment(a)
            .tensor(T::new("w", &[8], 0))
            .build();
        assert_eq!(err(&file), GgufError::BadAlignment { alignment: a });
    }
    let file = Builder::default()
        .alignment(64)
        .tensor(T::new("w", &[8], 0))
        .build();
    assert_eq!(Gguf::parse(&file).unwrap().alignment(), 64);
}

#[test]
fn alignment_as_bool_or_u64_is_refused() {
    for (v, found) in [
        (W::Bool(true), ValueType::Bool),
        (W::U64(32), ValueType::U64),
        (W::I32(32), ValueType::I32),
        (W::Str("32".into()), ValueType::String),
    ] {
        let file = Builder::default().kv("general.alignment", v).build();
        assert_eq!(
            err(&file),
            GgufError::WrongType {
                key: "general.alignment".into(),
                expected: ValueType::U32,
                found
            }
        );
    }
}

#[test]
fn unaligned_tensor_offset_is_refused() {
    let file = Builder {
        data_len: Some(64),
        ..Builder::default()
    }
    .tensor(T::new("w", &[4], 0).at(16))
    .build();
    assert_eq!(
        err(&file),
        GgufError::MisalignedOffset {
            tensor: "w".into(),
            offset: 16,
            alignment: 32
        }
    );
}

#[test]
fn duplicate_keys_are_refused() {
    let file = Builder::default()
        .kv("general.name", W::Str("a".into()))
        .kv("x", W::U8(1))
        .kv("general.name", W::Str("b".into()))
        .build();
    assert_eq!(
        err(&file),
        GgufError::DuplicateKey {
            key: "general.name".into()
        }
    );
}

#[test]
fn duplicate_tensor_names_are_refused() {
    let file = Builder::default()
        .tensor(T::new("output.weight", &[8], 0))
        .tensor(T::new("output.weight", &[8], 0))
        .build();
    assert_eq!(
        err(&file),
        GgufError::DuplicateTensor {
            tensor: "output.weight".into()
        }
    );
}

#[test]
fn overlapping_tensors_are_refused() {
    // b starts inside a; c lies after both.
    let file = Builder {
        data_len: Some(256),
        ..Builder::default()
    }
    .tensor(T::new("c", &[8], 0).at(128))
    .tensor(T::new("b", &[8], 0).at(32))
    .tensor(T::new("a", &[16], 0).at(0))
    .build();
    assert_eq!(
        err(&file),
        GgufError::Overlap {
            first: "a".into(),
            second: "b".into()
        }
    );
    // Touching is not overlapping, and empty tensors overlap nothing.
    let file = Builder {
        data_len: Some(256),
        ..Builder::default()
    }
    .tensor(T::new("a", &[8], 0).at(0))
    .tensor(T::new("b", &[8], 0).at(32))
    .tensor(T::new("empty", &[0], 0).at(32))
    .build();
    assert!(Gguf::parse(&file).is_ok());
}

#[test]
fn five_thousand_tensors_on_one_block_are_refused() {
    let mut b = Builder {
        data_len: Some(32),
        ..Builder::default()
    };
    for i in 0..5000 {
        b = b.tensor(T::new(&format!("t.{i}"), &[8], 0).at(0));
    }
    assert!(matches!(err(&b.build()), GgufError::Overlap { .. }));
}

#[test]
fn non_utf8_key_is_refused() {
    let mut b = Builder::default();
    b.kv.push((vec![b'k', 0xff, 0xfe], W::U8(1)));
    assert_eq!(
        err(&b.build()),
        GgufError::BadUtf8 {
            what: "metadata key 0".into()
        }
    );
}

#[test]
fn non_utf8_tensor_name_is_refused() {
    let mut t = T::new("x", &[8], 0);
    t.name = vec![b'w', 0xc3, 0x28];
    let file = Builder::default().tensor(t).build();
    assert_eq!(
        err(&file),
        GgufError::BadUtf8 {
            what: "the name of tensor 0".into()
        }
    );
}

#[test]
fn non_utf8_string_value_is_refused() {
    let mut bad = Vec::new();
    common::write_str(&mut bad, &[0x80]);
    let file = Builder::default()
        .kv("name", W::Raw(8, bad.clone()))
        .build();
    assert_eq!(
        err(&file),
        GgufError::BadUtf8 {
            what: "the value of key `name`".into()
        }
    );
    let mut arr = Vec::new();
    arr.extend(8u32.to_le_bytes());
    arr.extend(1u64.to_le_bytes());
    arr.extend(bad);
    let file = Builder::default().kv("tokens", W::Raw(9, arr)).build();
    assert!(matches!(err(&file), GgufError::BadUtf8 { what } if what.contains("tokens")));
}

#[test]
fn tensor_past_end_of_file_is_refused() {
    let file = Builder::default()
        .tensor(T::new("blk.3.ffn_up.weight", &[64], 0))
        .build();
    let cut = &file[..file.len() - 4];
    let e = err(cut);
    assert_eq!(
        e,
        GgufError::OutOfBounds {
            tensor: "blk.3.ffn_up.weight".into(),
            end: file.len() as u64,
            file_len: cut.len() as u64
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "blk.3.ffn_up.weight: data ends at byte {} beyond the end of the file ({} bytes)",
            file.len(),
            cut.len()
        )
    );
}

#[test]
fn counts_above_limits_are_refused() {
    let too_many = |what: &str, count, max| GgufError::TooMany {
        what: what.into(),
        count,
        max,
    };
    let b = Builder {
        n_tensors: Some((1 << 16) + 1),
        ..Builder::default()
    };
    assert_eq!(err(&b.build()), too_many("tensors", (1 << 16) + 1, 1 << 16));
    let b = Builder {
        n_kv: Some(u64::MAX),
        ..Builder::default()
    };
    assert_eq!(
        err(&b.build()),
        too_many("metadata entries", u64::MAX, 1 << 16)
    );

    let mut arr = Vec::new();
    arr.extend(0u32.to_le_bytes());
    arr.extend(((1u64 << 24) + 1).to_le_bytes());
    let file = Builder::default().kv("a", W::Raw(9, arr)).build();
    assert_eq!(
        err(&file),
        too_many("elements in an array of key `a`", (1 << 24) + 1, 1 << 24)
    );

    let mut s = Vec::new();
    s.extend(u64::MAX.to_le_bytes());
    let file = Builder::default().kv("s", W::Raw(8, s)).build();
    assert_eq!(
        err(&file),
        too_many("bytes in the value of key `s`", u64::MAX, 1 << 24)
    );

    let strict = Limits {
        max_tensors: 1,
        ..Limits::default()
    };
    let file = small_file();
    assert_eq!(
        Gguf::parse_with(&file, &strict).unwrap_err(),
        too_many("tensors", 3, 1)
    );
}

#[test]
fn counts_within_limits_but_beyond_the_bytes_are_truncated() {
    // 60,000 tensor infos claimed, none written: refused before any walk.
    let b = Builder {
        n_tensors: Some(60_000),
        ..Builder::default()
    };
    let file = b.build();
    assert_eq!(
        err(&file),
        GgufError::Truncated {
            what: "the metadata and tensor infos".into(),
            offset: 24,
            needed: 60_000 * 32,
            available: 8 // the padding to the data section
        }
    );
    // An array of 2^24 u64 in a few bytes.
    let mut arr = Vec::new();
    arr.extend(10u32.to_le_bytes());
    arr.extend((1u64 << 24).to_le_bytes());
    let file = Builder::default().kv("a", W::Raw(9, arr)).build();
    assert!(matches!(
        err(&file),
        GgufError::Truncated { needed, available, .. } if needed == 8 << 24 && available < 32
    ));
}

#[test]
fn unknown_value_type_is_refused() {
    let file = Builder::default()
        .kv("general.odd", W::Raw(13, vec![0; 8]))
        .build();
    assert_eq!(
        err(&file),
        GgufError::UnknownValueType {
            key: "general.odd".into(),
            type_id: 13
        }
    );
    let file = Builder::default()
        .kv("arr", W::Array(0xdead, vec![]))
        .build();
    assert_eq!(
        err(&file),
        GgufError::UnknownValueType {
            key: "arr".into(),
            type_id: 0xdead
        }
    );
}

#[test]
fn bad_bool_is_refused() {
    let file = Builder::default().kv("b", W::Raw(7, vec![2])).build();
    assert_eq!(
        err(&file),
        GgufError::BadBool {
            key: "b".into(),
            byte: 2
        }
    );
    let file = Builder::default()
        .kv("bs", W::Array(7, vec![W::U8(1), W::U8(0xff)]))
        .build();
    assert_eq!(
        err(&file),
        GgufError::BadBool {
            key: "bs".into(),
            byte: 0xff
        }
    );
}

#[test]
fn n_dims_0_and_5_are_refused() {
    for n_dims in [0, 5, u32::MAX] {
        let t = T {
            n_dims,
            ..T::new("w", &[8], 0)
        };
        let file = Builder::default().tensor(t).build();
        assert_eq!(
            err(&file),
            GgufError::BadDims {
                tensor: "w".into(),
                n_dims
            }
        );
    }
}

#[test]
fn every_prefix_of_a_valid_file_is_refused() {
    let file = small_file();
    assert!(Gguf::parse(&file).is_ok());
    for n in 0..file.len() {
        match Gguf::parse(&file[..n]) {
            Err(GgufError::Truncated { .. } | GgufError::OutOfBounds { .. }) => {}
            other => panic!("prefix of {n} bytes: {other:?}"),
        }
    }
}

#[test]
fn unknown_ggml_type_ids_are_refused() {
    for type_id in [4, 31, 36, 43, 99, u32::MAX] {
        let t = T {
            type_id,
            ..T::new("w", &[8], 0)
        };
        let file = Builder::default().tensor(t).build();
        assert_eq!(
            err(&file),
            GgufError::UnknownTensorType {
                tensor: "w".into(),
                type_id
            }
        );
    }
}

#[test]
fn ggml_types_unknown_to_fused_core_are_kept() {
    let file = Builder::default()
        .tensor(T::new("blk.0.ffn_down.weight", &[256, 2], 16))
        .build();
    let g = Gguf::parse(&file).unwrap();
    let t = &g.tensors()[0];
    assert_eq!(t.type_name(), "iq2_xxs");
    assert_eq!(t.byte_len(), 2 * 66);
    assert_eq!(
        t.dtype(),
        Err(GgufError::UnsupportedType {
            tensor: "blk.0.ffn_down.weight".into(),
            type_name: "iq2_xxs",
            type_id: 16
        })
    );
}

#[test]
fn row_length_not_whole_blocks_is_refused() {
    let t = T {
        dims: vec![48, 2],
        n_dims: 2,
        ..T::new("w", &[32, 2], 2)
    };
    let file = Builder::default().tensor(t).build();
    assert_eq!(
        err(&file),
        GgufError::NotBlockAligned {
            tensor: "w".into(),
            type_name: "q4_0",
            ne0: 48,
            block_len: 32
        }
    );
}

#[test]
fn bad_magic_and_versions_are_refused() {
    let file = Builder {
        magic: *b"GGML",
        ..Builder::default()
    }
    .build();
    assert_eq!(err(&file), GgufError::BadMagic { found: *b"GGML" });
    for version in [0, 1, 4, 0x0300_0000, 0x0200_0000] {
        let file = Builder {
            version,
            ..Builder::default()
        }
        .build();
        assert_eq!(err(&file), GgufError::UnsupportedVersion { version });
    }
    let v2 = Builder {
        version: 2,
        ..Builder::default()
    }
    .build();
    assert_eq!(Gguf::parse(&v2).unwrap().version(), 2);
}

#[test]
fn rows_are_bounds_checked() {
    let file = Builder::default().tensor(T::new("w", &[32, 4], 8)).build();
    let g = Gguf::parse(&file).unwrap();
    let t = g.tensor("w").unwrap();
    assert_eq!(t.row_bytes(), 34);
    assert_eq!(t.rows(0, 4).unwrap(), t.data());
    assert_eq!(t.rows(3, 1).unwrap().len(), 34);
    assert_eq!(t.rows(4, 0).unwrap().len(), 0);
    for (first, count) in [(3, 2), (5, 0), (u64::MAX, 2), (1, u64::MAX)] {
        assert_eq!(
            t.rows(first, count),
            Err(GgufError::RowsOutOfRange {
                tensor: "w".into(),
                first,
                count,
                rows: 4
            })
        );
    }
}

#[test]
fn typed_getters_name_the_key_and_types() {
    let file = small_file();
    let g = Gguf::parse(&file).unwrap();
    assert_eq!(g.get_u32("llama.block_count"), Ok(2));
    assert_eq!(
        g.get_u64("llama.block_count"),
        Err(GgufError::WrongType {
            key: "llama.block_count".into(),
            expected: ValueType::U64,
            found: ValueType::U32
        })
    );
    assert_eq!(
        g.get_str("missing"),
        Err(GgufError::MissingKey {
            key: "missing".into()
        })
    );
    let tokens = g.get_array("tokens").unwrap();
    assert_eq!(
        tokens.strings().unwrap_err(),
        GgufError::WrongType {
            key: "tokens".into(),
            expected: ValueType::String,
            found: ValueType::Array
        }
    );
    assert!(tokens.f32s().is_err());
    assert_eq!(tokens.arrays().unwrap().len(), 2);
}

#[test]
fn unsafe_tensor_names_are_refused_as_file_names() {
    for bad in [
        "/abs/path",
        "../../x",
        "a/b",
        "",
        ".",
        "..",
        "a\\b",
        ".hidden",
        "a\0b",
        "line\nbreak",
        "C:x",
        "trailing.",
        "con",
        "NUL.weight",
    ] {
        assert!(
            matches!(safe_file_stem(bad), Err(GgufError::UnsafeName { name, .. }) if name == bad),
            "{bad:?}"
        );
    }
    let long = "x".repeat(201);
    assert!(safe_file_stem(&long).is_err());
}

#[test]
fn ggml_tensor_names_are_safe_file_names() {
    for good in [
        "blk.0.ffn_gate.weight",
        "token_embd.weight",
        "output_norm.weight",
        "blk.31.attn_k.bias",
        "v.blk.0.attn_q.weight",
        "rope_freqs.weight",
        "a..b",
    ] {
        assert_eq!(safe_file_stem(good), Ok(good));
    }
}
