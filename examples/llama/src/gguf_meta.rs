//! GGUF metadata written out: the value types the synthetic-model
//! generator and the tokenizer's tests write.

/// GGUF metadata value types.
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STR: u32 = 8;
const T_ARRAY: u32 = 9;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Meta {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

impl Meta {
    /// Appends the type tag and the payload.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        let array = |out: &mut Vec<u8>, elem: u32, n: usize| {
            out.extend(T_ARRAY.to_le_bytes());
            out.extend(elem.to_le_bytes());
            out.extend((n as u64).to_le_bytes());
        };
        match self {
            Meta::U32(v) => {
                out.extend(T_U32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::F32(v) => {
                out.extend(T_F32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::Bool(v) => {
                out.extend(T_BOOL.to_le_bytes());
                out.push(u8::from(*v));
            }
            Meta::Str(s) => {
                out.extend(T_STR.to_le_bytes());
                string(out, s);
            }
            Meta::Strs(v) => {
                array(out, T_STR, v.len());
                v.iter().for_each(|s| string(out, s));
            }
            Meta::I32s(v) => {
                array(out, T_I32, v.len());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Meta::F32s(v) => {
                array(out, T_F32, v.len());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
        }
    }
}

/// Appends a GGUF string: u64 length, UTF-8 bytes.
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// The start of a version-3 GGUF file: magic, version, tensor count, and
/// the metadata.
pub(crate) fn header(tensors: usize, kv: &[(&str, Meta)]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(b"GGUF");
    h.extend(3u32.to_le_bytes());
    h.extend((tensors as u64).to_le_bytes());
    h.extend((kv.len() as u64).to_le_bytes());
    for (key, value) in kv {
        string(&mut h, key);
        value.write(&mut h);
    }
    h
}
