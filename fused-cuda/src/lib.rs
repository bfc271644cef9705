//! fused-cuda backend (skeleton; its issue fills it).
