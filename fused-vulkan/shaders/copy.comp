#version 450
// dst = src in 16-byte words (uvec4 loads and stores): the compute-shader
// copy the bench measures next to vkCmdCopyBuffer for the bandwidth
// ceiling. Workgroup g copies the WG * PER quads from g * WG * PER, thread t
// quads t, t + WG, ..., all loads issued before the stores.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 0) const uint WG = 256; // threads per workgroup
layout(constant_id = 1) const uint PER = 4;  // quads per thread
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer S { uvec4 src[]; };
layout(std430, binding = 1) writeonly buffer D { uvec4 dst[]; };
layout(push_constant) uniform PC {
    uint n_quads;
} pc;

void main() {
    uint first = flat_group() * WG * PER + gl_LocalInvocationIndex;
    uvec4 v[PER];
    for (uint i = 0u; i < PER; ++i) {
        uint q = first + i * WG;
        v[i] = q < pc.n_quads ? src[q] : uvec4(0u);
    }
    for (uint i = 0u; i < PER; ++i) {
        uint q = first + i * WG;
        if (q < pc.n_quads) {
            dst[q] = v[i];
        }
    }
}
