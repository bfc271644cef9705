//! The ops a decode step needs between its matrix products, defined once:
//! rotary position embedding from a table, a row written at a position,
//! attention of one query token over a cache, and the index of a maximum.
//!
//! The token position is a *value in memory* (a one-element F32 tensor),
//! not a parameter of the graph, so that one resident plan (one recorded
//! CUDA graph, one Vulkan command buffer) serves every token: the caller
//! writes four bytes before each run. A position is read as
//! [`position`]: truncated, and clamped into the rows the op has, so that a
//! bad value can never address memory outside a tensor (a device kernel has
//! no way to return an error); the caller checks its positions before it
//! writes them.
//!
//! - **RoPE** ([`rope`]) rotates pairs of a head by angles the caller
//!   tabulated once (`cos θ, sin θ` per pair and position): every backend
//!   then computes the same two products and one sum or difference per
//!   element, so the op is bit for bit equal everywhere (no `sin`/`cos` of
//!   a device's own precision), and any frequency scheme (base, linear
//!   scale, per-pair factors) is the table's business.
//! - **Row write** ([`set_row`]): `dst` with row `pos` replaced, the KV
//!   cache append. Placed exactly on `dst` it writes one row.
//! - **Attention** ([`attention`]): one query token, grouped-query heads,
//!   over cache rows `0..=pos`. Its softmax uses `exp`, which differs by an
//!   ulp between `libm` and a GPU's, so backends match this definition
//!   within the verifier's tolerance; the CPU reproduces it exactly.
//! - **Argmax** ([`argmax`]): the index of the largest value of each
//!   column, the first one on ties, NaN never chosen; exact everywhere.

use crate::error::{Error, check_len};
use crate::tensor::TensorDesc;

/// Which elements of a head RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Pair `i` is elements `2i, 2i + 1` (GGML's normal mode: Llama GGUF
    /// files, whose converter permutes the q/k weights for it).
    Adjacent,
    /// Pair `i` is elements `i, i + d/2` (GGML's NeoX mode).
    Halves,
}

impl RopeMode {
    /// The two elements of pair `i` in a head of `head_dim` values.
    pub const fn pair(self, i: usize, head_dim: usize) -> (usize, usize) {
        match self {
            RopeMode::Adjacent => (2 * i, 2 * i + 1),
            RopeMode::Halves => (i, i + head_dim / 2),
        }
    }

    /// A short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            RopeMode::Adjacent => "adjacent",
            RopeMode::Halves => "halves",
        }
    }
}

/// The row a position value addresses among `rows` rows: `value`
/// truncated toward zero, `0` for a negative value or NaN, `rows - 1` for
/// one past the end (and `0` when `rows` is 0).
pub fn position(value: f32, rows: usize) -> usize {
    let last = rows.saturating_sub(1);
    if value.is_nan() || value < 1.0 {
        0
    } else if value >= last as f32 {
        last
    } else {
        // In range: below `rows` ≤ usize::MAX, truncation is exact.
        (value as usize).min(last)
    }
}

/// RoPE of every head of `x` (`head_dim` values each) at one position:
/// `row` is that position's table row, `head_dim` values holding
/// `cos θ_i, sin θ_i` for pair `i` at `2i, 2i + 1`. For pair `(a, b)`:
/// `y[a] = x[a]·c − x[b]·s` and `y[b] = x[a]·s + x[b]·c`, each product
/// rounded to f32 before the sum (no fused multiply-add).
pub fn rope(
    mode: RopeMode,
    head_dim: usize,
    x: &[f32],
    row: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    check_rope(head_dim, x.len(), row.len(), y.len())?;
    for (xh, yh) in x.chunks_exact(head_dim).zip(y.chunks_exact_mut(head_dim)) {
        for i in 0..head_dim / 2 {
            let (a, b) = mode.pair(i, head_dim);
            let (c, s) = (row[2 * i], row[2 * i + 1]);
            let (xa, xb) = (xh[a], xh[b]);
            yh[a] = mul(xa, c) - mul(xb, s);
            yh[b] = mul(xa, s) + mul(xb, c);
        }
    }
    Ok(())
}

/// A product kept apart from the sum it feeds: Rust never contracts `a * b
/// + c` into a fused multiply-add, and naming the product says so.
#[inline(always)]
fn mul(a: f32, b: f32) -> f32 {
    a * b
}

fn check_rope(head_dim: usize, x: usize, row: usize, y: usize) -> Result<(), Error> {
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(Error::LengthMismatch {
            what: "RoPE head size (even, at least 2)",
            expected: (head_dim + 1) & !1,
            actual: head_dim,
        });
    }
    if !x.is_multiple_of(head_dim) {
        return Err(Error::LengthMismatch {
            what: "RoPE input (whole heads)",
            expected: x.div_ceil(head_dim) * head_dim,
            actual: x,
        });
    }
    check_len("RoPE table row", head_dim, row)?;
    check_len("RoPE output", x, y)
}

/// `dst` (rows of `row.len()` values) with row `pos` replaced by `row`, in
/// place: the row write of [`crate::graph::Graph::set_row`].
pub fn set_row(dst: &mut [f32], row: &[f32], pos: usize) -> Result<(), Error> {
    let n = row.len();
    let start = pos.checked_mul(n).ok_or(Error::Overflow {
        what: "row write offset",
    })?;
    let end = start.checked_add(n).ok_or(Error::Overflow {
        what: "row write offset",
    })?;
    let Some(out) = dst.get_mut(start..end) else {
        return Err(Error::BufferTooShort {
            what: "row write destination",
            needed: end,
            actual: dst.len(),
        });
    };
    out.copy_from_slice(row);
    Ok(())
}

/// Attention's score scale, kept as its bits so that ops stay `Eq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scale(u32);

impl Scale {
    /// `scale`.
    pub const fn new(scale: f32) -> Scale {
        Scale(scale.to_bits())
    }

    /// The value.
    pub const fn get(self) -> f32 {
        f32::from_bits(self.0)
    }
}

/// The shape of an [`attention`]: `n_head` query heads of `head_dim`
/// values, sharing `n_kv` key/value heads (`n_head / n_kv` query heads per
/// key/value head, in order), with scores scaled by `scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Values per head.
    pub head_dim: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (dividing `n_head`).
    pub n_kv: usize,
    /// The scores' scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
}

impl AttentionShape {
    /// Values of one cache row: every key/value head's.
    pub const fn kv_dim(&self) -> usize {
        self.head_dim * self.n_kv
    }

    /// Values of the query and of the output.
    pub const fn q_dim(&self) -> usize {
        self.head_dim * self.n_head
    }

    /// Whether the shape is usable: nonzero sizes, `n_kv` dividing `n_head`.
    pub fn check(&self) -> Result<(), Error> {
        if self.head_dim == 0 || self.n_kv == 0 || !self.n_head.is_multiple_of(self.n_kv) {
            return Err(Error::LengthMismatch {
                what: "attention heads (query heads a nonzero multiple of key/value heads)",
                expected: self.n_kv.max(1) * self.n_head.div_ceil(self.n_kv.max(1)).max(1),
                actual: self.n_head,
            });
        }
        Ok(())
    }
}

/// Attention of one query token `q` (`n_head` heads) over cache rows
/// `0..len` of `k` and `v` (rows of [`AttentionShape::kv_dim`] values),
/// into `out` (`q`'s size); `scores` is scratch of at least `len` values.
///
/// Per query head `h`, with key/value head `g = h / (n_head / n_kv)`:
/// 1. `s[t] = dot(q_h, k[t]_g) · scale` ([`dot`]'s order);
/// 2. `m = max s[t]`, `e[t] = expf(s[t] − m)`, `sum = Σ e[t]` in
///    increasing `t`;
/// 3. `out_h[i] = Σ_t e[t] · v[t]_g[i]` in increasing `t`, then divided
///    by `sum`.
pub fn attention(
    shape: &AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    scores: &mut [f32],
    out: &mut [f32],
) -> Result<(), Error> {
    check_attention(shape, q.len(), k.len(), v.len(), len, out.len())?;
    let (d, kv) = (shape.head_dim, shape.kv_dim());
    let Some(scores) = scores.get_mut(..len) else {
        return Err(Error::BufferTooShort {
            what: "attention scores",
            needed: len,
            actual: scores.len(),
        });
    };
    let group = shape.n_head / shape.n_kv;
    for h in 0..shape.n_head {
        let g = h / group;
        attend_head(
            d,
            shape.scale,
            &q[h * d..(h + 1) * d],
            |t| &k[t * kv + g * d..t * kv + (g + 1) * d],
            |t| &v[t * kv + g * d..t * kv + (g + 1) * d],
            scores,
            &mut out[h * d..(h + 1) * d],
        );
    }
    Ok(())
}

/// Whether [`attention`] takes these sizes: a usable shape, a query and an
/// output of [`AttentionShape::q_dim`] values, at least one row and caches
/// holding `len` rows.
pub fn check_attention(
    shape: &AttentionShape,
    q: usize,
    k: usize,
    v: usize,
    len: usize,
    out: usize,
) -> Result<(), Error> {
    shape.check()?;
    check_len("attention query", shape.q_dim(), q)?;
    check_len("attention output", shape.q_dim(), out)?;
    if len == 0 {
        return Err(Error::LengthMismatch {
            what: "attention context (at least one position)",
            expected: 1,
            actual: 0,
        });
    }
    let need = len.checked_mul(shape.kv_dim()).ok_or(Error::Overflow {
        what: "attention cache size",
    })?;
    for (what, have) in [("attention keys", k), ("attention values", v)] {
        if have < need {
            return Err(Error::BufferTooShort {
                what,
                needed: need,
                actual: have,
            });
        }
    }
    Ok(())
}

/// The cache rows of an attention over tensors, as a backend receives it
/// ([`crate::lower::Command::Attention`]), after checking that they fit:
/// a usable shape, caches `[head_dim, n_kv, rows]` with at least one row,
/// a query and an output of [`AttentionShape::q_dim`] values and a
/// one-value position.
pub fn attention_rows(
    shape: &AttentionShape,
    q: &TensorDesc,
    k: &TensorDesc,
    v: &TensorDesc,
    pos: &TensorDesc,
    out: &TensorDesc,
) -> Result<usize, Error> {
    shape.check()?;
    let rows = k.ne()[2];
    let cache = [shape.head_dim, shape.n_kv, rows, 1];
    for t in [k, v] {
        if t.ne() != cache || rows == 0 {
            return Err(Error::ShapeMismatch {
                what: "attention cache ([head_dim, n_kv, rows], rows > 0)",
                expected: [shape.head_dim, shape.n_kv, rows.max(1), 1],
                actual: t.ne(),
            });
        }
    }
    check_len("attention query", shape.q_dim(), q.n_elements())?;
    check_len("attention output", shape.q_dim(), out.n_elements())?;
    check_len("position (one F32 value)", 1, pos.n_elements())?;
    Ok(rows)
}

/// One head of [`attention`]: `key(t)` and `value(t)` are row `t`'s
/// vectors of this head's group, for `t` in `0..scores.len()`. Public so
/// that a backend running heads in parallel computes each exactly so.
pub fn attend_head<'a>(
    head_dim: usize,
    scale: f32,
    q: &[f32],
    key: impl Fn(usize) -> &'a [f32],
    value: impl Fn(usize) -> &'a [f32],
    scores: &mut [f32],
    out: &mut [f32],
) {
    let mut max = f32::NEG_INFINITY;
    for (t, s) in scores.iter_mut().enumerate() {
        *s = dot(&q[..head_dim], &key(t)[..head_dim]) * scale;
        max = max.max(*s);
    }
    let mut sum = 0.0f32;
    for s in scores.iter_mut() {
        *s = libm::expf(*s - max);
        sum += *s;
    }
    out.fill(0.0);
    for (t, &e) in scores.iter().enumerate() {
        let vt = value(t);
        for (o, &x) in out.iter_mut().zip(vt) {
            *o += e * x;
        }
    }
    for o in out.iter_mut() {
        *o /= sum;
    }
}

/// The number of interleaved partial sums of [`dot`].
pub const DOT_PARTIALS: usize = 8;

/// `Σ a[i]·b[i]` as attention defines it: partial `j` accumulates the
/// products of the indices `i ≡ j (mod 8)` in increasing `i` from `+0.0`
/// (a product rounded, then added), and the partials are summed in a fixed
/// tree, `p[j] += p[j + w]` for `j < w`, `w = 4, 2, 1`. Eight independent
/// sums keep a CPU's vector lanes busy where one running sum could not.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut p = [0.0f32; DOT_PARTIALS];
    let n = a.len().min(b.len());
    let (ca, cb) = (
        a[..n].chunks_exact(DOT_PARTIALS),
        b[..n].chunks_exact(DOT_PARTIALS),
    );
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (xa, xb) in ca.zip(cb) {
        for j in 0..DOT_PARTIALS {
            p[j] += mul(xa[j], xb[j]);
        }
    }
    for (j, (&x, &y)) in ta.iter().zip(tb).enumerate() {
        p[j] += mul(x, y);
    }
    let mut w = DOT_PARTIALS / 2;
    while w > 0 {
        for j in 0..w {
            p[j] += p[j + w];
        }
        w /= 2;
    }
    p[0]
}

/// The index of the largest value of `x`: the first on ties, NaN never
/// chosen (0 when every value is NaN or `x` is empty).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    let mut best_v = f32::NAN;
    for (i, &v) in x.iter().enumerate() {
        if v > best_v || (best_v.is_nan() && !v.is_nan()) {
            best = i;
            best_v = v;
        }
    }
    best
}

/// The largest index [`argmax`] reports in an F32 tensor: `2^24`, below
/// which every integer is an f32.
pub const MAX_ARGMAX_LEN: usize = 1 << 24;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_truncated_and_clamped() {
        assert_eq!(position(3.0, 8), 3);
        assert_eq!(position(3.9, 8), 3);
        assert_eq!(position(-2.0, 8), 0);
        assert_eq!(position(f32::NAN, 8), 0);
        assert_eq!(position(8.0, 8), 7);
        assert_eq!(position(f32::INFINITY, 8), 7);
        assert_eq!(position(5.0, 0), 0);
    }

    #[test]
    fn rope_rotates_each_pair_of_each_head() {
        let (c, s) = (0.6f32, 0.8f32);
        let row = [1.0, 0.0, c, s];
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let mut y = [0.0; 8];
        rope(RopeMode::Adjacent, 4, &x, &row, &mut y).unwrap();
        assert_eq!(&y[..2], &[1.0, 2.0]);
        assert_eq!(y[2], 3.0 * c - 4.0 * s);
        assert_eq!(y[3], 3.0 * s + 4.0 * c);
        assert_eq!(y[6], 7.0 * c - 8.0 * s);
        rope(RopeMode::Halves, 4, &x, &row, &mut y).unwrap();
        // Pair 0 is (0, 2) at angle 0; pair 1 is (1, 3).
        assert_eq!((y[0], y[2]), (1.0, 3.0));
        assert_eq!(y[1], 2.0 * c - 4.0 * s);
        assert_eq!(y[3], 2.0 * s + 4.0 * c);
        assert!(rope(RopeMode::Adjacent, 3, &x[..6], &row[..3], &mut y[..6]).is_err());
        assert!(rope(RopeMode::Adjacent, 4, &x[..6], &row, &mut y[..6]).is_err());
    }

    #[test]
    fn set_row_replaces_one_row_and_refuses_one_past_the_end() {
        let mut dst = [0.0f32; 6];
        set_row(&mut dst, &[1.0, 2.0], 1).unwrap();
        assert_eq!(dst, [0.0, 0.0, 1.0, 2.0, 0.0, 0.0]);
        assert!(set_row(&mut dst, &[1.0, 2.0], 3).is_err());
    }

    #[test]
    fn attention_over_one_row_returns_its_value_and_follows_the_scores() {
        let shape = AttentionShape {
            head_dim: 2,
            n_head: 2,
            n_kv: 1,
            scale: 1.0,
        };
        let q = [1.0, 0.0, 0.0, 1.0];
        let k = [1.0, 0.0, 0.0, 1.0];
        let v = [3.0, 4.0, 5.0, 6.0];
        let mut scores = [0.0; 2];
        let mut out = [0.0; 4];
        attention(&shape, &q, &k, &v, 1, &mut scores, &mut out).unwrap();
        assert_eq!(out, [3.0, 4.0, 3.0, 4.0]);
        // Two rows: head 0 prefers row 0, head 1 row 1, by e : 1.
        attention(&shape, &q, &k, &v, 2, &mut scores, &mut out).unwrap();
        let w = core::f32::consts::E / (core::f32::consts::E + 1.0);
        assert!((out[0] - (w * 3.0 + (1.0 - w) * 5.0)).abs() < 1e-5);
        assert!((out[3] - ((1.0 - w) * 4.0 + w * 6.0)).abs() < 1e-5);
        assert!(attention(&shape, &q, &k, &v, 3, &mut [0.0; 3], &mut out).is_err());
        assert!(attention(&shape, &q, &k, &v, 0, &mut scores, &mut out).is_err());
        let bad = AttentionShape { n_kv: 3, ..shape };
        assert!(attention(&bad, &q, &k, &v, 1, &mut scores, &mut out).is_err());
    }

    #[test]
    fn dot_sums_interleaved_partials_in_a_fixed_tree() {
        let a: [f32; 11] = core::array::from_fn(|i| (i as f32 + 1.0) * 0.1);
        let b: [f32; 11] = core::array::from_fn(|i| 1.0 - i as f32 * 0.07);
        let mut p = [0.0f32; 8];
        for i in 0..11 {
            p[i % 8] += a[i] * b[i];
        }
        let want = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
        assert_eq!(dot(&a, &b).to_bits(), want.to_bits());
        assert_eq!(dot(&[], &[]), 0.0);
    }

    #[test]
    fn argmax_takes_the_first_maximum_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -1.0, f32::NAN, -0.5]), 3);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }
}
