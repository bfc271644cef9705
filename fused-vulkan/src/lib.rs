//! fused-vulkan: the Vulkan compute backend of `fused` (skeleton).
//!
//! Nothing is implemented yet. The backend (`ash`, loading the Vulkan loader at
//! run time, compute shaders compiled to SPIR-V) comes in its own issue; its
//! tests will run on Mesa's lavapipe, which `scripts/test` installs
//! (`mesa-vulkan-drivers`, `libvulkan1`, `vulkan-validationlayers`).
//! Until then this crate contains no code.
