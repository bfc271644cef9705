//! The decode loop: the prompt fed one token at a time through the decode
//! path, then tokens sampled and fed back, text streamed as it completes.

use std::time::{Duration, Instant};

use fused_core::backend::Backend;

use crate::attention::KvCache;
use crate::error::LlamaError;
use crate::model::Model;
use crate::profile::Phase;
use crate::sampling::Sampler;
use crate::tokenizer::TextStream;

/// What one generation produced, and how fast.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generation {
    /// The prompt's token ids.
    pub prompt_ids: Vec<u32>,
    /// The generated token ids (an end-of-sequence token that stopped the
    /// run is not included).
    pub ids: Vec<u32>,
    /// The generated text.
    pub text: String,
    /// Time spent on the prompt (its forward passes).
    pub prompt_time: Duration,
    /// Forward passes of generated tokens (every generated token but the
    /// last is fed back).
    pub decode_steps: usize,
    /// Time spent on those passes and on sampling every generated token.
    pub decode_time: Duration,
}

impl Generation {
    /// Prompt tokens a second.
    pub fn prompt_tok_s(&self) -> f64 {
        rate(self.prompt_ids.len(), self.prompt_time)
    }

    /// Decode steps a second.
    pub fn decode_tok_s(&self) -> f64 {
        rate(self.decode_steps, self.decode_time)
    }
}

fn rate(n: usize, t: Duration) -> f64 {
    let s = t.as_secs_f64();
    if n == 0 || s <= 0.0 {
        0.0
    } else {
        n as f64 / s
    }
}

/// Runs `prompt` through `model` from an empty cache, then generates up to
/// `n` tokens with `sampler` (stopping at the end-of-sequence token when
/// `stop_at_eos`), passing each piece of text to `on_text` as soon as it
/// is whole UTF-8.
///
/// # Errors
/// An empty prompt ([`LlamaError::Usage`]); a prompt and `n` that do not
/// fit the model's context ([`LlamaError::ContextOverflow`], before
/// anything runs); any backend error.
pub fn generate<B: Backend>(
    model: &mut Model<'_, B>,
    prompt: &[u32],
    n: usize,
    sampler: &mut Sampler,
    stop_at_eos: bool,
    mut on_text: impl FnMut(&str),
) -> Result<Generation, LlamaError> {
    let Some(&last) = prompt.last() else {
        return Err(LlamaError::Usage(
            "the prompt is empty: give some text (or a model that adds BOS)".into(),
        ));
    };
    // Positions needed: the prompt, then every generated token but the last.
    let needed = prompt.len() + n.saturating_sub(1);
    if needed > model.max_context() {
        return Err(LlamaError::ContextOverflow {
            pos: needed - 1,
            max: model.max_context(),
        });
    }
    let mut cache = model.new_cache();
    let greedy = sampler.is_greedy();
    // One pass: the next token, from the logits read back and sampled, or,
    // greedy, from the model's own argmax (on the whole-token path only the
    // token comes back from the backend).
    let mut pass = |model: &mut Model<'_, B>, t: u32, cache: &mut KvCache| {
        if greedy {
            return model.forward_greedy(t, cache);
        }
        model.forward(t, cache)?;
        let s = Instant::now();
        let id = sampler.sample(model.logits());
        model.add_time(Phase::Sample, s);
        Ok::<u32, LlamaError>(id)
    };
    let t0 = Instant::now();
    for &t in &prompt[..prompt.len() - 1] {
        model.feed(t, &mut cache)?;
    }
    let mut next = pass(model, last, &mut cache)?;
    let prompt_time = t0.elapsed();
    let eos = model.tokenizer().eos();
    let mut ids = Vec::with_capacity(n);
    let mut text = String::new();
    let mut decode_steps = 0;
    let t1 = Instant::now();
    let mut stream = TextStream::new();
    for i in 0..n {
        let id = next;
        if stop_at_eos && Some(id) == eos {
            break;
        }
        ids.push(id);
        let piece = stream.push(model.tokenizer(), id)?;
        on_text(&piece);
        text.push_str(&piece);
        if i + 1 == n {
            break;
        }
        next = pass(model, id, &mut cache)?;
        decode_steps += 1;
    }
    let rest = stream.finish(model.tokenizer())?;
    on_text(&rest);
    text.push_str(&rest);
    Ok(Generation {
        prompt_ids: prompt.to_vec(),
        ids,
        text,
        prompt_time,
        decode_steps,
        decode_time: t1.elapsed(),
    })
}
