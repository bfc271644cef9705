//! What a device plan (`DevicePlan`) reports about a run, and how a run is
//! submitted: plain data, the same with and without the `cuda` feature.

/// What one run of a `DevicePlan` enqueues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevicePlanStats {
    /// Plan steps that launch a kernel (reshapes, views and inputs excluded).
    pub kernel_steps: u64,
    /// Kernel launches (one per kernel step, plus the activation
    /// quantizers, less the [`DevicePlanStats::grouped`] GEMVs; a step that
    /// is a plain copy counts here as one launch of the copy engine).
    pub launches: u64,
    /// Of the launches: activation quantizers (one per GEMV input in a
    /// quantized activation mode: a gated GEMV quantizes once for both
    /// weights, and a GEMV whose input the latest quantization still holds
    /// needs none).
    pub quantizations: u64,
    /// Activation quantizations that the GEMV producing the input wrote
    /// itself, with no quantizer launch (the lab's `Knob::FoldQuantizers`):
    /// not counted in [`DevicePlanStats::quantizations`].
    #[cfg(feature = "lab")]
    pub folded_quantizations: u64,
    /// Of the launches: GEMVs that start without waiting for the launch
    /// before them where the tuning's overlap is on (they touch nothing
    /// the GEMVs they overlap touch in a conflicting way).
    pub overlapping: u64,
    /// GEMV steps that run in one group launch with the GEMV steps just
    /// before them (one column, one kernel, no hazard between them; where
    /// the tuning's group was on when the plan was built): the
    /// projections of one input, such as q, k and v.
    pub grouped: u64,
    /// Device-to-device copies added for misaligned or in-place tensors.
    pub copies: u64,
    /// Bytes those copies move.
    pub copy_bytes: u64,
}

impl DevicePlanStats {
    /// Everything enqueued per run: launches and added copies.
    pub fn enqueued(&self) -> u64 {
        self.launches + self.copies
    }
}

/// How a run reaches the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submission {
    /// Every launch enqueued on the stream by the host, one by one.
    Stream,
    /// The launches captured once into a CUDA graph
    /// (`DevicePlan::capture_graph`) and replayed with one `cuGraphLaunch`.
    Graph,
}
