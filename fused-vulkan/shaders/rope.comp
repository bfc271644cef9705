#version 450
// RoPE of every head of x at the position in pos, angles from row pos of
// the table (fused_core::decode::rope): one invocation per pair (a, b),
//   y[a] = x[a]*c - x[b]*s,   y[b] = x[a]*s + x[b]*c,
// each product rounded before the sum (`precise`: no fused multiply-add),
// so the result is the core's bit for bit. Pairs are (2i, 2i+1) in mode 0
// and (i, i + d/2) in mode 1. The invocation reads both elements of its
// pair before it writes them, so y may be x (in place). Every tensor is
// read at an element offset within its binding (*_at).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "position.glsl"
#include "rope_pair.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer T { float table[]; };
layout(std430, binding = 2) readonly buffer P { float pos[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
    uint d;
    uint pairs;
    uint rows;
    uint mode;
    uint x_at;
    uint table_at;
    uint pos_at;
    uint y_at;
} pc;

void main() {
    uint gid = flat_group() * 64u + gl_LocalInvocationIndex;
    if (gid >= pc.pairs) {
        return;
    }
    uint half_d = pc.d / 2u;
    uint head = gid / half_d;
    uint i = gid % half_d;
    uint p = decode_position(pos[pc.pos_at], pc.rows);
    uint row = pc.table_at + p * pc.d;
    float c = table[row + 2u * i];
    float s = table[row + 2u * i + 1u];
    uint a = rope_a(pc.mode, pc.d, i);
    uint b = rope_b(pc.mode, pc.d, i);
    uint base = head * pc.d;
    float ya;
    float yb;
    rope_rotate(x[pc.x_at + base + a], x[pc.x_at + base + b], c, s, ya, yb);
    y[pc.y_at + base + a] = ya;
    y[pc.y_at + base + b] = yb;
}
