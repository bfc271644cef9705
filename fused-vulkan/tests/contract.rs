//! The backend-contract suite (fused-testkit) on the Vulkan backend
//! (lavapipe in CI). Without a device every check prints `skipped:`, unless
//! `FUSED_REQUIRE_VULKAN` is set, which makes that a failure.

fused_testkit::contract_suite!(fused_testkit::skip::backend_or_skip(
    "Vulkan",
    Some("FUSED_REQUIRE_VULKAN"),
    fused_vulkan::VulkanBackend::new
));
