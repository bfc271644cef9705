//! The byte-level BPE tokenizer of a GGUF file (`tokenizer.ggml.model =
//! "gpt2"`), built with the `tokenizers` crate from the file's vocabulary
//! (`tokenizer.ggml.tokens`), merges (`tokenizer.ggml.merges`) and
//! pre-tokenizer name (`tokenizer.ggml.pre`); control tokens
//! (`tokenizer.ggml.token_type` 3) are matched whole in the text, as
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

use crate::error::LlamaError;
use crate::file::get_uint;

/// GGUF's token type of control tokens (`LLAMA_TOKEN_TYPE_CONTROL`).
const TOKEN_TYPE_CONTROL: i32 = 3;
/// GGUF's token type of user-defined tokens (`LLAMA_TOKEN_TYPE_USER_DEFINED`).
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The split of Llama 3's tokenizer (`tokenizer.ggml.pre = "llama-bpe"`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A model's tokenizer and its special tokens.
#[derive(Debug)]
pub struct Tokenizer {
    inner: HfTokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    vocab: usize,
}

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
        let model = g.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(LlamaError::Tokenizer(format!(
                "tokenizer model `{}` (tokenizer.ggml.model) is not supported; \
                 this runtime reads byte-level BPE (`gpt2`)",
                model.escape_debug()
            )));
        }
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
            .zip(&types)
            .filter(|(_, t)| matches!(**t, TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED))
            .map(|(s, t)| AddedToken::from(*s, *t == TOKEN_TYPE_CONTROL))
            .collect();
        inner.add_special_tokens(&special);
        let add_bos = match g.get("tokenizer.ggml.add_bos_token") {
            Some(_) => g.get_bool("tokenizer.ggml.add_bos_token")?,
            None => true,
        };
        Ok(Tokenizer {
            inner,
            bos: token_id(g, "tokenizer.ggml.bos_token_id", vocab)?,
            eos: token_id(g, "tokenizer.ggml.eos_token_id", vocab)?,
            add_bos,
            vocab,
        })
    }

    /// The token ids of `text`, with BOS first when the file asks for it
    /// (`tokenizer.ggml.add_bos_token`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlamaError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| LlamaError::Tokenizer(format!("encoding the prompt: {e}")))?;
        let mut ids = Vec::with_capacity(enc.get_ids().len() + 1);
        if self.add_bos
            && let Some(bos) = self.bos
        {
            ids.push(bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// The text of `ids` (special tokens included; bytes that are not
    /// UTF-8 replaced by U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String, LlamaError> {
        self.check_ids(ids)?;
        self.inner
            .decode(ids, false)
            .map_err(|e| LlamaError::Tokenizer(format!("decoding: {e}")))
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
/// UTF-8 (a character may span several byte-level tokens). Byte-level
/// tokens decode independently, so the text of a run of ids is the
/// concatenation of the texts of its parts once each part ends on a
/// character boundary.
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
        let text = tok.decode(&self.pending)?;
        if text.ends_with('\u{FFFD}') && self.pending.len() < MAX_PENDING {
            return Ok(String::new());
        }
        self.pending.clear();
        Ok(text)
    }

    /// Whatever is left (a partial character as U+FFFD).
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String, LlamaError> {
        let text = tok.decode(&self.pending)?;
        self.pending.clear();
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    fn key(out: &mut Vec<u8>, k: &str, ty: u32) {
        string(out, k);
        out.extend(ty.to_le_bytes());
    }

    fn strings(out: &mut Vec<u8>, k: &str, v: &[String]) {
        key(out, k, 9);
        out.extend(8u32.to_le_bytes());
        out.extend((v.len() as u64).to_le_bytes());
        v.iter().for_each(|s| string(out, s));
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
        let mut f = Vec::new();
        f.extend(b"GGUF");
        f.extend(3u32.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        f.extend(6u64.to_le_bytes());
        key(&mut f, "tokenizer.ggml.model", 8);
        string(&mut f, "gpt2");
        key(&mut f, "tokenizer.ggml.pre", 8);
        string(&mut f, pre);
        strings(&mut f, "tokenizer.ggml.tokens", &tokens);
        strings(&mut f, "tokenizer.ggml.merges", &merges);
        key(&mut f, "tokenizer.ggml.token_type", 9);
        f.extend(5u32.to_le_bytes());
        f.extend((n as u64).to_le_bytes());
        types.iter().for_each(|t| f.extend(t.to_le_bytes()));
        key(&mut f, "tokenizer.ggml.add_bos_token", 7);
        f.push(0);
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
