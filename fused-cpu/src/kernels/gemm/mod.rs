//! GEMM micro-kernels: many activation columns against a tile of weight
//! rows decoded once, one file per ISA. The loops around them (tiles,
//! chunks, the epilogue) are in [`crate::gemm`].
//!
//! Two kinds of kernel:
//!
//! - **float** (f32 activations, every weight format, every ISA): weight
//!   rows are dequantized to f32 once per K chunk and swept against several
//!   columns at a time. Scalar and AVX2 ([`scalar`], [`x86_avx2`]): [`RR`]
//!   rows × [`CN`] columns, each (row, column) keeping a vector of partial
//!   sums over `k mod LANES` reduced once at the end; the scalar kernel has
//!   one lane and adds `w·x` in `k` order, which is exactly the core's
//!   reference ([`fused_core::reference::gemv::dot_f32`]). AVX-512
//!   ([`x86_avx512::micro_rows`]): rows in lanes, like the int kernel.
//! - **int** (Q8 activations, AVX2 and AVX-512 VNNI; Q4_0, Q5_0, Q8_0,
//!   IQ4_NL with Q8_0, Q4_K and Q6_K with Q8_K): a tile of [`RT`] rows is
//!   decoded to signed 8-bit codes in a rows-in-lanes layout (one 32-bit
//!   lane per row, four consecutive `k` per lane), so one multiply-add of a
//!   broadcast activation word adds four products to every row of a vector
//!   at once and no horizontal sum is ever needed. See [`int`],
//!   [`x86_avx512`] and [`x86_avx2`].
//!
//! Every accumulator is computed by the same operations whatever its place
//! in a tile or chunk (short tiles are padded with copies of a real row or
//! column whose results are dropped), so results do not depend on the row
//! range a thread was given nor on the epilogue.

use fused_core::DType;
use fused_core::acts::ActQuant;

use crate::isa::Isa;

#[cfg(target_arch = "x86_64")]
pub mod int;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
pub mod x86_avx2;
#[cfg(target_arch = "x86_64")]
pub mod x86_avx512;

// The float tiles and accumulators live on the stack of the calling
// thread. On 64-bit targets they are sized for the caches; on smaller ones
// (microcontrollers, where the stack may be a few KiB) for the stack: the
// whole float path then takes about 5 KiB (README, "Without std"). The
// sizes change which work is grouped, never a value.

/// Elements of K decoded per chunk: a multiple of every block length (256).
/// 512 on 64-bit targets, 256 on others.
#[cfg(target_pointer_width = "64")]
pub const KC: usize = 512;
/// Elements of K decoded per chunk: a multiple of every block length (256).
/// 512 on 64-bit targets, 256 on others.
#[cfg(not(target_pointer_width = "64"))]
pub const KC: usize = 256;
/// Columns per column chunk (one accumulator tile): 64 on 64-bit targets,
/// 16 on others.
#[cfg(target_pointer_width = "64")]
pub const NC: usize = 64;
/// Columns per column chunk (one accumulator tile): 64 on 64-bit targets,
/// 16 on others.
#[cfg(not(target_pointer_width = "64"))]
pub const NC: usize = 16;
/// Columns per micro-kernel call.
pub const CN: usize = 4;
/// Weight rows per float tile.
pub const RR: usize = 4;
/// Weight rows per int tile: four 16-lane vectors, swept two at a time.
pub const RT: usize = 64;
/// Most lanes a float accumulator of the `k`-in-lanes kernels uses: 8
/// (AVX2) on x86-64, 1 (the scalar kernel) elsewhere.
#[cfg(target_arch = "x86_64")]
pub const MAX_LANES: usize = 8;
/// Most lanes a float accumulator of the `k`-in-lanes kernels uses: 8
/// (AVX2) on x86-64, 1 (the scalar kernel) elsewhere.
#[cfg(not(target_arch = "x86_64"))]
pub const MAX_LANES: usize = 1;

/// A float tile: [`RR`] weight rows of one K chunk as f32.
pub type FloatTile = [[f32; KC]; RR];
/// The float accumulators of one column: per tile row, a lane vector.
pub type FloatAcc = [[f32; MAX_LANES]; RR];

/// The int formats: weight block layouts the int kernels decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntFormat {
    /// 32-element blocks with one f16 scale against Q8_0 (Q4_0, Q5_0, Q8_0,
    /// IQ4_NL).
    Legacy(DType),
    /// Q4_K against Q8_K.
    Q4K,
    /// Q6_K against Q8_K.
    Q6K,
}

/// The kernel path of a GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// f32 activations on `Isa` (which this machine supports).
    Float(Isa),
    /// Quantized activations on `Isa` (AVX2 or AVX-512 VNNI, which this
    /// machine supports).
    Int(Isa, IntFormat),
}

/// A GEMM kernel choice for one (ISA, weight format, activation mode).
/// Only [`gemm_kernel`] builds one, after checking that the ISA runs here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmKernel {
    pub(crate) path: Path,
    pub(crate) dtype: DType,
    pub(crate) mode: ActQuant,
}

impl GemmKernel {
    /// The weight format.
    pub const fn dtype(&self) -> DType {
        self.dtype
    }

    /// The activation mode.
    pub const fn mode(&self) -> ActQuant {
        self.mode
    }

    /// Whether this is the integer (quantized-activation) kernel.
    pub const fn is_int(&self) -> bool {
        matches!(self.path, Path::Int(..))
    }
}

/// The GEMM kernel for weights of `dtype` fed activations in `mode` on
/// `isa`, or `None` where the per-column path is used instead (quantized
/// activations below AVX2 or formats without an int kernel, an ISA this
/// machine does not run, or a mode the weights cannot take).
pub fn gemm_kernel(isa: Isa, dtype: DType, mode: ActQuant) -> Option<GemmKernel> {
    if !isa.is_supported() || mode.check(dtype).is_err() {
        return None;
    }
    let path = match mode {
        ActQuant::F32 => Path::Float(isa),
        _ if matches!(isa, Isa::Avx2 | Isa::Avx512) && cfg!(target_arch = "x86_64") => Path::Int(
            isa,
            match dtype {
                DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL => IntFormat::Legacy(dtype),
                DType::Q4_K => IntFormat::Q4K,
                DType::Q6_K => IntFormat::Q6K,
                _ => return None,
            },
        ),
        _ => return None,
    };
    Some(GemmKernel { path, dtype, mode })
}
