"""Writes tests/data/gguf-py.gguf with the gguf Python package (0.19.0),
llama.cpp's own writer, and prints its tensor directory as gguf's reader
sees it: name, dims, type id, file offset, bytes (the values tests/interop.rs
expects). Run: pip install gguf==0.19.0 && python3 make_gguf_py.py OUT"""
import sys

import numpy as np
import gguf
from gguf import GGUFWriter, GGMLQuantizationType as Q
w = GGUFWriter(sys.argv[1], 'llama')
w.add_uint8('u8', 200); w.add_int8('i8', -100); w.add_uint16('u16', 60000); w.add_int16('i16', -30000)
w.add_uint32('u32', 4000000000); w.add_int32('i32', -2000000000); w.add_float32('f32', -1.5)
w.add_bool('b', True); w.add_string('s', 'héllo'); w.add_uint64('u64', 2**64-1); w.add_int64('i64', -2**63)
w.add_float64('f64', 3.25)
w.add_array('tokens', ['<s>', '</s>', 'x'])
w.add_array('scores', [0.5, -1.0])
w.add_array('nested', [['a', 'b'], ['c']])
w.add_tensor('token_embd.weight', np.arange(64*3, dtype=np.float32).reshape(3, 64))
w.add_tensor('blk.0.attn_norm.weight', np.ones(64, dtype=np.float16))
rng = np.random.default_rng(0)
for name, q, shape in [('blk.0.ffn_up.weight', Q.Q8_0, (2, 64)), ('blk.0.ffn_down.weight', Q.Q4_K, (2, 256)), ('blk.0.ffn_gate.weight', Q.IQ2_XXS, (3, 256)), ('blk.0.attn_q.weight', Q.MXFP4, (2, 32))]:
    bl, bb = gguf.GGML_QUANT_SIZES[q]
    raw = rng.integers(0, 256, size=(shape[0], shape[1] // bl * bb), dtype=np.uint8)
    w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=q)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
r = gguf.GGUFReader(sys.argv[1])
for t in r.tensors:
    print(t.name, list(int(x) for x in t.shape), int(t.tensor_type), int(t.data_offset), int(t.n_bytes))
