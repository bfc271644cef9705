#version 450
// One query token's attention over cache rows 0..=pos
// (fused_core::decode::attention), grouped-query heads: query head h reads
// key/value head h / group. The context is cut into splits of CHUNK rows;
// workgroup (h, s) attends head h over split s:
//   scores  s_t = dot(q_h, k_t) * scale, one invocation per row (the dot
//           in increasing index from 0, as the core adds it), kept in
//           shared memory;
//   m = max s_t, e_t = exp(s_t - m), l = sum e_t (shared-memory trees);
//   o_i = sum e_t v_t[i], WG / d groups of d invocations each taking every
//           (WG / d)-th row, their sums added in group order.
// With `direct` (one split covers every row) it writes out_h = o / l;
// otherwise (m, l, o) of the split to part[(h splits + s)(d + 2) ..], and
// attention.comp -DCOMBINE joins the splits:
//   out_h[i] = sum_s o_s[i] w_s / sum_s l_s w_s,  w_s = exp(m_s - max m).
// Splits past the position write nothing and are not read. A workgroup
// reads q_h into shared memory before anything is written, and writes
// only out_h, so out may be q (in place). Head sizes up to WG.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "position.glsl"

#define WG 256u
#define CHUNK 512u

layout(local_size_x = 256) in;

#ifdef COMBINE

layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 1) readonly buffer P { float pos[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform PC {
    uint d;
    uint n_head;
    uint rows;
    uint splits;
    uint pos_at;
    uint out_at;
} pc;

void main() {
    uint h = flat_group();
    if (h >= pc.n_head) {
        return;
    }
    uint len = decode_position(pos[pc.pos_at], pc.rows) + 1u;
    uint live = (len + CHUNK - 1u) / CHUNK;
    uint stride = pc.d + 2u;
    uint base = h * pc.splits * stride;
    float m = part[base];
    for (uint s = 1u; s < live; s++) {
        m = max(m, part[base + s * stride]);
    }
    for (uint i = gl_LocalInvocationIndex; i < pc.d; i += WG) {
        float l = 0.0;
        float acc = 0.0;
        for (uint s = 0u; s < live; s++) {
            uint at = base + s * stride;
            float w = exp(part[at] - m);
            l += part[at + 1u] * w;
            acc += part[at + 2u + i] * w;
        }
        o[pc.out_at + h * pc.d + i] = acc / l;
    }
}

#else

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer P { float pos[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(push_constant) uniform PC {
    uint d;
    uint n_head;
    uint group;
    uint rows;
    uint kv_dim;
    float scale;
    uint splits;
    uint direct;
    uint q_at;
    uint k_at;
    uint v_at;
    uint pos_at;
    uint out_at;
} pc;

shared float sq[WG];
shared float ss[CHUNK];
shared float red[WG];

void main() {
    uint wg = flat_group();
    if (wg >= pc.n_head * pc.splits) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    uint h = wg / pc.splits;
    uint split = wg % pc.splits;
    uint len = decode_position(pos[pc.pos_at], pc.rows) + 1u;
    uint t0 = split * CHUNK;
    if (t0 >= len) {
        return; // the whole workgroup, as above
    }
    uint n = min(CHUNK, len - t0);
    uint tid = gl_LocalInvocationIndex;
    uint d = pc.d;
    uint g = h / pc.group;
    for (uint i = tid; i < d; i += WG) {
        sq[i] = q[pc.q_at + h * d + i];
    }
    barrier();

    float m = uintBitsToFloat(0xFF800000u); // -inf
    uint kbase = pc.k_at + g * d + t0 * pc.kv_dim;
    for (uint j = tid; j < n; j += WG) {
        uint at = kbase + j * pc.kv_dim;
        precise float dot = 0.0;
        for (uint i = 0u; i < d; i++) {
            dot = dot + sq[i] * k[at + i];
        }
        precise float s = dot * pc.scale;
        ss[j] = s;
        m = max(m, s);
    }
    red[tid] = m;
    barrier();
    for (uint stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (tid < stride) {
            red[tid] = max(red[tid], red[tid + stride]);
        }
        barrier();
    }
    m = red[0];
    barrier();

    float l = 0.0;
    for (uint j = tid; j < n; j += WG) {
        float e = exp(ss[j] - m);
        ss[j] = e;
        l += e;
    }
    red[tid] = l;
    barrier();
    for (uint stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (tid < stride) {
            red[tid] += red[tid + stride];
        }
        barrier();
    }
    l = red[0];
    barrier();

    uint groups = WG / d;
    uint gp = tid / d;
    uint i = tid % d;
    float acc = 0.0;
    if (gp < groups) {
        uint vbase = pc.v_at + g * d + t0 * pc.kv_dim + i;
        for (uint j = gp; j < n; j += groups) {
            acc += ss[j] * v[vbase + j * pc.kv_dim];
        }
    }
    red[tid] = acc;
    barrier();
    if (tid < d) {
        float total = 0.0;
        for (uint p = 0u; p < groups; p++) {
            total += red[p * d + tid];
        }
        if (pc.direct != 0u) {
            o[pc.out_at + h * d + tid] = total / l;
        } else {
            uint at = wg * (d + 2u);
            o[at + 2u + tid] = total;
            if (tid == 0u) {
                o[at] = m;
                o[at + 1u] = l;
            }
        }
    }
}

#endif
