//! The byte-level BPE tokenizer of GGUF files with `tokenizer.ggml.model =
//! "gpt2"` (SmolLM2, Llama 3), built with the `tokenizers` crate from the
//! file's vocabulary (`tokenizer.ggml.tokens`), merges
//! (`tokenizer.ggml.merges`) and pre-tokenizer name (`tokenizer.ggml.pre`);
//! control and user-defined tokens are matched whole in the text, as
//! `<|im_start|>` in a chat prompt.

use fused_gguf::Gguf;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer as HfTokenizer};

use super::TokenType;
use crate::error::LlamaError;

/// The split of Llama 3's tokenizer (`tokenizer.ggml.pre = "llama-bpe"`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How text is split before BPE, by `tokenizer.ggml.pre`.
fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper, LlamaError> {
    let byte_level = |regex: bool| ByteLevel::new(false, true, regex);
    Ok(match pre {
        // GPT-2's split.
        "default" | "gpt2" | "gpt-2" => byte_level(true).into(),
        // Every digit alone, then GPT-2's split (llama.cpp's `\p{N}` rule).
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
            Sequence::new(vec![Digits::new(true).into(), byte_level(true).into()]).into()
        }
        "llama-bpe" | "llama3" => {
            let split = Split::new(
                SplitPattern::Regex(LLAMA3_SPLIT.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| LlamaError::Tokenizer(format!("the Llama 3 split: {e}")))?;
            Sequence::new(vec![split.into(), byte_level(false).into()]).into()
        }
        other => {
            return Err(LlamaError::Tokenizer(format!(
                "pre-tokenizer `{}` (tokenizer.ggml.pre) is not supported \
                 (default, gpt2, smollm, starcoder, llama-bpe, ...)",
                other.escape_debug()
            )));
        }
    })
}

/// A byte-level BPE vocabulary.
#[derive(Debug)]
pub(super) struct Bpe {
    inner: HfTokenizer,
}

impl Bpe {
    /// The tokenizer of `g` (`tokens` and `types` already read from it,
    /// `types` empty when the file has none).
    pub(super) fn from_gguf(
        g: &Gguf<'_>,
        tokens: &[&str],
        types: &[i32],
    ) -> Result<Bpe, LlamaError> {
        let merges = g
            .get_array("tokenizer.ggml.merges")?
            .strings()?
            .enumerate()
            .map(|(i, m)| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| {
                        LlamaError::Tokenizer(format!(
                            "merge {i} `{}` is not two tokens separated by a space",
                            m.escape_debug()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut map = tokenizers::models::bpe::Vocab::default();
        for (id, t) in tokens.iter().enumerate() {
            // A repeated token keeps its first id.
            map.entry((*t).to_string()).or_insert(id as u32);
        }
        let bpe = BPE::builder()
            .vocab_and_merges(map, merges)
            .build()
            .map_err(|e| LlamaError::Tokenizer(format!("building the BPE model: {e}")))?;
        let mut inner = HfTokenizer::new(bpe);
        let pre = match g.get("tokenizer.ggml.pre") {
            Some(_) => g.get_str("tokenizer.ggml.pre")?,
            None => "default",
        };
        inner.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(types)
            .filter(|(_, t)| matches!(**t, TokenType::CONTROL | TokenType::USER_DEFINED))
            .map(|(s, t)| AddedToken::from(*s, *t == TokenType::CONTROL))
            .collect();
        inner.add_special_tokens(&special);
        Ok(Bpe { inner })
    }

    /// The ids of `text` (no BOS).
    pub(super) fn encode(&self, text: &str) -> Result<Vec<u32>, LlamaError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| LlamaError::Tokenizer(format!("encoding the prompt: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids` (inside the vocabulary), bytes that are not UTF-8
    /// replaced by U+FFFD.
    pub(super) fn decode(&self, ids: &[u32]) -> Result<String, LlamaError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| LlamaError::Tokenizer(format!("decoding: {e}")))
    }
}
