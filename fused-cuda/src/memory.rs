//! Device memory the backend's entry points take: f32 vectors, weight
//! matrices in the kernels' layouts, quantized activations. Plain owners of
//! `cust` allocations; the backend (`backend.rs`) fills and reads them.

use crate::context_lock::LockedDrop;
use crate::error::CudaError;
use crate::qacts::QactsLayout;
use cust::memory::DeviceBuffer;
use fused_core::acts::ActQuant;
use fused_core::error::Unsupported;
use fused_core::{DType, Error};

/// An f32 vector in device memory.
pub struct DeviceVec {
    pub(crate) buf: LockedDrop<DeviceBuffer<f32>>,
}

impl std::fmt::Debug for DeviceVec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceVec")
            .field("len", &self.len())
            .finish()
    }
}

impl DeviceVec {
    /// Number of f32 elements.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == 0
    }

    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_device_ptr().as_raw()
    }
}

/// A weight matrix in device memory, in one of [`GEMV_DTYPES`](crate::GEMV_DTYPES), in the
/// layouts of the kernels that read it: quantized formats in the
/// f32-activation kernels' lane-interleaved layout (`src/layout.rs`: the
/// same bytes, rearranged once at upload) and in the integer kernels'
/// layout (`layout::to_device_int`). [`CudaBackend::upload_weights`](crate::CudaBackend::upload_weights)
/// prepares both, so that one upload serves every activation mode (at twice
/// the device memory for the quantized formats); a [`DevicePlan`](crate::DevicePlan)
/// prepares only the one its mode reads.
pub struct DeviceWeights {
    pub(crate) dtype: DType,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) row_bytes: usize,
    /// The f32-activation kernels' layout, where prepared.
    pub(crate) float_buf: Option<LockedDrop<DeviceBuffer<u8>>>,
    /// The integer kernels' layout (the quantized formats), where prepared.
    pub(crate) int_buf: Option<LockedDrop<DeviceBuffer<u8>>>,
}

impl std::fmt::Debug for DeviceWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceWeights")
            .field("dtype", &self.dtype)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("float_layout", &self.float_buf.is_some())
            .field("int_layout", &self.int_buf.is_some())
            .finish()
    }
}

impl DeviceWeights {
    /// The format.
    #[cfg(feature = "lab")]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output rows `M`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension `K`.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of the matrix (one layout; what one GEMV reads).
    #[cfg(feature = "lab")]
    pub fn bytes(&self) -> usize {
        self.rows * self.row_bytes
    }

    /// Device bytes held: every layout prepared.
    pub(crate) fn held_bytes(&self) -> usize {
        [&self.float_buf, &self.int_buf]
            .into_iter()
            .flatten()
            .map(|b| b.len())
            .sum()
    }

    /// The device address and length of the layout a GEMV fed per `mode`
    /// reads: the integer layout for quantized activations, else the
    /// float one; a layout not prepared is [`Unsupported::ActQuant`].
    pub(crate) fn layout_extent(&self, mode: ActQuant) -> Result<(u64, usize), CudaError> {
        let buf = if mode == ActQuant::F32 {
            &self.float_buf
        } else {
            &self.int_buf
        };
        let buf = buf
            .as_ref()
            .ok_or(Error::Unsupported(Unsupported::ActQuant(mode)))?;
        Ok((buf.as_device_ptr().as_raw(), buf.len()))
    }

    /// The device address of the layout a GEMV fed per `mode` reads
    /// ([`DeviceWeights::layout_extent`]).
    pub(crate) fn layout_addr(&self, mode: ActQuant) -> Result<u64, CudaError> {
        Ok(self.layout_extent(mode)?.0)
    }

    /// Bytes of one row (in the core's layout).
    pub(crate) fn row_bytes(&self) -> usize {
        self.row_bytes
    }
}

/// Activation columns quantized on the device (the core's
/// [`ActQuant::Q8_0`], [`ActQuant::Q8_1`] or [`ActQuant::Q8_K`] mode), in the integer GEMV
/// kernels' layout (`src/qacts.rs`).
pub struct DeviceActs {
    pub(crate) layout: QactsLayout,
    pub(crate) buf: LockedDrop<DeviceBuffer<u8>>,
}

impl std::fmt::Debug for DeviceActs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceActs")
            .field("mode", &self.layout.mode)
            .field("k", &self.layout.k)
            .field("n_cols", &self.layout.n_cols)
            .finish()
    }
}

impl DeviceActs {
    /// The activation mode.
    #[cfg(feature = "lab")]
    pub fn mode(&self) -> ActQuant {
        self.layout.mode
    }

    /// Columns.
    #[cfg(feature = "lab")]
    pub fn n_cols(&self) -> usize {
        self.layout.n_cols
    }

    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_device_ptr().as_raw()
    }
}
