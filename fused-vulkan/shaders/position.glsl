// The row a position value addresses among `rows` rows, as
// fused_core::decode::position has it: 0 for NaN or a value below 1, the
// last row for a value at or past it, else the value truncated. Written so
// that a NaN fails the first test (every comparison with NaN is false).
uint decode_position(float v, uint rows) {
    uint last = rows == 0u ? 0u : rows - 1u;
    if (!(v >= 1.0)) {
        return 0u;
    }
    if (v >= float(last)) {
        return last;
    }
    return min(uint(v), last);
}
