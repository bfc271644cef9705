//! Device-timed kernels (timestamp queries) for the bench binary.
