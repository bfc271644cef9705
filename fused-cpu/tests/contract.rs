//! The backend-contract suite (fused-testkit) on the CPU backend: the best
//! instruction set this machine has, and the scalar kernels (which must
//! equal the core's reference bit for bit), two threads each.

#![cfg(feature = "std")]

mod best {
    fused_testkit::contract_suite!(fused_testkit::skip::backend_or_skip("cpu", None, || {
        fused_cpu::CpuBackend::new(2)
    }));
}

mod scalar {
    fused_testkit::contract_suite!(fused_testkit::skip::backend_or_skip(
        "cpu-scalar",
        None,
        || fused_cpu::CpuBackend::with_isa(fused_cpu::Isa::Scalar, 2)
    ));
}
