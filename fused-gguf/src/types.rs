//! The block size of every GGML tensor type a GGUF file may hold, so that
//! every tensor's byte size can be computed and bounds-checked, whether or
//! not `fused-core` computes on its type.
//!
//! Ids from `enum ggml_type` in ggml's `include/ggml.h`; block lengths and
//! bytes from `type_traits` in `src/ggml.c` and the `block_*` structs with
//! their `static_assert`s in `src/ggml-common.h` (ggml-org/ggml at d99724f2,
//! 2026-08-21). Ids 4, 5, 31–33 and 36–38 were removed from GGUF files
//! (their `blck_size` is 0 there) and are absent here, like ids never
//! defined.

/// One GGML tensor type: its id, its name and its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GgmlType {
    /// `ggml_type` id.
    pub(crate) id: u32,
    /// `ggml_type_name`.
    pub(crate) name: &'static str,
    /// Elements per block (`ggml_blck_size`).
    pub(crate) block_len: u64,
    /// Bytes per block (`ggml_type_size`).
    pub(crate) block_bytes: u64,
}

const fn t(id: u32, name: &'static str, block_len: u64, block_bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block_len,
        block_bytes,
    }
}

/// `QK_K`, the K-quant super-block.
const QK_K: u64 = 256;

/// Every GGML type a GGUF file may use, in id order.
const TYPES: [GgmlType; 35] = [
    t(0, "f32", 1, 4),
    t(1, "f16", 1, 2),
    t(2, "q4_0", 32, 2 + 16),
    t(3, "q4_1", 32, 2 * 2 + 16),
    t(6, "q5_0", 32, 2 + 4 + 16),
    t(7, "q5_1", 32, 2 * 2 + 4 + 16),
    t(8, "q8_0", 32, 2 + 32),
    // 36 bytes as in ggml-common.h (two f16); gguf-py 0.19's table still
    // says 40, from when `d` and `s` were f32.
    t(9, "q8_1", 32, 2 * 2 + 32),
    t(10, "q2_K", QK_K, 2 * 2 + QK_K / 16 + QK_K / 4),
    t(11, "q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12),
    t(12, "q4_K", QK_K, 2 * 2 + 12 + QK_K / 2),
    t(13, "q5_K", QK_K, 2 * 2 + 12 + QK_K / 2 + QK_K / 8),
    t(14, "q6_K", QK_K, 2 + QK_K / 16 + 3 * QK_K / 4),
    t(15, "q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2),
    t(16, "iq2_xxs", QK_K, 2 + QK_K / 8 * 2),
    t(17, "iq2_xs", QK_K, 2 + QK_K / 8 * 2 + QK_K / 32),
    t(18, "iq3_xxs", QK_K, 2 + 3 * (QK_K / 8)),
    t(19, "iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 16),
    t(20, "iq4_nl", 32, 2 + 16),
    t(21, "iq3_s", QK_K, 2 + 13 * (QK_K / 32) + QK_K / 64),
    t(22, "iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 16),
    t(23, "iq4_xs", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2),
    t(24, "i8", 1, 1),
    t(25, "i16", 1, 2),
    t(26, "i32", 1, 4),
    t(27, "i64", 1, 8),
    t(28, "f64", 1, 8),
    t(29, "iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
    t(30, "bf16", 1, 2),
    t(
        34,
        "tq1_0",
        QK_K,
        2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5,
    ),
    t(35, "tq2_0", QK_K, 2 + QK_K / 4),
    t(39, "mxfp4", 32, 1 + 16),
    t(40, "nvfp4", 64, 64 / 16 + 64 / 2),
    t(41, "q1_0", 128, 2 + 128 / 8),
    t(42, "q2_0", 64, 2 + 64 / 4),
];

/// The GGML type with id `id`, if GGUF files may hold it.
pub(crate) fn lookup(id: u32) -> Option<GgmlType> {
    TYPES.iter().copied().find(|ty| ty.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_core::DType;

    #[test]
    fn block_sizes_match_ggml_common_h() {
        // The byte counts the `static_assert`s in ggml-common.h pin, spelled out.
        let want = [
            ("q2_K", 84),
            ("q3_K", 110),
            ("q4_K", 144),
            ("q5_K", 176),
            ("q6_K", 210),
            ("q8_K", 292),
            ("iq2_xxs", 66),
            ("iq2_xs", 74),
            ("iq3_xxs", 98),
            ("iq1_s", 50),
            ("iq3_s", 110),
            ("iq2_s", 82),
            ("iq4_xs", 136),
            ("iq1_m", 56),
            ("tq1_0", 54),
            ("tq2_0", 66),
            ("mxfp4", 17),
            ("nvfp4", 36),
            ("q1_0", 18),
            ("q2_0", 18),
        ];
        for (name, bytes) in want {
            let ty = TYPES.iter().find(|ty| ty.name == name).unwrap();
            assert_eq!(ty.block_bytes, bytes, "{name}");
        }
    }

    #[test]
    fn ids_are_unique_and_sorted() {
        assert!(TYPES.windows(2).all(|w| w[0].id < w[1].id));
        for removed in [4, 5, 31, 32, 33, 36, 37, 38, 43, u32::MAX] {
            assert!(lookup(removed).is_none(), "{removed}");
        }
    }

    #[test]
    fn agrees_with_fused_core() {
        for d in DType::ALL {
            let ty = lookup(d.ggml_id()).unwrap();
            assert_eq!(ty.name, d.name());
            assert_eq!(ty.block_len, d.block_len() as u64, "{d}");
            assert_eq!(ty.block_bytes, d.block_bytes() as u64, "{d}");
        }
    }
}
