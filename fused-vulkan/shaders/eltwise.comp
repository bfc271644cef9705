#version 450
// Unfused element-wise kernels, built from the same functions as the fused
// epilogue (common.glsl). out[i] for i < n:
//   op 0: a + b          op 1: a * b         op 2: act(a)
//   op 3: act(a) * b     op 4: a + b[i % p0] (row-broadcast bias, p0 rows)
//   op 5: a * b[((i / p0) % p1) * p0 + i % p0]   (FWHT sign multiply, N = p0, n_blk = p1)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform PC {
    uint n;
    uint op;
    uint act;
    uint p0;
    uint p1;
} pc;

void main() {
    uint i = flat_group() * 256u + gl_LocalInvocationIndex;
    if (i >= pc.n) {
        return;
    }
    float r;
    if (pc.op == 0u) {
        r = ep_add(a[i], b[i]);
    } else if (pc.op == 1u) {
        r = ep_mul(a[i], b[i]);
    } else if (pc.op == 2u) {
        r = act_apply(pc.act, a[i]);
    } else if (pc.op == 3u) {
        r = glu_apply(pc.act, a[i], b[i]);
    } else if (pc.op == 4u) {
        r = ep_add(a[i], b[i % pc.p0]);
    } else {
        uint n = pc.p0;
        r = ep_mul(a[i], b[((i / n) % pc.p1) * n + i % n]);
    }
    o[i] = r;
}
