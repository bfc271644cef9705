//! What a device plan may reuse from one step to a later one: the latest
//! activation quantization, or the latest norm prologue.
//!
//! With quantized activations (GGML's mode) every integer GEMV step reads
//! its input quantized into a scratch buffer. Two steps of one input, such
//! as the unfused gate and up projections, need that quantization once: the
//! second step may read what the first one's quantizer wrote, as long as no
//! launch between them wrote the input (the quantization would be stale) or
//! the scratch (it would be gone). [`LatestQuantization`] keeps that record
//! for a plan being built, launch by launch; the CUDA and the Vulkan device
//! plans both use it. A norm prologue (`(x·s)·g`, quantized or not) is kept
//! the same way with its weight `g` as a second input
//! ([`LatestQuantization::record_weighted`]): q, k and v reading one norm
//! compute it once.

use crate::placement::Region;

/// One quantization: the input it read, how it quantized (`K`: a backend's
/// layout key, equal for interchangeable outputs), where it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Quantization<S, K> {
    input: Region<S>,
    /// A second input (a norm's weight), if any.
    weight: Option<Region<S>>,
    key: K,
    output: Region<S>,
}

/// The latest activation quantization of a plan being built, while
/// nothing since has written its input or its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatestQuantization<S, K> {
    latest: Option<Quantization<S, K>>,
}

impl<S, K> Default for LatestQuantization<S, K> {
    fn default() -> Self {
        LatestQuantization { latest: None }
    }
}

impl<S: Copy + PartialEq, K: PartialEq> LatestQuantization<S, K> {
    /// No quantization yet.
    pub const fn new() -> Self {
        LatestQuantization { latest: None }
    }

    /// Where `input` already lies quantized as `key`: the latest
    /// quantization's output when it read exactly `input` the same way and
    /// nothing has written either since.
    pub fn lookup(&self, input: &Region<S>, key: &K) -> Option<Region<S>> {
        self.lookup_weighted(input, None, key)
    }

    /// [`LatestQuantization::lookup`] of an output made from `input` and
    /// `weight` (a norm prologue's input and weight).
    pub fn lookup_weighted(
        &self,
        input: &Region<S>,
        weight: Option<&Region<S>>,
        key: &K,
    ) -> Option<Region<S>> {
        self.latest
            .as_ref()
            .filter(|q| q.input == *input && q.weight.as_ref() == weight && q.key == *key)
            .map(|q| q.output)
    }

    /// Records the quantization of `input` as `key` into `output`, the
    /// launch just appended (after [`LatestQuantization::wrote`] saw its
    /// write of `output`).
    pub fn record(&mut self, input: Region<S>, key: K, output: Region<S>) {
        self.record_weighted(input, None, key, output);
    }

    /// [`LatestQuantization::record`] of an output made from `input` and
    /// `weight`: a write of either makes it stale.
    pub fn record_weighted(
        &mut self,
        input: Region<S>,
        weight: Option<Region<S>>,
        key: K,
        output: Region<S>,
    ) {
        self.latest = Some(Quantization {
            input,
            weight,
            key,
            output,
        });
    }

    /// A launch appended to the plan writes `region`: a quantization whose
    /// input or output it touches is no longer reusable.
    pub fn wrote(&mut self, region: &Region<S>) {
        if self.latest.as_ref().is_some_and(|q| {
            region.overlaps(&q.input)
                || region.overlaps(&q.output)
                || q.weight.is_some_and(|w| region.overlaps(&w))
        }) {
            self.latest = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(slot: u8, offset: u64, size: u64) -> Region<u8> {
        Region { slot, offset, size }
    }

    #[test]
    fn the_same_input_and_key_reuse_the_output() {
        let mut l = LatestQuantization::new();
        assert_eq!(l.lookup(&r(0, 0, 64), &1), None, "nothing quantized yet");
        l.wrote(&r(9, 0, 16));
        l.record(r(0, 0, 64), 1, r(9, 0, 16));
        assert_eq!(l.lookup(&r(0, 0, 64), &1), Some(r(9, 0, 16)));
        // A write elsewhere (another buffer, or beside both) keeps it.
        l.wrote(&r(1, 0, 64));
        l.wrote(&r(0, 64, 64));
        l.wrote(&r(9, 16, 16));
        assert_eq!(l.lookup(&r(0, 0, 64), &1), Some(r(9, 0, 16)));
    }

    #[test]
    fn another_input_or_key_does_not_match() {
        let mut l = LatestQuantization::new();
        l.record(r(0, 0, 64), 1, r(9, 0, 16));
        assert_eq!(l.lookup(&r(0, 0, 32), &1), None, "part of the input");
        assert_eq!(l.lookup(&r(0, 64, 64), &1), None, "the next input");
        assert_eq!(l.lookup(&r(1, 0, 64), &1), None, "another buffer");
        assert_eq!(l.lookup(&r(0, 0, 64), &2), None, "another layout");
    }

    #[test]
    fn a_write_of_the_input_or_the_output_forgets_it() {
        for w in [r(0, 63, 1), r(0, 0, 4), r(9, 15, 2), r(9, 0, 16)] {
            let mut l = LatestQuantization::new();
            l.record(r(0, 0, 64), 1, r(9, 0, 16));
            l.wrote(&w);
            assert_eq!(l.lookup(&r(0, 0, 64), &1), None, "after a write of {w:?}");
        }
    }

    #[test]
    fn a_weighted_output_needs_the_same_weight_and_forgets_on_its_write() {
        let mut l = LatestQuantization::new();
        l.record_weighted(r(0, 0, 64), Some(r(1, 0, 64)), 1, r(9, 0, 16));
        let w = r(1, 0, 64);
        assert_eq!(
            l.lookup_weighted(&r(0, 0, 64), Some(&w), &1),
            Some(r(9, 0, 16))
        );
        assert_eq!(l.lookup(&r(0, 0, 64), &1), None, "no weight");
        let other = r(1, 64, 64);
        assert_eq!(l.lookup_weighted(&r(0, 0, 64), Some(&other), &1), None);
        l.wrote(&r(1, 60, 8));
        assert_eq!(
            l.lookup_weighted(&r(0, 0, 64), Some(&w), &1),
            None,
            "weight written"
        );
    }

    #[test]
    fn a_new_quantization_replaces_the_old_one() {
        let mut l = LatestQuantization::new();
        l.record(r(0, 0, 64), 1, r(9, 0, 16));
        l.wrote(&r(9, 0, 16));
        l.record(r(0, 64, 64), 1, r(9, 0, 16));
        assert_eq!(l.lookup(&r(0, 0, 64), &1), None);
        assert_eq!(l.lookup(&r(0, 64, 64), &1), Some(r(9, 0, 16)));
    }
}
