//! The device, through the CUDA driver API (`cust`): context, stream and the
//! crate's kernel modules. [`CudaDevice`] is public in the lab only.
#![cfg_attr(not(feature = "lab"), allow(unreachable_pub))]

use crate::context_lock::{self, ContextUse, LockedDrop};
use crate::error::CudaError;
use cust::context::{Context, CurrentContext};
use cust::device::{Device, DeviceAttribute};
use cust::function::Function;
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};
use std::fmt;

/// Which compiled form of the kernels a device loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelForm {
    /// The cubin for the build's architecture (`sm_90` unless
    /// `FUSED_CUDA_ARCH` said otherwise at build time): no JIT.
    Cubin,
    /// The portable `compute_80` PTX, JIT-compiled by the driver.
    PortablePtx,
}

/// Bytes aligned for the driver's ELF loader.
#[repr(C, align(16))]
struct Aligned<T: ?Sized>(T);

/// One kernel file, as the build script compiled it.
struct KernelImage {
    name: &'static str,
    cubin: &'static Aligned<[u8]>,
    ptx: &'static str,
}

macro_rules! kernel_image {
    ($stem:literal) => {
        KernelImage {
            name: $stem,
            cubin: &Aligned(*include_bytes!(concat!(
                env!("OUT_DIR"),
                "/",
                $stem,
                ".cubin"
            ))),
            ptx: include_str!(concat!(env!("OUT_DIR"), "/", $stem, ".ptx")),
        }
    };
}

const PROBE: KernelImage = kernel_image!("probe");
const ELEMENTWISE: KernelImage = kernel_image!("elementwise");
const GEMV: KernelImage = kernel_image!("gemv");
const FWHT: KernelImage = kernel_image!("fwht");
const DECODE: KernelImage = kernel_image!("decode");

/// Whether the GEMV kernels' portable PTX defines the kernel `name`, for
/// host tests that check that a kernel name the launches build exists.
#[cfg(test)]
pub(crate) fn gemv_has(name: &str) -> bool {
    static ENTRIES: std::sync::OnceLock<std::collections::HashSet<&'static str>> =
        std::sync::OnceLock::new();
    ENTRIES.get_or_init(|| ptx_entries(GEMV.ptx)).contains(name)
}

/// [`gemv_has`] for the decode kernels.
#[cfg(test)]
pub(crate) fn decode_has(name: &str) -> bool {
    static ENTRIES: std::sync::OnceLock<std::collections::HashSet<&'static str>> =
        std::sync::OnceLock::new();
    ENTRIES
        .get_or_init(|| ptx_entries(DECODE.ptx))
        .contains(name)
}

/// The names of the kernels a PTX module defines (its `.entry` lines),
/// read once: the GEMV module is tens of megabytes, too long to search
/// again for every name a test checks.
#[cfg(test)]
fn ptx_entries(ptx: &'static str) -> std::collections::HashSet<&'static str> {
    ptx.lines()
        .filter_map(|l| l.strip_prefix(".visible .entry "))
        .filter_map(|l| l.split('(').next())
        .collect()
}

/// The largest dynamic shared memory a kernel of this crate asks for: one
/// row of the widest FWHT (32768 f32).
pub(crate) const MAX_DYNAMIC_SHARED: usize = fused_core::fwht::FWHT_MAX_N * 4;

/// Maps a driver error to [`CudaError::Driver`], saying what was being done.
pub(crate) fn driver(what: &'static str) -> impl FnOnce(cust::error::CudaError) -> CudaError {
    move |e| CudaError::Driver {
        what,
        message: format!("{e} ({e:?})"),
    }
}

/// A CUDA device, its context, stream and loaded kernels.
///
/// [`CudaDevice::new`] opens device 0 with `cust::quick_init` (its primary
/// context) and loads the crate's kernels (the cubin when the device can run
/// it, else the portable PTX), so a device that cannot run them fails there,
/// not at the first launch.
pub struct CudaDevice {
    // Field order is drop order: the modules and the stream, each released
    // under the context lock, go before the context.
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub(crate) probe: LockedDrop<Module>,
    pub(crate) elementwise: LockedDrop<Module>,
    pub(crate) gemv: LockedDrop<Module>,
    pub(crate) fwht: LockedDrop<Module>,
    pub(crate) decode: LockedDrop<Module>,
    pub(crate) stream: LockedDrop<Stream>,
    form: KernelForm,
    name: String,
    capability: (i32, i32),
    /// Streaming multiprocessors.
    sms: u32,
    ctx: Context,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice")
            .field("name", &self.name)
            .field("capability", &self.capability)
            .field("form", &self.form)
            .finish_non_exhaustive()
    }
}

/// Loads one kernel file in the given form.
fn load(image: &KernelImage, form: KernelForm) -> Result<Module, CudaError> {
    let loaded = match form {
        KernelForm::Cubin => Module::from_cubin(&image.cubin.0, &[]),
        KernelForm::PortablePtx => Module::from_ptx(image.ptx, &[]),
    };
    loaded.map_err(|e| CudaError::Driver {
        what: "load a kernel module",
        message: format!("{} ({form:?}): {e} ({e:?})", image.name),
    })
}

/// Raises `function`'s dynamic shared-memory limit to `bytes`.
fn allow_dynamic_shared(function: &Function<'_>, bytes: usize) -> Result<(), CudaError> {
    let bytes = i32::try_from(bytes).map_err(|_| fused_core::Error::Overflow {
        what: "dynamic shared memory",
    })?;
    // SAFETY: `function` is a live function handle of a loaded module (the
    // borrow keeps the module alive); the attribute and value are plain
    // integers; cust 0.3.2 has no safe wrapper for this call.
    let r = unsafe {
        cust::sys::cuFuncSetAttribute(
            function.to_raw(),
            cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes,
        )
    };
    check_result(
        r,
        "raise the dynamic shared-memory limit of fused_fwht_block",
    )
}

/// A raw driver result as `Ok`, or [`CudaError::Driver`] saying what was
/// being done (for the calls cust 0.3.2 has no wrapper for).
pub(crate) fn check_result(r: cust::sys::CUresult, what: &'static str) -> Result<(), CudaError> {
    if r == cust::sys::cudaError_enum::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Driver {
            what,
            message: format!("{r:?}"),
        })
    }
}

impl CudaDevice {
    /// Opens the first CUDA device and loads the crate's kernels.
    ///
    /// Fails with [`CudaError::Driver`] when there is no driver or no device,
    /// or when the device can run neither the cubin nor the portable PTX.
    pub fn new() -> Result<CudaDevice, CudaError> {
        // Module loads and stream creation wait for a capture elsewhere.
        let _use = context_lock::shared();
        let ctx = cust::quick_init().map_err(driver("initialise device 0"))?;
        let device = Device::get_device(0).map_err(driver("open device 0"))?;
        let name = device.name().map_err(driver("read the device name"))?;
        let major = device
            .get_attribute(DeviceAttribute::ComputeCapabilityMajor)
            .map_err(driver("read the compute capability"))?;
        let minor = device
            .get_attribute(DeviceAttribute::ComputeCapabilityMinor)
            .map_err(driver("read the compute capability"))?;
        let sms = device
            .get_attribute(DeviceAttribute::MultiprocessorCount)
            .map_err(driver("read the SM count"))?
            .max(1) as u32;
        let form = match load(&PROBE, KernelForm::Cubin) {
            Ok(_) => KernelForm::Cubin,
            Err(_) => KernelForm::PortablePtx,
        };
        let probe = load(&PROBE, form)?;
        let elementwise = load(&ELEMENTWISE, form)?;
        let gemv = load(&GEMV, form)?;
        let fwht = load(&FWHT, form)?;
        let decode = load(&DECODE, form)?;
        // The FWHT rows of N = 16384 and 32768 need more than the default 48 KiB.
        for (e, bytes) in [(16, MAX_DYNAMIC_SHARED / 2), (32, MAX_DYNAMIC_SHARED)] {
            let f = fwht
                .get_function(format!("fused_fwht_block_e{e}"))
                .map_err(driver("find fused_fwht_block"))?;
            allow_dynamic_shared(&f, bytes)?;
        }
        let stream =
            Stream::new(StreamFlags::NON_BLOCKING, None).map_err(driver("create a stream"))?;
        Ok(CudaDevice {
            probe: LockedDrop::new(probe),
            elementwise: LockedDrop::new(elementwise),
            gemv: LockedDrop::new(gemv),
            fwht: LockedDrop::new(fwht),
            decode: LockedDrop::new(decode),
            stream: LockedDrop::new(stream),
            form,
            name,
            capability: (major, minor),
            sms,
            ctx,
        })
    }

    /// The device's name, as the driver reports it.
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The compute capability, `(major, minor)`.
    pub fn capability(&self) -> (i32, i32) {
        self.capability
    }

    /// Which compiled form of the kernels runs.
    pub fn kernel_form(&self) -> KernelForm {
        self.form
    }

    /// Makes the device's context current on the calling thread and holds
    /// the context lock (shared) for the driver calls that follow, until
    /// the returned token is dropped.
    pub(crate) fn make_current(&self) -> Result<ContextUse, CudaError> {
        let using = context_lock::shared();
        CurrentContext::set_current(&self.ctx).map_err(driver("make the context current"))?;
        Ok(using)
    }

    /// Kernel `name` of `module` (one of this device's), with the device's
    /// context current.
    pub(crate) fn kernel<'m>(
        &self,
        module: &'m Module,
        name: &str,
    ) -> Result<Function<'m>, CudaError> {
        let _use = self.make_current()?;
        module.get_function(name).map_err(|e| CudaError::Driver {
            what: "find a kernel",
            message: format!("{name}: {e}"),
        })
    }

    /// Blocks of `threads` threads of kernel `name` of `module` that fit
    /// on one SM, as the driver computes it.
    fn blocks_per_sm(&self, module: &Module, name: &str, threads: u32) -> Result<u32, CudaError> {
        self.kernel(module, name)?
            .max_active_blocks_per_multiprocessor(threads.into(), 0)
            .map_err(|e| CudaError::Driver {
                what: "find a kernel's occupancy",
                message: format!("{name}: {e}"),
            })
    }

    /// Blocks of `threads` threads of the GEMV kernel `name` that fit on
    /// one SM.
    pub(crate) fn gemv_blocks_per_sm(&self, name: &str, threads: u32) -> Result<u32, CudaError> {
        self.blocks_per_sm(&self.gemv, name, threads)
    }

    /// Blocks of `threads` threads of the decode kernel `name` that the
    /// whole device holds at once: one wave of a grid.
    pub(crate) fn decode_resident_blocks(
        &self,
        name: &str,
        threads: u32,
    ) -> Result<usize, CudaError> {
        let per_sm = self.blocks_per_sm(&self.decode, name, threads)?;
        Ok(per_sm as usize * self.sms as usize)
    }
}
