//! The Vulkan context: loader, instance (with the validation layer and a
//! debug-utils messenger when asked for), one device with one compute queue,
//! its subgroup properties and limits, buffers, the cache of compute
//! pipelines, and synchronous submission of recorded dispatches with
//! explicit barriers and timestamp queries.

use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ash::vk;
use ash::vk::Handle;

use crate::error::VulkanError;
use crate::pipeline::{self, Kernel, KernelKey};

/// The name of the Khronos validation layer.
const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How to open the context. The default opens the best device without the
/// validation layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextOptions {
    /// Enable `VK_LAYER_KHRONOS_validation` and record every warning or error
    /// it reports (see [`VulkanContext::validation_messages`]). Opening fails
    /// with [`VulkanError::NoValidationLayer`] when the layer is missing.
    pub validation: bool,
    /// Use device-local buffers reached through staging copies even where
    /// the device prefers host-visible ones (tests the staging path on
    /// lavapipe).
    pub staged_buffers: bool,
}

/// What the backend needs to know about the device (its `Debug` output
/// lists every field).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    /// The device name.
    pub(crate) name: String,
    /// The device type (discrete GPU, CPU, ...).
    pub(crate) device_type: vk::PhysicalDeviceType,
    /// Vulkan API version.
    pub(crate) api_version: u32,
    /// Subgroup size.
    pub(crate) subgroup_size: u32,
    /// Subgroup operations supported in compute shaders (empty when the
    /// compute stage has no subgroup support).
    pub(crate) subgroup_ops: vk::SubgroupFeatureFlags,
    /// `maxComputeWorkGroupInvocations`.
    pub(crate) max_invocations: u32,
    /// `maxComputeWorkGroupCount[0]` and `[1]`.
    pub(crate) max_groups: [u32; 2],
    /// `maxComputeSharedMemorySize` in bytes.
    pub(crate) max_shared_bytes: u32,
    /// `maxStorageBufferRange` in bytes.
    pub(crate) max_storage_range: u32,
    /// Nanoseconds per timestamp tick; `None` when the queue has no timestamps.
    pub(crate) timestamp_period_ns: Option<f32>,
    /// Buffers live in host-visible memory (every device-local memory type
    /// is host visible: a CPU or unified-memory device); otherwise they are
    /// device local and reached through staging copies.
    pub(crate) host_visible_buffers: bool,
    /// Shaders may read storage buffers as 16-bit words
    /// (`storageBuffer16BitAccess`, enabled on the device when present).
    pub(crate) storage_16bit: bool,
    /// Shaders may use integer dot products of packed 4×8-bit vectors
    /// (`VK_KHR_shader_integer_dot_product`, `shaderIntegerDotProduct`;
    /// enabled on the device when present).
    pub(crate) integer_dot: bool,
}

impl DeviceInfo {
    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device type (discrete GPU, CPU, ...).
    pub fn device_type(&self) -> vk::PhysicalDeviceType {
        self.device_type
    }

    /// The subgroup size the kernels are shaped for.
    pub fn subgroup_size(&self) -> u32 {
        self.subgroup_size
    }

    /// Nanoseconds per timestamp tick; `None` when the compute queue has no
    /// timestamps (and [`fused_core::backend::PlanTiming::device`] is `None`).
    pub fn timestamp_period_ns(&self) -> Option<f32> {
        self.timestamp_period_ns
    }

    /// Whether compute shaders may use subgroup shuffles.
    pub(crate) fn has_shuffle(&self) -> bool {
        self.subgroup_ops
            .contains(vk::SubgroupFeatureFlags::SHUFFLE)
    }
}

/// Recorded validation messages, written by the messenger callback.
type MessageLog = Mutex<Vec<String>>;

/// An open Vulkan device with one compute queue.
pub struct VulkanContext {
    _entry: ash::Entry,
    instance: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Boxed so that its address, handed to the messenger, never moves.
    messages: Box<MessageLog>,
    physical: vk::PhysicalDevice,
    pub(crate) device: ash::Device,
    queue: Mutex<vk::Queue>,
    command_pool: vk::CommandPool,
    query_pool: vk::QueryPool,
    memory: vk::PhysicalDeviceMemoryProperties,
    timestamp_mask: u64,
    /// `minStorageBufferOffsetAlignment`: descriptor offsets are multiples.
    storage_offset_alignment: u64,
    info: DeviceInfo,
    /// Built compute pipelines; the lock also serialises use of the
    /// command pool.
    pub(crate) kernels: Mutex<HashMap<KernelKey, Kernel>>,
    /// Dispatches completed (each followed by a barrier or the host's wait).
    dispatches: AtomicU64,
    /// The host-visible buffer of staged writes and reads, kept and grown.
    staging: Mutex<Option<Staging>>,
}

/// A host-visible buffer for the staged copies to and from device-local
/// buffers, kept from one to the next (every submission waits, so one
/// serves them all): allocating one per copy cost several milliseconds a
/// plan run on NVIDIA's driver. Raw handles, freed by the context.
#[derive(Debug)]
struct Staging {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// The mapping's address (host-visible memory, mapped for its life).
    ptr: usize,
    size: u64,
}

impl core::fmt::Debug for VulkanContext {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VulkanContext")
            .field("info", &self.info)
            .field("validation", &self.debug.is_some())
            .finish_non_exhaustive()
    }
}

/// The messenger callback: records every message it is given.
unsafe extern "system" fn record_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the loader passes a valid callback-data pointer (or null), and
    // `p_message` is a NUL-terminated string when not null.
    let text = unsafe {
        data.as_ref()
            .filter(|d| !d.p_message.is_null())
            .map(|d| CStr::from_ptr(d.p_message).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // SAFETY: `user` is the address of the context's boxed `MessageLog`,
    // which outlives the messenger (destroyed first in `Drop`).
    let log = unsafe { &*(user as *const MessageLog) };
    if let Ok(mut log) = log.lock() {
        log.push(format!("{severity:?}: {text}"));
    }
    vk::FALSE
}

fn messenger_info(log: &MessageLog) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(record_message))
        .user_data(log as *const MessageLog as *mut c_void)
}

/// A storage buffer of the context, destroyed on drop.
pub struct Buffer<'a> {
    ctx: &'a VulkanContext,
    pub(crate) buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
    mapped: Option<*mut u8>,
}

impl core::fmt::Debug for Buffer<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Buffer")
            .field("size", &self.size)
            .field("mapped", &self.mapped.is_some())
            .finish()
    }
}

impl Buffer<'_> {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        // SAFETY: the handles were created by this context's device, which is
        // alive (the buffer borrows the context); every submission waits for
        // its fence before returning, so the device no longer uses them.
        unsafe {
            self.ctx.device.destroy_buffer(self.buffer, None);
            self.ctx.device.free_memory(self.memory, None);
        }
    }
}

/// One compute dispatch: a kernel, its buffers in binding order, push
/// constants and a workgroup grid.
#[derive(Clone, Debug)]
pub(crate) struct Dispatch<'b> {
    pub kernel: KernelKey,
    pub buffers: Vec<&'b Buffer<'b>>,
    pub push: Vec<u8>,
    pub groups: [u32; 3],
}

/// One command of a submission.
#[derive(Clone, Debug)]
pub(crate) enum Command<'b> {
    /// A compute dispatch.
    Dispatch(Dispatch<'b>),
    /// A whole-buffer copy (`src` and `dst` the same size).
    Copy(&'b Buffer<'b>, &'b Buffer<'b>),
    /// `size` bytes from byte `src_offset` of `src` to byte `dst_offset` of
    /// `dst` (a staged partial write or read).
    CopyRange {
        src: vk::Buffer,
        src_offset: u64,
        dst: vk::Buffer,
        dst_offset: u64,
        size: u64,
    },
}

impl VulkanContext {
    /// Loads the Vulkan loader at run time and opens the best device with a
    /// compute queue (discrete GPU first, then integrated, virtual, CPU).
    /// Every failure is an `Err`.
    pub fn new(options: ContextOptions) -> Result<VulkanContext, VulkanError> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers;
        // that is the documented use of `Entry::load`.
        let entry =
            unsafe { ash::Entry::load() }.map_err(|e| VulkanError::NoLoader(e.to_string()))?;
        let messages: Box<MessageLog> = Box::new(Mutex::new(Vec::new()));
        let app = vk::ApplicationInfo::default()
            .application_name(c"fused-vulkan")
            .api_version(vk::API_VERSION_1_1);
        let mut layers = Vec::new();
        let mut extensions = Vec::new();
        if options.validation {
            // SAFETY: plain query of the loader.
            let available = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(VulkanError::vk("vkEnumerateInstanceLayerProperties"))?;
            if !available
                .iter()
                .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER))
            {
                return Err(VulkanError::NoValidationLayer);
            }
            layers.push(VALIDATION_LAYER.as_ptr());
            extensions.push(ash::ext::debug_utils::NAME.as_ptr());
            extensions.push(ash::ext::validation_features::NAME.as_ptr());
        }
        // Synchronization validation too: it checks the barriers.
        let enabled_features = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled_features);
        let mut instance_messenger = messenger_info(&messages);
        let mut create = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if options.validation {
            create = create
                .push_next(&mut instance_messenger)
                .push_next(&mut features);
        }
        // SAFETY: every pointer in `create` refers to locals alive here.
        let instance = unsafe { entry.create_instance(&create, None) }
            .map_err(VulkanError::vk("vkCreateInstance"))?;
        let debug = if options.validation {
            let loader = ash::ext::debug_utils::Instance::new(&entry, &instance);
            // SAFETY: the instance has the debug-utils extension enabled; the
            // user-data pointer stays valid until the messenger is destroyed.
            match unsafe { loader.create_debug_utils_messenger(&messenger_info(&messages), None) } {
                Ok(m) => Some((loader, m)),
                Err(e) => {
                    // SAFETY: nothing else was created from the instance.
                    unsafe { instance.destroy_instance(None) };
                    return Err(VulkanError::Vk {
                        call: "vkCreateDebugUtilsMessengerEXT",
                        result: e,
                    });
                }
            }
        } else {
            None
        };
        let mut partial = Partial {
            instance: Some(instance),
            debug,
        };
        let mut opened = open_device(partial.instance.as_ref().expect("instance"))?;
        opened.info.host_visible_buffers &= !options.staged_buffers;
        let (instance, debug) = partial.take();
        Ok(VulkanContext {
            _entry: entry,
            instance,
            debug,
            messages,
            physical: opened.physical,
            device: opened.device,
            queue: Mutex::new(opened.queue),
            command_pool: opened.command_pool,
            query_pool: opened.query_pool,
            memory: opened.memory,
            timestamp_mask: opened.timestamp_mask,
            storage_offset_alignment: opened.storage_offset_alignment,
            info: opened.info,
            kernels: Mutex::new(HashMap::new()),
            dispatches: AtomicU64::new(0),
            staging: Mutex::new(None),
        })
    }

    /// The device's properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Every validation warning or error reported so far (empty without
    /// validation).
    pub fn validation_messages(&self) -> Vec<String> {
        self.messages.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Compute dispatches completed so far. Every dispatch is followed by a
    /// full barrier (before the next command of its submission) or by the
    /// host's wait for the submission, so this counts both kernel calls and
    /// synchronisation points.
    pub(crate) fn dispatches(&self) -> u64 {
        self.dispatches.load(Ordering::Relaxed)
    }

    /// Whether the validation layer is on.
    pub fn validation_enabled(&self) -> bool {
        self.debug.is_some()
    }

    /// Sends `text` through the debug-utils messenger as a validation
    /// warning, as the layer would. Tests use it to check that a message
    /// really reaches [`VulkanContext::validation_messages`]. Returns whether
    /// validation (and so the messenger) is on. A test hook: documented
    /// with the `lab` feature; hidden, not part of the API, without it.
    #[cfg_attr(not(feature = "lab"), doc(hidden))]
    pub fn report_test_message(&self, text: &CStr) -> bool {
        let Some((loader, _)) = &self.debug else {
            return false;
        };
        let data = vk::DebugUtilsMessengerCallbackDataEXT::default().message(text);
        // SAFETY: the instance has the debug-utils extension enabled and
        // `data` points at live locals.
        unsafe {
            loader.submit_debug_utils_message(
                vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION,
                &data,
            );
        }
        true
    }

    /// Builds (once) the pipeline of `key`.
    pub(crate) fn kernel(&self, key: KernelKey) -> Result<(), VulkanError> {
        let mut cache = self
            .kernels
            .lock()
            .map_err(|_| VulkanError::Unsupported("kernel cache poisoned".into()))?;
        if cache.contains_key(&key) {
            return Ok(());
        }
        let kernel = pipeline::build(&self.device, key)?;
        cache.insert(key, kernel);
        Ok(())
    }

    fn memory_type(&self, bits: u32, flags: vk::MemoryPropertyFlags) -> Option<u32> {
        (0..self.memory.memory_type_count).find(|&i| {
            bits & (1 << i) != 0
                && self.memory.memory_types[i as usize]
                    .property_flags
                    .contains(flags)
        })
    }

    /// A storage buffer of `size` bytes (at least 4), host visible when the
    /// device prefers it (see `DeviceInfo::host_visible_buffers`).
    pub(crate) fn buffer(&self, size: u64) -> Result<Buffer<'_>, VulkanError> {
        let host = self.info.host_visible_buffers;
        self.buffer_in(size, host)
    }

    /// A host-visible, host-coherent buffer of `size` bytes (at least 4),
    /// mapped for its life, whatever the device prefers for storage.
    pub(crate) fn host_buffer(&self, size: u64) -> Result<Buffer<'_>, VulkanError> {
        self.buffer_in(size, true)
    }

    fn buffer_in(&self, size: u64, host: bool) -> Result<Buffer<'_>, VulkanError> {
        let size = size.max(4).next_multiple_of(4);
        if size > u64::from(self.info.max_storage_range) {
            return Err(VulkanError::Unsupported(format!(
                "buffer of {size} bytes exceeds maxStorageBufferRange {}",
                self.info.max_storage_range
            )));
        }
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info; the device is alive.
        let buffer = unsafe { self.device.create_buffer(&info, None) }
            .map_err(VulkanError::vk("vkCreateBuffer"))?;
        // SAFETY: `buffer` was just created by this device.
        let req = unsafe { self.device.get_buffer_memory_requirements(buffer) };
        let flags = if host {
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT
        } else {
            vk::MemoryPropertyFlags::DEVICE_LOCAL
        };
        let destroy = |e: VulkanError| {
            // SAFETY: the buffer is unused and owned here.
            unsafe { self.device.destroy_buffer(buffer, None) };
            e
        };
        let Some(type_index) = self.memory_type(req.memory_type_bits, flags) else {
            return Err(destroy(VulkanError::Unsupported(format!(
                "no memory type with {flags:?}"
            ))));
        };
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size)
            .memory_type_index(type_index);
        // SAFETY: valid allocate info for this device.
        let memory = unsafe { self.device.allocate_memory(&alloc, None) }
            .map_err(|e| destroy(VulkanError::vk("vkAllocateMemory")(e)))?;
        let free = |e: VulkanError| {
            // SAFETY: the memory is unused and owned here.
            unsafe { self.device.free_memory(memory, None) };
            destroy(e)
        };
        // SAFETY: `memory` satisfies the buffer's requirements and is unbound.
        unsafe { self.device.bind_buffer_memory(buffer, memory, 0) }
            .map_err(|e| free(VulkanError::vk("vkBindBufferMemory")(e)))?;
        let mapped = if host {
            // SAFETY: host-visible memory, mapped once for its whole life.
            let p = unsafe {
                self.device
                    .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            }
            .map_err(|e| free(VulkanError::vk("vkMapMemory")(e)))?;
            Some(p.cast::<u8>())
        } else {
            None
        };
        Ok(Buffer {
            ctx: self,
            buffer,
            memory,
            size,
            mapped,
        })
    }

    /// Runs `f` with the staging buffer (its handle and mapped address),
    /// at least `len` bytes long: the one kept, or a larger one replacing it.
    fn with_staging<R>(
        &self,
        len: usize,
        f: impl FnOnce(vk::Buffer, *mut u8) -> Result<R, VulkanError>,
    ) -> Result<R, VulkanError> {
        let mut kept = self
            .staging
            .lock()
            .map_err(|_| VulkanError::Unsupported("staging buffer poisoned".into()))?;
        let need = (len as u64).max(4);
        if kept.as_ref().is_none_or(|s| s.size < need) {
            if let Some(old) = kept.take() {
                // SAFETY: created by this device; every submission waits, so
                // the device no longer uses it.
                unsafe { self.free_staging(&old) };
            }
            // At least 64 KiB, and doubling, so that growing is rare.
            let buf = self.buffer_in(need.max(64 << 10).next_power_of_two(), true)?;
            let buf = core::mem::ManuallyDrop::new(buf);
            let ptr = buf.mapped.ok_or_else(|| {
                VulkanError::Unsupported("the staging buffer is not mapped".into())
            })?;
            *kept = Some(Staging {
                buffer: buf.buffer,
                memory: buf.memory,
                ptr: ptr as usize,
                size: buf.size,
            });
        }
        let s = kept.as_ref().expect("just set");
        f(s.buffer, s.ptr as *mut u8)
    }

    /// Frees a staging buffer's handles.
    ///
    /// # Safety
    /// `s` was created by this device and the device no longer uses it.
    unsafe fn free_staging(&self, s: &Staging) {
        // SAFETY: the caller's guarantee.
        unsafe {
            self.device.destroy_buffer(s.buffer, None);
            self.device.free_memory(s.memory, None);
        }
    }

    /// A buffer holding `data` (padded to 4 bytes).
    pub fn upload(&self, data: &[u8]) -> Result<Buffer<'_>, VulkanError> {
        let buf = self.buffer(data.len() as u64)?;
        self.write(&buf, data)?;
        Ok(buf)
    }

    /// A buffer holding `data`.
    pub(crate) fn upload_f32(&self, data: &[f32]) -> Result<Buffer<'_>, VulkanError> {
        self.upload(bytemuck::cast_slice(data))
    }

    /// Writes `data` at the start of `buf`.
    pub(crate) fn write(&self, buf: &Buffer<'_>, data: &[u8]) -> Result<(), VulkanError> {
        self.write_at(buf, 0, data)
    }

    /// Reads the start of `buf` into `out`.
    pub fn read(&self, buf: &Buffer<'_>, out: &mut [u8]) -> Result<(), VulkanError> {
        self.read_at(buf, 0, out)
    }

    /// Writes `data` into `buf` from byte `offset`.
    pub(crate) fn write_at(
        &self,
        buf: &Buffer<'_>,
        offset: usize,
        data: &[u8],
    ) -> Result<(), VulkanError> {
        let end = range_end(buf, offset, data.len())?;
        match buf.mapped {
            Some(p) => {
                // SAFETY: the mapping covers `buf.size >= end` bytes (checked
                // above); no submission is running (every submission
                // waits), so the device does not access the memory now.
                unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), p.add(offset), data.len()) };
                Ok(())
            }
            None if data.is_empty() => Ok(()),
            None => self.with_staging(data.len(), |staging, p| {
                // A device-local buffer: the bytes staged, then copied to
                // their range alone (a copy of the whole staging buffer
                // would overwrite the rest of `buf`).
                // SAFETY: the staging mapping holds at least `data.len()`
                // bytes; no submission is running.
                unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
                self.submit(
                    &[Command::CopyRange {
                        src: staging,
                        src_offset: 0,
                        dst: buf.buffer,
                        dst_offset: offset as u64,
                        size: (end - offset) as u64,
                    }],
                    false,
                )?;
                Ok(())
            }),
        }
    }

    /// Reads `out.len()` bytes of `buf` from byte `offset`.
    pub(crate) fn read_at(
        &self,
        buf: &Buffer<'_>,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), VulkanError> {
        let end = range_end(buf, offset, out.len())?;
        match buf.mapped {
            Some(p) => {
                // SAFETY: as in `write_at`; the last submission ended with a
                // barrier that makes shader and transfer writes visible to
                // the host, and its fence was waited for.
                unsafe {
                    core::ptr::copy_nonoverlapping(p.add(offset), out.as_mut_ptr(), out.len())
                };
                Ok(())
            }
            None if out.is_empty() => Ok(()),
            None => self.with_staging(out.len(), |staging, p| {
                // The range alone copied to the staging buffer, then read.
                self.submit(
                    &[Command::CopyRange {
                        src: buf.buffer,
                        src_offset: offset as u64,
                        dst: staging,
                        dst_offset: 0,
                        size: (end - offset) as u64,
                    }],
                    false,
                )?;
                // SAFETY: the staging mapping holds at least `out.len()`
                // bytes, which the copy just waited for wrote (its submission
                // ends with a host-visibility barrier).
                unsafe { core::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
                Ok(())
            }),
        }
    }

    /// Reads the start of `buf` into `out`.
    pub(crate) fn read_f32(&self, buf: &Buffer<'_>, out: &mut [f32]) -> Result<(), VulkanError> {
        self.read(buf, bytemuck::cast_slice_mut(out))
    }

    /// Records `commands` into one command buffer with a full compute/transfer
    /// barrier between consecutive commands and a host-visibility barrier at
    /// the end, submits it and waits. With `timed`, returns the device time
    /// between the first and the last command, in nanoseconds.
    pub(crate) fn submit(
        &self,
        commands: &[Command<'_>],
        timed: bool,
    ) -> Result<Option<f64>, VulkanError> {
        self.submit_with(commands, timed, true)
    }

    /// [`VulkanContext::submit`], with the barriers between consecutive
    /// commands left out when `ordered` is false: for commands that do not
    /// touch each other's outputs (the bench's back-to-back GEMVs).
    pub(crate) fn submit_with(
        &self,
        commands: &[Command<'_>],
        timed: bool,
        ordered: bool,
    ) -> Result<Option<f64>, VulkanError> {
        let mut times = Vec::with_capacity(1);
        self.submit_times(commands, timed, ordered, 1, &mut times)?;
        Ok(times.first().copied())
    }

    /// Records `commands` once (as [`VulkanContext::submit_with`]) and
    /// submits the recording `submissions` times, waiting for each; with
    /// `timed`, appends each submission's device time (nanoseconds) to
    /// `times`. Repeated submissions cost the host no recording (the bench
    /// keeps the GPU busy with them).
    pub(crate) fn submit_times(
        &self,
        commands: &[Command<'_>],
        timed: bool,
        ordered: bool,
        submissions: usize,
        times: &mut Vec<f64>,
    ) -> Result<(), VulkanError> {
        let period = match (timed, self.info.timestamp_period_ns) {
            (false, _) => None,
            (true, Some(p)) => Some(p),
            (true, None) => {
                return Err(VulkanError::Unsupported(
                    "the compute queue has no timestamps".into(),
                ));
            }
        };
        let kernels = self
            .kernels
            .lock()
            .map_err(|_| VulkanError::Unsupported("kernel cache poisoned".into()))?;
        let n_sets = commands
            .iter()
            .filter(|c| matches!(c, Command::Dispatch(_)))
            .count() as u32;
        let n_descriptors: u32 = commands
            .iter()
            .map(|c| match c {
                Command::Dispatch(d) => d.buffers.len() as u32,
                Command::Copy(..) | Command::CopyRange { .. } => 0,
            })
            .sum();
        let mut res = Resources::new(self);
        if n_sets > 0 {
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: n_descriptors.max(1),
            }];
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(n_sets)
                .pool_sizes(&sizes);
            // SAFETY: valid create info.
            res.descriptor_pool = unsafe { self.device.create_descriptor_pool(&info, None) }
                .map_err(VulkanError::vk("vkCreateDescriptorPool"))?;
        }
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.command_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device; access to it is serialised
        // by the kernel-cache lock held for the whole submission.
        res.command_buffer = unsafe { self.device.allocate_command_buffers(&alloc) }
            .map_err(VulkanError::vk("vkAllocateCommandBuffers"))?[0];
        // SAFETY: a fresh fence.
        res.fence = unsafe {
            self.device
                .create_fence(&vk::FenceCreateInfo::default(), None)
        }
        .map_err(VulkanError::vk("vkCreateFence"))?;
        let cb = res.command_buffer;
        let begin = vk::CommandBufferBeginInfo::default().flags(if submissions > 1 {
            vk::CommandBufferUsageFlags::empty()
        } else {
            vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT
        });
        // SAFETY: every handle recorded below belongs to this device and is
        // alive until the fence wait at the end of this function: buffers are
        // borrowed by `commands`, kernels by the held cache lock, the
        // descriptor pool and command buffer by `res`.
        unsafe {
            self.device
                .begin_command_buffer(cb, &begin)
                .map_err(VulkanError::vk("vkBeginCommandBuffer"))?;
            if period.is_some() {
                self.device.cmd_reset_query_pool(cb, self.query_pool, 0, 2);
                self.device.cmd_write_timestamp(
                    cb,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    self.query_pool,
                    0,
                );
            }
            for (i, command) in commands.iter().enumerate() {
                if i > 0 && ordered {
                    self.barrier(
                        cb,
                        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
                        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::SHADER_READ
                            | vk::AccessFlags::SHADER_WRITE
                            | vk::AccessFlags::TRANSFER_READ
                            | vk::AccessFlags::TRANSFER_WRITE,
                    );
                }
                match command {
                    Command::Copy(src, dst) => {
                        let region = vk::BufferCopy {
                            src_offset: 0,
                            dst_offset: 0,
                            size: src.size.min(dst.size),
                        };
                        self.device
                            .cmd_copy_buffer(cb, src.buffer, dst.buffer, &[region]);
                    }
                    &Command::CopyRange {
                        src,
                        src_offset,
                        dst,
                        dst_offset,
                        size,
                    } => {
                        let region = vk::BufferCopy {
                            src_offset,
                            dst_offset,
                            size,
                        };
                        self.device.cmd_copy_buffer(cb, src, dst, &[region]);
                    }
                    Command::Dispatch(d) => {
                        let kernel = kernels.get(&d.kernel).ok_or_else(|| {
                            VulkanError::Unsupported(format!("kernel {:?} not built", d.kernel))
                        })?;
                        let layouts = [kernel.set_layout];
                        let info = vk::DescriptorSetAllocateInfo::default()
                            .descriptor_pool(res.descriptor_pool)
                            .set_layouts(&layouts);
                        let set = self
                            .device
                            .allocate_descriptor_sets(&info)
                            .map_err(VulkanError::vk("vkAllocateDescriptorSets"))?[0];
                        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = d
                            .buffers
                            .iter()
                            .map(|b| {
                                [vk::DescriptorBufferInfo {
                                    buffer: b.buffer,
                                    offset: 0,
                                    range: vk::WHOLE_SIZE,
                                }]
                            })
                            .collect();
                        let writes = storage_writes(set, &infos);
                        self.device.update_descriptor_sets(&writes, &[]);
                        self.device.cmd_bind_pipeline(
                            cb,
                            vk::PipelineBindPoint::COMPUTE,
                            kernel.pipeline,
                        );
                        self.device.cmd_bind_descriptor_sets(
                            cb,
                            vk::PipelineBindPoint::COMPUTE,
                            kernel.layout,
                            0,
                            &[set],
                            &[],
                        );
                        if !d.push.is_empty() {
                            self.device.cmd_push_constants(
                                cb,
                                kernel.layout,
                                vk::ShaderStageFlags::COMPUTE,
                                0,
                                &d.push,
                            );
                        }
                        self.device
                            .cmd_dispatch(cb, d.groups[0], d.groups[1], d.groups[2]);
                    }
                }
            }
            if period.is_some() {
                self.device.cmd_write_timestamp(
                    cb,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    self.query_pool,
                    1,
                );
            }
            self.barrier(
                cb,
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
                vk::PipelineStageFlags::HOST,
                vk::AccessFlags::HOST_READ,
            );
            self.device
                .end_command_buffer(cb)
                .map_err(VulkanError::vk("vkEndCommandBuffer"))?;
            let cbs = [cb];
            let submit = vk::SubmitInfo::default().command_buffers(&cbs);
            for i in 0..submissions {
                if i > 0 {
                    self.device
                        .reset_fences(&[res.fence])
                        .map_err(VulkanError::vk("vkResetFences"))?;
                }
                {
                    let queue = self
                        .queue
                        .lock()
                        .map_err(|_| VulkanError::Unsupported("queue lock poisoned".into()))?;
                    self.device
                        .queue_submit(*queue, &[submit], res.fence)
                        .map_err(VulkanError::vk("vkQueueSubmit"))?;
                }
                self.device
                    .wait_for_fences(&[res.fence], true, u64::MAX)
                    .map_err(VulkanError::vk("vkWaitForFences"))?;
                self.dispatches
                    .fetch_add(u64::from(n_sets), Ordering::Relaxed);
                if let Some(p) = period {
                    let mut ts = [0u64; 2];
                    self.device
                        .get_query_pool_results(
                            self.query_pool,
                            0,
                            &mut ts,
                            vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                        )
                        .map_err(VulkanError::vk("vkGetQueryPoolResults"))?;
                    let ticks = ts[1].wrapping_sub(ts[0]) & self.timestamp_mask;
                    times.push(ticks as f64 * f64::from(p));
                }
            }
            Ok(())
        }
    }

    /// `minStorageBufferOffsetAlignment` (at least 1): a storage-buffer
    /// descriptor's offset must be a multiple of it.
    pub(crate) fn storage_offset_alignment(&self) -> u64 {
        self.storage_offset_alignment
    }

    /// The bits of a timestamp that are valid (all ones for 64).
    pub(crate) fn timestamp_mask(&self) -> u64 {
        self.timestamp_mask
    }

    /// The command pool every command buffer of this context comes from.
    /// Allocating, recording, resetting or freeing its command buffers is
    /// done while holding the kernel-cache lock ([`VulkanContext::kernels`]),
    /// as `submit` does.
    pub(crate) fn command_pool(&self) -> vk::CommandPool {
        self.command_pool
    }

    /// Submits the recorded command buffers `cbs` in one submission, in
    /// order, waits for `fence` (unsignalled, of this device) and resets it.
    ///
    /// # Safety
    /// Each of `cbs` is a command buffer of this device in the executable
    /// state, not pending, and every object they refer to is alive until
    /// this returns.
    pub(crate) unsafe fn submit_and_wait(
        &self,
        cbs: &[vk::CommandBuffer],
        fence: vk::Fence,
    ) -> Result<(), VulkanError> {
        let submit = vk::SubmitInfo::default().command_buffers(cbs);
        {
            let queue = self
                .queue
                .lock()
                .map_err(|_| VulkanError::Unsupported("queue lock poisoned".into()))?;
            // SAFETY: guaranteed by the caller; the queue is externally
            // synchronised by its lock.
            unsafe { self.device.queue_submit(*queue, &[submit], fence) }
                .map_err(VulkanError::vk("vkQueueSubmit"))?;
        }
        // SAFETY: the fence belongs to this device and was just submitted.
        let waited = unsafe { self.device.wait_for_fences(&[fence], true, u64::MAX) };
        if let Err(e) = waited {
            // The command buffer may still be pending: wait for the device
            // so that the caller may free what it refers to.
            // SAFETY: plain wait.
            let _ = unsafe { self.device.device_wait_idle() };
            return Err(VulkanError::vk("vkWaitForFences")(e));
        }
        // SAFETY: the fence is signalled and no longer in use.
        unsafe { self.device.reset_fences(&[fence]) }.map_err(VulkanError::vk("vkResetFences"))
    }

    /// Records a global memory barrier.
    ///
    /// # Safety
    /// `cb` is a command buffer of this device in the recording state.
    unsafe fn barrier(
        &self,
        cb: vk::CommandBuffer,
        src_stage: vk::PipelineStageFlags,
        src_access: vk::AccessFlags,
        dst_stage: vk::PipelineStageFlags,
        dst_access: vk::AccessFlags,
    ) {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(src_access)
            .dst_access_mask(dst_access);
        // SAFETY: the caller guarantees `cb` is recording.
        unsafe {
            self.device.cmd_pipeline_barrier(
                cb,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
        }
    }
}

/// Per-submission objects, released when the submission is done (or failed).
struct Resources<'a> {
    ctx: &'a VulkanContext,
    descriptor_pool: vk::DescriptorPool,
    command_buffer: vk::CommandBuffer,
    fence: vk::Fence,
}

impl<'a> Resources<'a> {
    fn new(ctx: &'a VulkanContext) -> Self {
        Resources {
            ctx,
            descriptor_pool: vk::DescriptorPool::null(),
            command_buffer: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
        }
    }
}

impl Drop for Resources<'_> {
    fn drop(&mut self) {
        let d = &self.ctx.device;
        // SAFETY: the objects belong to this device. If a submission is in
        // flight (an error after `vkQueueSubmit`), wait for the device first.
        unsafe {
            if !self.fence.is_null() && d.get_fence_status(self.fence) != Ok(true) {
                let _ = d.device_wait_idle();
            }
            if !self.command_buffer.is_null() {
                d.free_command_buffers(self.ctx.command_pool, &[self.command_buffer]);
            }
            if !self.descriptor_pool.is_null() {
                d.destroy_descriptor_pool(self.descriptor_pool, None);
            }
            if !self.fence.is_null() {
                d.destroy_fence(self.fence, None);
            }
        }
    }
}

/// The instance and messenger while the device is being opened: destroyed
/// on an early return.
struct Partial {
    instance: Option<ash::Instance>,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

impl Partial {
    fn take(
        &mut self,
    ) -> (
        ash::Instance,
        Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    ) {
        (
            self.instance.take().expect("instance taken once"),
            self.debug.take(),
        )
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        // SAFETY: the messenger and instance were created here and nothing
        // else refers to them (device creation failed).
        unsafe {
            if let Some((loader, m)) = self.debug.take() {
                loader.destroy_debug_utils_messenger(m, None);
            }
            if let Some(i) = self.instance.take() {
                i.destroy_instance(None);
            }
        }
    }
}

struct Opened {
    physical: vk::PhysicalDevice,
    device: ash::Device,
    queue: vk::Queue,
    command_pool: vk::CommandPool,
    query_pool: vk::QueryPool,
    memory: vk::PhysicalDeviceMemoryProperties,
    timestamp_mask: u64,
    storage_offset_alignment: u64,
    info: DeviceInfo,
}

fn type_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

/// Picks a device and a compute queue family and opens them.
fn open_device(instance: &ash::Instance) -> Result<Opened, VulkanError> {
    // SAFETY: the instance is alive.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .map_err(VulkanError::vk("vkEnumeratePhysicalDevices"))?;
    let mut best: Option<(u32, vk::PhysicalDevice, u32, vk::QueueFamilyProperties)> = None;
    for pd in devices {
        // SAFETY: `pd` came from this instance.
        let props = unsafe { instance.get_physical_device_properties(pd) };
        if props.api_version < vk::API_VERSION_1_1 {
            continue;
        }
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        // A compute family with timestamps; a compute-only one first.
        let family = families
            .iter()
            .enumerate()
            .filter(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .min_by_key(|(_, f)| {
                (
                    f.timestamp_valid_bits == 0,
                    f.queue_flags.contains(vk::QueueFlags::GRAPHICS),
                )
            });
        if let Some((fi, f)) = family {
            let rank = type_rank(props.device_type);
            if best.as_ref().is_none_or(|b| rank < b.0) {
                best = Some((rank, pd, fi as u32, *f));
            }
        }
    }
    let Some((_, physical, family, family_props)) = best else {
        return Err(VulkanError::NoDevice(
            "no Vulkan 1.1 device with a compute queue".into(),
        ));
    };
    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
    // SAFETY: a Vulkan 1.1 device; the chain points at a live local.
    unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
    let props = props2.properties;
    // SAFETY: plain query.
    let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
    let types = &memory.memory_types[..memory.memory_type_count as usize];
    let host_visible_buffers = types
        .iter()
        .filter(|t| {
            t.property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
        .all(|t| {
            t.property_flags.contains(
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
            )
        });
    // SAFETY: plain query of a physical device of this instance.
    let has_dot_ext = unsafe { instance.enumerate_device_extension_properties(physical) }
        .map_err(VulkanError::vk("vkEnumerateDeviceExtensionProperties"))?
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(ash::khr::shader_integer_dot_product::NAME));
    let mut storage16 = vk::PhysicalDevice16BitStorageFeatures::default();
    let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut storage16);
    if has_dot_ext {
        features2 = features2.push_next(&mut dot);
    }
    // SAFETY: a Vulkan 1.1 device; the chain points at live locals (the
    // integer-dot struct only where the device has its extension).
    unsafe { instance.get_physical_device_features2(physical, &mut features2) };
    let storage_16bit = storage16.storage_buffer16_bit_access == vk::TRUE;
    let integer_dot = has_dot_ext && dot.shader_integer_dot_product == vk::TRUE;
    let compute_subgroups = subgroup
        .supported_stages
        .contains(vk::ShaderStageFlags::COMPUTE);
    let info = DeviceInfo {
        name: props
            .device_name_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        device_type: props.device_type,
        api_version: props.api_version,
        subgroup_size: subgroup.subgroup_size,
        subgroup_ops: if compute_subgroups {
            subgroup.supported_operations
        } else {
            vk::SubgroupFeatureFlags::empty()
        },
        max_invocations: props.limits.max_compute_work_group_invocations,
        max_groups: [
            props.limits.max_compute_work_group_count[0],
            props.limits.max_compute_work_group_count[1],
        ],
        max_shared_bytes: props.limits.max_compute_shared_memory_size,
        max_storage_range: props.limits.max_storage_buffer_range,
        timestamp_period_ns: (family_props.timestamp_valid_bits > 0
            && props.limits.timestamp_compute_and_graphics == vk::TRUE)
            .then_some(props.limits.timestamp_period),
        host_visible_buffers,
        storage_16bit,
        integer_dot,
    };
    let timestamp_mask = match family_props.timestamp_valid_bits {
        0 => 0,
        64.. => u64::MAX,
        b => (1u64 << b) - 1,
    };
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    // Only the features the shaders use, and only where present.
    let mut enable16 = vk::PhysicalDevice16BitStorageFeatures::default()
        .storage_buffer16_bit_access(storage_16bit);
    let mut enable_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
        .shader_integer_dot_product(true);
    let dot_ext = [ash::khr::shader_integer_dot_product::NAME.as_ptr()];
    let mut create = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .push_next(&mut enable16);
    if integer_dot {
        create = create
            .enabled_extension_names(&dot_ext)
            .push_next(&mut enable_dot);
    }
    // SAFETY: valid create info referring to live locals.
    let device = unsafe { instance.create_device(physical, &create, None) }
        .map_err(VulkanError::vk("vkCreateDevice"))?;
    let destroy_device = |e: VulkanError| {
        // SAFETY: nothing created from the device is alive at these points
        // except what the caller of this closure destroyed first.
        unsafe { device.destroy_device(None) };
        e
    };
    // SAFETY: queue 0 of the family was requested above.
    let queue = unsafe { device.get_device_queue(family, 0) };
    let pool_info = vk::CommandPoolCreateInfo::default()
        .queue_family_index(family)
        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
    // SAFETY: valid create info.
    let command_pool = unsafe { device.create_command_pool(&pool_info, None) }
        .map_err(|e| destroy_device(VulkanError::vk("vkCreateCommandPool")(e)))?;
    let query_info = vk::QueryPoolCreateInfo::default()
        .query_type(vk::QueryType::TIMESTAMP)
        .query_count(2);
    // SAFETY: valid create info.
    let query_pool = match unsafe { device.create_query_pool(&query_info, None) } {
        Ok(q) => q,
        Err(e) => {
            // SAFETY: the pool is unused.
            unsafe { device.destroy_command_pool(command_pool, None) };
            return Err(destroy_device(VulkanError::vk("vkCreateQueryPool")(e)));
        }
    };
    Ok(Opened {
        physical,
        device,
        queue,
        command_pool,
        query_pool,
        memory,
        timestamp_mask,
        storage_offset_alignment: props.limits.min_storage_buffer_offset_alignment.max(1),
        info,
    })
}

impl Drop for VulkanContext {
    fn drop(&mut self) {
        // SAFETY: destruction in reverse order of creation, after the device
        // is idle: kernels, pools, device, messenger, instance. Buffers
        // borrow the context, so none is alive here.
        unsafe {
            let _ = self.device.device_wait_idle();
            if let Ok(mut kernels) = self.kernels.lock() {
                for (_, k) in kernels.drain() {
                    k.destroy(&self.device);
                }
            }
            if let Some(s) = self.staging.get_mut().ok().and_then(Option::take) {
                self.free_staging(&s);
            }
            self.device.destroy_query_pool(self.query_pool, None);
            self.device.destroy_command_pool(self.command_pool, None);
            self.device.destroy_device(None);
            if let Some((loader, m)) = self.debug.take() {
                loader.destroy_debug_utils_messenger(m, None);
            }
            self.instance.destroy_instance(None);
        }
        let _ = self.physical;
    }
}

/// The end of `len` bytes from `offset` in `buf`, or why they do not fit.
/// The writes binding `infos` to bindings 0, 1, ... of `set`, each a
/// storage buffer.
pub(crate) fn storage_writes(
    set: vk::DescriptorSet,
    infos: &[[vk::DescriptorBufferInfo; 1]],
) -> Vec<vk::WriteDescriptorSet<'_>> {
    infos
        .iter()
        .enumerate()
        .map(|(binding, info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(binding as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info)
        })
        .collect()
}

fn range_end(buf: &Buffer<'_>, offset: usize, len: usize) -> Result<usize, VulkanError> {
    let end = offset.checked_add(len).ok_or(fused_core::Error::Overflow {
        what: "Vulkan buffer range",
    })?;
    if end as u64 > buf.size {
        return Err(fused_core::Error::BufferTooShort {
            what: "Vulkan buffer range",
            needed: end,
            actual: buf.size as usize,
        }
        .into());
    }
    Ok(end)
}
