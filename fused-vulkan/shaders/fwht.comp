#version 450
// Signed or unsigned FWHT of rows of N = TPR * E values: TPR threads per row,
// E values per thread in registers; element i = e * TPR + lane. Butterfly
// half-widths run h = 1, 2, ..., N/2 in that order (the core's reference
// order, so the result is bit-exact): h < subgroup size by subgroup shuffles
// (SHUFFLE variant), h < TPR through shared memory in chunks of CH register
// slots (any N fits: shared memory holds WG * CH floats), h >= TPR in
// registers. The sign multiply and the scale are fused into the load:
// v = (x * s) * scale, as the reference rounds them.
#extension GL_GOOGLE_include_directive : require
#ifdef SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;   // threads per workgroup
layout(constant_id = 1) const uint TPR = 64;  // threads per row (divides WG)
layout(constant_id = 2) const uint E = 1;     // values per thread
layout(constant_id = 3) const uint CH = 1;    // register slots per shared exchange (divides E)
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer S { float s[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform PC {
    uint rows;
    uint n_blk;   // 0: unsigned
    float scale;
} pc;

shared float sh[WG * CH];

void main() {
#ifdef SHUFFLE
    uint t = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
    uint t = gl_LocalInvocationIndex;
#endif
    const uint N = TPR * E;
    uint lane = t % TPR;
    uint row = flat_group() * (WG / TPR) + t / TPR;
    bool live = row < pc.rows;
    float v[E];
    for (uint e = 0u; e < E; ++e) {
        uint i = e * TPR + lane;
        precise float a = 0.0;
        if (live) {
            a = x[row * N + i];
            if (pc.n_blk != 0u) {
                a = a * s[(row % pc.n_blk) * N + i];
            }
            a = a * pc.scale;
        }
        v[e] = a;
    }
    uint h = 1u;
#ifdef SHUFFLE
    uint hs = min(gl_SubgroupSize, TPR);
    for (; h < hs; h <<= 1u) {
        for (uint e = 0u; e < E; ++e) {
            float p = subgroupShuffleXor(v[e], h);
            v[e] = (lane & h) == 0u ? v[e] + p : p - v[e];
        }
    }
#endif
    for (; h < TPR; h <<= 1u) {
        for (uint c0 = 0u; c0 < E; c0 += CH) {
            barrier();
            for (uint c = 0u; c < CH; ++c) {
                sh[c * WG + t] = v[c0 + c];
            }
            barrier();
            for (uint c = 0u; c < CH; ++c) {
                float p = sh[c * WG + (t ^ h)];
                v[c0 + c] = (lane & h) == 0u ? v[c0 + c] + p : p - v[c0 + c];
            }
        }
    }
    for (uint hh = 1u; hh < E; hh <<= 1u) {
        for (uint e = 0u; e < E; ++e) {
            if ((e & hh) == 0u) {
                float a = v[e];
                float b = v[e | hh];
                v[e] = a + b;
                v[e | hh] = a - b;
            }
        }
    }
    if (live) {
        for (uint e = 0u; e < E; ++e) {
            o[row * N + e * TPR + lane] = v[e];
        }
    }
}
