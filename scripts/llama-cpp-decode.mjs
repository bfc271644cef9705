// llama.cpp's CPU decode through node-llama-cpp's prebuilt binaries, timed
// the way fused-llama times itself: the prompt's evaluation (up to its
// first sampled token) and then every further greedy token.
//
//   node scripts/llama-cpp-decode.mjs MODEL PROMPT N THREADS
//
// Prints one JSON line: {"prompt_ids", "ids", "prompt_tok_s", "decode_tok_s"}.
// Run from a folder where `npm i -E node-llama-cpp@3.21.1` was run
// (scripts/bench-llama-cpp does that in .tools/node-llama).
import { getLlama } from "node-llama-cpp";

const [modelPath, prompt, nArg, threadsArg] = process.argv.slice(2);
const n = Number(nArg);
const threads = Number(threadsArg);
if (!modelPath || !prompt || !(n > 1) || !(threads > 0)) {
    console.error("usage: llama-cpp-decode.mjs MODEL PROMPT N THREADS");
    process.exit(2);
}
const llama = await getLlama({ gpu: false, build: "never" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ threads, contextSize: 512 });
const sequence = context.getSequence();
const promptIds = model.tokenize(prompt);
const ids = [];
const t0 = performance.now();
let t1 = 0;
for await (const id of sequence.evaluate(promptIds, { temperature: 0 })) {
    if (ids.length === 0) t1 = performance.now();
    ids.push(id);
    if (ids.length === n) break;
}
const t2 = performance.now();
console.log(JSON.stringify({
    prompt_ids: Array.from(promptIds),
    ids,
    prompt_tok_s: promptIds.length / ((t1 - t0) / 1000),
    decode_tok_s: (ids.length - 1) / ((t2 - t1) / 1000),
}));
await context.dispose();
await model.dispose();
