#version 450
// One query token's attention over cache rows 0..=pos
// (fused_core::decode::attention), grouped-query heads: query head h reads
// key/value head h / group. A workgroup serves HEADS consecutive query
// heads of one key/value head (the host picks HEADS: a divisor of the group,
// at most GMAX, HEADS * d <= QMAX), so each key and value row is read once
// for all of them rather than once per query head. The context in use (len
// rows, known only when the kernel runs) is cut into the host's `splits`
// even shares of at least MIN_CHUNK rows (split_rows below; the host picks
// enough splits that a share never exceeds CHUNK, the rows whose scores
// shared memory holds); workgroup (c, s) attends heads c*HEADS.. over
// split s:
//   scores  s_rt = dot(q_r, k_t) * scale in the core's order (eight
//           interleaved partials, then the fixed tree 4, 2, 1), kept in
//           shared memory; with SHUFFLE eight invocations share a row, lane
//           j taking the indices j mod 8 (the row read contiguously) and the
//           tree done by subgroup shuffles, otherwise one invocation a row;
//   m_r = max_t s_rt, e_rt = exp(s_rt - m_r), l_r = sum_t e_rt, 32
//           invocations a head (shared-memory trees);
//   o_ri = sum_t e_rt v_t[i], WG / d groups of d invocations each taking
//           every (WG / d)-th row for every head, their sums added in group
//           order.
// With `direct` (one split covers every row) it writes out_h = o / l;
// otherwise (m, l, o) of the split to part[(h splits + s)(d + 2) ..] for
// each query head h, and attention.comp -DCOMBINE joins the splits per
// query head:
//   out_h[i] = sum_s o_s[i] w_s / sum_s l_s w_s,  w_s = exp(m_s - max m).
// With QUANT (-DCOMBINE only) the joining pass also writes out as the
// next GEMV's Q8_0 activations, or with Q8_1 too as Q8_1 ones
// (quantize.comp's layout for one column of n_head d values, d a multiple
// of 32: the codes from word 0, four a word, then each block's scale
// word), with the quantizer's own code, so no quantizer runs after it.
// With APPEND (the split pass) the key/value append that kv_append.comp
// would run before it is done here: q's RoPE from the product's rows, the
// new key (rotated) and value rows of each head kept in shared memory by
// the split holding row pos and written into the caches (see main).
// Splits past the position write nothing and are not read. A workgroup
// reads its q heads into shared memory before anything is written, and
// writes only their outputs, so out may be q (in place). Head sizes up to
// WG. Shared memory: (QMAX + GMAX * CHUNK + WG + 2 GMAX) floats, 13 KiB,
// within Vulkan's guaranteed 16 KiB.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"
#include "position.glsl"

#define WG 256u
#define CHUNK 256u
#define MIN_CHUNK 32u
#define GMAX 8u
#define QMAX 1024u
#define PARTIALS 8u
// Global loads an invocation issues before using them (keys and values).
#define LOADS 8u

layout(local_size_x = 256) in;

// The rows each split of a len-row context takes: an even share, at least
// MIN_CHUNK, at most CHUNK (the host's choice of splits keeps the share
// within it; the bound keeps shared memory safe regardless).
uint split_rows(uint len, uint splits) {
    return min(max((len + splits - 1u) / splits, MIN_CHUNK), CHUNK);
}

#ifdef COMBINE

layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 1) readonly buffer P { float pos[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
#ifdef QUANT
layout(std430, binding = 3) writeonly buffer Q { uint qo[]; };
#include "quant_math.glsl"
// The head's outputs, for their blocks' largest magnitudes and codes.
shared float cq[WG];
#endif
layout(push_constant) uniform PC {
    uint d;
    uint n_head;
    uint rows;
    uint splits;
    uint pos_at;
    uint out_at;
} pc;

// The weight of each split of the current run of WG splits, and its sum
// times that weight, computed once for every output value.
shared float cw[WG];
shared float cl[WG];

void main() {
    uint h = flat_group();
    if (h >= pc.n_head) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    uint tid = gl_LocalInvocationIndex;
    uint len = decode_position(pos[pc.pos_at], pc.rows) + 1u;
    uint chunk = split_rows(len, pc.splits);
    uint live = (len + chunk - 1u) / chunk;
    uint stride = pc.d + 2u;
    uint base = h * pc.splits * stride;
    // max m over the live splits: a strided fold, then a tree.
    float m = uintBitsToFloat(0xFF800000u); // -inf
    for (uint s = tid; s < live; s += WG) {
        m = max(m, part[base + s * stride]);
    }
    cw[tid] = m;
    barrier();
    for (uint w = WG / 2u; w > 0u; w >>= 1u) {
        if (tid < w) {
            cw[tid] = max(cw[tid], cw[tid + w]);
        }
        barrier();
    }
    m = cw[0];
    barrier();
    // Heads are at most WG values (the host refuses longer ones): value i
    // is invocation i's.
    uint i = tid;
    // `precise` here and below: every variant of a pass (with or without
    // its quantized output or the append) computes the same bits, which a
    // compiler free to fuse multiply-adds need not do.
    precise float l = 0.0;
    precise float acc = 0.0;
    for (uint s0 = 0u; s0 < live; s0 += WG) {
        uint count = min(WG, live - s0);
        if (tid < count) {
            uint at = base + (s0 + tid) * stride;
            float w = exp(part[at] - m);
            cw[tid] = w;
            precise float lw = part[at + 1u] * w;
            cl[tid] = lw;
        }
        barrier();
        if (i < pc.d) {
            uint at = base + s0 * stride + 2u + i;
            uint s = 0u;
            // LOADS splits' values in flight together, summed in order.
            for (; s + LOADS <= count; s += LOADS) {
                float x[LOADS];
                [[unroll]] for (uint u = 0u; u < LOADS; u++) {
                    x[u] = part[at + (s + u) * stride];
                }
                [[unroll]] for (uint u = 0u; u < LOADS; u++) {
                    l += cl[s + u];
                    acc += x[u] * cw[s + u];
                }
            }
            for (; s < count; s++) {
                l += cl[s];
                acc += part[at + s * stride] * cw[s];
            }
        }
        barrier();
    }
    precise float y = acc / l;
    if (i < pc.d) {
        o[pc.out_at + h * pc.d + i] = y;
    }
#ifdef QUANT
    // Invocation j < d / 4 writes the word of codes j of the head, each
    // folding its block's 32 values in order (the core's amax fold); the
    // first of a block's eight also writes its d.
    cq[i] = y;
    barrier();
    if (tid < pc.d / 4u) {
        uint b0 = tid / 8u * 32u;
        uint fold = 0u;
        for (uint j = 0u; j < 32u; ++j) {
            fold = amax_step(fold, floatBitsToUint(cq[b0 + j]) & ABS_MASK);
        }
        float dq = q8_0_scale(fold);
        float id = q8_0_inverse(dq);
        precise vec4 p = vec4(cq[4u * tid], cq[4u * tid + 1u], cq[4u * tid + 2u],
                              cq[4u * tid + 3u]) * id;
        uint n = h * pc.d + 4u * tid; // this word's first value in the column
        qo[n / 4u] = pack_codes(ivec4(round_away_i8(p.x), round_away_i8(p.y),
                                      round_away_i8(p.z), round_away_i8(p.w)));
        if (tid % 8u == 0u) {
#ifdef Q8_1
            // Q8_1: s = f16(d * the block's sum of codes) in the high half.
            int sum = 0;
            for (uint j = 0u; j < 32u; ++j) {
                precise float pj = cq[b0 + j] * id;
                sum += round_away_i8(pj);
            }
            precise float sd = float(sum) * dq;
            qo[pc.n_head * pc.d / 4u + n / 32u] = f16_bits(dq) | (f16_bits(sd) << 16u);
#else
            qo[pc.n_head * pc.d / 4u + n / 32u] = f16_bits(dq);
#endif
        }
    }
#endif
}

#else

layout(std430, binding = 0) readonly buffer Q { float q[]; };
#ifdef APPEND
// The caches: row pos written here, the other rows read.
layout(std430, binding = 1) buffer K { float k[]; };
layout(std430, binding = 2) buffer V { float v[]; };
layout(std430, binding = 2) buffer VW { uint v_words[]; };
#else
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
#endif
layout(std430, binding = 3) readonly buffer P { float pos[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
#ifdef APPEND
layout(std430, binding = 5) readonly buffer T { float table[]; };
layout(std430, binding = 6) readonly buffer KR { float k_new[]; };
layout(std430, binding = 7) readonly buffer VR { uint v_new[]; };
layout(std430, binding = 8) writeonly buffer QO { float q_out[]; };
#endif
layout(push_constant) uniform PC {
    uint d;
    uint n_head;
    uint group;
    uint rows;
    uint kv_dim;
    float scale;
    uint splits;
    uint direct;
    uint heads;
    uint q_at;
    uint k_at;
    uint v_at;
    uint pos_at;
    uint out_at;
#ifdef APPEND
    uint mode;
    uint table_rows;
    uint table_at;
    uint kn_at;
    uint vn_at;
    uint qo_at;
    uint write_q;
#endif
} pc;

shared float sq[QMAX];
shared float ss[GMAX * CHUNK];
shared float red[WG];
shared float sm[GMAX];
shared float sl[GMAX];
#ifdef APPEND
// The key and value rows appended at pos, for the split that holds that
// row (used in place of the cache's, which this dispatch writes).
shared float snk[WG];
shared float snv[WG];

#include "rope_pair.glsl"
#endif

void main() {
    uint wg = flat_group();
    uint heads = pc.heads;
    if (wg >= (pc.n_head / heads) * pc.splits) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    uint h0 = (wg / pc.splits) * heads;
    uint split = wg % pc.splits;
    uint len = decode_position(pos[pc.pos_at], pc.rows) + 1u;
    uint chunk = split_rows(len, pc.splits);
    uint t0 = split * chunk;
    if (t0 >= len) {
        return; // the whole workgroup, as above
    }
    uint n = min(chunk, len - t0);
    uint tid = gl_LocalInvocationIndex;
    uint d = pc.d;
    uint g = h0 / pc.group;
#ifdef APPEND
    // The key/value append (kv_append.comp's) done here: q's heads rotated
    // into shared memory (and into q's destination by the first split), the
    // new key and value rows of head g kept in shared memory by the split
    // that holds row len - 1 and written into the caches by its first
    // workgroup of the head. The position is clamped into the table's rows
    // for the angles; the caches' rows are the attention's (the host's
    // check).
    uint prow = len - 1u;
    bool fresh_here = prow - t0 < n;
    uint half_d = d / 2u;
    uint angles = pc.table_at + decode_position(pos[pc.pos_at], pc.table_rows) * d;
    for (uint p = tid; p < heads * half_d; p += WG) {
        uint r = p / half_d;
        uint i = p % half_d;
        uint at = pc.q_at + (h0 + r) * d;
        uint a = rope_a(pc.mode, d, i);
        uint b = rope_b(pc.mode, d, i);
        float ya;
        float yb;
        rope_rotate(q[at + a], q[at + b], table[angles + 2u * i], table[angles + 2u * i + 1u],
                    ya, yb);
        sq[r * d + a] = ya;
        sq[r * d + b] = yb;
        if (split == 0u && pc.write_q != 0u) {
            q_out[pc.qo_at + (h0 + r) * d + a] = ya;
            q_out[pc.qo_at + (h0 + r) * d + b] = yb;
        }
    }
    if (fresh_here) {
        bool writer = h0 % pc.group == 0u;
        uint kat = pc.kn_at + g * d;
        uint row = prow * pc.kv_dim + g * d;
        for (uint i = tid; i < half_d; i += WG) {
            uint a = rope_a(pc.mode, d, i);
            uint b = rope_b(pc.mode, d, i);
            float ya;
            float yb;
            rope_rotate(k_new[kat + a], k_new[kat + b], table[angles + 2u * i],
                        table[angles + 2u * i + 1u], ya, yb);
            snk[a] = ya;
            snk[b] = yb;
            if (writer) {
                k[pc.k_at + row + a] = ya;
                k[pc.k_at + row + b] = yb;
            }
        }
        for (uint i = tid; i < d; i += WG) {
            uint bits = v_new[pc.vn_at + g * d + i];
            snv[i] = uintBitsToFloat(bits);
            if (writer) {
                v_words[pc.v_at + row + i] = bits;
            }
        }
    }
#else
    for (uint i = tid; i < heads * d; i += WG) {
        sq[i] = q[pc.q_at + h0 * d + i];
    }
#endif
    barrier();

    uint kbase = pc.k_at + g * d + t0 * pc.kv_dim;
#ifdef SHUFFLE
    // Slots in subgroup order, so the eight lanes of a row share a subgroup.
    uint slot = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    uint lane = slot % PARTIALS;
    for (uint j = slot / PARTIALS; j < n; j += WG / PARTIALS) {
        uint at = kbase + j * pc.kv_dim;
#ifdef APPEND
        bool fresh = t0 + j == prow;
#endif
        precise float p[GMAX];
        [[unroll]] for (uint r = 0u; r < GMAX; r++) {
            p[r] = 0.0;
        }
        uint i = lane;
        // LOADS of the row's values loaded before any is used, so that
        // their reads are in flight together; the sums take them in the
        // same order as the remainder loop.
        for (; i + PARTIALS * (LOADS - 1u) < d; i += PARTIALS * LOADS) {
            float kv[LOADS];
#ifdef APPEND
            if (fresh) {
                [[unroll]] for (uint u = 0u; u < LOADS; u++) {
                    kv[u] = snk[i + PARTIALS * u];
                }
            } else
#endif
            {
                [[unroll]] for (uint u = 0u; u < LOADS; u++) {
                    kv[u] = k[at + i + PARTIALS * u];
                }
            }
            [[unroll]] for (uint u = 0u; u < LOADS; u++) {
                [[unroll]] for (uint r = 0u; r < GMAX; r++) {
                    if (r < heads) {
                        precise float prod = sq[r * d + i + PARTIALS * u] * kv[u];
                        p[r] = p[r] + prod;
                    }
                }
            }
        }
        for (; i < d; i += PARTIALS) {
#ifdef APPEND
            float kv = fresh ? snk[i] : k[at + i];
#else
            float kv = k[at + i];
#endif
            [[unroll]] for (uint r = 0u; r < GMAX; r++) {
                if (r < heads) {
                    precise float prod = sq[r * d + i] * kv;
                    p[r] = p[r] + prod;
                }
            }
        }
        [[unroll]] for (uint r = 0u; r < GMAX; r++) {
            if (r < heads) {
                // Lane 0 ends with ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)).
                [[unroll]] for (uint w = PARTIALS / 2u; w > 0u; w >>= 1u) {
                    precise float sum = p[r] + subgroupShuffleXor(p[r], w);
                    p[r] = sum;
                }
                if (lane == 0u) {
                    precise float s = p[r] * pc.scale;
                    ss[r * CHUNK + j] = s;
                }
            }
        }
    }
#else
    for (uint j = tid; j < n; j += WG) {
        uint at = kbase + j * pc.kv_dim;
        precise float p[GMAX][PARTIALS];
        [[unroll]] for (uint r = 0u; r < GMAX; r++) {
            [[unroll]] for (uint c = 0u; c < PARTIALS; c++) {
                p[r][c] = 0.0;
            }
        }
        for (uint i0 = 0u; i0 < d; i0 += PARTIALS) {
            [[unroll]] for (uint c = 0u; c < PARTIALS; c++) {
                if (i0 + c < d) {
#ifdef APPEND
                    float kv = t0 + j == prow ? snk[i0 + c] : k[at + i0 + c];
#else
                    float kv = k[at + i0 + c];
#endif
                    [[unroll]] for (uint r = 0u; r < GMAX; r++) {
                        if (r < heads) {
                            precise float prod = sq[r * d + i0 + c] * kv;
                            p[r][c] = p[r][c] + prod;
                        }
                    }
                }
            }
        }
        [[unroll]] for (uint r = 0u; r < GMAX; r++) {
            if (r < heads) {
                [[unroll]] for (uint w = PARTIALS / 2u; w > 0u; w >>= 1u) {
                    [[unroll]] for (uint c = 0u; c < w; c++) {
                        precise float sum = p[r][c] + p[r][c + w];
                        p[r][c] = sum;
                    }
                }
                precise float s = p[r][0] * pc.scale;
                ss[r * CHUNK + j] = s;
            }
        }
    }
#endif
    barrier();

    // 32 invocations a head for the max and the sum of exp.
    uint r = tid / 32u;
    uint sub = tid % 32u;
    float m = uintBitsToFloat(0xFF800000u); // -inf
    if (r < heads) {
        for (uint j = sub; j < n; j += 32u) {
            m = max(m, ss[r * CHUNK + j]);
        }
    }
    red[tid] = m;
    barrier();
    for (uint stride = 16u; stride > 0u; stride >>= 1u) {
        if (sub < stride) {
            red[tid] = max(red[tid], red[tid + stride]);
        }
        barrier();
    }
    if (sub == 0u && r < heads) {
        sm[r] = red[tid];
    }
    barrier();

    float l = 0.0;
    if (r < heads) {
        m = sm[r];
        for (uint j = sub; j < n; j += 32u) {
            float e = exp(ss[r * CHUNK + j] - m);
            ss[r * CHUNK + j] = e;
            l += e;
        }
    }
    red[tid] = l;
    barrier();
    for (uint stride = 16u; stride > 0u; stride >>= 1u) {
        if (sub < stride) {
            red[tid] += red[tid + stride];
        }
        barrier();
    }
    if (sub == 0u && r < heads) {
        sl[r] = red[tid];
    }
    barrier();

    uint groups = WG / d;
    uint gp = tid / d;
    uint i = tid % d;
    precise float acc[GMAX];
    [[unroll]] for (uint c = 0u; c < GMAX; c++) {
        acc[c] = 0.0;
    }
    if (gp < groups) {
        uint vbase = pc.v_at + g * d + t0 * pc.kv_dim + i;
        uint j = gp;
        // LOADS rows' values in flight together, as for the keys.
        for (; j + groups * (LOADS - 1u) < n; j += groups * LOADS) {
            float x[LOADS];
            [[unroll]] for (uint u = 0u; u < LOADS; u++) {
#ifdef APPEND
                if (t0 + j + groups * u == prow) {
                    x[u] = snv[i];
                    continue;
                }
#endif
                x[u] = v[vbase + (j + groups * u) * pc.kv_dim];
            }
            [[unroll]] for (uint u = 0u; u < LOADS; u++) {
                [[unroll]] for (uint c = 0u; c < GMAX; c++) {
                    if (c < heads) {
                        acc[c] += ss[c * CHUNK + j + groups * u] * x[u];
                    }
                }
            }
        }
        for (; j < n; j += groups) {
#ifdef APPEND
            float x = t0 + j == prow ? snv[i] : v[vbase + j * pc.kv_dim];
#else
            float x = v[vbase + j * pc.kv_dim];
#endif
            [[unroll]] for (uint c = 0u; c < GMAX; c++) {
                if (c < heads) {
                    acc[c] += ss[c * CHUNK + j] * x;
                }
            }
        }
    }
    [[unroll]] for (uint c = 0u; c < GMAX; c++) {
        if (c < heads) {
            red[tid] = acc[c];
            barrier();
            if (tid < d) {
                precise float total = 0.0;
                for (uint p = 0u; p < groups; p++) {
                    total += red[p * d + tid];
                }
                uint h = h0 + c;
                if (pc.direct != 0u) {
                    precise float y = total / sl[c];
                    o[pc.out_at + h * d + tid] = y;
                } else {
                    uint at = (h * pc.splits + split) * (d + 2u);
                    o[at + 2u + tid] = total;
                    if (tid == 0u) {
                        o[at] = sm[c];
                        o[at + 1u] = sl[c];
                    }
                }
            }
            barrier();
        }
    }
}

#endif
