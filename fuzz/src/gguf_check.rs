//! What must hold of every file `Gguf::parse` accepts: the documented
//! guarantees (tensor data inside the file, tensors disjoint, metadata
//! iterable without failure), lookups consistent with iteration, and a
//! header that writes back to the exact bytes it was read from.

use fused_gguf::{Array, Gguf, GgufError, Value, ValueType, safe_file_stem};

use crate::gguf_write;

/// Checks every invariant of `g`, parsed from `bytes`; panics on a breach.
pub fn check(bytes: &[u8], g: &Gguf<'_>) {
    check_tensors(bytes, g);
    check_metadata(g);
    check_header(bytes, g);
}

/// Tensor data lies in `bytes` where the offsets say, tensors are disjoint,
/// rows slice the data, and lookups by name agree with the list.
fn check_tensors(bytes: &[u8], g: &Gguf<'_>) {
    let base = bytes.as_ptr() as usize;
    let mut spans = Vec::new();
    for t in g.tensors() {
        let d = t.data();
        let start = d.as_ptr() as usize;
        assert!(d.is_empty() || (start >= base && start + d.len() <= base + bytes.len()));
        assert_eq!(d.len() as u64, t.byte_len());
        if !d.is_empty() {
            assert_eq!((start - base) as u64, t.file_offset(), "{}", t.name());
            spans.push((start, start + d.len()));
        }
        assert_eq!(t.file_offset(), g.data_offset() + t.offset());
        assert_eq!(t.offset() % u64::from(g.alignment()), 0);
        assert!((1..=4).contains(&t.dims().len()));
        assert_eq!(t.n_rows().checked_mul(t.row_bytes()), Some(t.byte_len()));
        let all = t.rows(0, t.n_rows()).expect("all rows of a parsed tensor");
        assert!(core::ptr::eq(all, d));
        assert!(t.rows(t.n_rows(), 1).is_err());
        assert!(t.rows(u64::MAX, 2).is_err());
        assert!(matches!(
            t.dtype(),
            Ok(_) | Err(GgufError::UnsupportedType { .. })
        ));
        assert_eq!(g.tensor(t.name()), Some(t));
        let _ = safe_file_stem(t.name());
        let _ = t.type_name();
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "tensors overlap: {w:?}");
    }
}

/// Every entry is found by its key, typed getters agree, every array
/// iterates to its length through every view that fits its type.
fn check_metadata(g: &Gguf<'_>) {
    for (key, value) in g.metadata() {
        assert_eq!(
            format!("{:?}", g.get(key)),
            format!("{:?}", Some(value)),
            "{key}"
        );
        let t = value.value_type();
        assert_eq!(g.get_u32(key).is_ok(), t == ValueType::U32);
        assert_eq!(g.get_u64(key).is_ok(), t == ValueType::U64);
        assert_eq!(g.get_i32(key).is_ok(), t == ValueType::I32);
        assert_eq!(g.get_f32(key).is_ok(), t == ValueType::F32);
        assert_eq!(g.get_bool(key).is_ok(), t == ValueType::Bool);
        assert_eq!(g.get_str(key).is_ok(), t == ValueType::String);
        assert_eq!(g.get_array(key).is_ok(), t == ValueType::Array);
        if let Err(e) = g.get_u32(key) {
            let _ = e.to_string();
        }
        if let Value::Array(a) = value {
            walk(a);
        }
    }
    assert!(g.get_u32("\u{0}no such key").is_err());
}

/// Iterates `a` (and, through [`Array::arrays`], everything nested).
fn walk(a: &Array<'_>) {
    assert_eq!(a.iter().len(), a.len());
    assert_eq!(a.iter().count(), a.len());
    assert_eq!(a.is_empty(), a.iter().next().is_none());
    let elem = a.elem_type();
    assert!(a.iter().all(|v| v.value_type() == elem));
    assert_eq!(
        a.strings().map(Iterator::count).ok(),
        (elem == ValueType::String).then_some(a.len())
    );
    assert_eq!(
        a.u32s().map(Iterator::count).ok(),
        (elem == ValueType::U32).then_some(a.len())
    );
    assert_eq!(
        a.i32s().map(Iterator::count).ok(),
        (elem == ValueType::I32).then_some(a.len())
    );
    assert_eq!(
        a.f32s().map(Iterator::count).ok(),
        (elem == ValueType::F32).then_some(a.len())
    );
    if let Ok(inner) = a.arrays() {
        let mut n = 0;
        for (x, v) in inner.zip(a.iter()) {
            assert_eq!(format!("{:?}", Value::Array(x)), format!("{v:?}"));
            walk(&x);
            n += 1;
        }
        assert_eq!(n, a.len());
    }
}

/// The header writes back to the bytes it came from; the data section
/// starts at its end rounded up to the alignment; and the same header with
/// zeroed padding before the same data parses to the same file.
fn check_header(bytes: &[u8], g: &Gguf<'_>) {
    let header = gguf_write::header(g);
    assert!(header.len() <= bytes.len());
    assert!(
        bytes.starts_with(&header),
        "header does not re-read identically"
    );
    let data_offset = (header.len() as u64).next_multiple_of(u64::from(g.alignment()));
    assert_eq!(data_offset, g.data_offset());

    let mut copy = header;
    copy.resize(data_offset.min(bytes.len() as u64) as usize, 0);
    copy.extend_from_slice(bytes.get(copy.len()..).unwrap_or_default());
    let again = Gguf::parse(&copy).expect("the rewritten file parses");
    assert_eq!(again.version(), g.version());
    assert_eq!(again.alignment(), g.alignment());
    assert_eq!(again.data_offset(), g.data_offset());
    assert_eq!(
        format!("{:?}", again.metadata().collect::<Vec<_>>()),
        format!("{:?}", g.metadata().collect::<Vec<_>>())
    );
    assert_eq!(again.tensors().len(), g.tensors().len());
    for (a, b) in again.tensors().iter().zip(g.tensors()) {
        assert_eq!(a.name(), b.name());
        assert_eq!(a.ne(), b.ne());
        assert_eq!(a.ggml_type(), b.ggml_type());
        assert_eq!(a.file_offset(), b.file_offset());
        assert_eq!(a.data(), b.data());
    }
}
