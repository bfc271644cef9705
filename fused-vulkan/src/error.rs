//! The error type of the Vulkan backend.

use ash::vk;

/// Everything that can go wrong in the Vulkan backend.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum VulkanError {
    /// Bad input, as the core defines it (shape, length, format).
    Core(fused_core::Error),
    /// The Vulkan loader library could not be loaded.
    NoLoader(String),
    /// No usable device: none present, or none with what the backend needs.
    NoDevice(String),
    /// `VK_LAYER_KHRONOS_validation` was asked for but is not installed.
    NoValidationLayer,
    /// A Vulkan call failed.
    Vk {
        /// The call.
        call: &'static str,
        /// Its result code.
        result: vk::Result,
    },
    /// The device cannot run this call (a limit or a missing feature).
    Unsupported(String),
}

impl VulkanError {
    /// Wraps a failed Vulkan call.
    pub(crate) fn vk(call: &'static str) -> impl FnOnce(vk::Result) -> VulkanError {
        move |result| VulkanError::Vk { call, result }
    }

    /// Whether the error says that no Vulkan device can be used at all (the
    /// condition tests report as a skip).
    pub fn is_no_device(&self) -> bool {
        matches!(
            self,
            VulkanError::NoLoader(_) | VulkanError::NoDevice(_) | VulkanError::NoValidationLayer
        ) || matches!(
            self,
            VulkanError::Vk {
                call: "vkCreateInstance",
                ..
            }
        )
    }
}

impl core::fmt::Display for VulkanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VulkanError::Core(e) => write!(f, "{e}"),
            VulkanError::NoLoader(why) => write!(f, "Vulkan loader not found: {why}"),
            VulkanError::NoDevice(why) => write!(f, "no usable Vulkan device: {why}"),
            VulkanError::NoValidationLayer => {
                f.write_str("VK_LAYER_KHRONOS_validation is not installed")
            }
            VulkanError::Vk { call, result } => write!(f, "{call} failed: {result}"),
            VulkanError::Unsupported(why) => write!(f, "not supported by this device: {why}"),
        }
    }
}

impl std::error::Error for VulkanError {}

impl From<fused_core::Error> for VulkanError {
    fn from(e: fused_core::Error) -> Self {
        VulkanError::Core(e)
    }
}
