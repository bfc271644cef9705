// llama.cpp's SentencePiece tokenization of seeded vocabularies and
// texts, written as the fixture that fused-llama's tokenizer is tested
// against (examples/llama/tests/data/spm-llama-cpp.json).
//
//   node scripts/spm-llama-cpp.mjs OUT.json
//
// Each vocabulary is written as a GGUF file of metadata only (Llama
// hyperparameters and `tokenizer.ggml.*`), loaded by llama.cpp through
// node-llama-cpp 3.21.1 with `vocabOnly`, and every text tokenized with
// special tokens parsed. The fixture holds the vocabularies (tokens,
// scores, types, flags), the texts and llama.cpp's ids, so the Rust test
// needs neither node nor llama.cpp. Run from a folder where `npm i -E
// node-llama-cpp@3.21.1` was run (scripts/spm-parity does both).
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama } from "node-llama-cpp";

const out = process.argv[2];
if (!out) {
    console.error("usage: spm-llama-cpp.mjs OUT.json");
    process.exit(2);
}

// SplitMix64, so the vocabularies are the same on every run.
function rng(seed) {
    let s = BigInt(seed);
    const mask = (1n << 64n) - 1n;
    return () => {
        s = (s + 0x9e3779b97f4a7c15n) & mask;
        let z = s;
        z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & mask;
        z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & mask;
        z ^= z >> 31n;
        return Number(z >> 11n) / 2 ** 53;
    };
}
const SP = "\u2581";
const NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6;

// Llama 2's head: <unk>, <s>, </s>, the 256 byte tokens.
function head() {
    const v = { tokens: ["<unk>", "<s>", "</s>"], scores: [0, 0, 0], types: [UNKNOWN, CONTROL, CONTROL] };
    for (let b = 0; b < 256; b++) {
        v.tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
        v.scores.push(0);
        v.types.push(BYTE);
    }
    return v;
}
function add(v, text, score, type = NORMAL) {
    v.tokens.push(text);
    v.scores.push(score);
    v.types.push(type);
}

const CORPUS = `The quick brown fox jumps over the lazy dog. Matrix vector products
dominate decoding; the kernels fuse the residual add, the activation and the
norm into the product that feeds them. Tokenizers split text into pieces:
the pieces join by score, the best pair first, until no pair is a piece.
Zürich, São Paulo and Kraków are cities; 東京 and Ελλάδα are names too.`;

// Pieces a SentencePiece model could have learned from CORPUS: every
// substring of 2 to 7 characters of each `▁word`, the most frequent 400,
// scores falling with rank in groups of three (so ties happen), and every
// character of the corpus alone.
function wordsVocab() {
    const v = head();
    const counts = new Map();
    for (const w of CORPUS.split(/\s+/).filter(Boolean)) {
        const chars = [...(SP + w)];
        for (let i = 0; i < chars.length; i++) {
            for (let n = 2; n <= 7 && i + n <= chars.length; n++) {
                const p = chars.slice(i, i + n).join("");
                counts.set(p, (counts.get(p) ?? 0) + 1);
            }
        }
    }
    const ranked = [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    ranked.slice(0, 400).forEach(([p], r) => add(v, p, -Math.floor(r / 3)));
    const chars = [...new Set([...CORPUS.replace(/\s+/g, "")])].sort();
    add(v, SP, -200);
    chars.forEach((c, i) => add(v, c, -200 - i));
    return { name: "words", ...v, add_space_prefix: true };
}

// Random pieces over a, b, c and ▁ with scores from five values (many
// ties), no space prefix, a user-defined token and an unused one.
function randomVocab(seed) {
    const r = rng(seed);
    const v = head();
    const alpha = ["a", "b", "c", SP];
    alpha.forEach((c) => add(v, c, -10));
    const seen = new Set(alpha);
    while (v.tokens.length < 259 + 4 + 60) {
        const n = 2 + Math.floor(r() * 4);
        let p = "";
        for (let i = 0; i < n; i++) p += alpha[Math.floor(r() * 4)];
        if (seen.has(p)) continue;
        seen.add(p);
        add(v, p, -Math.floor(r() * 5));
    }
    add(v, "<|user|>", 0, USER_DEFINED);
    add(v, "<unused0>", 0, UNUSED);
    return { name: `random-${seed}`, ...v, add_space_prefix: false };
}

function wordsTexts() {
    const lines = CORPUS.split("\n");
    return [
        ...lines,
        "the fox",
        " the fox",
        "  two  spaces  ",
        "tabs\tand\nnewlines\n",
        "Zürich 東京 🙂 and ﬁ",
        "<s>The dog</s> jumps",
        "</s></s>the",
        "pieces join by score",
        "ab<s>",
        "",
        " ",
        "joinjoinjoin the the the",
        "Kraków, São Paulo",
    ];
}

function randomTexts(seed) {
    const r = rng(seed);
    const chars = ["a", "b", "c", " ", "é", "<|user|>", "<s>"];
    const texts = [];
    for (let t = 0; t < 60; t++) {
        const n = Math.floor(r() * 16);
        let s = "";
        for (let i = 0; i < n; i++) s += chars[Math.floor(r() * (i % 5 === 4 ? 7 : 5))];
        texts.push(s);
    }
    return texts;
}

// A GGUF (version 3) of metadata only.
function gguf(v) {
    const parts = [];
    const u32 = (x) => { const b = Buffer.alloc(4); b.writeUInt32LE(x); parts.push(b); };
    const u64 = (x) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(x)); parts.push(b); };
    const f32 = (x) => { const b = Buffer.alloc(4); b.writeFloatLE(x); parts.push(b); };
    const i32 = (x) => { const b = Buffer.alloc(4); b.writeInt32LE(x); parts.push(b); };
    const str = (s) => { const b = Buffer.from(s, "utf8"); u64(b.length); parts.push(b); };
    const kv = [
        ["general.architecture", 8, "llama"],
        ["llama.block_count", 4, 1],
        ["llama.context_length", 4, 64],
        ["llama.embedding_length", 4, 64],
        ["llama.feed_forward_length", 4, 128],
        ["llama.attention.head_count", 4, 2],
        ["llama.attention.layer_norm_rms_epsilon", 6, 1e-5],
        ["tokenizer.ggml.model", 8, "llama"],
        ["tokenizer.ggml.tokens", [9, 8], v.tokens],
        ["tokenizer.ggml.scores", [9, 6], v.scores],
        ["tokenizer.ggml.token_type", [9, 5], v.types],
        ["tokenizer.ggml.bos_token_id", 4, 1],
        ["tokenizer.ggml.eos_token_id", 4, 2],
        ["tokenizer.ggml.unknown_token_id", 4, 0],
        ["tokenizer.ggml.add_bos_token", 7, false],
        ["tokenizer.ggml.add_space_prefix", 7, v.add_space_prefix],
    ];
    parts.push(Buffer.from("GGUF"));
    u32(3);
    u64(0);
    u64(kv.length);
    const scalar = { 4: u32, 5: i32, 6: f32, 7: (x) => parts.push(Buffer.from([x ? 1 : 0])), 8: str };
    for (const [k, t, x] of kv) {
        str(k);
        if (Array.isArray(t)) {
            u32(9);
            u32(t[1]);
            u64(x.length);
            x.forEach(scalar[t[1]]);
        } else {
            u32(t);
            scalar[t](x);
        }
    }
    return Buffer.concat(parts);
}

const llama = await getLlama({ gpu: false, build: "never" });
const dir = mkdtempSync(join(tmpdir(), "spm-"));
const cases = [
    [wordsVocab(), wordsTexts()],
    [randomVocab(7), randomTexts(8)],
    [randomVocab(9), randomTexts(10)],
];
const fixture = { llama_cpp: "node-llama-cpp 3.21.1", vocabularies: [] };
for (const [v, texts] of cases) {
    const path = join(dir, `${v.name}.gguf`);
    writeFileSync(path, gguf(v));
    const model = await llama.loadModel({ modelPath: path, vocabOnly: true });
    const ids = texts.map((t) => Array.from(model.tokenize(t, true)));
    await model.dispose();
    fixture.vocabularies.push({ ...v, texts, ids });
}
writeFileSync(out, JSON.stringify(fixture) + "\n");
console.log(`wrote ${out}: ${cases.map(([v, t]) => `${v.name} ${v.tokens.length} tokens, ${t.length} texts`).join("; ")}`);
