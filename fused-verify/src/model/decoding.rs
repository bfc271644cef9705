//! The token sequences the checks compare, run on any decoder (the f64
//! reference or the runtime on a backend): greedy decoding, and the
//! teacher-forced steps that feed every decoder the same tokens. The two
//! share their forward passes while a decoder's greedy choice is the
//! forced token, and fork (the cache is cloned) where it is not.

use fused_core::backend::Backend;
use fused_llama::Model;
use fused_llama::attention::KvCache;

use super::error::ModelError;
use super::reference::{RefCache, Reference};

/// A language model run one token at a time over a cache.
pub trait Decoder {
    /// Its key/value cache.
    type Cache: Clone;
    /// An empty cache.
    fn new_cache(&self) -> Self::Cache;
    /// Runs `token` at the next position of `cache`: the logits of the
    /// token after it, as f64.
    fn forward(&mut self, token: u32, cache: &mut Self::Cache) -> Result<Vec<f64>, ModelError>;
}

impl Decoder for &Reference {
    type Cache = RefCache;

    fn new_cache(&self) -> RefCache {
        Reference::new_cache(self)
    }

    fn forward(&mut self, token: u32, cache: &mut RefCache) -> Result<Vec<f64>, ModelError> {
        Reference::forward(self, token, cache)
    }
}

impl<B: Backend> Decoder for Model<'_, B> {
    type Cache = KvCache;

    fn new_cache(&self) -> KvCache {
        Model::new_cache(self)
    }

    fn forward(&mut self, token: u32, cache: &mut KvCache) -> Result<Vec<f64>, ModelError> {
        let pos = cache.len();
        Model::forward(self, token, cache)
            .map(|l| l.iter().map(|&x| f64::from(x)).collect())
            .map_err(|e| ModelError::runtime(format!("forward pass at position {pos}"), e))
    }
}

/// The index of the largest logit (the first of equals; NaN never wins),
/// 0 for none.
pub fn argmax(logits: &[f64]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// Runs `prompt` (not empty) from an empty cache: the cache and the logits
/// after its last token.
fn prefill<D: Decoder>(dec: &mut D, prompt: &[u32]) -> Result<(D::Cache, Vec<f64>), ModelError> {
    let mut cache = dec.new_cache();
    let mut logits = Err(ModelError::Usage("the prompt is empty".into()));
    for &t in prompt {
        logits = dec.forward(t, &mut cache);
        if logits.is_err() {
            break;
        }
    }
    Ok((cache, logits?))
}

/// A greedy decoding: `tokens[i] = argmax(logits[i])`, each fed back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Greedy {
    /// The chosen tokens.
    pub tokens: Vec<u32>,
    /// The logits each was chosen from.
    pub logits: Vec<Vec<f64>>,
}

/// `n` greedy tokens after `prompt`.
pub fn greedy<D: Decoder>(dec: &mut D, prompt: &[u32], n: usize) -> Result<Greedy, ModelError> {
    let (mut cache, mut logits) = prefill(dec, prompt)?;
    let mut out = Greedy::default();
    for i in 0..n {
        let t = argmax(&logits);
        out.tokens.push(t);
        let next = if i + 1 < n {
            Some(dec.forward(t, &mut cache)?)
        } else {
            None
        };
        out.logits
            .push(std::mem::replace(&mut logits, next.unwrap_or_default()));
    }
    Ok(out)
}

/// The logits after `prompt` then `prefix`.
pub fn logits_after<D: Decoder>(
    dec: &mut D,
    prompt: &[u32],
    prefix: &[u32],
) -> Result<Vec<f64>, ModelError> {
    let (mut cache, mut logits) = prefill(dec, prompt)?;
    for &t in prefix {
        logits = dec.forward(t, &mut cache)?;
    }
    Ok(logits)
}

/// What a decoder did with the forced tokens and on its own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Paths {
    /// Teacher-forced: the logits after `prompt` and `forced[..i]`, for
    /// each step `i < steps`.
    pub forced: Vec<Vec<f64>>,
    /// Its own greedy tokens after `prompt`.
    pub greedy: Vec<u32>,
    /// Forward passes run (the prompt's included).
    pub passes: usize,
}

/// The teacher-forced logits of `steps` steps (feeding `forced`, at least
/// `steps − 1` tokens) and `tokens` greedy tokens of the decoder's own,
/// both after `prompt`, with the forward passes shared while its greedy
/// choice is the forced token.
pub fn forced_and_greedy<D: Decoder>(
    dec: &mut D,
    prompt: &[u32],
    forced: &[u32],
    steps: usize,
    tokens: usize,
) -> Result<Paths, ModelError> {
    if forced.len() + 1 < steps {
        return Err(ModelError::Usage(format!(
            "{steps} forced steps need {} tokens, {} given",
            steps - 1,
            forced.len()
        )));
    }
    let (mut cache, mut logits) = prefill(dec, prompt)?;
    let mut out = Paths {
        passes: prompt.len(),
        ..Paths::default()
    };
    // The greedy path once it has left the forced one: its cache and logits.
    let mut own: Option<(D::Cache, Vec<f64>)> = None;
    for i in 0..steps.max(tokens) {
        if i < steps {
            out.forced.push(logits.clone());
        }
        if i < tokens {
            let more = i + 1 < tokens;
            match &mut own {
                None => {
                    let t = argmax(&logits);
                    out.greedy.push(t);
                    if more && forced.get(i) != Some(&t) {
                        let mut c = cache.clone();
                        let l = dec.forward(t, &mut c)?;
                        out.passes += 1;
                        own = Some((c, l));
                    }
                }
                Some((c, l)) => {
                    let t = argmax(l);
                    out.greedy.push(t);
                    if more {
                        *l = dec.forward(t, c)?;
                        out.passes += 1;
                    }
                }
            }
        }
        let forced_needed = i + 1 < steps || (own.is_none() && i + 1 < tokens);
        if forced_needed {
            let Some(&t) = forced.get(i) else { break };
            logits = dec.forward(t, &mut cache)?;
            out.passes += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy decoder over a vocabulary of 5: the next token is
    /// `(sum of the tokens so far + shift) mod 5`, its logit 1, the others 0.
    struct Toy {
        shift: u32,
        passes: usize,
    }

    impl Decoder for Toy {
        type Cache = Vec<u32>;

        fn new_cache(&self) -> Vec<u32> {
            Vec::new()
        }

        fn forward(&mut self, token: u32, cache: &mut Vec<u32>) -> Result<Vec<f64>, ModelError> {
            self.passes += 1;
            cache.push(token);
            let next = (cache.iter().sum::<u32>() + self.shift) % 5;
            Ok((0..5).map(|t| if t == next { 1.0 } else { 0.0 }).collect())
        }
    }

    #[test]
    fn argmax_takes_the_first_of_equals_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f64::NAN, 0.5, f64::NAN, 2.0]), 3);
        assert_eq!(argmax(&[]), 0);
    }

    #[test]
    fn forced_and_greedy_agree_with_separate_runs() {
        let prompt = [1, 2];
        for shift in [0, 1] {
            let mut a = Toy { shift, passes: 0 };
            // The forced tokens: toy 0's greedy decoding.
            let want = greedy(
                &mut Toy {
                    shift: 0,
                    passes: 0,
                },
                &prompt,
                8,
            )
            .unwrap();
            let mut fresh = Toy { shift, passes: 0 };
            let own = greedy(&mut fresh, &prompt, 8).unwrap();
            let p = forced_and_greedy(&mut a, &prompt, &want.tokens, 5, 8).unwrap();
            assert_eq!(p.greedy, own.tokens, "shift {shift}");
            assert_eq!(p.forced.len(), 5);
            for (i, l) in p.forced.iter().enumerate() {
                let l2 = logits_after(&mut fresh, &prompt, &want.tokens[..i]).unwrap();
                assert_eq!(l, &l2, "shift {shift} step {i}");
            }
            assert_eq!(p.passes, a.passes);
            if shift == 0 {
                // Same tokens: one path, prompt + 7 passes.
                assert_eq!(p.passes, 2 + 7);
                assert_eq!(p.forced, want.logits[..5].to_vec());
            } else {
                // Forked at once: 4 forced passes, 7 of its own.
                assert_eq!(p.passes, 2 + 4 + 7);
            }
        }
        assert!(
            forced_and_greedy(
                &mut Toy {
                    shift: 0,
                    passes: 0
                },
                &[1],
                &[2],
                4,
                1
            )
            .is_err()
        );
        assert!(
            greedy(
                &mut Toy {
                    shift: 0,
                    passes: 0
                },
                &[],
                3
            )
            .is_err()
        );
    }
}
