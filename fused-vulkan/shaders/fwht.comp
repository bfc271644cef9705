#version 450
// Signed or unsigned FWHT of rows of N = TPR * E values: TPR threads per row,
// E values per thread in registers, in groups of V consecutive values (V = 4:
// loaded and stored as vec4; V = 1: single floats). Value slot g * V + c of
// the thread at lane l of a row holds element (g * TPR + l) * V + c, so that
// consecutive threads read and write consecutive 16-byte words.
// Butterfly half-widths run h = 1, 2, ..., N/2 in that order (the core's
// reference order, so the result is bit-exact): h < V inside a group; V <= h
// < V * TPR between lanes l and l ^ (h / V), by subgroup shuffles while
// h / V is below the subgroup size (SHUFFLE variant), else through shared
// memory in chunks of CH register slots (any N fits: shared memory holds
// WG * CH floats); h >= V * TPR between groups in registers. The sign
// multiply and the scale are fused into the load: v = (x * s) * scale, as
// the reference rounds them.
//
// A workgroup transforms RPT slabs of WG / TPR consecutive rows, one after
// the other; the loads of the next slab are issued before the current one
// is transformed, so that they are in flight meanwhile.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;   // threads per workgroup
layout(constant_id = 1) const uint TPR = 64;  // threads per row (divides WG)
layout(constant_id = 2) const uint E = 1;     // values per thread
layout(constant_id = 3) const uint CH = 1;    // register slots per shared exchange (divides E)
layout(constant_id = 4) const uint V = 1;     // values per group: 1 or 4 (divides E)
layout(constant_id = 5) const uint RPT = 1;   // slabs of rows per workgroup
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer S { float s[]; };
layout(std430, binding = 1) readonly buffer S4 { vec4 s4[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 2) writeonly buffer O4 { vec4 o4[]; };
layout(push_constant) uniform PC {
    uint rows;
    uint n_blk;   // 0: unsigned
    float scale;
} pc;

shared float sh[WG * CH];

// (x * s) * scale, or x * scale unsigned.
vec4 signed_scaled(vec4 a, vec4 sg, bool signed_) {
    precise vec4 r = a;
    if (signed_) {
        r = r * sg;
    }
    r = r * pc.scale;
    return r;
}

const uint N = TPR * E;
const uint G = E / V; // groups per thread
float v[E];           // the values being transformed
float nx[E];          // the next slab's values, loaded ahead

// Loads the row `row` (zeros when not `live`) into nx.
void load_next(uint row, bool live, uint lane) {
    bool signed_ = pc.n_blk != 0u;
    uint srow = signed_ ? row % pc.n_blk : 0u;
    [[unroll]] for (uint g = 0u; g < G; ++g) {
        uint first = (g * TPR + lane) * V; // the group's first element
        vec4 a = vec4(0.0);
        if (V == 4u) {
            if (live) {
                uint q = (row * N + first) >> 2u;
                a = signed_scaled(x4[q], signed_ ? s4[(srow * N + first) >> 2u] : vec4(1.0), signed_);
            }
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                nx[g * V + c] = a[c];
            }
        } else {
            if (live) {
                float sg = signed_ ? s[srow * N + first] : 1.0;
                a = signed_scaled(vec4(x[row * N + first]), vec4(sg), signed_);
            }
            nx[g] = a.x;
        }
    }
}

// Transforms v (the row of this thread's lane) in place.
void transform(uint t, uint lane) {
    // h < V: inside each group.
    [[unroll]] for (uint h = 1u; h < V; h <<= 1u) {
        [[unroll]] for (uint e = 0u; e < E; ++e) {
            if ((e & h) == 0u) {
                float a = v[e];
                float b = v[e + h];
                v[e] = a + b;
                v[e + h] = a - b;
            }
        }
    }
    // V <= h < V * TPR: between lanes l and l ^ hl, hl = h / V.
    uint hl = 1u;
#ifdef SHUFFLE
    uint hs = min(gl_SubgroupSize, TPR);
    for (; hl < hs; hl <<= 1u) {
        [[unroll]] for (uint e = 0u; e < E; ++e) {
            float p = subgroupShuffleXor(v[e], hl);
            v[e] = (lane & hl) == 0u ? v[e] + p : p - v[e];
        }
    }
#endif
    for (; hl < TPR; hl <<= 1u) {
        [[unroll]] for (uint c0 = 0u; c0 < E; c0 += CH) {
            barrier();
            [[unroll]] for (uint c = 0u; c < CH; ++c) {
                sh[c * WG + t] = v[c0 + c];
            }
            barrier();
            [[unroll]] for (uint c = 0u; c < CH; ++c) {
                float p = sh[c * WG + (t ^ hl)];
                v[c0 + c] = (lane & hl) == 0u ? v[c0 + c] + p : p - v[c0 + c];
            }
        }
    }
    // h >= V * TPR: between groups g and g ^ hg, hg = h / (V * TPR).
    [[unroll]] for (uint hg = 1u; hg < G; hg <<= 1u) {
        [[unroll]] for (uint g = 0u; g < G; ++g) {
            if ((g & hg) == 0u) {
                [[unroll]] for (uint c = 0u; c < V; ++c) {
                    float a = v[g * V + c];
                    float b = v[(g + hg) * V + c];
                    v[g * V + c] = a + b;
                    v[(g + hg) * V + c] = a - b;
                }
            }
        }
    }
}

void main() {
#ifdef SHUFFLE
    uint t = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
    uint t = gl_LocalInvocationIndex;
#endif
    uint lane = t % TPR;
    const uint SLAB = WG / TPR; // rows per slab
    uint row = flat_group() * RPT * SLAB + t / TPR;
    load_next(row, row < pc.rows, lane);
    for (uint j = 0u; j < RPT; ++j) {
        bool live = row < pc.rows;
        [[unroll]] for (uint e = 0u; e < E; ++e) {
            v[e] = nx[e];
        }
        if (j + 1u < RPT) {
            load_next(row + SLAB, row + SLAB < pc.rows, lane);
        }
        transform(t, lane);
        if (live) {
            [[unroll]] for (uint g = 0u; g < G; ++g) {
                uint first = (g * TPR + lane) * V;
                if (V == 4u) {
                    o4[(row * N + first) >> 2u] = vec4(v[g * V], v[g * V + 1u], v[g * V + 2u], v[g * V + 3u]);
                } else {
                    o[row * N + first] = v[g];
                }
            }
        }
        row += SLAB;
    }
}
