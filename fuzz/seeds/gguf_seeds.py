#!/usr/bin/env python3
"""Writes a few valid GGUF files into the directory given (default:
fuzz/corpus/gguf_parse): every metadata value type, nested arrays, the
alignment key, tensors of several GGML types, an empty tensor. Seeds for
the `gguf_parse` fuzz target; run once, the output is committed."""

import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
       F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# GGML type id -> (block length, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 30: (1, 2)}


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def payload(t, v):
    if t == STRING:
        return s(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(payload(et, i) for i in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, align=32):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + payload(t, v)
    offset, blobs = 0, []
    for name, dims, ty in tensors:
        bl, bb = TYPES[ty]
        n = 1
        for d in dims:
            n *= d
        size = n // bl * bb
        offset = (offset + align - 1) // align * align
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ty, offset)
        blobs.append((offset, bytes((i * 37 + 11) % 251 for i in range(size))))
        offset += size
    out += b"\0" * ((-len(out)) % align)
    data = bytearray(offset)
    for o, b in blobs:
        data[o:o + len(b)] = b
    return out + bytes(data)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/gguf_parse"
    os.makedirs(d, exist_ok=True)
    seeds = {
        "empty-v3": gguf([], []),
        "empty-v2": gguf([], [], version=2),
        "scalars": gguf([("u8", U8, 1), ("i8", I8, -1), ("u16", U16, 2), ("i16", I16, -2),
                         ("u32", U32, 3), ("i32", I32, -3), ("f32", F32, 1.5), ("bool", BOOL, 1),
                         ("str", STRING, "héllo"), ("u64", U64, 4), ("i64", I64, -4), ("f64", F64, 2.5)], []),
        "arrays": gguf([("tokens", ARRAY, (STRING, ["a", "bc", ""])),
                        ("scores", ARRAY, (F32, [0.0, 1.0])),
                        ("ids", ARRAY, (U32, [1, 2, 3])),
                        ("nested", ARRAY, (ARRAY, [(I32, [1, -1]), (I32, []), (ARRAY, [])])),
                        ("deep", ARRAY, (ARRAY, [(ARRAY, [(ARRAY, [(U8, [7])])])]))], []),
        "tensors": gguf([("general.name", STRING, "tiny")],
                        [("w.f32", [4, 2], 0), ("w.f16", [8], 1), ("w.q4_0", [32, 2], 2),
                         ("w.q8_0", [64, 1, 1], 8), ("w.q4_k", [256, 1], 12), ("w.bf16", [2, 2, 2, 2], 30),
                         ("empty", [0, 3], 0)]),
        "aligned64": gguf([("general.alignment", U32, 64)], [("a", [16], 0), ("b", [32], 2)], align=64),
    }
    for name, b in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
