//! The element-format enum and its fixed properties. It sits below the
//! error type, which names formats; [`crate::dtype`] re-exports it and adds
//! the conversions that can fail.

/// Number of elements in a K-quant super-block (GGML's `QK_K`).
pub const QK_K: usize = 256;

/// An element format, numbered as GGML/GGUF number it (`ggml_type`).
///
/// Quantized formats store elements in fixed-size blocks; see
/// [`DType::block_len`] and [`DType::block_bytes`]. The byte layout of every
/// block is the one GGML writes into GGUF files.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum DType {
    /// IEEE binary32.
    F32 = 0,
    /// IEEE binary16.
    F16 = 1,
    /// 32 elements: f16 scale, 4-bit codes, value = (q − 8)·d.
    Q4_0 = 2,
    /// 32 elements: f16 scale and min, 4-bit codes, value = q·d + m.
    Q4_1 = 3,
    /// 32 elements: f16 scale, 5-bit codes, value = (q − 16)·d.
    Q5_0 = 6,
    /// 32 elements: f16 scale and min, 5-bit codes, value = q·d + m.
    Q5_1 = 7,
    /// 32 elements: f16 scale, signed 8-bit codes.
    Q8_0 = 8,
    /// 32 elements: f16 scale, f16 `d·Σq`, signed 8-bit codes (an activation format).
    Q8_1 = 9,
    /// 256 elements: 4-bit codes with 6-bit sub-block scales and mins.
    Q4_K = 12,
    /// 256 elements: 5-bit codes with 6-bit sub-block scales and mins.
    Q5_K = 13,
    /// 256 elements: 6-bit codes with signed 8-bit sub-block scales.
    Q6_K = 14,
    /// 256 elements: f32 scale, signed 8-bit codes, 16-element sums (an activation format).
    Q8_K = 15,
    /// 32 elements: f16 scale, 4-bit indices into a fixed non-linear table.
    IQ4_NL = 20,
    /// bfloat16.
    BF16 = 30,
    /// 256 elements: ternary codes in 2 bits each, f16 scale stored last.
    TQ2_0 = 35,
}

impl DType {
    /// Every format, in GGML id order.
    pub const ALL: [DType; 15] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::IQ4_NL,
        DType::BF16,
        DType::TQ2_0,
    ];

    /// GGML's name for the format (`ggml_type_name`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q8_0 => "q8_0",
            DType::Q8_1 => "q8_1",
            DType::Q4_K => "q4_K",
            DType::Q5_K => "q5_K",
            DType::Q6_K => "q6_K",
            DType::Q8_K => "q8_K",
            DType::IQ4_NL => "iq4_nl",
            DType::BF16 => "bf16",
            DType::TQ2_0 => "tq2_0",
        }
    }

    /// The GGML/GGUF type id.
    pub const fn ggml_id(self) -> u32 {
        self as u32
    }

    /// The format called `name` (GGML spelling, case-insensitive).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block (1 for the float formats).
    pub const fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q8_1
            | DType::IQ4_NL => 32,
            DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::Q8_K | DType::TQ2_0 => QK_K,
        }
    }

    /// Bytes per block (the element size for the float formats).
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q8_1 => 36,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
            DType::Q8_K => 292,
            DType::IQ4_NL => 18,
            DType::TQ2_0 => 66,
        }
    }

    /// Whether the format stores elements in multi-element blocks.
    pub const fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// The activation format GGML's CPU backend dots this weight format against
    /// (`vec_dot_type`), or `None` when the core defines no quantized dot for it
    /// (the float formats, and the activation-only formats Q8_1 and Q8_K).
    pub const fn vec_dot_type(self) -> Option<DType> {
        match self {
            DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL => Some(DType::Q8_0),
            DType::Q4_1 | DType::Q5_1 => Some(DType::Q8_1),
            DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::TQ2_0 => Some(DType::Q8_K),
            DType::F32 | DType::F16 | DType::BF16 | DType::Q8_1 | DType::Q8_K => None,
        }
    }

    /// Whether the format can hold GEMV weights in a fused kernel: every format
    /// except the activation-only Q8_1 and Q8_K.
    pub const fn is_weight_format(self) -> bool {
        !matches!(self, DType::Q8_1 | DType::Q8_K)
    }
}

impl core::fmt::Display for DType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
