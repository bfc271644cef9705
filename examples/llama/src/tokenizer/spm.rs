//! The SentencePiece tokenizer of GGUF files with `tokenizer.ggml.model =
//! "llama"` (Llama 1 and 2, Mistral, TinyLlama, Code Llama): pieces with
//! scores, no merge list, spaces written as `▁` (U+2581), and bytes that
//! no piece covers written as byte tokens `<0xXX>`.
//!
//! Encoding follows llama.cpp, which defines what these files mean in
//! practice:
//! - Control, user-defined and unknown tokens are cut out of the text
//!   first, the longest token text first, each at every occurrence; what
//!   is left are the text fragments.
//! - A fragment at the start of the text or right after such a token gets
//!   one space in front (`tokenizer.ggml.add_space_prefix`, default on),
//!   then every space becomes `▁`.
//! - A fragment starts as one symbol a character. Of all neighbouring pairs
//!   whose joined text is a piece, the pair of the highest-scoring piece
//!   joins, the leftmost on ties, until no pair is a piece.
//! - A symbol that is a piece is its id; any other (a character the
//!   vocabulary lacks) is its UTF-8 bytes as byte tokens.
//!
//! Decoding writes `▁` as a space, a byte token as its byte, a control
//! token as its text and the unknown token as `▅` (U+2585).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use fused_gguf::Gguf;

use super::{TokenType, token_id};
use crate::error::LlamaError;

/// How a space is written inside pieces.
const SPACE: char = '\u{2581}';
/// What the unknown token decodes to (llama.cpp's choice).
const UNKNOWN_TEXT: &str = "\u{2585}";

/// What a token is, from `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Text, `▁` for spaces.
    Normal,
    /// The unknown token.
    Unknown,
    /// A control token (BOS, EOS, chat markers): matched whole in text.
    Control,
    /// A user-defined token: matched whole in text, decoded as text.
    UserDefined,
    /// A slot the model never emits: decodes to nothing.
    Unused,
    /// One byte, written `<0xXX>`.
    Byte(u8),
}

/// A SentencePiece vocabulary.
#[derive(Debug)]
pub(super) struct Spm {
    texts: Vec<String>,
    scores: Vec<f32>,
    kinds: Vec<Kind>,
    /// Token text → id; a repeated text maps to its last id, as in llama.cpp.
    ids: HashMap<String, u32>,
    /// The tokens cut out of text before it is split: control, user-defined
    /// and unknown tokens, the longest text first.
    specials: Vec<u32>,
    /// The id of `<0xXX>` for each byte, where the vocabulary has one.
    bytes: Box<[Option<u32>; 256]>,
    unk: Option<u32>,
    add_space_prefix: bool,
}

/// A piece of the text: plain text, or a token cut out of it whole.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// The byte of a byte token's text `<0xXX>`.
fn byte_of(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl Spm {
    /// The vocabulary of `g` (`tokens` and `types` already read from it,
    /// `types` empty when the file has none).
    pub(super) fn from_gguf(
        g: &Gguf<'_>,
        tokens: &[&str],
        types: &[i32],
    ) -> Result<Spm, LlamaError> {
        let vocab = tokens.len();
        let scores: Vec<f32> = match g.get("tokenizer.ggml.scores") {
            Some(_) => g.get_array("tokenizer.ggml.scores")?.f32s()?.collect(),
            None => vec![0.0; vocab],
        };
        if scores.len() != vocab {
            return Err(LlamaError::Tokenizer(format!(
                "{} scores in tokenizer.ggml.scores for {vocab} tokens",
                scores.len()
            )));
        }
        if !types.is_empty() && types.len() != vocab {
            return Err(LlamaError::Tokenizer(format!(
                "{} types in tokenizer.ggml.token_type for {vocab} tokens",
                types.len()
            )));
        }
        let kinds = tokens
            .iter()
            .enumerate()
            .map(|(id, text)| {
                let ty = types.get(id).copied().unwrap_or(TokenType::NORMAL);
                Ok(match ty {
                    TokenType::UNKNOWN => Kind::Unknown,
                    TokenType::CONTROL => Kind::Control,
                    TokenType::USER_DEFINED => Kind::UserDefined,
                    TokenType::UNUSED => Kind::Unused,
                    TokenType::BYTE => Kind::Byte(byte_of(text).ok_or_else(|| {
                        LlamaError::Tokenizer(format!(
                            "token {id} `{}` is typed as a byte but is not `<0xXX>`",
                            text.escape_debug()
                        ))
                    })?),
                    _ => Kind::Normal,
                })
            })
            .collect::<Result<Vec<Kind>, LlamaError>>()?;
        let ids: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| ((*t).to_string(), id as u32))
            .collect();
        let mut specials: Vec<u32> = (0..vocab as u32)
            .filter(|&id| {
                matches!(
                    kinds[id as usize],
                    Kind::Control | Kind::UserDefined | Kind::Unknown
                ) && !tokens[id as usize].is_empty()
            })
            .collect();
        specials.sort_by_key(|&id| std::cmp::Reverse(tokens[id as usize].len()));
        let mut bytes = Box::new([None; 256]);
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = ids.get(&format!("<0x{b:02X}>")).copied();
        }
        let unk = match token_id(g, "tokenizer.ggml.unknown_token_id", vocab)? {
            Some(id) => Some(id),
            None => kinds
                .iter()
                .position(|k| *k == Kind::Unknown)
                .map(|i| i as u32),
        };
        let add_space_prefix = match g.get("tokenizer.ggml.add_space_prefix") {
            Some(_) => g.get_bool("tokenizer.ggml.add_space_prefix")?,
            None => true,
        };
        Ok(Spm {
            texts: tokens.iter().map(|t| (*t).to_string()).collect(),
            scores,
            kinds,
            ids,
            specials,
            bytes,
            unk,
            add_space_prefix,
        })
    }

    /// Whether decoding drops the space the encoder put at the start.
    pub(super) fn adds_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// Whether the text after `id` starts a fragment (gets the space
    /// prefix): after a control or user-defined token.
    pub(super) fn starts_fragment(&self, id: u32) -> bool {
        matches!(
            self.kinds.get(id as usize),
            Some(Kind::Control | Kind::UserDefined)
        )
    }

    /// The ids of `text` (no BOS).
    pub(super) fn encode(&self, text: &str) -> Result<Vec<u32>, LlamaError> {
        let mut out = Vec::new();
        let mut after_special = true;
        for fragment in self.fragments(text) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => {
                    let mut s = String::with_capacity(t.len() + 3);
                    if self.add_space_prefix && after_special {
                        s.push(SPACE);
                    }
                    s.extend(t.chars().map(|c| if c == ' ' { SPACE } else { c }));
                    self.encode_fragment(&s, &mut out)?;
                    after_special = false;
                }
            }
        }
        Ok(out)
    }

    /// `text` cut at every occurrence of a special token's text, the
    /// longest texts first; empty text fragments are left out.
    fn fragments<'t>(&self, text: &'t str) -> Vec<Fragment<'t>> {
        let mut frags = vec![Fragment::Text(text)];
        for &id in &self.specials {
            let pat = self.texts[id as usize].as_str();
            if !text.contains(pat) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(t) = f else {
                    next.push(f);
                    continue;
                };
                let mut rest = t;
                while let Some(at) = rest.find(pat) {
                    next.push(Fragment::Text(&rest[..at]));
                    next.push(Fragment::Token(id));
                    rest = &rest[at + pat.len()..];
                }
                next.push(Fragment::Text(rest));
            }
            frags = next;
        }
        frags.retain(|f| *f != Fragment::Text(""));
        frags
    }

    /// Appends the ids of one escaped text fragment: symbols joined by
    /// score, then each symbol as its piece or its bytes.
    fn encode_fragment(&self, s: &str, out: &mut Vec<u32>) -> Result<(), LlamaError> {
        let mut syms: Vec<Symbol> = s
            .char_indices()
            .map(|(at, c)| Symbol {
                at,
                len: c.len_utf8(),
            })
            .collect();
        let n = syms.len();
        // prev / next links of the symbols still in the sequence (`n` and
        // usize::MAX: none).
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut heap = BinaryHeap::new();
        let bigram = |syms: &[Symbol], l: usize, r: usize| -> Option<Bigram> {
            let (a, b) = (syms[l], syms[r]);
            let text = &s[a.at..b.at + b.len];
            let id = *self.ids.get(text)?;
            Some(Bigram {
                score: self.scores[id as usize],
                left: l,
                right: r,
                len: text.len(),
            })
        };
        for i in 1..n {
            heap.extend(bigram(&syms, i - 1, i));
        }
        while let Some(b) = heap.pop() {
            let (l, r) = (syms[b.left], syms[b.right]);
            // Stale: one side was joined into another symbol since.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            syms[b.left].len += r.len;
            syms[b.right].len = 0;
            let after = next[b.right];
            next[b.left] = after;
            if after < n {
                prev[after] = b.left;
            }
            let before = prev[b.left];
            if before < n {
                heap.extend(bigram(&syms, before, b.left));
            }
            if after < n {
                heap.extend(bigram(&syms, b.left, after));
            }
        }
        let mut i = 0;
        while i < n {
            let sym = syms[i];
            let text = &s[sym.at..sym.at + sym.len];
            match self.ids.get(text) {
                Some(&id) => out.push(id),
                None => {
                    for &byte in text.as_bytes() {
                        out.push(self.byte_token(byte)?);
                    }
                }
            }
            i = next[i];
        }
        Ok(())
    }

    /// The token of one byte no piece covers: `<0xXX>`, else the byte as a
    /// one-character piece, else the unknown token.
    fn byte_token(&self, byte: u8) -> Result<u32, LlamaError> {
        if let Some(id) = self.bytes[byte as usize] {
            return Ok(id);
        }
        if byte.is_ascii()
            && let Some(&id) = self.ids.get(&(byte as char).to_string())
        {
            return Ok(id);
        }
        self.unk.ok_or_else(|| {
            LlamaError::Tokenizer(format!(
                "byte {byte:#04x} has no token (<0x{byte:02X}>) and the vocabulary has no \
                 unknown token"
            ))
        })
    }

    /// Appends the bytes `id` decodes to (`id` inside the vocabulary).
    pub(super) fn piece(&self, id: u32, out: &mut Vec<u8>) {
        let text = &self.texts[id as usize];
        match self.kinds[id as usize] {
            Kind::Normal | Kind::UserDefined => {
                for c in text.chars() {
                    let c = if c == SPACE { ' ' } else { c };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
            }
            Kind::Control => out.extend_from_slice(text.as_bytes()),
            Kind::Unknown => out.extend_from_slice(UNKNOWN_TEXT.as_bytes()),
            Kind::Unused => {}
            Kind::Byte(b) => out.push(b),
        }
    }
}

/// A symbol of a fragment being joined: a byte range of the escaped text
/// (`len` 0 once joined into its left neighbour).
#[derive(Clone, Copy, Debug)]
struct Symbol {
    at: usize,
    len: usize,
}

/// Two neighbouring symbols whose joined text is a piece.
#[derive(Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Bytes of the joined text, to tell a stale entry.
    len: usize,
}

impl Ord for Bigram {
    /// The higher score first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{Model, TextStream, TokenType, Tokenizer};
    use super::*;
    use crate::gguf_meta::{Meta, header};

    /// A SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte
    /// tokens, then `pieces` with their scores.
    fn vocab_file(pieces: &[(&str, f32)], extra: Vec<(&str, Meta)>) -> (Vec<u8>, usize) {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![TokenType::UNKNOWN, TokenType::CONTROL, TokenType::CONTROL];
        let mut scores = vec![0.0f32; 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(TokenType::BYTE);
            scores.push(0.0);
        }
        for (p, s) in pieces {
            tokens.push(p.replace(' ', "\u{2581}"));
            types.push(TokenType::NORMAL);
            scores.push(*s);
        }
        let n = tokens.len();
        let mut kv = vec![
            ("tokenizer.ggml.model", Meta::Str("llama".into())),
            ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
            ("tokenizer.ggml.scores", Meta::F32s(scores)),
            ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ];
        kv.extend(extra);
        (header(0, &kv), n)
    }

    fn tokenizer(pieces: &[(&str, f32)], extra: Vec<(&str, Meta)>) -> Tokenizer {
        let (file, n) = vocab_file(pieces, extra);
        let g = Gguf::parse(&file).unwrap();
        Tokenizer::from_gguf(&g, n).unwrap()
    }

    fn spm(t: &Tokenizer) -> &Spm {
        match &t.model {
            Model::Spm(s) => s,
            Model::Bpe(_) => unreachable!("a SentencePiece file"),
        }
    }

    /// The texts of `ids`, `▁` shown as a space.
    fn texts(t: &Tokenizer, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .map(|&id| spm(t).texts[id as usize].replace('\u{2581}', " "))
            .collect()
    }

    /// The definition, step by step: join the highest-scoring pair (the
    /// leftmost on ties) until no pair is a piece, then pieces or bytes.
    fn naive(s: &Spm, text: &str) -> Vec<u32> {
        if text.is_empty() {
            return Vec::new();
        }
        let escaped: String = std::iter::once(' ')
            .filter(|_| s.add_space_prefix)
            .chain(text.chars())
            .map(|c| if c == ' ' { SPACE } else { c })
            .collect();
        let mut syms: Vec<String> = escaped.chars().map(String::from).collect();
        loop {
            let mut best: Option<(usize, f32)> = None;
            for i in 0..syms.len().saturating_sub(1) {
                let joined = format!("{}{}", syms[i], syms[i + 1]);
                if let Some(&id) = s.ids.get(&joined) {
                    let score = s.scores[id as usize];
                    if best.is_none_or(|(_, b)| score.total_cmp(&b) == Ordering::Greater) {
                        best = Some((i, score));
                    }
                }
            }
            let Some((i, _)) = best else { break };
            let right = syms.remove(i + 1);
            syms[i].push_str(&right);
        }
        let mut out = Vec::new();
        for sym in syms {
            match s.ids.get(&sym) {
                Some(&id) => out.push(id),
                None => out.extend(sym.bytes().map(|b| s.bytes[b as usize].unwrap())),
            }
        }
        out
    }

    #[test]
    fn joins_the_best_scoring_pair_first() {
        let t = tokenizer(
            &[
                ("a", -1.0),
                ("b", -1.0),
                ("c", -1.0),
                (" ", -1.0),
                ("ab", -2.0),
                ("bc", -1.5),
                ("abc", -3.0),
                (" a", -4.0),
            ],
            vec![("tokenizer.ggml.add_bos_token", Meta::Bool(false))],
        );
        // bc (-1.5) beats ab (-2), then a + bc = abc; " a" never wins.
        assert_eq!(texts(&t, &t.encode("abc").unwrap()), [" ", "abc"]);
        // Without the space prefix.
        let t = tokenizer(
            &[
                ("x", 0.0),
                ("y", 0.0),
                ("z", 0.0),
                ("xy", -1.0),
                ("yz", -1.0),
            ],
            vec![
                ("tokenizer.ggml.add_space_prefix", Meta::Bool(false)),
                ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
            ],
        );
        // A tie goes to the leftmost pair.
        assert_eq!(texts(&t, &t.encode("xyz").unwrap()), ["xy", "z"]);
    }

    #[test]
    fn characters_without_a_piece_fall_back_to_bytes() {
        let t = tokenizer(&[(" ", 0.0), ("a", 0.0)], vec![]);
        let ids = t.encode("aé").unwrap();
        // BOS, then ▁, a, and é as its two UTF-8 bytes.
        assert_eq!(ids, [1, 3 + 256, 3 + 257, 3 + 0xC3, 3 + 0xA9]);
        assert_eq!(t.decode(&ids[1..]).unwrap(), "aé");
        assert_eq!(t.decode(&ids).unwrap(), "<s>aé");
    }

    #[test]
    fn control_tokens_are_cut_out_and_the_text_after_them_gets_a_space() {
        let t = tokenizer(
            &[
                (" ", -5.0),
                ("h", -5.0),
                ("i", -5.0),
                ("hi", -1.0),
                (" hi", -0.5),
            ],
            vec![("tokenizer.ggml.add_bos_token", Meta::Bool(false))],
        );
        let ids = t.encode("<s>hi</s>hi").unwrap();
        assert_eq!(texts(&t, &ids), ["<s>", " hi", "</s>", " hi"]);
        // Decoding drops the spaces encoding added.
        assert_eq!(t.decode(&ids).unwrap(), "<s>hi</s>hi");
        assert_eq!(t.bos(), Some(1));
        assert_eq!(t.eos(), Some(2));
    }

    #[test]
    fn streaming_keeps_the_spaces_between_tokens() {
        let t = tokenizer(&[(" ", -5.0), ("a", -5.0), (" a", -1.0)], vec![]);
        let ids = t.encode("a a 東").unwrap();
        let mut stream = TextStream::new();
        let mut out = String::new();
        for &id in &ids[1..] {
            out += &stream.push(&t, id).unwrap();
        }
        out += &stream.finish(&t).unwrap();
        // The stream continues a sequence: the first token's space stays.
        assert_eq!(out, " a a 東");
        assert_eq!(t.decode(&ids[1..]).unwrap(), "a a 東");
    }

    #[test]
    fn refuses_malformed_vocabularies() {
        let from = |kv: &[(&str, Meta)], n: usize| {
            Tokenizer::from_gguf(&Gguf::parse(&header(0, kv)).unwrap(), n)
        };
        let llama = || ("tokenizer.ggml.model", Meta::Str("llama".into()));
        let tokens = |t: &[&str]| {
            (
                "tokenizer.ggml.tokens",
                Meta::Strs(t.iter().map(|s| (*s).to_string()).collect()),
            )
        };
        // Tokens and embedding rows disagree.
        let e = from(&[llama(), tokens(&["a", "b"])], 3).unwrap_err();
        assert!(e.to_string().contains("embedding"), "{e}");
        // A byte token that is not `<0xXX>`.
        let types = ("tokenizer.ggml.token_type", Meta::I32s(vec![1, 6]));
        let e = from(&[llama(), tokens(&["a", "<0xZZ>"]), types], 2).unwrap_err();
        assert!(e.to_string().contains("<0xZZ>"), "{e}");
        // Scores of another length.
        let scores = ("tokenizer.ggml.scores", Meta::F32s(vec![0.0]));
        let e = from(&[llama(), tokens(&["a", "b"]), scores], 2).unwrap_err();
        assert!(e.to_string().contains("scores"), "{e}");
        // No byte token and no unknown token: a character outside the
        // vocabulary is an error, not a panic.
        let t = from(&[llama(), tokens(&["a", "\u{2581}"])], 2).unwrap();
        assert!(t.encode("a").is_ok());
        let e = t.encode("q").unwrap_err();
        assert!(e.to_string().contains("0x71"), "{e}");
        // With an unknown token, that character is the unknown token.
        let types = ("tokenizer.ggml.token_type", Meta::I32s(vec![2, 1, 1]));
        let no_bos = ("tokenizer.ggml.add_bos_token", Meta::Bool(false));
        let t = from(
            &[llama(), tokens(&["<unk>", "a", "\u{2581}"]), types, no_bos],
            3,
        )
        .unwrap();
        assert_eq!(t.encode("qa").unwrap(), [2, 0, 1]);
        assert_eq!(t.decode(&[0]).unwrap(), UNKNOWN_TEXT);
        // A tokenizer model this runtime does not read.
        let bert = ("tokenizer.ggml.model", Meta::Str("bert".into()));
        let e = from(&[bert, tokens(&["a"])], 1).unwrap_err();
        assert!(
            e.to_string().contains("`bert`") && e.to_string().contains("`llama`"),
            "{e}"
        );
    }

    /// llama.cpp's ids for seeded vocabularies and texts (a vocabulary
    /// learned from a paragraph, and random ones with tied scores, a
    /// user-defined and an unused token, no space prefix), written by
    /// `scripts/spm-parity` through node-llama-cpp.
    #[test]
    fn equals_llama_cpp_on_its_fixture() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/data/spm-llama-cpp.json")).unwrap();
        let mut checked = 0;
        for v in fixture["vocabularies"].as_array().unwrap() {
            let strs = |k: &str| -> Vec<String> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap().to_string())
                    .collect()
            };
            let tokens = strs("tokens");
            let n = tokens.len();
            let scores = v["scores"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32);
            let types = v["types"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap() as i32);
            let file = header(
                0,
                &[
                    ("tokenizer.ggml.model", Meta::Str("llama".into())),
                    ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
                    ("tokenizer.ggml.scores", Meta::F32s(scores.collect())),
                    ("tokenizer.ggml.token_type", Meta::I32s(types.collect())),
                    ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
                    (
                        "tokenizer.ggml.add_space_prefix",
                        Meta::Bool(v["add_space_prefix"].as_bool().unwrap()),
                    ),
                ],
            );
            let t = Tokenizer::from_gguf(&Gguf::parse(&file).unwrap(), n).unwrap();
            let expected = v["ids"].as_array().unwrap();
            for (text, ids) in strs("texts").iter().zip(expected) {
                let ids: Vec<u32> = ids
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect();
                assert_eq!(t.encode(text).unwrap(), ids, "{}: {text:?}", v["name"]);
                checked += 1;
            }
        }
        assert_eq!(checked, 138);
    }

    /// Pieces over a small alphabet with scores from a small set (ties
    /// happen), and text over that alphabet and a few characters outside it.
    fn vocab_and_text() -> impl Strategy<Value = (Vec<(String, f32)>, String)> {
        let piece = (
            proptest::collection::vec(prop::sample::select(vec!['a', 'b', 'c', ' ']), 1..4),
            -3i32..1,
        )
            .prop_map(|(cs, s)| (cs.into_iter().collect::<String>(), s as f32));
        let text = proptest::collection::vec(
            prop::sample::select(vec!['a', 'b', 'c', ' ', 'é', '\n', '東']),
            0..24,
        )
        .prop_map(|cs| cs.into_iter().collect::<String>());
        (proptest::collection::vec(piece, 0..24), text)
    }

    proptest! {
        #[test]
        fn equals_the_step_by_step_definition_and_round_trips((pieces, text) in vocab_and_text()) {
            // Every real vocabulary has `▁`; the rest are random.
            let pieces: Vec<(&str, f32)> = std::iter::once((" ", -10.0))
                .chain(pieces.iter().map(|(p, s)| (p.as_str(), *s)))
                .collect();
            let t = tokenizer(&pieces, vec![("tokenizer.ggml.add_bos_token", Meta::Bool(false))]);
            let ids = t.encode(&text).unwrap();
            prop_assert_eq!(&ids, &naive(spm(&t), &text));
            prop_assert_eq!(t.decode(&ids).unwrap(), text);
        }
    }

    /// Any vocabulary a file can hold: token texts of any characters
    /// (empty, repeated, byte-like), any type number, any score.
    fn any_vocab() -> impl Strategy<Value = (Vec<String>, Vec<i32>, Vec<f32>)> {
        let text = prop_oneof![
            "[a-c<>0-9xA-F\\u{2581} ]{0,6}",
            (0u8..=255).prop_map(|b| format!("<0x{b:02X}>")),
            Just("<s>".to_string()),
            Just(String::new()),
        ];
        let ty = prop_oneof![1 => 0i32..8, 4 => Just(1i32)];
        let score = prop_oneof![any::<f32>(), (-5i32..5).prop_map(|s| s as f32)];
        proptest::collection::vec((text, ty, score), 1..40).prop_map(|v| {
            let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
            for (t, y, s) in v {
                a.push(t);
                b.push(y);
                c.push(s);
            }
            (a, b, c)
        })
    }

    proptest! {
        #[test]
        fn any_vocabulary_loads_or_is_refused_and_never_panics(
            (tokens, types, scores) in any_vocab(),
            text in "[a-c<>s/0-9xA-F\\u{2581} \u{e9}]{0,20}",
            ids in proptest::collection::vec(0u32..48, 0..8),
        ) {
            let n = tokens.len();
            let file = header(0, &[
                ("tokenizer.ggml.model", Meta::Str("llama".into())),
                ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
                ("tokenizer.ggml.token_type", Meta::I32s(types)),
                ("tokenizer.ggml.scores", Meta::F32s(scores)),
            ]);
            let g = Gguf::parse(&file).unwrap();
            if let Ok(t) = Tokenizer::from_gguf(&g, n) {
                if let Ok(out) = t.encode(&text) {
                    prop_assert!(out.iter().all(|&id| (id as usize) < n));
                }
                let decoded = t.decode(&ids);
                prop_assert_eq!(decoded.is_ok(), ids.iter().all(|&id| (id as usize) < n));
            }
        }
    }
}
