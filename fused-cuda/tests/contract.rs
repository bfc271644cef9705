//! The backend-contract suite (fused-testkit) on the CUDA backend. Without
//! a device (or without the `cuda` feature) every check prints `skipped:`,
//! unless `FUSED_REQUIRE_CUDA` is set, which makes that a failure.

fused_testkit::contract_suite!(fused_testkit::skip::backend_or_skip(
    "CUDA",
    Some("FUSED_REQUIRE_CUDA"),
    fused_cuda::CudaBackend::new
));
