//! A GGUF writer for the tests: it writes valid files and, on request, every
//! kind of malformed one (raw keys and names, any type id, any count, any
//! offset, any data length).

// Each test binary uses part of it.
#![allow(dead_code)]

/// A metadata value as written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum W {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    /// An element type id and the elements (written without type tags,
    /// whatever their own variant: a mismatch makes a malformed array).
    Array(u32, Vec<W>),
    U64(u64),
    I64(i64),
    F64(f64),
    /// Any type id followed by any payload bytes.
    Raw(u32, Vec<u8>),
}

impl W {
    pub(crate) fn type_id(&self) -> u32 {
        match self {
            W::U8(_) => 0,
            W::I8(_) => 1,
            W::U16(_) => 2,
            W::I16(_) => 3,
            W::U32(_) => 4,
            W::I32(_) => 5,
            W::F32(_) => 6,
            W::Bool(_) => 7,
            W::Str(_) => 8,
            W::Array(..) => 9,
            W::U64(_) => 10,
            W::I64(_) => 11,
            W::F64(_) => 12,
            W::Raw(t, _) => *t,
        }
    }

    /// Writes the payload (no type tag).
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        match self {
            W::U8(x) => out.push(*x),
            W::I8(x) => out.extend(x.to_le_bytes()),
            W::U16(x) => out.extend(x.to_le_bytes()),
            W::I16(x) => out.extend(x.to_le_bytes()),
            W::U32(x) => out.extend(x.to_le_bytes()),
            W::I32(x) => out.extend(x.to_le_bytes()),
            W::F32(x) => out.extend(x.to_le_bytes()),
            W::Bool(x) => out.push(u8::from(*x)),
            W::Str(s) => write_str(out, s.as_bytes()),
            W::Array(elem, items) => {
                out.extend(elem.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for it in items {
                    it.write(out);
                }
            }
            W::U64(x) => out.extend(x.to_le_bytes()),
            W::I64(x) => out.extend(x.to_le_bytes()),
            W::F64(x) => out.extend(x.to_le_bytes()),
            W::Raw(_, bytes) => out.extend(bytes),
        }
    }
}

pub(crate) fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s);
}

/// The payload of an array nested `depth` deep (`depth` ≥ 1): each level an
/// array of one array, the innermost an empty array of `UINT8`. Written
/// flat, so no recursion builds or drops it.
pub(crate) fn nested_array(depth: usize) -> W {
    let mut out = Vec::with_capacity(12 * depth);
    for _ in 1..depth {
        out.extend(9u32.to_le_bytes());
        out.extend(1u64.to_le_bytes());
    }
    out.extend(0u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    W::Raw(9, out)
}

/// GGML block (elements, bytes) of the types the tests use.
pub(crate) fn block(type_id: u32) -> (u64, u64) {
    match type_id {
        0 => (1, 4),      // f32
        1 => (1, 2),      // f16
        2 => (32, 18),    // q4_0
        8 => (32, 34),    // q8_0
        10 => (256, 84),  // q2_K (not a fused-core format)
        12 => (256, 144), // q4_K
        16 => (256, 66),  // iq2_xxs (not a fused-core format)
        30 => (1, 2),     // bf16
        _ => (1, 1),
    }
}

/// A tensor as written.
#[derive(Clone, Debug)]
pub(crate) struct T {
    pub(crate) name: Vec<u8>,
    /// Written as the dimension count.
    pub(crate) n_dims: u32,
    pub(crate) dims: Vec<u64>,
    pub(crate) type_id: u32,
    /// `None`: placed after the previous tensor, aligned.
    pub(crate) offset: Option<u64>,
    /// Its bytes (for placed tensors).
    pub(crate) data: Vec<u8>,
}

impl T {
    /// A tensor of the right size, its bytes a pattern.
    pub(crate) fn new(name: &str, dims: &[u64], type_id: u32) -> T {
        let (bl, bb) = block(type_id);
        let n: u64 = dims.iter().product();
        let size = n / bl * bb;
        let seed = name.len() as u64;
        let data = (0..size)
            .map(|i| (i.wrapping_mul(31) ^ seed) as u8)
            .collect();
        T {
            name: name.as_bytes().to_vec(),
            n_dims: dims.len() as u32,
            dims: dims.to_vec(),
            type_id,
            offset: None,
            data,
        }
    }

    /// Claims `offset` in the data section, writing no bytes.
    pub(crate) fn at(mut self, offset: u64) -> T {
        self.offset = Some(offset);
        self.data.clear();
        self
    }
}

/// A GGUF file to write.
#[derive(Clone, Debug)]
pub(crate) struct Builder {
    pub(crate) magic: [u8; 4],
    pub(crate) version: u32,
    /// Written instead of the real counts.
    pub(crate) n_tensors: Option<u64>,
    pub(crate) n_kv: Option<u64>,
    pub(crate) kv: Vec<(Vec<u8>, W)>,
    pub(crate) tensors: Vec<T>,
    /// The alignment the writer pads to (not written as metadata).
    pub(crate) align: u64,
    /// Length of the data section: `None` ends it with the last placed
    /// tensor (no padding after it); `Some(n)` cuts or zero-fills it to `n`.
    pub(crate) data_len: Option<u64>,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            magic: *b"GGUF",
            version: 3,
            n_tensors: None,
            n_kv: None,
            kv: Vec::new(),
            tensors: Vec::new(),
            align: 32,
            data_len: None,
        }
    }
}

impl Builder {
    pub(crate) fn kv(mut self, key: &str, v: W) -> Builder {
        self.kv.push((key.as_bytes().to_vec(), v));
        self
    }

    pub(crate) fn tensor(mut self, t: T) -> Builder {
        self.tensors.push(t);
        self
    }

    /// `general.alignment` as `UINT32`, and the writer's padding when it
    /// is a power of two.
    pub(crate) fn alignment(mut self, a: u32) -> Builder {
        if a.is_power_of_two() {
            self.align = u64::from(a);
        }
        self.kv("general.alignment", W::U32(a))
    }

    pub(crate) fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(self.magic);
        out.extend(self.version.to_le_bytes());
        let n_t = self.n_tensors.unwrap_or(self.tensors.len() as u64);
        let n_kv = self.n_kv.unwrap_or(self.kv.len() as u64);
        out.extend(n_t.to_le_bytes());
        out.extend(n_kv.to_le_bytes());
        for (k, v) in &self.kv {
            write_str(&mut out, k);
            out.extend(v.type_id().to_le_bytes());
            v.write(&mut out);
        }
        // Lay out the placed tensors.
        let mut next = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            match t.offset {
                Some(o) => offsets.push(o),
                None => {
                    offsets.push(next);
                    next = (next + t.data.len() as u64).next_multiple_of(self.align);
                }
            }
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            write_str(&mut out, &t.name);
            out.extend(t.n_dims.to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.type_id.to_le_bytes());
            out.extend(off.to_le_bytes());
        }
        let data_start = (out.len() as u64).next_multiple_of(self.align) as usize;
        out.resize(data_start, 0);
        let mut data = Vec::new();
        for (t, off) in self.tensors.iter().zip(&offsets) {
            if t.offset.is_none() {
                data.resize(*off as usize, 0);
                data.extend(&t.data);
            }
        }
        if let Some(n) = self.data_len {
            data.resize(n as usize, 0);
        }
        out.extend(data);
        out
    }
}

/// A small valid file: a few metadata entries of different types (a nested
/// array of strings among them) and three tensors, the last ending the file.
pub(crate) fn small_file() -> Vec<u8> {
    Builder::default()
        .kv("general.architecture", W::Str("llama".into()))
        .kv("llama.block_count", W::U32(2))
        .kv("flag", W::Bool(true))
        .kv(
            "tokens",
            W::Array(
                9,
                vec![
                    W::Array(8, vec![W::Str("a".into()), W::Str("bc".into())]),
                    W::Array(8, vec![]),
                ],
            ),
        )
        .tensor(T::new("token_embd.weight", &[32, 2], 2))
        .tensor(T::new("blk.0.attn_norm.weight", &[4], 0))
        .tensor(T::new("output.weight", &[8, 2], 1))
        .build()
}
