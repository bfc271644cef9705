//! The f64 reference forward pass of a Llama model, written from the
//! architecture's definition and independent of the runtime under test
//! (`fused-llama`): weights as fused-core dequantizes them (exact in f32),
//! every other quantity in f64.
//!
//! Per token at position `pos`, from the embedding row `x`:
//!
//! - per layer: `n = rmsnorm(x) ⊙ attn_norm`; `q, k, v = Wq·n, Wk·n, Wv·n`;
//!   RoPE on `q` and `k` (GGML's "normal" mode of GGUF Llama files: each
//!   head's adjacent pairs `(2i, 2i+1)` rotated by
//!   `θ_i = pos · freq_scale · base^(−2i/d) / factor_i`); `k`, `v` appended
//!   to the layer's cache; per query head `h`, over key/value head
//!   `h / (n_head / n_head_kv)`: `softmax(q·Kᵀ / √d) · V`;
//!   `x += Wo·attn`; `n = rmsnorm(x) ⊙ ffn_norm`;
//!   `x += Wdown·(silu(Wgate·n) ⊙ Wup·n)`;
//! - then `logits = Whead · (rmsnorm(x) ⊙ output_norm)`, the head being
//!   `output.weight` or, tied, the embeddings.
//!
//! `rmsnorm(x) = x / √(mean(x²) + eps)`, `silu(v) = v / (1 + e^−v)`.

use fused_gguf::Gguf;

use super::config::Hyper;
use super::error::ModelError;
use super::par::for_each_chunk;
use super::weights::{Matrix, Weights};

/// The keys and values of every layer for the positions run so far, in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct RefCache {
    /// Per layer: `len × kv_dim` rotated keys, position-major.
    k: Vec<Vec<f64>>,
    /// Per layer: `len × kv_dim` values, position-major.
    v: Vec<Vec<f64>>,
    len: usize,
}

impl RefCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A Llama model in f64.
#[derive(Clone, Debug)]
pub struct Reference {
    h: Hyper,
    w: Weights,
    threads: usize,
}

impl Reference {
    /// The reference of `h` with weights `w`, its products on `threads`
    /// threads; an error when a weight does not fit the hyperparameters.
    pub fn new(h: Hyper, w: Weights, threads: usize) -> Result<Reference, ModelError> {
        let bad = |what: String| Err(ModelError::Usage(format!("reference weights: {what}")));
        if w.layers.len() != h.n_layer {
            return bad(format!("{} layers, {} expected", w.layers.len(), h.n_layer));
        }
        let (hd, q, kv, f) = (h.hidden, h.q_dim(), h.kv_dim(), h.ffn);
        let mut mats: Vec<(&str, &Matrix, usize, usize)> = vec![
            ("embedding", &w.embedding, h.vocab, hd),
            ("head", w.head(), h.vocab, hd),
        ];
        for l in &w.layers {
            mats.extend([
                ("attn_q", &l.wq, q, hd),
                ("attn_k", &l.wk, kv, hd),
                ("attn_v", &l.wv, kv, hd),
                ("attn_output", &l.wo, hd, q),
                ("ffn_gate", &l.w_gate, f, hd),
                ("ffn_up", &l.w_up, f, hd),
                ("ffn_down", &l.w_down, hd, f),
            ]);
        }
        for (name, m, rows, cols) in mats {
            if (m.rows(), m.cols()) != (rows, cols) {
                return bad(format!(
                    "{name} is {} × {}, {rows} × {cols} expected",
                    m.rows(),
                    m.cols()
                ));
            }
        }
        let norms = w
            .layers
            .iter()
            .flat_map(|l| [&l.attn_norm, &l.ffn_norm])
            .chain([&w.output_norm]);
        if norms.into_iter().any(|n| n.len() != hd) {
            return bad(format!("a norm weight is not of the hidden size {hd}"));
        }
        if !(w.rope_factors.is_empty() || w.rope_factors.len() == h.head_dim / 2) {
            return bad(format!("{} RoPE factors", w.rope_factors.len()));
        }
        Ok(Reference {
            h,
            w,
            threads: threads.max(1),
        })
    }

    /// Reads the hyperparameters of the Llama file `g` and dequantizes its
    /// weights.
    pub fn load(g: &Gguf<'_>, threads: usize) -> Result<Reference, ModelError> {
        let h = Hyper::from_gguf(g)?;
        let w = Weights::load(g, &h, threads)?;
        Reference::new(h, w, threads)
    }

    /// The hyperparameters.
    pub fn hyper(&self) -> &Hyper {
        &self.h
    }

    /// The weights.
    pub fn weights(&self) -> &Weights {
        &self.w
    }

    /// The hyperparameters and weights back (to change one and build
    /// another reference: a deliberately broken model, in the tests).
    pub fn into_parts(self) -> (Hyper, Weights) {
        (self.h, self.w)
    }

    /// An empty cache.
    pub fn new_cache(&self) -> RefCache {
        RefCache {
            k: vec![Vec::new(); self.h.n_layer],
            v: vec![Vec::new(); self.h.n_layer],
            len: 0,
        }
    }

    /// Runs `token` at the next position of `cache` and returns the logits
    /// of the token after it.
    pub fn forward(&self, token: u32, cache: &mut RefCache) -> Result<Vec<f64>, ModelError> {
        let h = &self.h;
        let row = token as usize;
        if row >= h.vocab {
            return Err(ModelError::Usage(format!(
                "token {token} is outside the vocabulary of {} tokens",
                h.vocab
            )));
        }
        if cache.k.len() != h.n_layer {
            return Err(ModelError::Usage(
                "a cache of another model was passed to the reference".into(),
            ));
        }
        let pos = cache.len;
        let eps = h.norm_eps;
        let mut x: Vec<f64> = self
            .w
            .embedding
            .row(row)
            .iter()
            .map(|&v| v.into())
            .collect();
        for (l, layer) in self.w.layers.iter().enumerate() {
            let n = rms_norm(&x, &layer.attn_norm, eps);
            let [mut q, mut k, v] = self.products([&layer.wq, &layer.wk, &layer.wv], &n);
            self.rope(&mut q, pos);
            self.rope(&mut k, pos);
            cache.k[l].extend_from_slice(&k);
            cache.v[l].extend_from_slice(&v);
            let att = self.attention(&q, &cache.k[l], &cache.v[l]);
            let [o] = self.products([&layer.wo], &att);
            add(&mut x, &o);
            let n = rms_norm(&x, &layer.ffn_norm, eps);
            let [g, u] = self.products([&layer.w_gate, &layer.w_up], &n);
            let act: Vec<f64> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
            let [d] = self.products([&layer.w_down], &act);
            add(&mut x, &d);
        }
        cache.len += 1;
        let n = rms_norm(&x, &self.w.output_norm, eps);
        let [logits] = self.products([self.w.head()], &n);
        Ok(logits)
    }

    /// `M·x` for each matrix of `ms` (every row length `x.len()`), their
    /// rows shared out over the threads together.
    fn products<const N: usize>(&self, ms: [&Matrix; N], x: &[f64]) -> [Vec<f64>; N] {
        let total: usize = ms.iter().map(|m| m.rows()).sum();
        let mut out = vec![0.0f64; total];
        let _ = for_each_chunk(&mut out, 1, self.threads, 256, |start, chunk| {
            let (mut m, mut first) = (0usize, 0usize);
            for (i, o) in chunk.iter_mut().enumerate() {
                let mut r = start + i - first;
                while r >= ms[m].rows() {
                    first += ms[m].rows();
                    r -= ms[m].rows();
                    m += 1;
                }
                *o = dot(ms[m].row(r), x);
            }
            Ok::<(), ()>(())
        });
        let mut rest = out.as_slice();
        ms.map(|m| {
            let (this, tail) = rest.split_at(m.rows());
            rest = tail;
            this.to_vec()
        })
    }

    /// Rotates every head of `x` for position `pos`.
    fn rope(&self, x: &mut [f64], pos: usize) {
        let h = &self.h;
        let d = h.head_dim;
        let angles: Vec<(f64, f64)> = (0..d / 2)
            .map(|i| {
                let factor = self.w.rope_factors.get(i).map_or(1.0, |&f| f64::from(f));
                let theta =
                    pos as f64 * h.rope_freq_scale * h.rope_base.powf(-2.0 * i as f64 / d as f64)
                        / factor;
                (theta.cos(), theta.sin())
            })
            .collect();
        for head in x.chunks_exact_mut(d) {
            for (pair, &(c, s)) in head.chunks_exact_mut(2).zip(&angles) {
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * c - b * s;
                pair[1] = a * s + b * c;
            }
        }
    }

    /// Grouped-query causal attention of the query `q` over every cached
    /// position (`keys`, `values`: position-major, `kv_dim` a position).
    fn attention(&self, q: &[f64], keys: &[f64], values: &[f64]) -> Vec<f64> {
        let h = &self.h;
        let (d, kv_dim) = (h.head_dim, h.kv_dim());
        let group = h.n_head / h.n_head_kv;
        let n_pos = keys.len() / kv_dim;
        let scale = 1.0 / (d as f64).sqrt();
        let mut out = vec![0.0f64; h.q_dim()];
        for (head, o) in out.chunks_exact_mut(d).enumerate() {
            let qh = &q[head * d..(head + 1) * d];
            let at = |p: usize| p * kv_dim + (head / group) * d;
            let scores: Vec<f64> = (0..n_pos)
                .map(|p| {
                    scale
                        * qh.iter()
                            .zip(&keys[at(p)..at(p) + d])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                })
                .collect();
            let weights = softmax(&scores);
            for (p, w) in weights.iter().enumerate() {
                for (o, v) in o.iter_mut().zip(&values[at(p)..at(p) + d]) {
                    *o += w * v;
                }
            }
        }
        out
    }
}

/// `Σ w[i]·x[i]` in f64 (four partial sums, which the compiler vectorizes).
fn dot(w: &[f32], x: &[f64]) -> f64 {
    let mut acc = [0.0f64; 4];
    let (cw, cx) = (w.chunks_exact(4), x.chunks_exact(4));
    let tail: f64 = cw
        .remainder()
        .iter()
        .zip(cx.remainder())
        .map(|(&a, b)| f64::from(a) * b)
        .sum();
    for (a, b) in cw.zip(cx) {
        for i in 0..4 {
            acc[i] += f64::from(a[i]) * b[i];
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// `x / √(mean(x²) + eps) ⊙ w`.
fn rms_norm(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &g)| v * s * f64::from(g))
        .collect()
}

/// `v / (1 + e^−v)`.
fn silu(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

/// The softmax of `x` (its maximum subtracted first).
fn softmax(x: &[f64]) -> Vec<f64> {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

fn add(x: &mut [f64], y: &[f64]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::weights::Layer;

    /// A one-layer model of hidden 8, two query heads over one KV head of
    /// size 4, FFN 2, vocabulary 3, with simple weights.
    fn toy(rope_base: f64) -> Reference {
        let h = Hyper {
            n_layer: 1,
            hidden: 8,
            ffn: 2,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 4,
            vocab: 3,
            norm_eps: 1e-6,
            rope_base,
            rope_freq_scale: 1.0,
        };
        let m = |rows: usize, cols: usize, f: fn(usize, usize) -> f32| {
            let data = (0..rows * cols).map(|i| f(i / cols, i % cols)).collect();
            Matrix::new(rows, cols, data).unwrap()
        };
        let eye = |r: usize, c: usize| if r == c { 1.0 } else { 0.0 };
        let w = Weights {
            embedding: m(3, 8, |r, c| ((r * 8 + c) % 5) as f32 / 4.0 - 0.6),
            layers: vec![Layer {
                attn_norm: vec![1.0; 8],
                wq: m(8, 8, eye),
                wk: m(4, 8, eye),
                wv: m(4, 8, |r, c| if c == r + 4 { 1.0 } else { 0.0 }),
                wo: m(8, 8, eye),
                ffn_norm: vec![1.0; 8],
                w_gate: m(2, 8, eye),
                w_up: m(2, 8, eye),
                w_down: m(8, 2, eye),
            }],
            output_norm: vec![1.0; 8],
            output: None,
            rope_factors: Vec::new(),
            formats: Vec::new(),
        };
        Reference::new(h, w, 1).unwrap()
    }

    #[test]
    fn ops_by_hand() {
        let n = rms_norm(&[3.0, -4.0], &[1.0, 2.0], 0.0);
        let s = (12.5f64).sqrt();
        assert_eq!(n, vec![3.0 / s, -8.0 / s]);
        assert!((silu(0.0)).abs() < 1e-300 && (silu(50.0) - 50.0).abs() < 1e-12);
        let p = softmax(&[0.0, 3.0f64.ln()]);
        assert!((p[0] - 0.25).abs() < 1e-15 && (p[1] - 0.75).abs() < 1e-15);
        let w: Vec<f32> = (0..7).map(|i| i as f32).collect();
        let x: Vec<f64> = (0..7).map(|i| 0.5 * i as f64).collect();
        assert_eq!(dot(&w, &x), 45.5);
    }

    #[test]
    fn rope_rotates_adjacent_pairs_by_the_base() {
        let r = toy(100.0);
        let mut x = vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0];
        r.rope(&mut x, 0);
        assert_eq!(x, vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
        r.rope(&mut x, 3);
        // head_dim 4: pair i of every head turns by θ_i = 3 · 100^(−2i/4).
        for head in x.chunks(4) {
            for (pair, theta) in head.chunks(2).zip([3.0f64, 0.3]) {
                assert!((pair[0] - theta.cos()).abs() < 1e-15, "{x:?}");
                assert!((pair[1] - theta.sin()).abs() < 1e-15, "{x:?}");
            }
        }
    }

    #[test]
    fn attention_groups_query_heads_and_weights_positions() {
        let r = toy(100.0);
        // One KV head of 4 for both query heads; two positions; the
        // scale is 1/√4.
        let keys = [0.0, 0.0, 0.0, 0.0, 2.0 * 3f64.ln(), 0.0, 0.0, 0.0];
        let values = [10.0, 1.0, 0.0, 0.0, 20.0, 2.0, 0.0, 0.0];
        let q = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let out = r.attention(&q, &keys, &values);
        // Head 0: scores 0 and ln 3, weights 1/4 and 3/4; head 1: equal.
        let want = [17.5, 1.75, 0.0, 0.0, 15.0, 1.5, 0.0, 0.0];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-12, "{out:?}");
        }
    }

    #[test]
    fn forward_fills_the_cache_and_depends_on_rope() {
        let r = toy(100.0);
        let mut c = r.new_cache();
        let a = r.forward(1, &mut c).unwrap();
        let b = r.forward(2, &mut c).unwrap();
        assert_eq!((a.len(), c.len()), (3, 2));
        assert!(a.iter().chain(&b).all(|v| v.is_finite()));
        // Position 0 does not rotate; position 1 does, by the base.
        let other = toy(10.0);
        let mut c2 = other.new_cache();
        assert_eq!(other.forward(1, &mut c2).unwrap(), a);
        assert_ne!(other.forward(2, &mut c2).unwrap(), b);
        assert!(matches!(r.forward(3, &mut c), Err(ModelError::Usage(_))));
        assert_eq!(c.len(), 2);
    }
}
