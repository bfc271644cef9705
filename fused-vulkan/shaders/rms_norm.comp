#version 450
// RMS normalisation in fused_core::norm's order (norm.glsl), one workgroup
// of 32 invocations per column of K values: the unfused rms_norm op, and
// the norm prologue of a GEMV or GLU step with f32 activations, which
// passes a weight g:  y[i] = x[i] * s, or (x[i] * s) * g[i] with a weight.
// Invocation j writes exactly the elements of partial j, which it read,
// so y may be x (an in-place norm).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
    uint K;
    uint n_cols;
    float eps;
    uint weighted;
} pc;

#define NORM_X(i) x[i]
#include "norm.glsl"

void main() {
    uint col = flat_group();
    if (col >= pc.n_cols) {
        return; // the whole workgroup: no barrier is skipped by part of it
    }
    uint j = gl_LocalInvocationIndex;
    uint base = col * pc.K;
    float s = norm_scale(base, pc.K, pc.eps, j, 32u);
    for (uint i = j; i < pc.K; i += 32u) {
        precise float t = x[base + i] * s;
        if (pc.weighted != 0u) {
            t = t * g[i];
        }
        y[base + i] = t;
    }
}
