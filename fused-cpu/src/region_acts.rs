//! Activations prepared inside a call's parallel region, by the tasks that
//! read them: the call's columns are cut into pieces, and a task that needs
//! a piece no thread has taken quantizes it itself (each piece once, into
//! its own part of the call's buffer); one that needs a piece another
//! thread is quantizing waits for that piece only. The call keeps one
//! region (one barrier): nobody waits for a thread that has not started,
//! and when every task reads only its own columns (a few weight rows
//! against many columns) no task waits at all.
//!
//! The bytes are those of [`quantize_columns`] over all the columns on one
//! thread, whatever the pieces and the threads.

use core::ops::Range;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::vec::Vec;

use fused_core::Error;
use fused_core::error::check_len;
use fused_core::acts::ActQuant;

use crate::acts::{Acts, column, prepared_bytes, quantize_columns};
use crate::pool::spin_for;

/// One piece: its columns, its part of the buffer until a thread takes it,
/// and that part once prepared (or the error preparing it gave).
struct Piece<'a> {
    cols: Range<usize>,
    dst: Mutex<Option<&'a mut [u8]>>,
    done: OnceLock<Result<&'a [u8], Error>>,
}

/// Marks a piece failed if its preparation unwinds, so that no thread
/// waits for it forever (the pool re-raises the panic after the region).
struct FailOnUnwind<'p, 'a>(&'p OnceLock<Result<&'a [u8], Error>>);

impl Drop for FailOnUnwind<'_, '_> {
    fn drop(&mut self) {
        let _ = self.0.set(Err(Error::Overflow {
            what: "activation preparation (a task panicked)",
        }));
    }
}

/// The activations of one call (`n_cols` columns of `k` values in `x`),
/// prepared in `mode` piece by piece by the tasks of its region
/// ([`RegionActs::columns`]).
pub struct RegionActs<'a> {
    mode: ActQuant,
    x: &'a [f32],
    k: usize,
    n_cols: usize,
    pieces: Vec<Piece<'a>>,
    quantized: AtomicUsize,
}

impl core::fmt::Debug for RegionActs<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RegionActs")
            .field("mode", &self.mode)
            .field("k", &self.k)
            .field("n_cols", &self.n_cols)
            .field("pieces", &self.pieces.len())
            .finish_non_exhaustive()
    }
}

impl<'a> RegionActs<'a> {
    /// The `n_cols` columns of `x` (each `k` values) cut into `pieces`
    /// (consecutive ranges, in order, covering every column), to be prepared
    /// in `mode` into `scratch` (`prepared_bytes(mode, k)` bytes per column,
    /// laid out as by [`quantize_columns`]). Nothing is prepared yet.
    pub fn new(
        mode: ActQuant,
        x: &'a [f32],
        k: usize,
        n_cols: usize,
        pieces: &[Range<usize>],
        scratch: &'a mut [u8],
    ) -> Result<RegionActs<'a>, Error> {
        let overflow = Error::Overflow {
            what: "activations",
        };
        check_len(
            "activations",
            k.checked_mul(n_cols).ok_or(overflow)?,
            x.len(),
        )?;
        let pb = prepared_bytes(mode, k)?;
        check_len("activation scratch", n_cols * pb, scratch.len())?;
        let mut rest = scratch;
        let mut next = 0;
        let mut out = Vec::with_capacity(pieces.len());
        for p in pieces {
            if p.start != next || p.end < p.start || p.end > n_cols {
                return Err(Error::LengthMismatch {
                    what: "activation piece (pieces cover the columns in order)",
                    expected: next,
                    actual: p.start,
                });
            }
            let (dst, tail) = rest.split_at_mut(p.len() * pb);
            rest = tail;
            next = p.end;
            out.push(Piece {
                cols: p.clone(),
                dst: Mutex::new(Some(dst)),
                done: OnceLock::new(),
            });
        }
        check_len("activation pieces (columns covered)", n_cols, next)?;
        Ok(RegionActs {
            mode,
            x,
            k,
            n_cols,
            pieces: out,
            quantized: AtomicUsize::new(0),
        })
    }

    /// Columns `cols` prepared: first every piece they touch that no thread
    /// has taken is prepared here, then those other threads took are waited
    /// for. An error from preparing any of them is returned.
    pub fn columns(&self, cols: Range<usize>) -> Result<Vec<Acts<'a>>, Error> {
        if cols.start > cols.end || cols.end > self.n_cols {
            return Err(Error::LengthMismatch {
                what: "prepared column range (must lie inside the column count)",
                expected: self.n_cols,
                actual: cols.end,
            });
        }
        let touched = || {
            let cols = cols.clone();
            self.pieces
                .iter()
                .filter(move |p| p.cols.start < cols.end && cols.start < p.cols.end)
        };
        for p in touched() {
            self.prepare_if_free(p);
        }
        let mut out = Vec::with_capacity(cols.len());
        for p in touched() {
            let bytes = spin_for(|| p.done.get().copied())?;
            let x = &self.x[p.cols.start * self.k..p.cols.end * self.k];
            let (lo, hi) = (cols.start.max(p.cols.start), cols.end.min(p.cols.end));
            let local = lo - p.cols.start..hi - p.cols.start;
            for c in local {
                out.push(column(self.mode, x, bytes, self.k, c)?);
            }
        }
        Ok(out)
    }

    /// Prepares piece `p` unless another thread has taken it.
    fn prepare_if_free(&self, p: &Piece<'a>) {
        let taken = p.dst.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(dst) = taken else { return };
        let _unwind = FailOnUnwind(&p.done);
        let x = &self.x[p.cols.start * self.k..p.cols.end * self.k];
        let r = quantize_columns(self.mode, x, self.k, &mut *dst);
        if self.mode.dtype().is_some() {
            self.quantized.fetch_add(p.cols.len(), Ordering::Relaxed);
        }
        let done: &'a [u8] = dst;
        // Set before `_unwind` drops (its `set` then does nothing).
        let _ = p.done.set(r.map(|()| done));
    }

    /// Columns quantized so far, counted once per piece prepared (0 in f32
    /// mode): the column count once every piece is, whatever the threads.
    pub fn quantized_columns(&self) -> usize {
        self.quantized.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn bad_pieces_and_ranges_are_typed_errors() {
        let (mode, k, n) = (ActQuant::Q8_0, 64, 3);
        let x = vec![0.5f32; k * n];
        let pb = prepared_bytes(mode, k).unwrap();
        let mut s = vec![0u8; pb * n];
        let (short_of_end, not_from_0, whole) = (0..2, 1..3, 0..3);
        let bad: [&[Range<usize>]; 4] = [
            &[0..1, 2..3],
            core::slice::from_ref(&short_of_end),
            &[0..2, 2..4],
            core::slice::from_ref(&not_from_0),
        ];
        for pieces in bad {
            assert!(RegionActs::new(mode, &x, k, n, pieces, &mut s).is_err());
        }
        let whole = core::slice::from_ref(&whole);
        let mut short = vec![0u8; pb * n - 1];
        assert!(RegionActs::new(mode, &x, k, n, whole, &mut short).is_err());
        assert!(RegionActs::new(mode, &x[1..], k, n, whole, &mut s).is_err());
        let acts = RegionActs::new(mode, &x, k, n, &[0..1, 1..3], &mut s).unwrap();
        assert!(acts.columns(2..4).is_err());
        assert_eq!(acts.quantized_columns(), 0);
        // A range across both pieces prepares both, once.
        assert_eq!(acts.columns(0..3).unwrap().len(), 3);
        assert_eq!(acts.columns(1..2).unwrap().len(), 1);
        assert_eq!(acts.quantized_columns(), 3);
    }
}
