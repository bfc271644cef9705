//! The device, through the CUDA driver API (`cust`).

use crate::CudaError;
use crate::error::check_axpy_lengths;
use cust::context::{Context, CurrentContext};
use cust::device::Device;
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};
use std::fmt;

/// PTX of `kernels/probe.cu`, compiled by the build script.
const PROBE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/probe.ptx"));

/// Threads per block of the probe kernel.
const PROBE_BLOCK: u32 = 256;

fn driver(what: &'static str) -> impl FnOnce(cust::error::CudaError) -> CudaError {
    move |e| CudaError::Driver {
        what,
        message: format!("{e} ({e:?})"),
    }
}

/// A CUDA device, its context, stream and loaded kernels.
///
/// [`CudaDevice::new`] opens device 0 with `cust::quick_init` (its primary
/// context) and loads the crate's PTX, so a device that cannot run the
/// kernels fails there, not at the first launch.
pub struct CudaDevice {
    // Field order is drop order: the module and the stream go before the context.
    probe: Module,
    stream: Stream,
    name: String,
    ctx: Context,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl CudaDevice {
    /// Opens the first CUDA device and loads the crate's kernels.
    ///
    /// Fails with [`CudaError::Driver`] when there is no driver or no device.
    pub fn new() -> Result<CudaDevice, CudaError> {
        let ctx = cust::quick_init().map_err(driver("initialise device 0"))?;
        let name = Device::get_device(0)
            .and_then(|d| d.name())
            .map_err(driver("read the device name"))?;
        let probe = Module::from_ptx(PROBE_PTX, &[]).map_err(driver("load probe.ptx"))?;
        let stream =
            Stream::new(StreamFlags::NON_BLOCKING, None).map_err(driver("create a stream"))?;
        Ok(CudaDevice {
            probe,
            stream,
            name,
            ctx,
        })
    }

    /// The device's name, as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the probe kernel: `y[i] = a·x[i] + y[i]` (one fused multiply-add).
    ///
    /// `x` and `y` must be equally long (at most `u32::MAX`).
    pub fn probe_axpy(&self, a: f32, x: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        let n = check_axpy_lengths(x.len(), y.len())?;
        if n == 0 {
            return Ok(());
        }
        CurrentContext::set_current(&self.ctx).map_err(driver("make the context current"))?;
        let x_dev = DeviceBuffer::from_slice(x).map_err(driver("copy x to the device"))?;
        let y_dev = DeviceBuffer::from_slice(y).map_err(driver("copy y to the device"))?;
        let function = self
            .probe
            .get_function("fused_probe_axpy_f32")
            .map_err(driver("find fused_probe_axpy_f32"))?;
        let stream = &self.stream;
        let grid = n.div_ceil(PROBE_BLOCK);
        // SAFETY: the arguments match the kernel's signature in kernels/probe.cu,
        // (float, const float*, float*, unsigned int), in order and type; both
        // buffers hold `n` f32 and stay alive until the stream is synchronised
        // below; the kernel touches only indices `< n`.
        let launched = unsafe {
            cust::launch!(function<<<grid, PROBE_BLOCK, 0, stream>>>(
                a,
                x_dev.as_device_ptr(),
                y_dev.as_device_ptr(),
                n
            ))
        };
        launched.map_err(driver("launch fused_probe_axpy_f32"))?;
        stream
            .synchronize()
            .map_err(driver("run fused_probe_axpy_f32"))?;
        y_dev.copy_to(y).map_err(driver("copy y to the host"))?;
        Ok(())
    }
}
