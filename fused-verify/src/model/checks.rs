//! The verdicts of the `model` mode, as pure functions of logits and
//! tokens: the logits' NMSE against the reference per activation mode,
//! where two greedy decodings part and whether the reference calls that a
//! tie, and the " Paris" continuation.

use fused_core::acts::GemvMode;

use crate::metrics;

/// How far a backend's logits may be from the reference's over the
/// teacher-forced steps: the mean of the per-step NMSEs, and each step's.
///
/// Both bounds, because the per-step NMSE is heavy-tailed: some contexts
/// amplify any perturbation (step 6 of the default prompt gives the
/// largest NMSE for every backend and for every fault tried), so a mean
/// over the steps separates noise from a fault better than the worst step
/// does, and the per-step bound (10 × the mean's) still fails a fault that
/// shows at one step only.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Threshold {
    /// The largest mean NMSE over the steps.
    pub mean: f64,
    /// The largest NMSE at any one step.
    pub step: f64,
}

/// The threshold with f32 activations (`GemvMode::F32`).
///
/// The runtime then differs from the reference only by f32 rounding
/// (the weights are the same dequantized values): 30 layers of sums of 576
/// to 1536 products, norms and a softmax, each rounding at 2⁻²⁴ relative.
/// Measured on SmolLM2-135M (Q4_1, the default 16 steps): NMSE at most
/// 2.3e-11 a step on the CPU (AVX-512 kernels), 4.0e-12 on lavapipe.
/// A mean of 1e-9 and a step of 1e-8 leave a margin of over ×400 for other
/// summation orders (GPU reductions) and fail every fault tried
/// (`tests/model.rs`): a RoPE base 1 % off (10⁵ → 1.01·10⁵) gives a mean
/// of 1.5e-7 and steps up to 7.8e-7, GGML's default base 10⁴ instead of
/// the file's 10⁵ a mean of 1.4e-2, the middle layer skipped 0.27.
pub const F32_THRESHOLD: Threshold = Threshold {
    mean: 1e-9,
    step: 1e-8,
};

/// The threshold with GGML's quantized activations (`GemvMode::Ggml`:
/// every product's input rounded to Q8 blocks of 32 values and one scale).
///
/// That rounding is a relative error of about 2⁻⁸ per element, which
/// through 30 layers gives logits NMSEs of 1e-4 to 1e-3 at most steps and
/// up to 1e-2 at the sensitive ones. Measured over the default 16 steps:
/// mean 1.2e-3 and steps up to 7.2e-3 on the CPU, mean 2.3e-3 and steps up
/// to 1.7e-2 on lavapipe (over 32 steps, means of 1.1e-3 and 1.6e-3). A
/// mean of 5e-3 and a step of 5e-2 leave a margin of about ×2 to ×3 for
/// that noise and fail GGML's default RoPE base 10⁴ instead of the file's
/// 10⁵ (mean 1.4e-2, worst step 6.9e-2) and a skipped layer (mean 0.27,
/// worst step 1.4). A RoPE base 1 % off (mean 1.5e-7) is far inside the
/// quantization noise: only the f32 mode's threshold sees such faults,
/// which is why the mode runs both by default.
pub const GGML_THRESHOLD: Threshold = Threshold {
    mean: 5e-3,
    step: 5e-2,
};

/// The threshold of `mode` ([`F32_THRESHOLD`], [`GGML_THRESHOLD`]).
pub fn threshold(mode: GemvMode) -> Threshold {
    match mode {
        GemvMode::F32 => F32_THRESHOLD,
        GemvMode::Ggml => GGML_THRESHOLD,
    }
}

/// A backend's teacher-forced logits against the reference's.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LogitsCheck {
    /// NMSE per step (NaN where a logit is not finite).
    pub nmse: Vec<f64>,
    /// Their mean.
    pub mean: f64,
    /// Their largest (NaN if any is).
    pub worst: f64,
    /// The largest `|got − want|` over every step and token.
    pub max_abs: f64,
    /// The threshold applied.
    pub threshold: Threshold,
    /// Whether it held (and the steps and logits matched in number).
    pub ok: bool,
}

/// The larger of two values, NaN if either is.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Compares the logits `got` (f32 values widened to f64) with the
/// reference's `want`, step by step, against `threshold`.
pub fn check_logits(got: &[Vec<f64>], want: &[Vec<f64>], threshold: Threshold) -> LogitsCheck {
    let mut nmse = Vec::with_capacity(got.len());
    let mut max_abs = 0.0f64;
    let mut shapes_match = got.len() == want.len() && !got.is_empty();
    for (g, w) in got.iter().zip(want) {
        shapes_match &= g.len() == w.len();
        // The runtime's logits are f32: narrowing them back is exact.
        let g32: Vec<f32> = g.iter().map(|&v| v as f32).collect();
        nmse.push(metrics::nmse(&g32, w));
        max_abs = nan_max(max_abs, metrics::max_abs(&g32, w));
    }
    let mean = nmse.iter().sum::<f64>() / nmse.len().max(1) as f64;
    let worst = nmse.iter().copied().fold(0.0, nan_max);
    let ok = shapes_match && mean <= threshold.mean && worst <= threshold.step;
    LogitsCheck {
        nmse,
        mean,
        worst,
        max_abs,
        threshold,
        ok,
    }
}

/// The largest and second-largest logit and their difference.
pub fn top2_margin(logits: &[f64]) -> f64 {
    let (mut a, mut b) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for &v in logits {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

/// The first index where `a` and `b` differ, over their common length.
pub fn first_divergence(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Where two greedy decodings part, as the reference sees that step.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Divergence {
    /// The step (0: the first generated token).
    pub at: usize,
    /// The token the checked backend chose.
    pub ours: u32,
    /// The token the other sequence chose.
    pub theirs: u32,
    /// The reference's top-1 minus top-2 logit at that step (after the
    /// prompt and the tokens both sequences share).
    pub margin: f64,
    /// How far below the reference's top logit the lower of the two
    /// chosen tokens is: within `tolerance`, both are choices the measured
    /// error allows.
    pub gap: f64,
    /// Twice the larger measured logits error of the two sequences
    /// (each picked its token over the other's, each logit within its
    /// error of the reference).
    pub tolerance: f64,
    /// Whether the divergence is within the error (reported, not failed).
    pub tie: bool,
}

/// Judges a divergence at step `at` where the checked backend chose `ours`
/// and the other sequence `theirs`, from the reference's logits there
/// (`reference`) and the measured logits errors of the two sequences
/// (`err_ours`, `err_theirs`: their largest `|Δ|` against the reference;
/// 0 for the reference itself).
///
/// Each sequence's logits are within its error `e` of the reference's,
/// so it can prefer a token whose reference logit is up to `2e` below
/// another's; both choices are explained by the errors when both tokens
/// are within `2·max(e_ours, e_theirs)` of the reference's top logit.
pub fn judge(
    at: usize,
    reference: &[f64],
    ours: u32,
    theirs: u32,
    err_ours: f64,
    err_theirs: f64,
) -> Divergence {
    let top = reference.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let logit = |t: u32| reference.get(t as usize).copied().unwrap_or(f64::NAN);
    let (a, b) = (logit(ours), logit(theirs));
    // `f64::min` would pass over a NaN: a token outside the vocabulary
    // makes the gap NaN, never a tie.
    let gap = if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        top - a.min(b)
    };
    let tolerance = 2.0 * err_ours.max(err_theirs);
    Divergence {
        at,
        ours,
        theirs,
        margin: top2_margin(reference),
        gap,
        tolerance,
        tie: gap <= tolerance,
    }
}

/// The text the prompt "The capital of France is" must continue with.
pub const PARIS: &str = " Paris";

/// Whether `text` (a greedy continuation, decoded) starts with " Paris".
pub fn says_paris(text: &str) -> bool {
    text.starts_with(PARIS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(mean: f64, step: f64) -> Threshold {
        Threshold { mean, step }
    }

    #[test]
    fn logits_nmse_per_step_against_the_threshold() {
        let want = vec![vec![1.0, -2.0, 3.0], vec![0.5, 0.5, 0.0]];
        let same = check_logits(&want, &want, t(0.0, 0.0));
        assert!(same.ok && same.nmse == [0.0, 0.0] && same.max_abs == 0.0);
        let mut got = want.clone();
        got[1][2] = 0.05; // Σ err² = 0.0025 over Σ want² = 0.5
        let c = check_logits(&got, &want, t(1.0, 1e-3));
        assert!(!c.ok, "{c:?}");
        assert_eq!(c.nmse[0], 0.0);
        assert!((c.nmse[1] - 5e-3).abs() < 1e-9 && (c.max_abs - 0.05).abs() < 1e-9);
        assert!((c.mean - 2.5e-3).abs() < 1e-9 && c.worst == c.nmse[1]);
        // The mean alone, then the step alone, fails it.
        assert!(!check_logits(&got, &want, t(2e-3, 1.0)).ok);
        assert!(check_logits(&got, &want, t(3e-3, 1e-2)).ok);
        got[0][0] = f64::NAN;
        assert!(!check_logits(&got, &want, t(1.0, 1.0)).ok);
        assert!(!check_logits(&[], &[], t(1.0, 1.0)).ok);
        assert!(!check_logits(&want[..1], &want, t(1.0, 1.0)).ok);
        assert!(!check_logits(&[vec![1.0], vec![1.0]], &want, t(1.0, 1.0)).ok);
    }

    #[test]
    fn thresholds_are_ordered() {
        for m in [GemvMode::F32, GemvMode::Ggml] {
            assert!(threshold(m).mean < threshold(m).step);
        }
        assert!(threshold(GemvMode::F32).step < threshold(GemvMode::Ggml).mean);
    }

    #[test]
    fn divergence_is_a_tie_only_within_the_error() {
        assert_eq!(first_divergence(&[1, 2, 3], &[1, 2, 4, 5]), Some(2));
        assert_eq!(first_divergence(&[1, 2], &[1, 2, 4]), None);
        let r = [0.0, 5.0, 4.9, 1.0];
        assert!((top2_margin(&r) - 0.1).abs() < 1e-12);
        // Tokens 1 and 2 are 0.1 apart: a tie when either error is ≥ 0.05.
        let d = judge(3, &r, 2, 1, 0.06, 0.0);
        assert!(d.tie && d.at == 3 && (d.gap - 0.1).abs() < 1e-12, "{d:?}");
        assert!(!judge(3, &r, 2, 1, 0.01, 0.02).tie);
        // Token 3 is 4 below the top: never a tie at a small error.
        let d = judge(0, &r, 3, 1, 0.06, 0.06);
        assert!(!d.tie && (d.margin - 0.1).abs() < 1e-12);
        // A token outside the vocabulary is not a tie.
        assert!(!judge(0, &r, 9, 1, 1e9, 0.0).tie);
    }

    #[test]
    fn paris() {
        assert!(says_paris(" Paris. It is"));
        assert!(!says_paris(" Lyon"));
        assert!(!says_paris("Paris"));
    }
}
