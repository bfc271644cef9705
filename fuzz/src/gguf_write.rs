//! Writes a parsed GGUF file's header (magic, version, counts, metadata and
//! tensor infos) back to bytes, GGUF's canonical encoding. Since every
//! field has one encoding, the bytes equal the header the file was parsed
//! from: the `gguf_parse` target's re-read oracle.

use fused_gguf::{Array, Gguf, Value};

/// The header of `g` (up to, not including, the padding before the data).
pub fn header(g: &Gguf<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&g.version().to_le_bytes());
    out.extend_from_slice(&(g.tensors().len() as u64).to_le_bytes());
    out.extend_from_slice(&(g.metadata().len() as u64).to_le_bytes());
    for (key, value) in g.metadata() {
        string(&mut out, key);
        out.extend_from_slice(&value.value_type().id().to_le_bytes());
        payload(&mut out, value);
    }
    for t in g.tensors() {
        string(&mut out, t.name());
        out.extend_from_slice(&(t.dims().len() as u32).to_le_bytes());
        for d in t.dims() {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ggml_type().to_le_bytes());
        out.extend_from_slice(&t.offset().to_le_bytes());
    }
    out
}

/// A GGUF string: `u64` length, then the bytes.
fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A value without its type id (as an array element is written).
fn payload(out: &mut Vec<u8>, v: &Value<'_>) {
    match *v {
        Value::U8(x) => out.push(x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(x)),
        Value::String(s) => string(out, s),
        Value::Array(a) => array(out, &a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// An array: element type id, `u64` length, the elements (nesting is
/// bounded by the parser's depth limit, so recursion is bounded too).
fn array(out: &mut Vec<u8>, a: &Array<'_>) {
    out.extend_from_slice(&a.elem_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    for v in a.iter() {
        payload(out, &v);
    }
}
