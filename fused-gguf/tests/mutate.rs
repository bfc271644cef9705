//! Arbitrary mutations of valid files never panic: each parse either
//! refuses the file or gives tensors inside it, pairwise disjoint, whose
//! metadata and rows can all be read back.

mod common;

use common::{Builder, T, W, small_file};
use fused_gguf::{Array, Gguf, Value};
use proptest::prelude::*;

/// A file from llama.cpp's Python writer (see `tests/interop.rs`).
const GGUF_PY: &[u8] = include_bytes!("data/gguf-py.gguf");

/// A file with every kind of header field a mutation can hit: strings,
/// arrays of arrays, bools, several tensors and an explicit alignment.
fn rich_file() -> Vec<u8> {
    Builder::default()
        .alignment(16)
        .kv("general.name", W::Str("m".into()))
        .kv("b", W::Array(7, vec![W::Bool(true), W::Bool(false)]))
        .kv(
            "nested",
            W::Array(
                9,
                vec![
                    W::Array(8, vec![W::Str("x".into())]),
                    W::Array(9, vec![W::Array(4, vec![W::U32(3)])]),
                ],
            ),
        )
        .kv("f", W::F64(1.0))
        .tensor(T::new("a", &[32, 2], 2))
        .tensor(T::new("b", &[4, 2], 0))
        .tensor(T::new("c", &[256], 12))
        .build()
}

/// Reads every value of an array, arrays within arrays included (with a
/// stack, like the parser).
fn read_all(a: Array<'_>) -> usize {
    let mut seen = 0;
    let mut todo = vec![a];
    while let Some(a) = todo.pop() {
        for v in a.iter() {
            seen += 1;
            if let Value::Array(inner) = v {
                todo.push(inner);
            }
        }
        if let Ok(s) = a.strings() {
            seen += s.count();
        }
    }
    seen
}

/// What a successful parse promises.
fn check(file: &[u8]) {
    let Ok(g) = Gguf::parse(file) else {
        return;
    };
    let len = file.len() as u64;
    let mut spans = Vec::new();
    for t in g.tensors() {
        let start = t.file_offset();
        let end = start + t.byte_len();
        assert!(end <= len, "{} ends at {end}, file has {len}", t.name());
        assert!(start >= g.data_offset());
        assert_eq!(t.offset() % u64::from(g.alignment()), 0);
        assert_eq!(t.data(), &file[start as usize..end as usize]);
        assert_eq!(t.rows(0, t.n_rows()).unwrap(), t.data());
        assert_eq!(g.tensor(t.name()), Some(t));
        if t.byte_len() > 0 {
            spans.push((start, end));
        }
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "tensors overlap: {w:?}");
    }
    for (k, v) in g.metadata() {
        assert_eq!(g.get(k), Some(v));
        if let Value::Array(a) = v {
            read_all(*a);
        }
    }
}

fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    (
        prop::collection::vec((0..len, any::<u8>()), 0..8),
        prop::collection::vec((0..len, any::<u64>()), 0..2),
        prop::option::of(0..=len),
    )
        .prop_map(move |(flips, words, cut)| {
            let mut f = base.clone();
            for (i, x) in flips {
                f[i] ^= x;
            }
            // Whole little-endian words, to hit counts, lengths and offsets.
            for (i, x) in words {
                let bytes = x.to_le_bytes();
                let n = bytes.len().min(f.len() - i);
                f[i..i + n].copy_from_slice(&bytes[..n]);
            }
            if let Some(n) = cut {
                f.truncate(n);
            }
            f
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutations_of_a_small_file_never_panic(file in mutated(small_file())) {
        check(&file);
    }

    #[test]
    fn mutations_of_a_rich_file_never_panic(file in mutated(rich_file())) {
        check(&file);
    }

    #[test]
    fn mutations_of_a_gguf_py_file_never_panic(file in mutated(GGUF_PY.to_vec())) {
        check(&file);
    }
}

#[test]
fn the_base_files_parse() {
    for (f, n) in [(small_file(), 3), (rich_file(), 3), (GGUF_PY.to_vec(), 6)] {
        let g = Gguf::parse(&f).unwrap();
        assert_eq!(g.tensors().len(), n);
        check(&f);
    }
}

#[test]
fn every_single_byte_flip_of_the_header_is_handled() {
    // Exhaustive over positions and a few masks: no panic, promises kept.
    let base = rich_file();
    let header_end = Gguf::parse(&base).unwrap().data_offset() as usize;
    for i in 0..header_end {
        for mask in [0x01, 0x80, 0xff] {
            let mut f = base.clone();
            f[i] ^= mask;
            check(&f);
        }
    }
}
