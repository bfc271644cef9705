//! Causal self-attention over a host key/value cache, with grouped-query
//! attention: query head `h` reads key/value head `h / (n_head / n_head_kv)`.

use crate::error::LlamaError;
use crate::ops::softmax;

/// The keys and values of every layer for the positions decoded so far,
/// in f32 on the host.
#[derive(Clone, Debug)]
pub struct KvCache {
    kv_dim: usize,
    max: usize,
    len: usize,
    /// Per layer: `len × kv_dim` keys, position-major.
    k: Vec<Vec<f32>>,
    /// Per layer: `len × kv_dim` values, position-major.
    v: Vec<Vec<f32>>,
}

impl KvCache {
    /// An empty cache of `n_layer` layers of `kv_dim` elements a position,
    /// holding at most `max` positions. Memory grows with the positions
    /// used.
    pub fn new(n_layer: usize, kv_dim: usize, max: usize) -> KvCache {
        KvCache {
            kv_dim,
            max,
            len: 0,
            k: vec![Vec::new(); n_layer],
            v: vec![Vec::new(); n_layer],
        }
    }

    /// Positions held (after every layer of the last position was stored).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions the cache holds.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        self.len = 0;
        self.k.iter_mut().for_each(Vec::clear);
        self.v.iter_mut().for_each(Vec::clear);
    }

    /// Checks that position `pos` is the next one and fits.
    pub fn check_next(&self, pos: usize) -> Result<(), LlamaError> {
        if pos >= self.max {
            return Err(LlamaError::ContextOverflow { pos, max: self.max });
        }
        if pos != self.len {
            return Err(LlamaError::Usage(format!(
                "position {pos} decoded out of order: the cache holds {} positions",
                self.len
            )));
        }
        Ok(())
    }

    /// Stores layer `layer`'s key and value for the next position.
    fn push(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        self.k[layer].extend_from_slice(k);
        self.v[layer].extend_from_slice(v);
    }

    /// Drops what a failed position stored in some layers, back to the
    /// positions complete.
    pub fn rollback(&mut self) {
        let n = self.len * self.kv_dim;
        self.k.iter_mut().for_each(|k| k.truncate(n));
        self.v.iter_mut().for_each(|v| v.truncate(n));
    }

    /// Marks the next position as complete (every layer stored).
    pub fn advance(&mut self) {
        self.len += 1;
    }
}

/// Shapes of the attention of one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (dividing `n_head`).
    pub n_head_kv: usize,
    /// Elements per head.
    pub head_dim: usize,
}

impl AttentionShape {
    /// Stores `k` and `v` (already rotated) of layer `layer` for the next
    /// position in `cache`, then writes into `out` (`n_head · head_dim`)
    /// each query head's attention over every position so far, that one
    /// included: `softmax(q·Kᵀ / √d) · V`.
    pub fn attend(
        &self,
        cache: &mut KvCache,
        layer: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        out: &mut [f32],
    ) {
        cache.push(layer, k, v);
        let d = self.head_dim;
        let kv_dim = cache.kv_dim;
        let keys = &cache.k[layer];
        let values = &cache.v[layer];
        let n_pos = keys.len() / kv_dim.max(1);
        let group = self.n_head / self.n_head_kv;
        let scale = 1.0 / (d as f32).sqrt();
        let mut scores = vec![0.0f32; n_pos];
        for h in 0..self.n_head {
            let kvh = h / group;
            let qh = &q[h * d..(h + 1) * d];
            for (p, s) in scores.iter_mut().enumerate() {
                let kp = &keys[p * kv_dim + kvh * d..p * kv_dim + (kvh + 1) * d];
                *s = dot(qh, kp) * scale;
            }
            softmax(&mut scores);
            let oh = &mut out[h * d..(h + 1) * d];
            oh.fill(0.0);
            for (p, &w) in scores.iter().enumerate() {
                let vp = &values[p * kv_dim + kvh * d..p * kv_dim + (kvh + 1) * d];
                for (o, &x) in oh.iter_mut().zip(vp) {
                    *o += w * x;
                }
            }
        }
    }
}

/// `Σ a[i]·b[i]` over eight interleaved partial sums, which the compiler
/// keeps in vector registers (a single running sum has to stay scalar).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_covers_every_element() {
        for n in [0usize, 1, 7, 8, 19, 64] {
            let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let b: Vec<f32> = (0..n).map(|i| (i % 3) as f32).collect();
            let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert_eq!(dot(&a, &b), want, "n = {n}");
        }
    }

    #[test]
    fn one_position_returns_its_value_per_group() {
        // 4 query heads over 2 KV heads: heads 0, 1 read KV head 0; 2, 3 read 1.
        let shape = AttentionShape {
            n_head: 4,
            n_head_kv: 2,
            head_dim: 2,
        };
        let mut cache = KvCache::new(1, 4, 8);
        let q = [1.0f32; 8];
        let k = [0.5f32; 4];
        let v = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = [0.0f32; 8];
        shape.attend(&mut cache, 0, &q, &k, &v, &mut out);
        assert_eq!(out, [1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]);
    }

    #[test]
    fn attention_weights_follow_the_scores() {
        let shape = AttentionShape {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 1,
        };
        let mut cache = KvCache::new(1, 1, 8);
        let mut out = [0.0f32];
        shape.attend(&mut cache, 0, &[1.0], &[0.0], &[10.0], &mut out);
        cache.advance();
        // Keys 0 and ln 3: weights 1/4 and 3/4.
        shape.attend(&mut cache, 0, &[1.0], &[3.0f32.ln()], &[20.0], &mut out);
        assert!((out[0] - 17.5).abs() < 1e-4, "{}", out[0]);
        assert!(cache.check_next(1).is_ok());
        cache.advance();
        assert!(matches!(
            KvCache::new(1, 1, 2).check_next(2),
            Err(LlamaError::ContextOverflow { pos: 2, max: 2 })
        ));
    }
}
