//! Launch shapes and kernel variants: the tuned defaults in one table
//! ([`TABLE`], what [`Tuning::default`] returns), a [`Tuning`] value that
//! overrides them, and the pure functions that choose a kernel and its
//! launch shape from (device, shape, format, tuning). Nothing here touches
//! the device; `fwht_plans_fit_every_device_and_size` and
//! `gemv_shapes_fit_every_device` below check the choices on synthetic
//! devices.

// The shape types and their limits are public API with the `lab` feature
// only (re-exported from the crate root there); without it they are
// reached from nowhere outside the crate.
#![cfg_attr(not(feature = "lab"), allow(unreachable_pub))]

use ash::vk;
use fused_core::Error;
use fused_core::acts::ActQuant;
use fused_core::error::Unsupported;

use crate::context::DeviceInfo;
use crate::error::VulkanError;
use crate::pipeline::{GemvType, QuantFormat, Shader, check_mode, u32_of, units_per_block};

/// The most rows one GEMV workgroup computes.
pub const GEMV_MAX_ROWS: u32 = 8;
/// The most units each GEMV thread loads per loop trip.
pub const GEMV_MAX_UNROLL: u32 = 4;
/// The most slabs of rows an FWHT workgroup transforms.
pub const FWHT_MAX_SLABS: u32 = 16;
/// Shared memory the FWHT kernel may use for one exchange, in floats: 32
/// KiB, what lavapipe and NVIDIA both have (less where the device has
/// less), so that N = 32768 fits on any device.
const FWHT_SHARED_FLOATS: u32 = 8192;
/// The largest FWHT workgroup.
const FWHT_MAX_WG: u32 = 1024;

/// Rows a workgroup, units a thread per loop trip and lanes a weight block
/// (Q8 mode) of one class of GEMVs, for up to two columns (more columns
/// take one row a workgroup: their weights are already reused across
/// columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tile {
    pub rows: u32,
    pub unroll: u32,
    pub lanes: u32,
}

/// The tuned defaults, in one table. The sweeps behind the figures are in
/// `BENCHMARKS.md` (Vulkan on the H200 and on lavapipe).
pub(crate) const TABLE: Tuning = Tuning {
    // Enough threads to keep loads in flight, few enough for the shared
    // memory of the tree reduction on small devices.
    gemv_workgroup: 128,
    // Two rows share each x load.
    gemv_float: Tile {
        rows: 2,
        unroll: 2,
        lanes: 1,
    },
    // Quantized weights with f32 activations: four rows, since the x
    // values (4 bytes each) outweigh the weights (0.56 to 1.06 bytes).
    gemv_dequant: Tile {
        rows: 4,
        unroll: 2,
        lanes: 1,
    },
    // The Q8 mode, per weight format: the best of the H200 sweeps.
    gemv_q8_q8_0: Tile {
        rows: 2,
        unroll: 1,
        lanes: 2,
    },
    gemv_q8_q4_k: Tile {
        rows: 2,
        unroll: 1,
        lanes: 4,
    },
    gemv_q8_other: Tile {
        rows: 4,
        unroll: 2,
        lanes: 1,
    },
    gemv_shape: None,
    gemv_16bit_loads: true,
    integer_dot: true,
    fwht_variant: None,
    // 8 values a thread (N = 1024: 128 threads a row) kept more loads in
    // flight than 16 or 32 on the H200, with or without shuffles.
    fwht_values_per_thread: 8,
    fwht_min_workgroup: 128,
    fwht_slabs: 1,
    attention_shuffle: true,
    fold_attention_quantizer: true,
    append_in_attention: true,
    // About two workgroups per compute unit of a large GPU: on the H100 the
    // 8B-shaped token at context 4096 took 3893 µs at 256, 4094 at 512,
    // 4200 at 1024 and 2048, 4404 at 128 (two interleaved rounds each).
    attention_workgroups: 256,
    // 2 and 4 MiB beside each small kernel took 1 % off the 8B-shaped
    // token on the H100, 8 MiB less (the reads outlast the kernels).
    l2_between: 4 << 20,
    l2_reach: 1,
    // Several threads a block, their maxima joined through shared memory:
    // faster than one thread a block on the H200. 256 invocations: the
    // norm quantizer's scale takes one round of loads a 4096-value column
    // instead of four (8B-shaped Q4_0 token 2.5 % shorter than with 64 on
    // the H100).
    quantize_q8_0: QuantizeShape {
        workgroup: 256,
        values_per_thread: 4,
    },
    // The same blocks as Q8_0 with one more sum; not measured on its own.
    quantize_q8_1: QuantizeShape {
        workgroup: 256,
        values_per_thread: 4,
    },
    quantize_q8_k: QuantizeShape {
        workgroup: 64,
        values_per_thread: 8,
    },
};

/// Overrides of the tuned launch shapes and kernel variants. The default is
/// the tuned table; [`crate::VulkanBackend::set_tuning`] applies a value.
/// Every choice it leaves open is made from the device's properties (a
/// variant the device lacks is never used: 16-bit loads and integer dot
/// products are taken only where the device has them).
///
/// Without the `lab` feature two switches are public, both for a driver
/// that gets a feature path wrong: 16-bit weight loads and integer dot
/// products. With `lab`, every shape and variant can be set (for tests and
/// the bench).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    pub(crate) gemv_workgroup: u32,
    pub(crate) gemv_float: Tile,
    pub(crate) gemv_dequant: Tile,
    pub(crate) gemv_q8_q8_0: Tile,
    pub(crate) gemv_q8_q4_k: Tile,
    pub(crate) gemv_q8_other: Tile,
    /// One shape for every GEMV instead of the table's.
    pub(crate) gemv_shape: Option<GemvShape>,
    pub(crate) gemv_16bit_loads: bool,
    pub(crate) integer_dot: bool,
    /// The FWHT variant; `None`: shuffles where the device has them.
    pub(crate) fwht_variant: Option<FwhtVariant>,
    pub(crate) fwht_values_per_thread: u32,
    pub(crate) fwht_min_workgroup: u32,
    pub(crate) fwht_slabs: u32,
    /// Attention's scores with eight lanes a row joined by subgroup
    /// shuffles where the device has them; `false`: one invocation a row.
    pub(crate) attention_shuffle: bool,
    /// The attention's joining pass writes its output quantized for the
    /// GEMV that reads it (Q8_0), so that no quantizer dispatch follows.
    pub(crate) fold_attention_quantizer: bool,
    /// Attention's split pass does the key/value append recorded just
    /// before it, so that the append needs no dispatch of its own.
    pub(crate) append_in_attention: bool,
    /// The workgroups the attention splits of a long context aim at (a
    /// split is never shorter than 32 rows nor longer than 256).
    pub(crate) attention_workgroups: usize,
    /// Bytes of the next GEMV's weights read into L2 beside each small
    /// kernel between two GEMVs (the device plan's look-ahead; 0: none).
    pub(crate) l2_between: u64,
    /// How many GEMVs ahead the look-ahead may read once the next GEMV's
    /// weights are all read ahead (1: the next only).
    pub(crate) l2_reach: usize,
    pub(crate) quantize_q8_0: QuantizeShape,
    pub(crate) quantize_q8_1: QuantizeShape,
    pub(crate) quantize_q8_k: QuantizeShape,
}

impl Default for Tuning {
    /// The tuned table.
    fn default() -> Tuning {
        TABLE
    }
}

impl Tuning {
    /// Q8_0 and Q4_0 weights (2-byte-aligned blocks) read as 16-bit words
    /// where the device has `storageBuffer16BitAccess` (`true`, the
    /// default), or always cut out of 32-bit loads (`false`; the same bits).
    pub fn with_16bit_loads(self, on: bool) -> Tuning {
        Tuning {
            gemv_16bit_loads: on,
            ..self
        }
    }

    /// Q8-mode GEMVs dot their codes with integer dot products where the
    /// device has `shaderIntegerDotProduct` (`true`, the default), or always
    /// with plain integer arithmetic (`false`; the same bits).
    pub fn with_integer_dot(self, on: bool) -> Tuning {
        Tuning {
            integer_dot: on,
            ..self
        }
    }
}

/// The launch shape of the activation quantizer: each thread loads and
/// quantizes `values_per_thread` consecutive values; the threads of one
/// block (Q8_0: 32 values, Q8_K: 256) share one workgroup of `workgroup`
/// threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantizeShape {
    /// Threads per workgroup (a multiple of a block's threads).
    pub workgroup: u32,
    /// Values per thread: 4, 8, 16 or 32.
    pub values_per_thread: u32,
}

/// The launch shape of a GEMV: each workgroup of `workgroup` threads
/// computes `rows` consecutive rows; each thread loads `unroll` units (a few
/// code words of every row and the matching x values) per loop trip; the
/// partial sums are reduced with `subgroupAdd` or a shared-memory tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemvShape {
    /// Threads per workgroup (a power of two).
    pub workgroup: u32,
    /// Rows per workgroup (1 to [`GEMV_MAX_ROWS`]).
    pub rows: u32,
    /// Units per thread per loop trip (1 to [`GEMV_MAX_UNROLL`]).
    pub unroll: u32,
    /// Reduce with subgroup arithmetic (needs `ARITHMETIC` in compute
    /// shaders; in the Q8 mode also `SHUFFLE`); a shared-memory tree
    /// otherwise.
    pub subgroup_reduce: bool,
    /// Q8 mode only (ignored with f32 activations): consecutive threads
    /// sharing one weight block, their integer sums added through subgroup
    /// shuffles (a power of two up to the block's units: Q8_0 4, Q4_0 2,
    /// Q4_K 8; more than 1 needs `subgroup_reduce`).
    pub lanes: u32,
}

/// How the FWHT kernel exchanges values between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FwhtVariant {
    /// Subgroup shuffles for half-widths below the subgroup size, shared
    /// memory above (needs `SHUFFLE` in compute shaders).
    Shuffle,
    /// Shared memory for every cross-thread half-width.
    Shared,
}

/// The launch shape of one FWHT: threads per row, values per thread,
/// workgroup size and register slots per shared-memory exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwhtPlan {
    /// The variant.
    pub variant: FwhtVariant,
    /// Threads per row.
    pub threads_per_row: u32,
    /// Values per thread (`N / threads_per_row`).
    pub values_per_thread: u32,
    /// Threads per workgroup (a multiple of `threads_per_row`).
    pub workgroup: u32,
    /// Register slots exchanged per shared-memory round.
    pub chunk: u32,
    /// Consecutive values a thread loads and stores together: 4 (one
    /// vec4) where `values_per_thread` allows it, else 1.
    pub group: u32,
    /// Slabs of `workgroup / threads_per_row` rows each workgroup
    /// transforms in turn (the next slab's loads in flight meanwhile).
    pub slabs: u32,
}

/// Checks every setting of `t` against the device: the GEMV shape (if
/// set), the FWHT settings and the quantizer shapes.
pub(crate) fn check(info: &DeviceInfo, t: &Tuning) -> Result<(), VulkanError> {
    if let Some(s) = t.gemv_shape {
        check_gemv_shape(info, s, 1, false, None)?;
    }
    if !t.fwht_values_per_thread.is_power_of_two()
        || !t.fwht_min_workgroup.is_power_of_two()
        || !(1..=FWHT_MAX_SLABS).contains(&t.fwht_slabs)
    {
        return Err(VulkanError::Unsupported(format!(
            "FWHT tuning: {} values per thread, workgroup {}: not powers of two, or {} slabs \
             not 1 to {FWHT_MAX_SLABS}",
            t.fwht_values_per_thread, t.fwht_min_workgroup, t.fwht_slabs
        )));
    }
    if t.fwht_variant == Some(FwhtVariant::Shuffle) && !info.has_shuffle() {
        return Err(VulkanError::Unsupported(
            "subgroup shuffles in compute shaders".into(),
        ));
    }
    for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
        check_quantize_shape(info, quantize_shape(t, mode), mode)?;
    }
    Ok(())
}

// ------------------------------------------------------------ quantizer

/// The quantizer's launch shape for `mode` (Q8_0's for f32, which has no
/// quantizer).
pub(crate) fn quantize_shape(t: &Tuning, mode: ActQuant) -> QuantizeShape {
    match mode {
        ActQuant::Q8_K => t.quantize_q8_k,
        ActQuant::Q8_1 => t.quantize_q8_1,
        _ => t.quantize_q8_0,
    }
}

/// `Unsupported` unless `quantize.comp` can take `shape` for `mode` on
/// this device.
pub(crate) fn check_quantize_shape(
    info: &DeviceInfo,
    shape: QuantizeShape,
    mode: ActQuant,
) -> Result<(), VulkanError> {
    let QuantizeShape {
        workgroup,
        values_per_thread,
    } = shape;
    let block = QuantFormat::of(mode).map_or(32, QuantFormat::block) as u32;
    if workgroup == 0
        || ![4, 8, 16, 32].contains(&values_per_thread)
        || !workgroup.is_multiple_of(block / values_per_thread)
        || workgroup > info.max_invocations
    {
        return Err(VulkanError::Unsupported(format!(
            "quantizer shape {shape:?} for {mode:?}: values per thread not 4, 8, 16 or 32, \
             or a workgroup not a multiple of a block's threads or above the device's limit"
        )));
    }
    Ok(())
}

// ------------------------------------------------------------ FWHT

/// The FWHT variant: the tuning's, or shuffles where compute shaders have
/// them and shared memory otherwise.
pub(crate) fn fwht_variant(info: &DeviceInfo, t: &Tuning) -> FwhtVariant {
    match t.fwht_variant {
        Some(v) => v,
        None if info.has_shuffle() && info.subgroup_size > 1 => FwhtVariant::Shuffle,
        None => FwhtVariant::Shared,
    }
}

/// The FWHT launch shape for block size `n` on a device with `info`.
pub(crate) fn fwht_plan(info: &DeviceInfo, t: &Tuning, n: usize) -> Result<FwhtPlan, VulkanError> {
    let variant = fwht_variant(info, t);
    let mut plan = plan_fwht(
        info,
        variant,
        n,
        t.fwht_values_per_thread,
        t.fwht_min_workgroup,
    )?;
    plan.slabs = t.fwht_slabs;
    Ok(plan)
}

/// The FWHT launch shape aiming at `per_thread` values per thread and at
/// least `min_wg` threads per workgroup (both powers of two), one slab.
fn plan_fwht(
    info: &DeviceInfo,
    variant: FwhtVariant,
    n: usize,
    per_thread: u32,
    min_wg: u32,
) -> Result<FwhtPlan, VulkanError> {
    if variant == FwhtVariant::Shuffle && !info.has_shuffle() {
        return Err(VulkanError::Unsupported(
            "subgroup shuffles in compute shaders".into(),
        ));
    }
    let n = u32_of("FWHT block size", n)?;
    let sg = info.subgroup_size.max(1);
    let max_wg = prev_pow2(info.max_invocations.min(FWHT_MAX_WG));
    // At least a subgroup's worth of threads per row when N allows it.
    let tpr = (n / per_thread).max(n.min(sg)).min(max_wg).max(1);
    let workgroup = tpr.max(min_wg.max(sg).min(max_wg));
    let shared = prev_pow2((info.max_shared_bytes / 4).min(FWHT_SHARED_FLOATS));
    let values = n / tpr;
    let chunk = (shared / workgroup).clamp(1, values);
    if workgroup % sg != 0 && variant == FwhtVariant::Shuffle {
        return Err(VulkanError::Unsupported(format!(
            "workgroup {workgroup} is not a multiple of the subgroup size {sg}"
        )));
    }
    Ok(FwhtPlan {
        variant,
        threads_per_row: tpr,
        values_per_thread: values,
        workgroup,
        chunk,
        group: if values.is_multiple_of(4) { 4 } else { 1 },
        slabs: 1,
    })
}

// ------------------------------------------------------------ GEMV

/// The GEMV shape for `dtype` weights, activations fed per `mode`, and
/// `n_cols` columns, plain or gated (`glu`): the tuning's one shape if set,
/// else the table's for the format and mode fitted to the device; checked
/// against the device either way.
pub(crate) fn gemv_shape(
    info: &DeviceInfo,
    t: &Tuning,
    dtype: GemvType,
    mode: ActQuant,
    n_cols: usize,
    glu: bool,
) -> Result<GemvShape, VulkanError> {
    check_mode(dtype, mode)?;
    let n_cols = u32_of("GEMV columns", n_cols)?;
    let q8 = (mode != ActQuant::F32).then_some(dtype);
    let shape = match t.gemv_shape {
        Some(s) => s,
        None => pick_gemv_shape(info, t, dtype, q8.is_some(), n_cols, glu),
    };
    check_gemv_shape(info, shape, n_cols, glu, q8)?;
    Ok(shape)
}

/// The GEMV shader for a shape chosen by [`gemv_shape`]: plain or gated,
/// f32 or Q8 mode, with 16-bit weight loads where the tuning allows them,
/// the device has them and the format needs them (Q8_0, Q4_0), and integer
/// dot products where the tuning allows them and the device has them.
pub(crate) fn gemv_shader(
    info: &DeviceInfo,
    t: &Tuning,
    dtype: GemvType,
    mode: ActQuant,
    glu: bool,
    shape: GemvShape,
) -> Shader {
    let storage16 = uses_16bit_loads(info, t, dtype);
    let subgroup = shape.subgroup_reduce;
    if mode == ActQuant::F32 {
        Shader::Gemv {
            dtype,
            glu,
            subgroup,
            storage16,
        }
    } else {
        Shader::GemvQ8 {
            dtype,
            glu,
            subgroup,
            storage16,
            dot: t.integer_dot && info.integer_dot,
        }
    }
}

/// Whether GEMVs of `dtype` read their weights as 16-bit words.
pub(crate) fn uses_16bit_loads(info: &DeviceInfo, t: &Tuning, dtype: GemvType) -> bool {
    t.gemv_16bit_loads && info.storage_16bit && matches!(dtype, GemvType::Q8_0 | GemvType::Q4_0)
}

/// The table's GEMV shape for a device, weight format and activation mode
/// (`q8`: quantized activations): subgroup reduction where compute shaders
/// have subgroup arithmetic (and shuffles, in the Q8 mode), the table's
/// workgroup (fewer threads where the device allows fewer) and tile,
/// lanes only where the subgroup reduction and its size allow them;
/// shrunk until the partial sums fit in shared memory.
fn pick_gemv_shape(
    info: &DeviceInfo,
    t: &Tuning,
    dtype: GemvType,
    q8: bool,
    n_cols: u32,
    glu: bool,
) -> GemvShape {
    let subgroup_reduce = has_subgroup_add(info) && (!q8 || info.has_shuffle());
    let workgroup = prev_pow2(info.max_invocations.min(t.gemv_workgroup));
    let tile = match (q8, dtype) {
        (false, GemvType::F32 | GemvType::F16 | GemvType::BF16) => t.gemv_float,
        (false, _) => t.gemv_dequant,
        (true, GemvType::Q8_0) => t.gemv_q8_q8_0,
        (true, GemvType::Q4_K) => t.gemv_q8_q4_k,
        (true, _) => t.gemv_q8_other,
    };
    let rows = if n_cols >= 3 { 1 } else { tile.rows };
    let lanes = if subgroup_reduce {
        tile.lanes.min(prev_pow2(info.subgroup_size.max(1)))
    } else {
        1
    };
    let mut shape = GemvShape {
        workgroup,
        rows,
        unroll: tile.unroll,
        subgroup_reduce,
        lanes: lanes.min(workgroup),
    };
    let q8_type = q8.then_some(dtype);
    while check_gemv_shape(info, shape, n_cols, glu, q8_type).is_err() && shape.workgroup > 1 {
        if shape.rows > 1 {
            shape.rows /= 2;
        } else {
            shape.workgroup /= 2;
            shape.lanes = shape.lanes.min(shape.workgroup);
        }
    }
    shape
}

/// Whether compute shaders may use `subgroupAdd`.
fn has_subgroup_add(info: &DeviceInfo) -> bool {
    info.subgroup_size > 0
        && info
            .subgroup_ops
            .contains(vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC)
}

/// The partial sums per value the GEMV shader keeps in shared memory: one
/// per subgroup, or one per thread for the tree.
pub(crate) fn gemv_slots(info: &DeviceInfo, shape: GemvShape) -> u32 {
    if shape.subgroup_reduce {
        shape.workgroup.div_ceil(info.subgroup_size.max(1))
    } else {
        shape.workgroup
    }
}

/// Checks that `shape` is valid and fits the device for `n_cols` columns,
/// with f32 activations (`q8` `None`) or in the Q8 mode for weights `q8`.
fn check_gemv_shape(
    info: &DeviceInfo,
    shape: GemvShape,
    n_cols: u32,
    glu: bool,
    q8: Option<GemvType>,
) -> Result<(), VulkanError> {
    let bad = |why: String| {
        Err(VulkanError::Unsupported(format!(
            "GEMV shape {shape:?}: {why}"
        )))
    };
    if !shape.workgroup.is_power_of_two() || shape.workgroup > info.max_invocations {
        return bad(format!(
            "the workgroup must be a power of two up to {}",
            info.max_invocations
        ));
    }
    if !(1..=GEMV_MAX_ROWS).contains(&shape.rows) || !(1..=GEMV_MAX_UNROLL).contains(&shape.unroll)
    {
        return bad(format!(
            "rows 1 to {GEMV_MAX_ROWS}, unroll 1 to {GEMV_MAX_UNROLL}"
        ));
    }
    if shape.subgroup_reduce && !has_subgroup_add(info) {
        return bad("the device has no subgroup arithmetic in compute shaders".into());
    }
    if !shape.lanes.is_power_of_two() || shape.lanes > shape.workgroup {
        return bad("lanes must be a power of two up to the workgroup".into());
    }
    if let Some(dtype) = q8 {
        if shape.subgroup_reduce && !info.has_shuffle() {
            return bad("the device has no subgroup shuffles in compute shaders".into());
        }
        if shape.lanes > units_per_block(dtype)
            || (shape.lanes > 1
                && (!shape.subgroup_reduce || shape.lanes > info.subgroup_size.max(1)))
        {
            return bad(format!(
                "lanes above 1 need the subgroup reduction, at most {} (the block's units) \
                 and the subgroup size {}",
                units_per_block(dtype),
                info.subgroup_size
            ));
        }
    }
    let values = u64::from(shape.rows) * u64::from(n_cols) * if glu { 2 } else { 1 };
    let shared = 4 * values * u64::from(gemv_slots(info, shape));
    if shared > u64::from(info.max_shared_bytes) {
        return bad(format!(
            "{shared} bytes of shared memory for {n_cols} columns exceed {}",
            info.max_shared_bytes
        ));
    }
    Ok(())
}

/// The largest power of two `<= v` (1 for 0).
fn prev_pow2(v: u32) -> u32 {
    if v == 0 { 1 } else { 1 << v.ilog2() }
}

/// `Unsupported` for f32 activations, which have no quantizer.
pub(crate) fn quant_format(mode: ActQuant) -> Result<QuantFormat, Error> {
    QuantFormat::of(mode).ok_or(Error::Unsupported(Unsupported::ActQuant(mode)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::MAX_COLS;
    use ash::vk;

    fn device(subgroup: u32, invocations: u32, shared_kib: u32) -> DeviceInfo {
        DeviceInfo {
            name: "synthetic".into(),
            device_type: vk::PhysicalDeviceType::OTHER,
            api_version: vk::API_VERSION_1_1,
            subgroup_size: subgroup,
            subgroup_ops: vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::SHUFFLE,
            max_invocations: invocations,
            max_groups: [65535, 65535],
            max_shared_bytes: shared_kib * 1024,
            max_storage_range: u32::MAX,
            timestamp_period_ns: Some(1.0),
            host_visible_buffers: false,
            storage_16bit: false,
            integer_dot: false,
        }
    }

    /// Every N on lavapipe-, NVIDIA-, AMD-like and minimal devices gives a
    /// launch shape within the device's limits that covers the row.
    #[test]
    fn fwht_plans_fit_every_device_and_size() {
        for info in [
            device(8, 1024, 32),
            device(32, 1024, 48),
            device(64, 1024, 64),
            device(4, 128, 16),
            device(128, 1024, 16),
        ] {
            for (variant, (per_thread, min_wg)) in [
                (FwhtVariant::Shuffle, (8, 128)),
                (FwhtVariant::Shared, (8, 128)),
                (FwhtVariant::Shuffle, (16, 512)),
                (FwhtVariant::Shared, (32, 64)),
            ] {
                let mut n = 2u32;
                while n <= 32768 {
                    let p = plan_fwht(&info, variant, n as usize, per_thread, min_wg).unwrap();
                    let what = format!("{info:?} {p:?} N={n}");
                    assert_eq!(p.threads_per_row * p.values_per_thread, n, "{what}");
                    for v in [p.threads_per_row, p.values_per_thread, p.workgroup, p.chunk] {
                        assert!(v.is_power_of_two(), "{what}");
                    }
                    assert_eq!(p.workgroup % p.threads_per_row, 0, "{what}");
                    assert_eq!(p.values_per_thread % p.chunk, 0, "{what}");
                    assert_eq!(p.values_per_thread % p.group, 0, "{what}");
                    assert!(p.group == 1 || p.group == 4, "{what}");
                    assert!(p.workgroup <= info.max_invocations, "{what}");
                    assert!(p.workgroup * p.chunk * 4 <= info.max_shared_bytes, "{what}");
                    if variant == FwhtVariant::Shuffle {
                        assert_eq!(p.workgroup % info.subgroup_size, 0, "{what}");
                    }
                    n *= 2;
                }
            }
        }
        let mut no_shuffle = device(32, 1024, 48);
        no_shuffle.subgroup_ops = vk::SubgroupFeatureFlags::BASIC;
        assert!(plan_fwht(&no_shuffle, FwhtVariant::Shuffle, 64, 8, 128).is_err());
        assert_eq!(
            fwht_variant(&no_shuffle, &Tuning::default()),
            FwhtVariant::Shared
        );
        let forced = Tuning {
            fwht_variant: Some(FwhtVariant::Shuffle),
            ..Tuning::default()
        };
        assert!(check(&no_shuffle, &forced).is_err());
        assert!(check(&no_shuffle, &Tuning::default()).is_ok());
    }

    /// The picked GEMV shape fits lavapipe-, NVIDIA-, AMD-like and minimal
    /// devices for every column count, plain and gated, and reduces through
    /// subgroups only where the device has subgroup arithmetic.
    #[test]
    fn gemv_shapes_fit_every_device() {
        let mut arith = device(8, 1024, 32);
        arith.subgroup_ops |= vk::SubgroupFeatureFlags::ARITHMETIC;
        let t = Tuning::default();
        for info in [
            arith,
            device(32, 1024, 48),
            device(64, 256, 64),
            device(4, 128, 16),
            device(1, 64, 2),
        ] {
            for n_cols in 1..=MAX_COLS {
                for glu in [false, true] {
                    for (dtype, mode) in [
                        (GemvType::F16, ActQuant::F32),
                        (GemvType::BF16, ActQuant::F32),
                        (GemvType::Q4_0, ActQuant::F32),
                        (GemvType::Q8_0, ActQuant::Q8_0),
                        (GemvType::Q4_0, ActQuant::Q8_0),
                        (GemvType::Q4_K, ActQuant::Q8_K),
                    ] {
                        let s = gemv_shape(&info, &t, dtype, mode, n_cols, glu).unwrap();
                        let q8 = mode != ActQuant::F32;
                        let sg = has_subgroup_add(&info) && (!q8 || info.has_shuffle());
                        assert_eq!(s.subgroup_reduce, sg, "{info:?} {s:?}");
                    }
                }
            }
        }
    }

    /// 16-bit loads and integer dot products are used only where the
    /// tuning allows them and the device has them.
    #[test]
    fn feature_paths_need_the_device_and_the_tuning() {
        let mut info = device(32, 1024, 48);
        let t = Tuning::default();
        assert!(!uses_16bit_loads(&info, &t, GemvType::Q8_0));
        info.storage_16bit = true;
        assert!(uses_16bit_loads(&info, &t, GemvType::Q4_0));
        assert!(!uses_16bit_loads(&info, &t, GemvType::Q4_K));
        assert!(!uses_16bit_loads(
            &info,
            &t.with_16bit_loads(false),
            GemvType::Q4_0
        ));
        let shape = gemv_shape(&info, &t, GemvType::Q4_0, ActQuant::Q8_0, 1, false).unwrap();
        let dot = |info: &DeviceInfo, t: &Tuning| {
            matches!(
                gemv_shader(info, t, GemvType::Q4_0, ActQuant::Q8_0, false, shape),
                Shader::GemvQ8 { dot: true, .. }
            )
        };
        assert!(!dot(&info, &t));
        info.integer_dot = true;
        assert!(dot(&info, &t));
        assert!(!dot(&info, &t.with_integer_dot(false)));
    }
}
