// One RoPE pair, as fused_core::decode rotates it, shared by rope.comp,
// kv_append.comp and attention.comp's append so that all three compute
// the same bits: the pair's indices within a head of d values (mode 0:
// adjacent elements, otherwise the two halves) and the rotation by the
// angle's cos c and sin s, each product rounded before the sum (`precise`:
// no fused multiply-add).

uint rope_a(uint mode, uint d, uint i) {
    return mode == 0u ? 2u * i : i;
}

uint rope_b(uint mode, uint d, uint i) {
    return mode == 0u ? 2u * i + 1u : i + d / 2u;
}

void rope_rotate(float xa, float xb, float c, float s, out float ya, out float yb) {
    precise float ra = xa * c - xb * s;
    precise float rb = xa * s + xb * c;
    ya = ra;
    yb = rb;
}
