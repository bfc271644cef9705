//! Splitting work on an output slice over scoped threads: the reference's
//! dequantization and matrix–vector products.

/// Calls `f(start, chunk)` on consecutive chunks of `out` (each a whole
/// number of `unit` elements, about `out.len() / threads` long), one
/// thread a chunk, and returns the first error. Runs on the calling thread
/// alone when `threads <= 1` or `out` holds fewer than `min_units` units.
pub fn for_each_chunk<T, E, F>(
    out: &mut [T],
    unit: usize,
    threads: usize,
    min_units: usize,
    f: F,
) -> Result<(), E>
where
    T: Send,
    E: Send,
    F: Fn(usize, &mut [T]) -> Result<(), E> + Sync,
{
    let unit = unit.max(1);
    let units = out.len() / unit;
    if threads <= 1 || units < min_units.max(2) {
        return f(0, out);
    }
    let per = units.div_ceil(threads) * unit;
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = out
            .chunks_mut(per)
            .enumerate()
            .map(|(i, chunk)| s.spawn(move || f(i * per, chunk)))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

#[cfg(test)]
mod tests {
    use super::for_each_chunk;

    #[test]
    fn every_element_once_at_its_index() {
        for threads in [1, 2, 3, 7] {
            let mut v = vec![0usize; 3 * 11];
            for_each_chunk(&mut v, 3, threads, 1, |start, c| {
                assert_eq!(start % 3, 0);
                for (i, x) in c.iter_mut().enumerate() {
                    *x = start + i + 1;
                }
                Ok::<(), ()>(())
            })
            .unwrap();
            assert!(v.iter().enumerate().all(|(i, x)| *x == i + 1), "{threads}");
        }
        let mut v = vec![0u8; 8];
        let e = for_each_chunk(&mut v, 1, 4, 1, |s, _| if s >= 4 { Err(s) } else { Ok(()) });
        assert!(matches!(e, Err(4 | 6)));
    }
}
