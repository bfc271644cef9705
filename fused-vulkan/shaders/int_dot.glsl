// The signed dot product of two words of 4 int8 each, for the Q8-mode GEMV
// shaders (gemv_q8.comp, gemv_blocks.comp with Q8). DOT: OpSDot
// (SPV_KHR_integer_dot_product, declared through GL_EXT_spirv_intrinsics as
// this glslang lacks GL_EXT_integer_dot_product); otherwise the same sum
// with bitfieldExtract and multiplies. Both give the same bits. Include it
// before any declaration (it may declare an extension).
#ifdef DOT
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_packed(int a, int b, spirv_literal int packed_4x8);
int dot4x8(uint a, uint b) {
    return sdot_packed(int(a), int(b), 0);
}
#else
int dot4x8(uint a, uint b) {
    ivec4 va = ivec4(bitfieldExtract(int(a), 0, 8), bitfieldExtract(int(a), 8, 8),
                     bitfieldExtract(int(a), 16, 8), bitfieldExtract(int(a), 24, 8));
    ivec4 vb = ivec4(bitfieldExtract(int(b), 0, 8), bitfieldExtract(int(b), 8, 8),
                     bitfieldExtract(int(b), 16, 8), bitfieldExtract(int(b), 24, 8));
    return va.x * vb.x + va.y * vb.y + va.z * vb.z + va.w * vb.w;
}
#endif
