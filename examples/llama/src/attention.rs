//! Causal self-attention over a host key/value cache, with grouped-query
//! attention: query head `h` reads key/value head `h / (n_head / n_head_kv)`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::LlamaError;

/// The keys and values of one sequence: every layer's, for the positions
/// decoded so far.
///
/// A cache is cheap to clone, and a clone is another sequence that starts
/// with this one's positions (a fork: beam search, a teacher-forced path
/// beside a greedy one). The rows live in an append-only store shared by
/// the forks: row `p` of a store, once written, never changes, so a fork
/// reads the rows below its length from the store it shares, and the first
/// fork to write a row the others may not share copies what it needs into
/// a store of its own.
///
/// A model running whole tokens ([`crate::DecodePath::WholeToken`]) keeps
/// the rows of the sequence it last ran in its device caches, and copies
/// them into the host store only when another sequence runs next (and
/// copies that one's rows to the device), so decoding one sequence moves
/// no key or value between host and device.
#[derive(Debug)]
pub struct KvCache {
    /// Tells this sequence from any other (a clone is another).
    id: u64,
    kv_dim: usize,
    max: usize,
    len: usize,
    rows: Arc<Mutex<Rows>>,
}

/// The host rows of one or more sequences that share a prefix.
#[derive(Debug)]
pub(crate) struct Rows {
    /// The one sequence that may append.
    owner: u64,
    /// Rows complete in every layer.
    complete: usize,
    /// Per layer: keys, position-major (`kv_dim` a row).
    pub(crate) k: Vec<Vec<f32>>,
    /// Per layer: values, position-major.
    pub(crate) v: Vec<Vec<f32>>,
}

impl Rows {
    /// Rows complete in every layer.
    pub(crate) fn complete(&self) -> usize {
        self.complete
    }

    /// The sequence that may append.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// Marks `n` rows complete after they were appended to every layer.
    pub(crate) fn set_complete(&mut self, n: usize) {
        self.complete = n;
    }
}

impl KvCache {
    /// An empty cache of `n_layer` layers of `kv_dim` elements a position,
    /// holding at most `max` positions. Memory grows with the positions
    /// used.
    pub fn new(n_layer: usize, kv_dim: usize, max: usize) -> KvCache {
        let id = next_id();
        KvCache {
            id,
            kv_dim,
            max,
            len: 0,
            rows: Arc::new(Mutex::new(Rows {
                owner: id,
                complete: 0,
                k: vec![Vec::new(); n_layer],
                v: vec![Vec::new(); n_layer],
            })),
        }
    }

    /// The sequence's identity: unique to this cache (clones get their own).
    pub fn id(&self) -> u64 {
        self.id
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

    /// Forgets every position (forks made before keep theirs).
    pub fn clear(&mut self) {
        self.len = 0;
        self.detach();
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

    /// The rows, locked (a poisoned lock only means another thread
    /// panicked while holding it; the rows below `complete` are whole).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `other` is this very store.
    pub(crate) fn shares_rows(&self, other: &Arc<Mutex<Rows>>) -> bool {
        Arc::ptr_eq(&self.rows, other)
    }

    /// The store, for a model that keeps this sequence on its device.
    pub(crate) fn rows(&self) -> Arc<Mutex<Rows>> {
        Arc::clone(&self.rows)
    }

    /// Makes this cache the owner of its store, with its first `len` rows
    /// complete and no other row: copies them into a new store where the
    /// store is another sequence's.
    pub(crate) fn own_rows(&mut self) {
        let mut guard = self.lock();
        if guard.owner == self.id {
            let r = &mut *guard;
            let (n, kv) = (self.len.min(r.complete), self.kv_dim);
            r.complete = n;
            for layer in r.k.iter_mut().chain(r.v.iter_mut()) {
                layer.truncate(n * kv);
            }
            return;
        }
        drop(guard);
        self.detach();
    }

    /// A store of this cache's own with a copy of its first `len` rows (as
    /// many as the shared store holds).
    fn detach(&mut self) {
        let fresh = {
            let r = self.lock();
            let n = (self.len.min(r.complete)) * self.kv_dim;
            Rows {
                owner: self.id,
                complete: self.len.min(r.complete),
                k: r.k.iter().map(|l| l[..n.min(l.len())].to_vec()).collect(),
                v: r.v.iter().map(|l| l[..n.min(l.len())].to_vec()).collect(),
            }
        };
        self.rows = Arc::new(Mutex::new(fresh));
    }

    /// Stores layer `layer`'s key and value for the next position (in a
    /// store this cache owns: see [`KvCache::own_rows`]).
    fn push(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let mut r = self.lock();
        r.k[layer].extend_from_slice(k);
        r.v[layer].extend_from_slice(v);
    }

    /// Drops what a failed position stored in some layers, back to the
    /// positions complete.
    pub fn rollback(&mut self) {
        let (id, n) = (self.id, self.len * self.kv_dim);
        let mut guard = self.lock();
        let r = &mut *guard;
        if r.owner == id {
            for layer in r.k.iter_mut().chain(r.v.iter_mut()) {
                layer.truncate(n);
            }
        }
    }

    /// Marks the next position as complete (every layer stored); for a
    /// sequence kept on a device, the host rows follow later.
    pub fn advance(&mut self) {
        self.len += 1;
    }

    /// Marks the rows up to `len` complete in the host store (the layered
    /// path, which stores every row as it goes).
    pub(crate) fn complete_rows(&mut self) {
        let (id, len) = (self.id, self.len);
        let mut r = self.lock();
        if r.owner == id {
            r.complete = len;
        }
    }
}

impl Clone for KvCache {
    /// A fork: another sequence with this one's positions, sharing their
    /// rows until one of them writes.
    fn clone(&self) -> KvCache {
        KvCache {
            id: next_id(),
            kv_dim: self.kv_dim,
            max: self.max,
            len: self.len,
            rows: Arc::clone(&self.rows),
        }
    }
}

/// A cache identity never given before in this process.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
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
    ) -> Result<(), LlamaError> {
        cache.push(layer, k, v);
        let d = self.head_dim;
        let kv_dim = cache.kv_dim;
        let r = cache.lock();
        let n_pos = r.k[layer].len() / kv_dim.max(1);
        let shape = fused_core::decode::AttentionShape {
            head_dim: d,
            n_head: self.n_head,
            n_kv: self.n_head_kv,
            scale: 1.0 / (d as f32).sqrt(),
        };
        let mut scores = vec![0.0f32; n_pos];
        // The core's definition, which the whole-token plan computes too:
        // both paths give the same bits.
        fused_core::decode::attention(&shape, q, &r.k[layer], &r.v[layer], n_pos, &mut scores, out)
            .map_err(|e| LlamaError::Usage(format!("attention of layer {layer}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        shape.attend(&mut cache, 0, &q, &k, &v, &mut out).unwrap();
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
        shape
            .attend(&mut cache, 0, &[1.0], &[0.0], &[10.0], &mut out)
            .unwrap();
        cache.advance();
        // Keys 0 and ln 3: weights 1/4 and 3/4.
        shape
            .attend(&mut cache, 0, &[1.0], &[3.0f32.ln()], &[20.0], &mut out)
            .unwrap();
        assert!((out[0] - 17.5).abs() < 1e-4, "{}", out[0]);
        assert!(cache.check_next(1).is_ok());
        cache.advance();
        assert!(matches!(
            KvCache::new(1, 1, 2).check_next(2),
            Err(LlamaError::ContextOverflow { pos: 2, max: 2 })
        ));
    }
}
