//! Shared helpers for the graph, planner and reference tests.
#![allow(dead_code, unreachable_pub)]

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, plan};
use fused_core::quant::quantize_row;
use fused_core::reference::eval::{eval_graph, eval_plan};
use fused_core::tensor::{BufferId, TensorDesc};

pub use fused_testkit::Rng;

/// Builds graphs whose tensors are placed by a bump allocator (disjoint) in
/// buffer 0, and records the data to load into each input.
pub struct Builder {
    pub g: Graph,
    pub next: usize,
    pub inits: Vec<(TensorDesc, Init)>,
    pub rng: Rng,
}

pub enum Init {
    F32(Vec<f32>),
    Rows(Vec<u8>),
}

impl Builder {
    pub fn new(seed: u64) -> Builder {
        Builder {
            g: Graph::new(),
            next: 0,
            inits: Vec::new(),
            rng: Rng::new(seed),
        }
    }

    /// A fresh, disjoint place for `bytes` bytes.
    pub fn place(&mut self, bytes: usize) -> Place {
        let p = Place::at(0, self.next);
        self.next += bytes.div_ceil(64) * 64 + 64;
        p
    }

    /// A fresh place for a dense F32 tensor of shape `ne`.
    pub fn place_f32(&mut self, ne: [usize; 4]) -> Place {
        self.place(4 * ne.iter().product::<usize>())
    }

    /// An F32 input of shape `ne` filled with random values.
    pub fn input_f32(&mut self, ne: [usize; 4]) -> NodeId {
        let p = self.place_f32(ne);
        let t = TensorDesc::contiguous(DType::F32, ne, p.buffer, p.offset).unwrap();
        let v = self.rng.vec(ne.iter().product());
        self.inits.push((t, Init::F32(v)));
        self.g.input(t).unwrap()
    }

    /// An F32 input at an explicit place.
    pub fn input_f32_at(&mut self, ne: [usize; 4], p: Place) -> NodeId {
        let t = TensorDesc::contiguous(DType::F32, ne, p.buffer, p.offset).unwrap();
        let v = self.rng.vec(ne.iter().product());
        self.inits.push((t, Init::F32(v)));
        self.g.input(t).unwrap()
    }

    /// A random `rows × k` weight matrix in `dtype` (quantized from random f32).
    pub fn weight(&mut self, dtype: DType, k: usize, rows: usize) -> NodeId {
        let rb = dtype.row_bytes(k).unwrap();
        let p = self.place(rb * rows);
        let t = TensorDesc::contiguous(dtype, [k, rows, 1, 1], p.buffer, p.offset).unwrap();
        let mut bytes = vec![0u8; rb * rows];
        for r in 0..rows {
            let v = self.rng.vec(k);
            quantize_row(dtype, &v, &mut bytes[r * rb..(r + 1) * rb]).unwrap();
        }
        self.inits.push((t, Init::Rows(bytes)));
        self.g.input(t).unwrap()
    }

    /// The normalised Sylvester Hadamard matrix of size n, as F32 weights.
    pub fn hadamard(&mut self, n: usize) -> NodeId {
        let p = self.place(4 * n * n);
        let t = TensorDesc::contiguous(DType::F32, [n, n, 1, 1], p.buffer, p.offset).unwrap();
        let s = 1.0 / (n as f32).sqrt();
        let v = (0..n * n)
            .map(|i| {
                if ((i / n) & (i % n)).count_ones().is_multiple_of(2) {
                    s
                } else {
                    -s
                }
            })
            .collect();
        self.inits.push((t, Init::F32(v)));
        self.g.input(t).unwrap()
    }

    /// ±1 signs of length n.
    pub fn signs(&mut self, n: usize) -> NodeId {
        let p = self.place(4 * n);
        let t = TensorDesc::contiguous(DType::F32, [n, 1, 1, 1], p.buffer, p.offset).unwrap();
        let v = (0..n)
            .map(|_| {
                if self.rng.next_u64() & 1 == 0 {
                    1.0
                } else {
                    -1.0
                }
            })
            .collect();
        self.inits.push((t, Init::F32(v)));
        self.g.input(t).unwrap()
    }

    /// Memory holding every input's data, written in creation order.
    pub fn memory(&self) -> Memory {
        let mut mem = Memory::new(&[self.next.max(64) + 4096, 4096]);
        for (t, init) in &self.inits {
            match init {
                Init::F32(v) => mem.write(t, v).unwrap(),
                Init::Rows(b) => mem.write_rows(t, b).unwrap(),
            }
        }
        mem
    }
}

/// The value bytes of every graph output after `eval_graph` and after
/// `eval_plan` of `plan(g)`, for comparison.
pub fn run_both(b: &Builder, mode: GemvMode) -> (Plan, Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let p = plan(&b.g);
    let mut m1 = b.memory();
    let mut m2 = b.memory();
    eval_graph(&b.g, &mut m1, mode).unwrap();
    eval_plan(&b.g, &p, &mut m2, mode).unwrap();
    let outs = |m: &Memory| -> Vec<Vec<u32>> {
        b.g.nodes()
            .iter()
            .filter(|n| n.is_output())
            .map(|n| {
                m.read(n.tensor())
                    .unwrap()
                    .iter()
                    .map(|v| canon(*v))
                    .collect()
            })
            .collect()
    };
    let (a, c) = (outs(&m1), outs(&m2));
    (p, a, c)
}

/// Buffer id 0 as a `BufferId`.
pub const B0: BufferId = BufferId(0);

/// The bits of `v`, with every NaN mapped to one pattern: Rust (and Miri)
/// leave NaN payloads unspecified, so only NaN-ness is compared.
pub fn canon(v: f32) -> u32 {
    if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() }
}
