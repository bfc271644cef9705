#version 450
// The index of the largest value of each column (fused_core::decode::argmax):
// the first on ties, NaN never chosen, 0 when every value is NaN. Values
// travel as their bits with their index, so the kernel is exact.
//   mode 0: workgroup c reduces column c of src (n values a column) and
//           writes the index as a float to dst[c];
//   mode 1: workgroup (c, s) reduces split s (`chunk` values) of column c
//           and writes (value bits, index) to dst[2 (c splits + s) ..];
//   mode 2: workgroup c reduces the `splits` pairs mode 1 wrote for column
//           c (in src) and writes the index as a float to dst[c].
// Each invocation scans its values in increasing index, keeping the first
// maximum; the tree then keeps, of two candidates, the larger value, or on
// a tie the lower index, and a NaN (no candidate yet) loses to any number.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define WG 256u
#define NONE 0xFFFFFFFFu

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { uint src[]; };
layout(std430, binding = 1) writeonly buffer D { uint dst[]; };
layout(push_constant) uniform PC {
    uint n;
    uint cols;
    uint mode;
    uint splits;
    uint chunk;
    uint src_at;
    uint dst_at;
} pc;

shared float sv[WG];
shared uint si[WG];

// Whether candidate (v, i) beats (bv, bi).
bool better(float v, uint i, float bv, uint bi) {
    if (isnan(v)) {
        return false;
    }
    return isnan(bv) || v > bv || (v == bv && i < bi);
}

void main() {
    uint tid = gl_LocalInvocationIndex;
    uint wg = flat_group();
    uint groups = pc.mode == 1u ? pc.cols * pc.splits : pc.cols;
    if (wg >= groups) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    float bv = uintBitsToFloat(0x7FC00000u);
    uint bi = NONE;
    uint col = pc.mode == 1u ? wg / pc.splits : wg;
    if (pc.mode == 2u) {
        uint base = pc.src_at + 2u * col * pc.splits;
        for (uint s = tid; s < pc.splits; s += WG) {
            float v = uintBitsToFloat(src[base + 2u * s]);
            uint i = src[base + 2u * s + 1u];
            if (better(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
    } else {
        uint start = 0u;
        uint end = pc.n;
        if (pc.mode == 1u) {
            start = (wg % pc.splits) * pc.chunk;
            end = min(start + pc.chunk, pc.n);
        }
        uint base = pc.src_at + col * pc.n;
        for (uint i = start + tid; i < end; i += WG) {
            float v = uintBitsToFloat(src[base + i]);
            if (better(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
    }
    sv[tid] = bv;
    si[tid] = bi;
    barrier();
    for (uint stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (tid < stride) {
            float v = sv[tid + stride];
            uint i = si[tid + stride];
            if (better(v, i, sv[tid], si[tid])) {
                sv[tid] = v;
                si[tid] = i;
            }
        }
        barrier();
    }
    if (tid == 0u) {
        if (pc.mode == 1u) {
            uint at = pc.dst_at + 2u * wg;
            dst[at] = floatBitsToUint(sv[0]);
            dst[at + 1u] = si[0];
        } else {
            uint best = isnan(sv[0]) ? 0u : si[0];
            dst[pc.dst_at + col] = floatBitsToUint(float(best));
        }
    }
}
