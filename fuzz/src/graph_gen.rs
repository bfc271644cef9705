//! A small graph with arbitrary shapes, offsets, strides and buffer layouts,
//! built through the public [`Graph`] builder (a step the builder refuses
//! is skipped: its typed error is the expected answer), and the memory it
//! runs on, filled with deterministic bounded data.
//!
//! Sizes stay small (dimensions ≤ 64, K ≤ 256, buffers ≤ 64 KiB), and the
//! choices lean towards what the planner fuses: a GEMV's result feeding
//! element-wise ops, sources picked mostly from the newest node, result
//! offsets mostly reusing another tensor's offset (aliasing) or end.

use arbitrary::{Result, Unstructured};
use fused_core::DType;
use fused_core::decode::RopeMode;
use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Op, Place};
use fused_core::memory::Memory;
use fused_core::tensor::{BufferId, TensorDesc};

use crate::data;

/// Largest buffer a case may use.
pub const MAX_BUFFER: usize = 64 * 1024;

/// A graph and the memory (inputs written) it runs on.
#[derive(Debug)]
pub struct GraphCase {
    /// The graph.
    pub graph: Graph,
    /// Its buffers, every input written.
    pub memory: Memory,
}

/// Builds the graph as `u` says; `Ok(None)` when it ends up empty or does
/// not fit [`MAX_BUFFER`].
pub fn build(u: &mut Unstructured<'_>) -> Result<Option<GraphCase>> {
    let n_buf = u.int_in_range(1..=3u32)?;
    let mut b = Builder {
        g: Graph::new(),
        n_buf,
        positions: Vec::new(),
    };
    if u.ratio(3, 4)? {
        if u.ratio(1, 4)? {
            b.decode_candidate(u)?;
        } else {
            b.candidate(u)?;
        }
    }
    let steps = u.int_in_range(0..=10)?;
    for _ in 0..steps {
        b.step(u)?;
    }
    if b.g.is_empty() {
        return Ok(None);
    }
    let last = NodeId(b.g.len() as u32 - 1);
    let _ = b.g.mark_output(last);
    let Some(mut memory) = memory(&b.g, n_buf)? else {
        return Ok(None);
    };
    for (id, value) in &b.positions {
        let t =
            *b.g.tensor(*id)
                .map_err(|_| arbitrary::Error::IncorrectFormat)?;
        if memory.write(&t, &[*value]).is_err() {
            return Ok(None);
        }
    }
    Ok(Some(GraphCase { graph: b.g, memory }))
}

/// The graph under construction.
struct Builder {
    g: Graph,
    n_buf: u32,
    /// Position inputs and the values written into them (after the
    /// bounded fill, which would address row 0 almost always).
    positions: Vec<(NodeId, f32)>,
}

impl Builder {
    /// The ids of nodes whose tensor satisfies `keep`.
    fn nodes(&self, keep: impl Fn(&TensorDesc) -> bool) -> Vec<NodeId> {
        (0..self.g.len() as u32)
            .map(NodeId)
            .filter(|&id| self.g.tensor(id).is_ok_and(&keep))
            .collect()
    }

    /// A node satisfying `keep`: the newest one half the time.
    fn pick(
        &self,
        u: &mut Unstructured<'_>,
        keep: impl Fn(&TensorDesc) -> bool,
    ) -> Result<Option<NodeId>> {
        let ids = self.nodes(keep);
        if ids.is_empty() {
            return Ok(None);
        }
        Ok(Some(if u.ratio(1, 2)? {
            ids[ids.len() - 1]
        } else {
            *u.choose(&ids)?
        }))
    }

    /// Where a result goes: mostly fresh memory after every tensor of the
    /// buffer (what an allocator gives; also what exhausted fuzzer data
    /// gives), else another tensor's offset or end (aliasing and
    /// adjacency), offset 0, or anywhere 4-byte aligned (rarely unaligned).
    fn place(&self, u: &mut Unstructured<'_>) -> Result<Place> {
        let buffer = u.int_in_range(0..=self.n_buf - 1)?;
        let fresh = |b: u32| {
            self.g
                .nodes()
                .iter()
                .map(|n| n.tensor())
                .filter(|t| t.buffer().0 == b)
                .map(|t| t.byte_extent().end.next_multiple_of(4))
                .max()
                .unwrap_or(0)
        };
        let offset = match u.int_in_range(0..=7)? {
            0..=3 => fresh(buffer),
            4 | 5 if !self.g.is_empty() => {
                let id = NodeId(u.int_in_range(0..=self.g.len() as u32 - 1)?);
                let t = *self
                    .g
                    .tensor(id)
                    .map_err(|_| arbitrary::Error::IncorrectFormat)?;
                let r = t.byte_extent();
                let at = if u.ratio(1, 2)? { r.start } else { r.end };
                return Ok(Place::at(t.buffer().0, at.next_multiple_of(4)));
            }
            6 if u.ratio(1, 8)? => u.int_in_range(0..=16 * 1024usize)?,
            6 => 4 * u.int_in_range(0..=4096usize)?,
            _ => 0,
        };
        Ok(Place::at(buffer, offset))
    }

    /// A shape `[ne0, n1, n2, 1]` with small trailing dimensions.
    fn shape(u: &mut Unstructured<'_>, ne0: usize) -> Result<[usize; 4]> {
        Ok([
            ne0,
            u.int_in_range(1..=4)?,
            if u.ratio(1, 4)? { 2 } else { 1 },
            1,
        ])
    }

    /// An input tensor of `dtype` and shape `ne`, dense or with padded
    /// strides.
    fn input(&mut self, u: &mut Unstructured<'_>, dtype: DType, ne: [usize; 4]) -> Result<()> {
        let at = self.place(u)?;
        let t = if u.ratio(1, 4)? {
            let nb0 = dtype.block_bytes();
            let Ok(rb) = dtype.row_bytes(ne[0]) else {
                return Ok(());
            };
            let nb1 = rb + nb0 * u.int_in_range(0..=3usize)?;
            let nb2 = nb1 * ne[1] + nb0 * u.int_in_range(0..=3usize)?;
            let nb3 = nb2 * ne[2];
            TensorDesc::strided(dtype, ne, [nb0, nb1, nb2, nb3], at.buffer, at.offset)
        } else {
            TensorDesc::contiguous(dtype, ne, at.buffer, at.offset)
        };
        if let Ok(t) = t {
            let _ = self.g.input(t);
        }
        Ok(())
    }

    /// The newest node, if any.
    fn newest(&self) -> Option<NodeId> {
        (!self.g.is_empty()).then(|| NodeId(self.g.len() as u32 - 1))
    }

    /// An F32 input shaped `ne` (sometimes F16 or BF16), returning its id.
    fn operand(&mut self, u: &mut Unstructured<'_>, ne: [usize; 4]) -> Result<Option<NodeId>> {
        let before = self.g.len();
        let dtype = if u.ratio(7, 8)? {
            DType::F32
        } else {
            *u.choose(&[DType::F16, DType::BF16])?
        };
        self.input(u, dtype, ne)?;
        Ok((self.g.len() > before).then_some(NodeId(before as u32)))
    }

    /// A fusion candidate: weights (a second set for a GLU), activations
    /// of the matching K, the matmul (or a signed Hadamard transform), then
    /// a chain of element-wise ops on the newest node, each with a fresh
    /// operand (or, sometimes, an existing node).
    fn candidate(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let dtype =
            *u.choose(&DType::ALL.map(|d| if d.is_weight_format() { d } else { DType::F32 }))?;
        let hadamard = u.ratio(1, 5)?;
        let (k, m) = if hadamard {
            let n = *u.choose(&[32usize, 64, 128, 256])?;
            (n, n)
        } else {
            let bl = dtype.block_len();
            (
                bl * u.int_in_range(1..=(256 / bl).max(1))?,
                u.int_in_range(1..=64)?,
            )
        };
        let dtype = if hadamard { DType::F32 } else { dtype };
        let at = self.place(u)?;
        let Ok(wt) = TensorDesc::contiguous(dtype, [k, m, 1, 1], at.buffer, at.offset) else {
            return Ok(());
        };
        let Ok(w) = self.g.input(wt) else {
            return Ok(());
        };
        let ne = Self::shape(u, k)?;
        let Some(mut x) = self.operand(u, ne)? else {
            return Ok(());
        };
        if hadamard {
            // mul(x, signs) -> [reshape] -> mul_mat_hadamard.
            let Some(signs) = self.operand(u, [k, 1, 1, 1])? else {
                return Ok(());
            };
            let at = self.place(u)?;
            let Ok(sx) = self.g.mul(x, signs, at) else {
                return Ok(());
            };
            x = sx;
            if u.ratio(1, 3)? {
                let n = ne[1] * ne[2] * ne[3];
                if let Ok(r) = self.g.reshape(x, [k, n, 1, 1]) {
                    x = r;
                }
            }
            let at = self.place(u)?;
            let _ = self.g.mul_mat_hadamard(w, x, at);
        } else {
            let at = self.place(u)?;
            let Ok(y) = self.g.mul_mat(w, x, at) else {
                return Ok(());
            };
            if u.ratio(1, 3)? {
                let at = self.place(u)?;
                let w2 = TensorDesc::contiguous(dtype, [k, m, 1, 1], at.buffer, at.offset);
                let Ok(w2) = w2.and_then(|t| self.g.input(t)) else {
                    return Ok(());
                };
                let at = self.place(u)?;
                let Ok(y2) = self.g.mul_mat(w2, x, at) else {
                    return Ok(());
                };
                let at = self.place(u)?;
                let (a, b) = if u.ratio(1, 2)? { (y, y2) } else { (y2, y) };
                let _ = self.g.glu(*u.choose(&Activation::ALL)?, a, b, at);
            }
        }
        for _ in 0..u.int_in_range(0..=4)? {
            let Some(v) = self.newest() else { break };
            let Ok(t) = self.g.tensor(v).copied() else {
                break;
            };
            let ne = t.ne();
            let at = self.place(u)?;
            match u.int_in_range(0..=5)? {
                0 | 1 => {
                    let _ = self.g.unary(*u.choose(&Activation::ALL)?, v, at);
                }
                2 | 3 => {
                    let op = if u.ratio(1, 4)? {
                        self.pick(u, |t| t.ne() == ne)?
                    } else {
                        self.operand(u, ne)?
                    };
                    let Some(op) = op else { continue };
                    let at = self.place(u)?;
                    let (a, b) = if u.ratio(3, 4)? { (v, op) } else { (op, v) };
                    let _ = if u.ratio(1, 2)? {
                        self.g.add(a, b, at)
                    } else {
                        self.g.mul(a, b, at)
                    };
                }
                4 => {
                    let Some(bias) = self.operand(u, [ne[0], 1, 1, 1])? else {
                        continue;
                    };
                    let at = self.place(u)?;
                    let _ = self.g.add_row_bias(v, bias, at);
                }
                _ => {
                    let _ = self.g.mark_output(v);
                }
            }
        }
        Ok(())
    }

    /// A decode step's candidate for the key/value append: q, k and v
    /// heads, a RoPE table and a position (a row, a fraction, past the end,
    /// negative or NaN), key and value caches as state, RoPE of q and k,
    /// the row writes (mostly in place), attention over the written caches
    /// and an argmax; any piece may land on arbitrary memory (aliasing), be
    /// left out, or come in another order.
    fn decode_candidate(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let d = 2 * u.int_in_range(1..=8usize)?;
        let n_kv = u.int_in_range(1..=2usize)?;
        let n_head = n_kv * u.int_in_range(1..=3usize)?;
        let rows = u.int_in_range(1..=6usize)?;
        let kv = d * n_kv;
        let f32t = |at: Place, ne: [usize; 4]| {
            TensorDesc::contiguous(DType::F32, ne, at.buffer, at.offset)
        };
        let input = |b: &mut Builder, u: &mut Unstructured<'_>, ne, state: bool| {
            let at = b.place(u)?;
            Ok(f32t(at, ne)
                .ok()
                .and_then(|t| if state { b.g.state(t) } else { b.g.input(t) }.ok()))
        };
        let table_rows = rows + u.int_in_range(0..=2usize)?;
        let (Some(q), Some(k), Some(v), Some(table), Some(pos)) = (
            input(self, u, [d, n_head, 1, 1], false)?,
            input(self, u, [d, n_kv, 1, 1], false)?,
            input(self, u, [kv, 1, 1, 1], false)?,
            input(self, u, [d, table_rows, 1, 1], false)?,
            input(self, u, [1, 1, 1, 1], false)?,
        ) else {
            return Ok(());
        };
        let value = match u.int_in_range(0..=5)? {
            0 => f32::NAN,
            1 => -1.5,
            2 => rows as f32 + u.int_in_range(0..=3u32)? as f32,
            3 => u.int_in_range(0..=rows as u32)? as f32 + 0.5,
            _ => u.int_in_range(0..=rows as u32 - 1)? as f32,
        };
        self.positions.push((pos, value));
        let (Some(kc), Some(vc)) = (
            input(self, u, [kv, rows, 1, 1], true)?,
            input(self, u, [kv, rows, 1, 1], true)?,
        ) else {
            return Ok(());
        };
        let modes = [RopeMode::Adjacent, RopeMode::Halves];
        let kmode = *u.choose(&modes)?;
        let qmode = if u.ratio(3, 4)? {
            kmode
        } else {
            *u.choose(&modes)?
        };
        // The places of results: mostly fresh, or in place where a cache
        // is written.
        let cache_place = |b: &Builder, u: &mut Unstructured<'_>, c: NodeId| -> Result<Place> {
            if u.ratio(3, 4)? {
                let t =
                    b.g.tensor(c)
                        .map_err(|_| arbitrary::Error::IncorrectFormat)?;
                Ok(Place::at(t.buffer().0, t.offset()))
            } else {
                b.place(u)
            }
        };
        let at = self.place(u)?;
        let Ok(qr) = self.g.rope(qmode, q, table, pos, at) else {
            return Ok(());
        };
        let at = self.place(u)?;
        let Ok(kr) = self.g.rope(kmode, k, table, pos, at) else {
            return Ok(());
        };
        let at = cache_place(self, u, kc)?;
        let Ok(kw) = self.g.set_row(kc, kr, pos, at) else {
            return Ok(());
        };
        let early_v = u.ratio(3, 4)?;
        let mut vw = vc;
        if early_v {
            let at = cache_place(self, u, vc)?;
            if let Ok(w) = self.g.set_row(vc, v, pos, at) {
                vw = w;
            }
        }
        let (Ok(k3), Ok(v3)) = (
            self.g.reshape(kw, [d, n_kv, rows, 1]),
            self.g.reshape(vw, [d, n_kv, rows, 1]),
        ) else {
            return Ok(());
        };
        let at = self.place(u)?;
        if let Ok(att) = self.g.attention(qr, k3, v3, pos, 0.5, at) {
            let _ = self.g.mark_output(att);
        }
        if !early_v {
            let at = cache_place(self, u, vc)?;
            if let Ok(w) = self.g.set_row(vc, v, pos, at) {
                let _ = self.g.mark_output(w);
            }
        }
        if u.ratio(1, 4)? {
            let _ = self.g.mark_output(kr);
        }
        let at = self.place(u)?;
        if let Ok(best) = self.g.argmax(q, at) {
            let _ = self.g.mark_output(best);
        }
        for id in [qr, kw] {
            let _ = self.g.mark_output(id);
        }
        Ok(())
    }

    /// One builder call, chosen by `u`.
    fn step(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let float = |t: &TensorDesc| matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16);
        let f32_ = |t: &TensorDesc| t.dtype() == DType::F32;
        let weight = |t: &TensorDesc| t.ne()[2] == 1 && t.ne()[3] == 1;
        let acts = Activation::ALL;
        match u.int_in_range(0..=15)? {
            0 | 1 => {
                // Weights: any weight format; sometimes a square power of two
                // (a Hadamard candidate).
                let dtype = *u.choose(
                    &DType::ALL.map(|d| if d.is_weight_format() { d } else { DType::Q4_0 }),
                )?;
                let (k, m) = if u.ratio(1, 4)? {
                    let n = *u.choose(&[32usize, 64, 128, 256])?;
                    (n, n)
                } else {
                    let bl = dtype.block_len();
                    (
                        bl * u.int_in_range(1..=(256 / bl).max(1))?,
                        u.int_in_range(1..=64)?,
                    )
                };
                let at = self.place(u)?;
                if let Ok(t) = TensorDesc::contiguous(dtype, [k, m, 1, 1], at.buffer, at.offset) {
                    let _ = self.g.input(t);
                }
            }
            2 | 3 => {
                // Activations whose K matches some weight's, or any length.
                let ks: Vec<usize> = self
                    .nodes(weight)
                    .iter()
                    .filter_map(|&id| self.g.tensor(id).ok())
                    .map(|t| t.ne()[0])
                    .collect();
                let ne0 = if !ks.is_empty() && u.ratio(3, 4)? {
                    *u.choose(&ks)?
                } else {
                    u.int_in_range(1..=64)?
                };
                let ne = Self::shape(u, ne0)?;
                let dtype = if u.ratio(7, 8)? {
                    DType::F32
                } else {
                    *u.choose(&[DType::F16, DType::BF16])?
                };
                self.input(u, dtype, ne)?;
            }
            4 => {
                // An element-wise operand shaped like an existing node, or a
                // row bias, or a signs vector.
                let Some(a) = self.pick(u, float)? else {
                    return Ok(());
                };
                let ne = self.g.tensor(a).map(|t| t.ne()).unwrap_or([1; 4]);
                let ne = match u.int_in_range(0..=3)? {
                    0 => [ne[0], 1, 1, 1],
                    1 => [ne[0], ne[1], 1, 1],
                    _ => ne,
                };
                let dtype = if u.ratio(7, 8)? {
                    DType::F32
                } else {
                    *u.choose(&[DType::F16, DType::BF16])?
                };
                self.input(u, dtype, ne)?;
            }
            5 | 6 => {
                let (Some(w), Some(x)) = (self.pick(u, weight)?, self.pick(u, f32_)?) else {
                    return Ok(());
                };
                let at = self.place(u)?;
                let _ = if u.ratio(1, 4)? {
                    self.g.mul_mat_hadamard(w, x, at)
                } else {
                    self.g.mul_mat(w, x, at)
                };
            }
            7 | 8 => {
                let (Some(a), Some(b)) = (self.pick(u, float)?, self.pick(u, float)?) else {
                    return Ok(());
                };
                let at = self.place(u)?;
                let _ = if u.ratio(1, 2)? {
                    self.g.add(a, b, at)
                } else {
                    self.g.mul(a, b, at)
                };
            }
            9 => {
                let (Some(a), Some(b)) = (self.pick(u, float)?, self.pick(u, float)?) else {
                    return Ok(());
                };
                let at = self.place(u)?;
                let _ = self.g.add_row_bias(a, b, at);
            }
            10 | 11 => {
                let Some(a) = self.pick(u, float)? else {
                    return Ok(());
                };
                let at = self.place(u)?;
                let _ = self.g.unary(*u.choose(&acts)?, a, at);
            }
            12 => {
                let (Some(a), Some(b)) = (self.pick(u, float)?, self.pick(u, float)?) else {
                    return Ok(());
                };
                let at = self.place(u)?;
                let _ = self.g.glu(*u.choose(&acts)?, a, b, at);
            }
            13 => {
                let Some(a) = self.pick(u, |_| true)? else {
                    return Ok(());
                };
                let t = *self
                    .g
                    .tensor(a)
                    .map_err(|_| arbitrary::Error::IncorrectFormat)?;
                let n = t.n_elements();
                let ne = t.ne();
                let new = match u.int_in_range(0..=2)? {
                    0 => [n, 1, 1, 1],
                    1 => [ne[0], ne[1] * ne[2] * ne[3], 1, 1],
                    _ => [ne[0], 1, ne[1], ne[2] * ne[3]],
                };
                if u.ratio(1, 2)? {
                    let _ = self.g.reshape(a, new);
                } else {
                    // A view: a window of rows, or the same memory restrided.
                    let nb = t.nb();
                    let rows = u.int_in_range(1..=ne[1].max(1))?;
                    let skip = u.int_in_range(0..=ne[1] - rows)?;
                    let _ = self
                        .g
                        .view(a, [ne[0], rows, ne[2], ne[3]], nb, skip * nb[1]);
                }
            }
            14 => {
                let Some(a) = self.pick(u, float)? else {
                    return Ok(());
                };
                let ne = self.g.tensor(a).map(|t| t.ne()).unwrap_or([1; 4]);
                let at = self.place(u)?;
                let _ = self.g.other("opaque", &[a], ne, at);
            }
            _ => {
                if !self.g.is_empty() {
                    let id = NodeId(u.int_in_range(0..=self.g.len() as u32 - 1)?);
                    let _ = self.g.mark_output(id);
                }
            }
        }
        Ok(())
    }
}

/// Buffers just large enough for every tensor of `g` (`None` past
/// [`MAX_BUFFER`]), filled with bounded f32 values, then every input
/// written in order (later inputs overwrite earlier ones they overlap).
fn memory(g: &Graph, n_buf: u32) -> Result<Option<Memory>> {
    let mut sizes = vec![4usize; n_buf as usize];
    for n in g.nodes() {
        let t = n.tensor();
        let i = t.buffer().0 as usize;
        sizes[i] = sizes[i].max(t.byte_extent().end.next_multiple_of(4));
    }
    if sizes.iter().any(|&s| s > MAX_BUFFER) {
        return Ok(None);
    }
    let mut mem = Memory::new(&sizes);
    for (i, &s) in sizes.iter().enumerate() {
        let fill = data::values(s / 4, 1000 + i as u32, 1.0);
        let buf = mem.buffer_mut(BufferId(i as u32)).expect("buffer exists");
        for (b, v) in buf.chunks_exact_mut(4).zip(fill) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    }
    for (i, n) in g.nodes().iter().enumerate() {
        if n.op() != Op::Input {
            continue;
        }
        let t = n.tensor();
        let seed = 7 * i as u32 + 3;
        let ok = match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => mem
                .write(t, &data::values(t.n_elements(), seed, 1.0))
                .is_ok(),
            d => data::weight_bytes(d, t.n_rows(), t.ne()[0], seed)
                .is_some_and(|w| mem.write_rows(t, &w).is_ok()),
        };
        if !ok {
            return Ok(None);
        }
    }
    Ok(Some(mem))
}
