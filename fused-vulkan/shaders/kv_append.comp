#version 450
// The key/value append of a decode step as one dispatch
// (fused_core::kv_append): one invocation per work item over, in order,
// the q pairs (RoPE into q's destination), the k pairs (RoPE written
// straight into row pos of the key cache, the RoPE's own tensor never
// stored) and the v values (copied into row pos of the value cache as
// 32-bit words, NaN payloads included). A part with no items (q or v not
// joined) is bound to memory of another part and never touched.
//
// The rotation is rope.comp's, `precise` (no fused multiply-add), so every
// value is the core's bit for bit. The position is read once and clamped
// into each part's own rows (position.glsl), as the unfused ops clamp it:
// the table's for the angles, each cache's for its row. A q pair reads
// both of its elements before writing them, so q's destination may be q
// (in place).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "position.glsl"
#include "rope_pair.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer T { float table[]; };
layout(std430, binding = 1) readonly buffer P { float pos[]; };
layout(std430, binding = 2) readonly buffer K { float k[]; };
layout(std430, binding = 3) writeonly buffer KC { float k_cache[]; };
layout(std430, binding = 4) readonly buffer Q { float q[]; };
layout(std430, binding = 5) writeonly buffer QO { float q_out[]; };
layout(std430, binding = 6) readonly buffer V { uint v[]; };
layout(std430, binding = 7) writeonly buffer VC { uint v_cache[]; };
layout(push_constant) uniform PC {
    uint d;
    uint q_pairs;
    uint k_pairs;
    uint v_n;
    uint mode;
    uint table_rows;
    uint k_rows;
    uint v_rows;
    uint table_at;
    uint pos_at;
    uint k_at;
    uint kc_at;
    uint q_at;
    uint qo_at;
    uint v_at;
    uint vc_at;
} pc;

void main() {
    uint gid = flat_group() * 64u + gl_LocalInvocationIndex;
    float pv = pos[pc.pos_at];
    uint rotated = pc.q_pairs + pc.k_pairs;
    if (gid >= rotated) {
        uint j = gid - rotated;
        if (j < pc.v_n) {
            uint row = decode_position(pv, pc.v_rows) * pc.v_n;
            v_cache[pc.vc_at + row + j] = v[pc.v_at + j];
        }
        return;
    }
    bool is_q = gid < pc.q_pairs;
    uint pair = is_q ? gid : gid - pc.q_pairs;
    uint half_d = pc.d / 2u;
    uint head = pair / half_d;
    uint i = pair % half_d;
    uint angles = pc.table_at + decode_position(pv, pc.table_rows) * pc.d;
    float c = table[angles + 2u * i];
    float s = table[angles + 2u * i + 1u];
    uint a = head * pc.d + rope_a(pc.mode, pc.d, i);
    uint b = head * pc.d + rope_b(pc.mode, pc.d, i);
    float xa;
    float xb;
    if (is_q) {
        xa = q[pc.q_at + a];
        xb = q[pc.q_at + b];
    } else {
        xa = k[pc.k_at + a];
        xb = k[pc.k_at + b];
    }
    float ya;
    float yb;
    rope_rotate(xa, xb, c, s, ya, yb);
    if (is_q) {
        q_out[pc.qo_at + a] = ya;
        q_out[pc.qo_at + b] = yb;
    } else {
        uint row = pc.kc_at + decode_position(pv, pc.k_rows) * (2u * pc.k_pairs);
        k_cache[row + a] = ya;
        k_cache[row + b] = yb;
    }
}
