// What the GEMV shaders (gemv.comp: F32, F16, BF16; gemv_quant.comp: Q8_0, Q4_0,
// Q4_K; gemv_blocks.comp: the other formats) share: specialization constants, bindings, push constants, the
// per-thread partial sums, and the reduction over the workgroup followed by
// the GLU and the epilogue chain.
//
// y[col * M + row] = chain(W[row] . x[col]) for NC columns (1..8), or with
// GLU defined: chain(act(Wg[row] . x[col]) * (Wu[row] . x[col])). One
// workgroup of WG threads computes R consecutive rows; each thread keeps
// partial sums acc[(m * R + r) * NC + col] (m: 0 gate / plain, 1 up), which
// are reduced with subgroupAdd and shared memory (SUBGROUP defined) or with a
// shared-memory tree.
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"

layout(constant_id = 0) const uint NC = 1;     // columns
layout(constant_id = 1) const uint WG = 64;    // threads per workgroup
layout(constant_id = 2) const uint R = 1;      // rows per workgroup
layout(constant_id = 3) const uint U = 1;      // units per thread per loop trip
layout(constant_id = 4) const uint SLOTS = 64; // partial sums per value: subgroups, or WG
layout(local_size_x_id = 1) in;

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 0) readonly buffer W4 { uvec4 w4[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer OPS { float ops[]; };
#ifdef GLU
layout(std430, binding = 4) readonly buffer WU { uint wu[]; };
layout(std430, binding = 4) readonly buffer WU4 { uvec4 wu4[]; };
#define NMAT 2u
#else
#define NMAT 1u
#endif

layout(push_constant) uniform PC {
    uint M;
    uint K;
    uint n_stages;
    uint glu_act;
    uvec4 stage[2];  // kind | act << 8; kinds: 0 act, 1 add, 2 mul, 3 row bias
    uvec4 off[2];    // element offset of each stage's operand in `ops`
} pc;

const uint NV = NMAT * R * NC; // partial sums per thread
shared float red[NV * SLOTS];

// Every value stored in acc is computed by a `precise` expression.
float acc[NV];

// The 32-bit word `word` of matrix m (0: W, 1: the up matrix).
uint word_at(uint m, uint word) {
#ifdef GLU
    return m == 0u ? w[word] : wu[word];
#else
    return w[word];
#endif
}

// The 16-byte word `quad` of matrix m.
uvec4 quad_at(uint m, uint quad) {
#ifdef GLU
    return m == 0u ? w4[quad] : wu4[quad];
#else
    return w4[quad];
#endif
}

float dot4(vec4 a, vec4 b, float acc) {
    precise float r = fma(a.x, b.x, acc);
    r = fma(a.y, b.y, r);
    r = fma(a.z, b.z, r);
    r = fma(a.w, b.w, r);
    return r;
}

float sum4(vec4 a, float acc) {
    precise float r = acc + a.x;
    r = r + a.y;
    r = r + a.z;
    r = r + a.w;
    return r;
}

float apply_chain(float v, uint row, uint col) {
    precise float r = v;
    for (uint s = 0u; s < pc.n_stages; ++s) {
        uint code = pc.stage[s >> 2u][s & 3u];
        uint off = pc.off[s >> 2u][s & 3u];
        uint kind = code & 0xffu;
        if (kind == 0u) {
            r = act_apply(code >> 8u, r);
        } else if (kind == 1u) {
            r = ep_add(r, ops[off + col * pc.M + row]);
        } else if (kind == 2u) {
            r = ep_mul(r, ops[off + col * pc.M + row]);
        } else {
            r = ep_add(r, ops[off + row]);
        }
    }
    return r;
}

// Reduces acc over the workgroup and writes rows row0 .. row0 + R - 1 (those
// below M) of every column through the GLU and the chain.
void reduce_and_store(uint row0, uint tid) {
#ifdef SUBGROUP
    [[unroll]] for (uint v = 0u; v < NV; ++v) {
        float s = subgroupAdd(acc[v]);
        if (subgroupElect()) {
            red[v * SLOTS + gl_SubgroupID] = s;
        }
    }
    barrier();
    uint n_parts = gl_NumSubgroups;
#else
    [[unroll]] for (uint v = 0u; v < NV; ++v) {
        red[v * SLOTS + tid] = acc[v];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            [[unroll]] for (uint v = 0u; v < NV; ++v) {
                red[v * SLOTS + tid] = red[v * SLOTS + tid] + red[v * SLOTS + tid + s];
            }
        }
        barrier();
    }
    uint n_parts = 1u;
#endif
    for (uint t = tid; t < R * NC; t += WG) {
        uint r = t / NC;
        uint col = t % NC;
        uint row = row0 + r;
        if (row < pc.M) {
            precise float sums[NMAT];
            [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                uint v = (m * R + r) * NC + col;
                sums[m] = red[v * SLOTS];
                for (uint g = 1u; g < n_parts; ++g) {
                    sums[m] = sums[m] + red[v * SLOTS + g];
                }
            }
#ifdef GLU
            float o = glu_apply(pc.glu_act, sums[0], sums[1]);
#else
            float o = sums[0];
#endif
            y[col * pc.M + row] = apply_chain(o, row, col);
        }
    }
}
