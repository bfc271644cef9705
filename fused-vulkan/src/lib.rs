//! fused-vulkan backend (skeleton; its issue fills it).
