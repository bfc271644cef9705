#version 450
// Reads a window of the next GEMV's weights and drops what it read: run
// beside a small kernel between two GEMVs (no barrier between them), it
// pulls those bytes into L2 while the memory would otherwise idle, so the
// GEMV after the next barrier finds them there. SPIR-V has no prefetch, so
// the loads are kept alive by a store that depends on them and in practice
// never happens (into this dispatch's own word, which nothing reads).
//
// Workgroup g (flat over a 2D grid) reads the 16-byte words g * WG * LOADS + j * WG + tid, j <
// LOADS, of the `count` words bound.
#extension GL_EXT_control_flow_attributes : require

#define WG 256u
// Loads each invocation has in flight together.
#define LOADS 8u

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer W { uvec4 w[]; };
layout(std430, binding = 1) writeonly buffer S { uint sink[]; };
layout(push_constant) uniform PC {
    uint count;
    uint key;
} pc;

void main() {
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint base = g * WG * LOADS + gl_LocalInvocationID.x;
    uvec4 acc = uvec4(0u);
    [[unroll]] for (uint j = 0u; j < LOADS; ++j) {
        uint i = base + j * WG;
        if (i < pc.count) {
            acc ^= w[i];
        }
    }
    uint x = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (x == pc.key) {
        sink[0] = x;
    }
}
