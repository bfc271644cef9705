//! Bit-equality of f32 results, every NaN equal to every NaN (payloads and
//! signs of NaNs are not part of any backend's contract).

/// Whether `a` and `b` are bit-identical, or both NaN.
pub fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// The first index where `a` and `b` differ ([`same`]), or where one ends.
pub fn first_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| !same(*x, *y))
}

/// Panics (a fuzzer finding) naming `what` when `a` and `b` differ.
pub fn assert_same(what: &str, a: &[f32], b: &[f32]) {
    if let Some(i) = first_difference(a, b) {
        panic!(
            "{what}: differ at {i} of {}/{}: {:?} vs {:?}",
            a.len(),
            b.len(),
            a.get(i),
            b.get(i)
        );
    }
}

/// Panics naming `what` when bytes `start..end` of buffers `a` and `b`
/// differ, comparing whole 4-byte words at 4-byte-aligned buffer offsets
/// (where every f32 result is stored) and taking two NaN words as equal:
/// for tensors of a block format that F32 results were written over.
pub fn assert_same_bytes(what: &str, a: &[u8], b: &[u8], start: usize, end: usize) {
    let word = |buf: &[u8], at: usize| -> Option<f32> {
        buf.get(at..at + 4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    };
    let mut at = start - start % 4;
    while at < end {
        let (x, y) = (
            a.get(at..(at + 4).min(a.len())),
            b.get(at..(at + 4).min(b.len())),
        );
        if x != y {
            let nan = matches!((word(a, at), word(b, at)), (Some(p), Some(q)) if p.is_nan() && q.is_nan());
            assert!(nan, "{what}: bytes differ at {at}: {x:?} vs {y:?}");
        }
        at += 4;
    }
}
