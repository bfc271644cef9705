//! The tokenizer of a GGUF file, of either kind Llama-architecture files
//! carry (`tokenizer.ggml.model`):
//!
//! - `gpt2`: byte-level BPE with a merge list (SmolLM2, Llama 3), in
//!   `bpe`, through the `tokenizers` crate;
//! - `llama`: SentencePiece pieces with scores and byte fallback (Llama 2,
//!   Mistral, TinyLlama), in `spm`.
//!
//! Both match control tokens (`<|im_start|>`, `<s>`) whole in the text, put
//! BOS first when the file asks for it (`tokenizer.ggml.add_bos_token`),
//! and check every id against the vocabulary (the rows of the embedding
//! table).

mod bpe;
mod spm;

use fused_gguf::Gguf;

use crate::error::LlamaError;
use crate::file::get_uint;

/// GGUF's token types (`tokenizer.ggml.token_type`, llama.cpp's
/// `LLAMA_TOKEN_TYPE_*`).
pub(crate) struct TokenType;

impl TokenType {
    pub(crate) const NORMAL: i32 = 1;
    pub(crate) const UNKNOWN: i32 = 2;
    pub(crate) const CONTROL: i32 = 3;
    pub(crate) const USER_DEFINED: i32 = 4;
    pub(crate) const UNUSED: i32 = 5;
    pub(crate) const BYTE: i32 = 6;
}

/// The two vocabularies.
#[derive(Debug)]
enum Model {
    Bpe(Box<bpe::Bpe>),
    Spm(spm::Spm),
}

/// A model's tokenizer and its special tokens.
#[derive(Debug)]
pub struct Tokenizer {
    model: Model,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    vocab: usize,
}

/// A token id from metadata `key`, if present and inside the vocabulary.
fn token_id(g: &Gguf<'_>, key: &str, vocab: usize) -> Result<Option<u32>, LlamaError> {
    if g.get(key).is_none() {
        return Ok(None);
    }
    let id = get_uint(g, key)?;
    if id >= vocab as u64 {
        return Err(LlamaError::Tokenizer(format!(
            "{key} = {id} is outside the vocabulary of {vocab} tokens"
        )));
    }
    Ok(Some(id as u32))
}

impl Tokenizer {
    /// The tokenizer of a GGUF file, checked against a vocabulary of
    /// `vocab` tokens (the rows of the embedding table).
    pub fn from_gguf(g: &Gguf<'_>, vocab: usize) -> Result<Tokenizer, LlamaError> {
        let kind = g.get_str("tokenizer.ggml.model")?;
        let tokens: Vec<&str> = g.get_array("tokenizer.ggml.tokens")?.strings()?.collect();
        if tokens.len() != vocab {
            return Err(LlamaError::Tokenizer(format!(
                "{} tokens in tokenizer.ggml.tokens, {vocab} rows in the embedding table",
                tokens.len()
            )));
        }
        let types: Vec<i32> = match g.get("tokenizer.ggml.token_type") {
            Some(_) => g.get_array("tokenizer.ggml.token_type")?.i32s()?.collect(),
            None => Vec::new(),
        };
        let (model, default_bos, default_eos) = match kind {
            "gpt2" => (
                Model::Bpe(Box::new(bpe::Bpe::from_gguf(g, &tokens, &types)?)),
                None,
                None,
            ),
            // llama.cpp's defaults for SentencePiece files: <s> 1, </s> 2.
            "llama" => (
                Model::Spm(spm::Spm::from_gguf(g, &tokens, &types)?),
                Some(1).filter(|&id| id < vocab as u32),
                Some(2).filter(|&id| id < vocab as u32),
            ),
            other => {
                return Err(LlamaError::Tokenizer(format!(
                    "tokenizer model `{}` (tokenizer.ggml.model) is not supported; \
                     this runtime reads byte-level BPE (`gpt2`) and SentencePiece (`llama`)",
                    other.escape_debug()
                )));
            }
        };
        let add_bos = match g.get("tokenizer.ggml.add_bos_token") {
            Some(_) => g.get_bool("tokenizer.ggml.add_bos_token")?,
            None => true,
        };
        Ok(Tokenizer {
            model,
            bos: token_id(g, "tokenizer.ggml.bos_token_id", vocab)?.or(default_bos),
            eos: token_id(g, "tokenizer.ggml.eos_token_id", vocab)?.or(default_eos),
            add_bos,
            vocab,
        })
    }

    /// The token ids of `text`, with BOS first when the file asks for it
    /// (`tokenizer.ggml.add_bos_token`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlamaError> {
        let body = match &self.model {
            Model::Bpe(b) => b.encode(text)?,
            Model::Spm(s) => s.encode(text)?,
        };
        let mut ids = Vec::with_capacity(body.len() + 1);
        if self.add_bos
            && let Some(bos) = self.bos
        {
            ids.push(bos);
        }
        ids.extend_from_slice(&body);
        Ok(ids)
    }

    /// The text of `ids` (special tokens included; bytes that are not
    /// UTF-8 replaced by U+FFFD). For a SentencePiece vocabulary the space
    /// the encoder puts in front of the text and after each control or
    /// user-defined token is dropped, so that the text of
    /// [`encode`](Self::encode)'s ids past BOS is the text encoded.
    pub fn decode(&self, ids: &[u32]) -> Result<String, LlamaError> {
        self.text(ids, true)
    }

    /// The text of `ids`; `drop_prefix` false for ids that continue a
    /// sequence as it is generated (every space kept, as llama.cpp prints
    /// them).
    fn text(&self, ids: &[u32], drop_prefix: bool) -> Result<String, LlamaError> {
        self.check_ids(ids)?;
        match &self.model {
            Model::Bpe(b) => b.decode(ids),
            Model::Spm(s) => {
                let mut out = Vec::new();
                let drop_prefix = drop_prefix && s.adds_space_prefix();
                let mut fragment_start = true;
                for &id in ids {
                    let from = out.len();
                    s.piece(id, &mut out);
                    if s.starts_fragment(id) {
                        fragment_start = true;
                    } else if fragment_start {
                        if drop_prefix && out.get(from) == Some(&b' ') {
                            out.remove(from);
                        }
                        fragment_start = false;
                    }
                }
                Ok(String::from_utf8_lossy(&out).into_owned())
            }
        }
    }

    /// The end-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The beginning-of-sequence token, if the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// Tokens in the vocabulary.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    fn check_ids(&self, ids: &[u32]) -> Result<(), LlamaError> {
        match ids.iter().find(|&&id| id as usize >= self.vocab) {
            Some(id) => Err(LlamaError::Tokenizer(format!(
                "token id {id} is outside the vocabulary of {} tokens",
                self.vocab
            ))),
            None => Ok(()),
        }
    }
}

/// The most tokens held back waiting for a character to complete (a UTF-8
/// character has at most 4 bytes, so at most 4 byte tokens).
const MAX_PENDING: usize = 4;

/// Incremental decoding of generated ids into text as it becomes whole
/// UTF-8 (a character may span several byte tokens). Tokens decode
/// independently, so the text of a run of ids is the concatenation of the
/// texts of its parts once each part ends on a character boundary; the
/// ids continue a prompt, so nothing is dropped at their start.
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    /// Ids whose text ends inside a character.
    pending: Vec<u32>,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// Adds `id`; returns the text it completes (empty while a character
    /// is still partial).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, LlamaError> {
        self.pending.push(id);
        let text = tok.text(&self.pending, false)?;
        if text.ends_with('\u{FFFD}') && self.pending.len() < MAX_PENDING {
            return Ok(String::new());
        }
        self.pending.clear();
        Ok(text)
    }

    /// Whatever is left (a partial character as U+FFFD).
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String, LlamaError> {
        let text = tok.text(&self.pending, false)?;
        self.pending.clear();
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf_meta::{Meta, header};

    /// GPT-2's byte → printable character table.
    fn byte_chars() -> Vec<char> {
        let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        let mut next = 256;
        (0u32..256)
            .map(|b| {
                if printable(b) {
                    char::from_u32(b).unwrap()
                } else {
                    next += 1;
                    char::from_u32(next - 1).unwrap()
                }
            })
            .collect()
    }

    /// A GGUF file holding only a byte-level tokenizer: the 256 byte
    /// tokens, `<|endoftext|>` (control), and a few merges.
    fn tiny_gguf(pre: &str) -> (Vec<u8>, usize) {
        let bc = byte_chars();
        let mut tokens: Vec<String> = bc.iter().map(|c| c.to_string()).collect();
        tokens.push("<|endoftext|>".into());
        let sp = bc[b' ' as usize];
        let merges: Vec<String> = vec![
            "h e".into(),
            "l l".into(),
            "he ll".into(),
            "hell o".into(),
            format!("{sp} w"),
            "o r".into(),
        ];
        for m in &merges {
            tokens.push(m.replace(' ', ""));
        }
        let n = tokens.len();
        let mut types = vec![1i32; n];
        types[256] = 3;
        let f = header(
            0,
            &[
                ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
                ("tokenizer.ggml.pre", Meta::Str(pre.into())),
                ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
                ("tokenizer.ggml.merges", Meta::Strs(merges)),
                ("tokenizer.ggml.token_type", Meta::I32s(types)),
                ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
            ],
        );
        (f, n)
    }

    #[test]
    fn round_trips_ascii_and_non_ascii() {
        let (file, n) = tiny_gguf("smollm");
        let g = Gguf::parse(&file).unwrap();
        let tok = Tokenizer::from_gguf(&g, n).unwrap();
        for text in [
            "hello world",
            "  two  spaces, tabs\tand\nnewlines\r\n",
            "Zürich, Ελλάδα, 東京, 🙂 and ﬁ",
            "digits 12345 and 3.14",
            "",
        ] {
            let ids = tok.encode(text).unwrap();
            assert_eq!(tok.decode(&ids).unwrap(), text, "ids {ids:?}");
            // Streaming decodes to the same text, one id at a time.
            let mut s = TextStream::new();
            let mut out = String::new();
            for &id in &ids {
                out += &s.push(&tok, id).unwrap();
            }
            out += &s.finish(&tok).unwrap();
            assert_eq!(out, text);
        }
    }

    #[test]
    fn merges_apply_by_rank_and_control_tokens_match_whole() {
        let (file, n) = tiny_gguf("smollm");
        let g = Gguf::parse(&file).unwrap();
        let tok = Tokenizer::from_gguf(&g, n).unwrap();
        // "hello" merges to one token, " w" + "or" + "l" + "d".
        let ids = tok.encode("hello world").unwrap();
        assert_eq!(ids.len(), 5, "{ids:?}");
        assert_eq!(ids[0], 257 + 3);
        // Digits are split one by one (`smollm`'s pre-tokenizer).
        assert_eq!(tok.encode("123").unwrap().len(), 3);
        // The control token is one id, not its characters.
        assert_eq!(tok.encode("<|endoftext|>").unwrap(), vec![256]);
        assert!(tok.decode(&[n as u32]).is_err());
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let (file, n) = tiny_gguf("made-up");
        let g = Gguf::parse(&file).unwrap();
        let e = Tokenizer::from_gguf(&g, n).unwrap_err();
        assert!(e.to_string().contains("made-up"), "{e}");
        let (file, n) = tiny_gguf("smollm");
        let g = Gguf::parse(&file).unwrap();
        let e = Tokenizer::from_gguf(&g, n + 1).unwrap_err();
        assert!(matches!(e, LlamaError::Tokenizer(_)), "{e}");
    }
}
