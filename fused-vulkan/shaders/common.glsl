// The element functions shared by the fused epilogue (gemv.comp) and the
// unfused element-wise kernel (eltwise.comp). Every result is `precise`
// (SPIR-V NoContraction), so the two compute the same bits.
//
// Activation codes (fused_vulkan::shader_codes): 0 identity, 1 silu,
// 2 sigmoid, 3 gelu_erf, 4 gelu_tanh, 5 relu.

// erf(x), Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7).
float erf_as(float x) {
    precise float ax = abs(x);
    precise float t = 1.0 / (1.0 + 0.3275911 * ax);
    precise float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    precise float r = 1.0 - poly * exp(-ax * ax);
    return x < 0.0 ? -r : r;
}

// tanh(x) through exp, saturating to +-1 without overflow to NaN.
float tanh_sat(float x) {
    precise float ax = abs(x);
    precise float r = 1.0 - 2.0 / (exp(2.0 * ax) + 1.0);
    return x < 0.0 ? -r : r;
}

float act_apply(uint act, float x) {
    precise float r = x;
    if (act == 1u) {
        r = x / (1.0 + exp(-x));
    } else if (act == 2u) {
        r = 1.0 / (1.0 + exp(-x));
    } else if (act == 3u) {
        r = 0.5 * x * (1.0 + erf_as(x * 0.70710678118654752));
    } else if (act == 4u) {
        r = 0.5 * x * (1.0 + tanh_sat(0.7978846 * x * (1.0 + 0.044715 * x * x)));
    } else if (act == 5u) {
        r = (x > 0.0 || isnan(x)) ? x : 0.0;
    }
    return r;
}

float ep_add(float a, float b) {
    precise float r = a + b;
    return r;
}

float ep_mul(float a, float b) {
    precise float r = a * b;
    return r;
}

float glu_apply(uint act, float gate, float up) {
    precise float r = act_apply(act, gate) * up;
    return r;
}

// The flat index of this workgroup in a 2-D grid (dispatches wider than the
// device's x limit are split into rows of workgroups).
uint flat_group() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}
