#version 450
// The row write of fused_core::decode::set_row, moving 32-bit words (bit
// for bit, NaN payloads included). With `whole` 0 (out is dst itself, the
// KV-cache append) one invocation per value of the row writes
// out[pos*n + i] = row[i] and nothing else; with `whole` 1 (out apart from
// dst) one invocation per value of the result writes
// out[j] = j in row pos ? row[j - pos*n] : dst[j].
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "position.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer D { uint dst[]; };
layout(std430, binding = 1) readonly buffer R { uint row[]; };
layout(std430, binding = 2) readonly buffer P { float pos[]; };
layout(std430, binding = 3) writeonly buffer O { uint o[]; };
layout(push_constant) uniform PC {
    uint n;
    uint rows;
    uint whole;
    uint dst_at;
    uint row_at;
    uint pos_at;
    uint out_at;
} pc;

void main() {
    uint j = flat_group() * 256u + gl_LocalInvocationIndex;
    uint p = decode_position(pos[pc.pos_at], pc.rows);
    if (pc.whole == 0u) {
        if (j < pc.n) {
            o[pc.out_at + p * pc.n + j] = row[pc.row_at + j];
        }
        return;
    }
    if (j >= pc.n * pc.rows) {
        return;
    }
    uint r = j / pc.n;
    o[pc.out_at + j] = r == p ? row[pc.row_at + j - p * pc.n] : dst[pc.dst_at + j];
}
