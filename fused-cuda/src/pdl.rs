//! Programmatic dependent launch (Hopper and newer): `cuLaunchKernelEx`
//! with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, which lets
//! a kernel start while the kernel before it on the stream still runs; the
//! kernel itself waits for its predecessor's results (`griddepcontrol.wait`,
//! `griddep_wait` in `kernels/gemv.cu`) before it reads them.
//!
//! `cust` 0.3.2 binds the CUDA 11 driver API, which has no
//! `cuLaunchKernelEx`; the declarations below follow `cuda.h` of CUDA 12+
//! (`CUlaunchConfig`, `CUlaunchAttribute`), whose layouts are checked at
//! compile time.

use cust::sys::{CUfunction, CUresult, CUstream};
use std::ffi::c_void;

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`.
const ATTR_PROGRAMMATIC_STREAM_SERIALIZATION: u32 = 6;

/// `CUlaunchAttribute`: an id, padding to 8 bytes, a 64-byte value union.
#[repr(C)]
struct LaunchAttribute {
    id: u32,
    pad: [u8; 4],
    value: [u64; 8],
}

/// `CUlaunchConfig`.
#[repr(C)]
struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: CUstream,
    attrs: *mut LaunchAttribute,
    num_attrs: u32,
}

const _: () = {
    assert!(core::mem::size_of::<LaunchAttribute>() == 72);
    assert!(core::mem::offset_of!(LaunchConfig, stream) == 32);
    assert!(core::mem::size_of::<LaunchConfig>() == 56);
};

unsafe extern "C" {
    fn cuLaunchKernelEx(
        config: *const LaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CUresult;
}

/// Launches `f` on `stream` (1-D grid and block, `shared` bytes of dynamic
/// shared memory) allowed to overlap the previous kernel on the stream.
///
/// # Safety
/// As `cuLaunchKernel`: `args` must match the kernel's parameters and every
/// address they carry be valid for its accesses; the kernel must wait
/// (`griddepcontrol.wait`) before it reads anything the previous kernel on
/// the stream writes.
pub(crate) unsafe fn launch(
    f: CUfunction,
    grid: u32,
    block: u32,
    shared: u32,
    stream: CUstream,
    args: &[*mut c_void],
) -> CUresult {
    let mut attr = LaunchAttribute {
        id: ATTR_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value: [1, 0, 0, 0, 0, 0, 0, 0], // programmaticStreamSerializationAllowed = 1
    };
    let config = LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_mem_bytes: shared,
        stream,
        attrs: &mut attr,
        num_attrs: 1,
    };
    // SAFETY: `config` and `attr` live across the call, laid out as cuda.h
    // declares them (checked above); the argument pointers and the kernel's
    // requirements are the caller's.
    unsafe {
        cuLaunchKernelEx(
            &config,
            f,
            args.as_ptr() as *mut *mut c_void,
            std::ptr::null_mut(),
        )
    }
}
