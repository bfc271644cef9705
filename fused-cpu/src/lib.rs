//! fused-cpu backend (skeleton; its issue fills it).
