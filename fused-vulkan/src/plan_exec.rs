//! A device-resident plan executor: [`DevicePlan`] keeps every buffer of a
//! graph on the device and runs a whole [`Plan`] as one recorded command
//! buffer, one submission and one fence wait per run.
//!
//! Built once from a graph, a plan (fused, or [`Plan::unfused`]) and the
//! graph's buffer sizes:
//!
//! - one device buffer per graph [`BufferId`] (device local where the device
//!   has separate memory, host visible on unified-memory devices such as
//!   lavapipe), filled by [`ResidentPlan::write_all`] from any core
//!   [`Buffers`](fused_core::memory::Buffers) (the reference evaluator's `Memory` among them);
//! - every kernel step becomes one dispatch of the backend's own kernels
//!   (the same pipelines and launch shapes as the host-slice entry points),
//!   each tensor bound in place through a descriptor's offset and range;
//! - a pipeline barrier (buffer memory barriers over the ranges written
//!   since the previous barrier) is recorded only between commands that
//!   depend on each other (read after write, write after read or write, by
//!   byte range), and counted ([`DevicePlanStats::barriers`]);
//! - the command buffer is recorded once and submitted again on every
//!   [`DevicePlan::run`]; [`DevicePlan::run_timed`] brackets it with
//!   timestamp queries and a wall clock.
//!
//! Copies (`vkCmdCopyBuffer`, recorded in the same command buffer and
//! counted in [`DevicePlanStats::copies`]) stand in where a tensor cannot be
//! bound in place:
//! - a tensor whose byte offset is not a multiple of the device's
//!   `minStorageBufferOffsetAlignment` and of 16 ([`BINDING_ALIGN`]: shaders
//!   may load 16-byte vectors from a binding) is copied into an aligned
//!   scratch buffer before the dispatch that reads it, or written there and
//!   copied to its place after the dispatch that writes it;
//! - an input of a GEMV or an FWHT that is the kernel's own output (an
//!   in-place transform) is read from a copy made first: other workgroups
//!   would read what one has already written (the element-wise kernels read
//!   each element in the invocation that writes it, and read in place);
//! - the GEMV shader reads every epilogue operand from one binding at
//!   element offsets given in push constants: operands that share one
//!   buffer (the usual case, e.g. the residual stream) are read in place
//!   through a binding that spans them all; operands spread over several
//!   buffers, or not 4-byte aligned, are copied into a per-step operand
//!   buffer first.
//!
//! An operand that is the GEMV's own output (an in-place residual add) is
//! read and written through two bindings of the same memory: each output
//! element is read by the invocation that then writes it, and its new value
//! depends on the read, so the read comes first. A partial overlap is an
//! [`Error::AliasViolation`].
//!
//! What it refuses, as [`Error::Unsupported`] or a typed dtype error before
//! anything is recorded: strided (non-contiguous) tensors, element-wise or
//! GEMV activations that are not F32 (the host executor widens F16 on the
//! host), a broadcast operand of an element-wise node other than one
//! repeated over rows (a row-bias add, a multiply by `ne[1]` rows that the
//! rows of the input repeat), GEMV weight formats,
//! activation modes and column counts the kernels lack (as
//! [`StepKernels::supports_gemv`] says).
//!
//! With GGML's quantized activations ([`GemvMode::Ggml`]: Q8_0, Q8_1 or
//! Q8_K, as GGML pairs them with each quantized weight format), each GEMV
//! step first dispatches the
//! activation quantizer into one scratch buffer that every step reuses
//! (a gated step quantizes once for both weights); the barrier rules
//! above order the reuse. A step whose input the latest quantization
//! already holds (nothing wrote that input or the scratch since, same
//! mode and shape: the unfused gate and up GEMVs of one input) reads it
//! without quantizing again ([`fused_core::reuse`], the CUDA plan's rule
//! too). A step whose Q8_0 or Q8_1 input is exactly the output of the
//! attention's joining pass recorded just before it has that pass write
//! the quantization as well, with the quantizer's own code (heads of whole
//! 32-value blocks, one column), so no quantizer dispatch follows it.
//!
//! The decode ops ([`fused_core::decode`]: RoPE, the row write, attention,
//! argmax) read the token position from device memory when the plan runs,
//! so the one recorded command buffer serves every token: the caller writes
//! the position before each run. Their kernels address every tensor from
//! an element offset within its binding, so each tensor at a 4-byte
//! boundary is bound in place, copies never. A row write placed on its
//! destination (the KV-cache append) writes its row alone, but counts as
//! writing the whole destination for the barriers, since the row is known
//! only on the device. The core's fused key/value append is one dispatch
//! that writes q's RoPE, k's RoPE into its cache row and v into its own,
//! counted as writing q's destination and both whole caches; where the
//! attention recorded right after it reads exactly its q destination, caches
//! and position, attention's split pass does the append itself and the
//! append has no dispatch (`append_in_attention.rs`). Attention
//! over a cache longer than one split, and argmax over a long column, take
//! a second dispatch that joins the splits' partial results. Attention
//! heads of more than 256 values, and sources overlapping an output other
//! than in place, are refused as unsupported (the host plan runs them).
//!
//! With the tuning's `l2_between` (4 MiB; a lab knob), each small
//! kernel between two GEMVs gets a read of the next window of the next
//! GEMV's weights beside it, with no barrier between them, so that the
//! weights stream into L2 while the small kernel leaves the memory idle
//! (`look_ahead.rs`, its windows placed by `fused_core::look_ahead` as
//! CUDA's are; counted in [`DevicePlanStats::look_aheads`]).
//!
//! Where the buffers are device local, the graph's small inputs and
//! outputs have host mirrors (`mirrors.rs`): a write such an input covers
//! fills its mirror, whose recorded copy (to its place, and to its
//! pristine copy where the plan overwrites it) the next run submits with
//! itself, and each run ends by copying the small outputs to theirs, so a
//! token's write, run and read are one submission.
//!
//! Graph inputs that the plan overwrites in place (a residual stream) are
//! kept in pristine device copies at upload; [`DevicePlan::restore_inputs`]
//! copies them back (one more submission), so that every timed run
//! ([`DevicePlan::time_once`]) starts from the same inputs. State inputs
//! (KV caches, `Graph::state`) are not: runs update them on purpose.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ash::vk;
use ash::vk::Handle;
use fused_core::acts::ActQuant;
use fused_core::acts::GemvMode;
use fused_core::backend::{PlanStats, PlanTiming, ResidentPlan, buffer_range};
use fused_core::decode::{AttentionShape, MAX_ARGMAX_LEN, RopeMode, attention_rows};
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, MAX_STAGES};
use fused_core::error::{Unsupported, check_len};
use fused_core::exec::StepKernels;
use fused_core::fwht::FwhtDesc;
use fused_core::graph::{Graph, Op};
use fused_core::lower::{BinaryOp, Broadcast, CommandSink, KvAppendOperands, NormLoad, lower_into};
use fused_core::norm::Eps;
use fused_core::placement;
use fused_core::planner::{Operands, Plan};
use fused_core::reuse::LatestQuantization;
use fused_core::tensor::{BufferId, Overlap, TensorDesc};
use fused_core::{DType, Error};

use crate::backend::{ChainWords, EltOp, VulkanBackend};
use crate::context::{Buffer, Dispatch, storage_writes};
use crate::decode::{
    ATTENTION_MAX_HEAD, AppendInAttention, ArgMaxPass, KvAppendShape, argmax_splits,
    attention_splits,
};
use crate::error::VulkanError;
use crate::pipeline::{Kernel, KernelKey, gemv_type, quantized_bytes, u32_of};
use mirrors::HostMirrors;

mod append_in_attention;
mod look_ahead;
mod mirrors;
#[cfg(feature = "lab")]
mod profile;

/// The least alignment of a binding's offset, in bytes, on every device:
/// the shaders may read a binding as 16-byte vectors (`vec4`, `uvec4`),
/// which the host-slice path always binds at offset 0.
const BINDING_ALIGN: u64 = 16;

/// What one run of a [`DevicePlan`] records, in this backend's terms
/// (the lab's view; [`ResidentPlan::stats`] gives the common counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "lab"), allow(unreachable_pub))]
pub struct DevicePlanStats {
    /// Plan steps that launch a kernel (reshapes, views and inputs excluded).
    pub kernel_steps: u64,
    /// Compute dispatches: one per kernel step, plus the activation
    /// quantizers ([`DevicePlanStats::quantizations`]).
    pub dispatches: u64,
    /// Dispatches of the activation quantizer (one per GEMV step with
    /// GGML's quantized activations whose input the latest quantization
    /// does not already hold), counted in `dispatches` too.
    pub quantizations: u64,
    /// Pipeline barriers between dependent commands (the barrier that
    /// orders a run after earlier submissions and the one that makes the
    /// results visible to the host are not counted).
    pub barriers: u64,
    /// L2 look-ahead reads recorded beside the small kernels between two
    /// GEMVs (the tuning's `l2_between`; not counted in `dispatches`).
    pub look_aheads: u64,
    /// Buffer copies recorded for operands and misaligned tensors.
    pub copies: u64,
    /// Bytes those copies move.
    pub copy_bytes: u64,
}

/// Which buffer a region lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// A graph buffer (its [`BufferId`]).
    Graph(usize),
    /// A scratch buffer of the plan.
    Scratch(usize),
    /// The 4-byte placeholder bound where a kernel reads nothing.
    Dummy,
}

/// Bytes of one of the plan's buffers.
type Region = placement::Region<Slot>;

/// `r` grown to whole 4-byte words (shaders read words).
fn words(r: Region) -> Region {
    Region {
        size: r.size.next_multiple_of(4).max(4),
        ..r
    }
}

/// One recorded command.
#[derive(Debug)]
enum Cmd {
    /// A dispatch; `bindings` in binding order, `writes` the written ones.
    Dispatch {
        kernel: KernelKey,
        bindings: Vec<Region>,
        writes: Vec<usize>,
        push: Vec<u8>,
        groups: [u32; 3],
    },
    /// `src.size` bytes from `src` to `dst`.
    Copy { src: Region, dst: Region },
}

impl Cmd {
    /// The regions read and the regions written.
    fn access(&self) -> (Vec<Region>, Vec<Region>) {
        match self {
            Cmd::Dispatch {
                bindings, writes, ..
            } => {
                let (w, r): (Vec<_>, Vec<_>) = bindings
                    .iter()
                    .enumerate()
                    .partition(|(i, _)| writes.contains(i));
                let regions = |v: Vec<(usize, &Region)>| v.into_iter().map(|(_, r)| *r).collect();
                (regions(r), regions(w))
            }
            Cmd::Copy { src, dst } => (vec![*src], vec![*dst]),
        }
    }
}

/// A plan recorded for the device with its buffers; see the module docs.
pub struct DevicePlan<'a> {
    backend: &'a VulkanBackend,
    /// Graph buffers, indexed by [`BufferId`].
    buffers: Vec<Buffer<'a>>,
    /// The byte sizes the graph buffers were asked for.
    sizes: Vec<usize>,
    scratch: Vec<Buffer<'a>>,
    dummy: Buffer<'a>,
    /// Graph-input ranges the plan overwrites, with their pristine copies
    /// (scratch indices).
    pristine: Vec<(Region, usize)>,
    stats: DevicePlanStats,
    /// The commands of one run, in order.
    cmds: Vec<Cmd>,
    /// The descriptor set of each command (null for a copy).
    sets: Vec<vk::DescriptorSet>,
    descriptor_pool: vk::DescriptorPool,
    run_cb: vk::CommandBuffer,
    restore_cb: vk::CommandBuffer,
    fence: vk::Fence,
    queries: vk::QueryPool,
    /// Host copies of the small inputs and outputs (`mirrors.rs`).
    mirrors: HostMirrors<'a>,
}

impl core::fmt::Debug for DevicePlan<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DevicePlan")
            .field("sizes", &self.sizes)
            .field("stats", &self.stats)
            .field("scratch_buffers", &self.scratch.len())
            .field("restored_inputs", &self.pristine.len())
            .finish_non_exhaustive()
    }
}

/// The state while the plan's commands are built.
struct Builder<'a, 'd> {
    backend: &'a VulkanBackend,
    /// Placeholder for the dispatch builders' buffer lists (only their
    /// kernel, push constants and grid are kept).
    placeholder: &'d Buffer<'a>,
    sizes: &'d [usize],
    /// Descriptor offsets are multiples of this.
    align: u64,
    mode: GemvMode,
    scratch: Vec<Buffer<'a>>,
    /// The scratch buffer quantized activations are written to (its index
    /// and size), reused by every step whose activations fit.
    quantized: Option<(usize, u64)>,
    /// The scratch buffer a GEMV step's norm prologue writes its
    /// activations to (its index and size), reused like `quantized`.
    normed: Option<(usize, u64)>,
    /// The scratch buffer attention's splits write their partial results
    /// to (its index and size), reused like `quantized`.
    attention_parts: Option<(usize, u64)>,
    /// The latest norm prologue, while nothing has written its input, its
    /// weight or its output since.
    latest_norm: LatestQuantization<Slot, NormKey>,
    /// The latest activation quantization (its mode, K and columns), while
    /// reusable.
    latest_quant: LatestQuantization<Slot, (ActQuant, usize, usize)>,
    /// The attention joining pass recorded last, while it is the last
    /// command: it may take on quantizing its output.
    last_combine: Option<JoinedAttention>,
    /// The key/value append recorded last, while it is the last command:
    /// the attention after it may take it on.
    last_append: Option<RecordedAppend>,
    cmds: Vec<Cmd>,
    stats: DevicePlanStats,
}

/// A key/value append dispatch with q and v joined: its command, its
/// bindings (table, position, k, key cache, q, q's destination, v, value
/// cache: window and element offset of each), the exact regions of the
/// same tensors, and its shape.
#[derive(Clone, Copy, Debug)]
struct RecordedAppend {
    cmd: usize,
    windows: [(Region, u32); 8],
    exact: [Region; 8],
    shape: KvAppendShape,
}

/// The key/value append's part of attention's split pass: the product's
/// q rows (the pass's q binding and offset), its own bindings (table, new
/// key row, new value row, q's destination) and words.
#[derive(Clone, Copy, Debug)]
struct AppendBindings {
    q: (Region, u32),
    bindings: [Region; 4],
    words: AppendInAttention,
}

/// An attention's joining pass: its command, its output (the tensor's
/// exact region) and its heads.
#[derive(Clone, Copy, Debug)]
struct JoinedAttention {
    cmd: usize,
    out: Region,
    head_dim: usize,
    n_head: usize,
}

/// How a norm prologue was computed: its epsilon, column length, columns
/// and the quantization of its output (`None`: f32).
type NormKey = (Eps, usize, usize, Option<ActQuant>);

fn unsupported(what: &'static str) -> Error {
    Error::Unsupported(Unsupported::Operation(what))
}

impl<'a> Builder<'a, '_> {
    /// The bytes of `t` in its graph buffer (contiguous tensors only).
    fn region(&self, t: &TensorDesc) -> Result<Region, Error> {
        let strided = "a strided tensor on the Vulkan device plan";
        let (b, e) = placement::graph_extent(t, self.sizes, strided)?;
        Ok(Region {
            slot: Slot::Graph(b),
            offset: e.start as u64,
            size: e.len() as u64,
        })
    }

    fn aligned(&self, offset: u64) -> bool {
        offset.is_multiple_of(self.align)
    }

    /// A new scratch buffer of `size` bytes: its index.
    fn new_scratch(&mut self, size: u64) -> Result<usize, VulkanError> {
        let buf = self.backend.context().buffer(size)?;
        self.scratch.push(buf);
        Ok(self.scratch.len() - 1)
    }

    /// All of a new scratch buffer of `size` bytes.
    fn scratch(&mut self, size: u64) -> Result<Region, VulkanError> {
        Ok(Region {
            slot: Slot::Scratch(self.new_scratch(size)?),
            offset: 0,
            size,
        })
    }

    /// A command appended writes `r`: what it makes stale is forgotten.
    fn wrote(&mut self, r: &Region) {
        self.latest_quant.wrote(r);
        self.latest_norm.wrote(r);
    }

    fn copy(&mut self, src: Region, dst: Region) {
        self.wrote(&dst);
        self.stats.copies += 1;
        self.stats.copy_bytes += src.size;
        self.cmds.push(Cmd::Copy { src, dst });
    }

    /// The binding that reads `t`, an input of a kernel that writes `dst`:
    /// in place, or a copy made first when `t` is not at a valid descriptor
    /// offset, or when it is `dst` itself and the kernel does not read each
    /// element in the invocation that writes it (`per_element`: the
    /// element-wise kernels do; a GEMV or an FWHT reads whole rows). A
    /// partial overlap with `dst` is an error.
    fn read(
        &mut self,
        t: &TensorDesc,
        dst: &TensorDesc,
        per_element: bool,
    ) -> Result<Region, VulkanError> {
        let r = self.region(t)?;
        let in_place = placement::reads_in_place(t, dst, per_element)?;
        if in_place && self.aligned(r.offset) {
            return Ok(words(r));
        }
        let s = self.scratch(r.size)?;
        self.copy(r, s);
        Ok(words(s))
    }

    /// [`Builder::read`] of an f32 tensor.
    fn read_f32(
        &mut self,
        t: &TensorDesc,
        dst: &TensorDesc,
        per_element: bool,
        what: &'static str,
    ) -> Result<Region, VulkanError> {
        placement::require_f32(t, what)?;
        self.read(t, dst, per_element)
    }

    /// The binding that writes `t` and, when it is a scratch buffer, the
    /// place its bytes are copied to after the dispatch.
    fn write(&mut self, t: &TensorDesc) -> Result<(Region, Option<Region>), VulkanError> {
        placement::require_f32(t, "device plan destination (must be contiguous F32)")?;
        let r = self.region(t)?;
        if self.aligned(r.offset) {
            return Ok((r, None));
        }
        Ok((self.scratch(r.size)?, Some(r)))
    }

    /// Records `d` (from a backend dispatch builder) with `bindings`, the
    /// binding at `write` writing `out`, then the copy of a scratch output
    /// to its place.
    fn dispatch(
        &mut self,
        d: Dispatch<'_>,
        mut bindings: Vec<Region>,
        write: usize,
        out: (Region, Option<Region>),
    ) {
        bindings[write] = out.0;
        self.dispatch_in_place(d, bindings, vec![write]);
        if let Some(place) = out.1 {
            self.copy(out.0, place);
        }
    }

    /// Records `d` with `bindings`, those at `writes` written in place.
    fn dispatch_in_place(&mut self, d: Dispatch<'_>, bindings: Vec<Region>, writes: Vec<usize>) {
        for &w in &writes {
            self.wrote(&bindings[w]);
        }
        self.stats.dispatches += 1;
        self.cmds.push(Cmd::Dispatch {
            kernel: d.kernel,
            bindings,
            writes,
            push: d.push,
            groups: d.groups,
        });
    }

    fn dummy() -> Region {
        Region {
            slot: Slot::Dummy,
            offset: 0,
            size: 4,
        }
    }

    /// The epilogue operand binding and the chain words for the GEMV
    /// shader: one binding over operands that share a buffer, or a packed
    /// per-step copy.
    fn operands(
        &mut self,
        g: &Graph,
        epilogue: &Epilogue,
        ops: &Operands,
        dst: &TensorDesc,
        m: usize,
        n: usize,
    ) -> Result<(Region, ChainWords), VulkanError> {
        let descs: Vec<TensorDesc> = ops
            .iter()
            .flatten()
            .map(|id| g.tensor(*id).copied())
            .collect::<Result<_, _>>()?;
        for d in &descs {
            if d.dtype() != DType::F32 {
                return Err(Error::UnsupportedDType {
                    what: "device plan epilogue operand (must be F32)",
                    dtype: d.dtype(),
                }
                .into());
            }
            if d.overlap(dst) == Overlap::Partial {
                return Err(Error::AliasViolation {
                    what: "an epilogue operand partially overlaps the destination",
                }
                .into());
            }
        }
        // Lengths are checked here, against the core's rules.
        let zeros: Vec<Vec<f32>> = descs.iter().map(|d| vec![0.0; d.n_elements()]).collect();
        let mut slices: [&[f32]; MAX_STAGES] = [&[]; MAX_STAGES];
        for (s, z) in slices.iter_mut().zip(&zeros) {
            *s = z;
        }
        let (packed, mut chain) = VulkanBackend::pack_epilogue(epilogue, &slices, m, n)?;
        if descs.is_empty() {
            return Ok((Self::dummy(), chain));
        }
        let regions: Vec<Region> = descs
            .iter()
            .map(|d| self.region(d))
            .collect::<Result<_, _>>()?;
        let start = regions.iter().map(|r| r.offset).min().unwrap_or(0) / self.align * self.align;
        let end = regions.iter().map(|r| r.offset + r.size).max().unwrap_or(0);
        let in_place = regions
            .iter()
            .all(|r| r.slot == regions[0].slot && r.offset.is_multiple_of(4));
        if in_place {
            for (i, st) in epilogue.stages().iter().enumerate() {
                if let Some(slot) = st.slot() {
                    let words = (regions[slot].offset - start) / 4;
                    chain.offsets[i] = u32_of("epilogue operand offset", words as usize)?;
                }
            }
            let binding = Region {
                slot: regions[0].slot,
                offset: start,
                size: end - start,
            };
            return Ok((binding, chain));
        }
        // Packed as `pack_epilogue` lays them out: each slot once, at the
        // offset of the first stage that reads it.
        let buf = self.scratch(4 * packed.len() as u64)?;
        let mut done = [false; MAX_STAGES];
        for (i, st) in epilogue.stages().iter().enumerate() {
            if let Some(slot) = st.slot().filter(|s| !done[*s]) {
                done[slot] = true;
                let src = regions[slot];
                let dst = Region {
                    slot: buf.slot,
                    offset: 4 * u64::from(chain.offsets[i]),
                    size: src.size,
                };
                self.copy(src, dst);
            }
        }
        Ok((buf, chain))
    }

    /// Whether the backend has a GEMV for `w` times `x`, as
    /// [`StepKernels::supports_gemv`] says.
    fn supports(&self, w: &TensorDesc, x: &TensorDesc) -> Result<(), Error> {
        let mode = self.mode.act_quant(w.dtype());
        StepKernels::supports_gemv(self.backend, w.dtype(), mode, x.n_rows())?;
        Ok(())
    }

    /// The reusable scratch region for `bytes` of quantized activations
    /// (a larger buffer replaces it when it is too small; commands already
    /// built keep theirs).
    fn quantized_scratch(&mut self, bytes: u64) -> Result<Region, VulkanError> {
        let mut kept = self.quantized;
        let r = self.reused_scratch(&mut kept, bytes);
        self.quantized = kept;
        r
    }

    /// The scratch region `kept` names (slot, size) where it holds `bytes`,
    /// else a new one, which `kept` then names.
    fn reused_scratch(
        &mut self,
        kept: &mut Option<(usize, u64)>,
        bytes: u64,
    ) -> Result<Region, VulkanError> {
        let slot = match *kept {
            Some((i, size)) if size >= bytes => i,
            _ => {
                let i = self.new_scratch(bytes)?;
                *kept = Some((i, bytes));
                i
            }
        };
        Ok(Region {
            slot: Slot::Scratch(slot),
            offset: 0,
            size: bytes,
        })
    }

    /// An element-wise kernel over `a` (and `b`) into `dst`.
    fn eltwise(
        &mut self,
        op: EltOp,
        act: Activation,
        params: [u32; 2],
        a: &TensorDesc,
        b: Option<&TensorDesc>,
        dst: &TensorDesc,
    ) -> Result<(), VulkanError> {
        let n = a.n_elements();
        check_len("element-wise output", n, dst.n_elements())?;
        let what = "device plan element-wise input (must be F32)";
        // `b` is read per element unless broadcast over rows.
        let b_per_element = params == [0; 2];
        let ar = self.read_f32(a, dst, true, what)?;
        let br = match b {
            Some(b) => self.read_f32(b, dst, b_per_element, what)?,
            None => Self::dummy(),
        };
        let out = self.write(dst)?;
        let p = self.placeholder;
        let d = self
            .backend
            .eltwise_dispatch(op, act, params, n, [p, p, p])?;
        self.dispatch(d, vec![ar, br, out.0], 2, out);
        Ok(())
    }
}

impl<'a> Builder<'a, '_> {
    /// The binding that reads `t` where nothing it feeds writes over it:
    /// in place, or a copy when `t` is not at a valid descriptor offset.
    fn read_apart(&mut self, t: &TensorDesc, what: &'static str) -> Result<Region, VulkanError> {
        placement::require_f32(t, what)?;
        let r = self.region(t)?;
        if self.aligned(r.offset) {
            return Ok(words(r));
        }
        let s = self.scratch(r.size)?;
        self.copy(r, s);
        Ok(words(s))
    }

    /// The reusable scratch region for `bytes` of normed activations.
    fn normed_scratch(&mut self, bytes: u64) -> Result<Region, VulkanError> {
        let mut kept = self.normed;
        let r = self.reused_scratch(&mut kept, bytes);
        self.normed = kept;
        r
    }

    /// A norm prologue: `(x · s) · g` of every column of `p.x` (`n`
    /// columns of `k` values) into the normed scratch, or with `quant =
    /// Some((mode, bytes))` quantized per `mode` into the quantized scratch
    /// by the quantizer's norm variant (one dispatch); its region. Where
    /// the latest prologue normed the same input with the same weight,
    /// epsilon and quantization and nothing has written either or its
    /// output since (q, k and v reading one norm), that output is read
    /// again: the same bits.
    fn norm_prologue(
        &mut self,
        p: &NormLoad,
        k: usize,
        n: usize,
        quant: Option<(ActQuant, u64)>,
    ) -> Result<Region, VulkanError> {
        check_len("norm prologue input", k * n, p.x.n_elements())?;
        check_len("norm prologue weight", k, p.gamma.n_elements())?;
        let (xg, gg) = (self.region(&p.x)?, self.region(&p.gamma)?);
        let key = (p.eps, k, n, quant.map(|(m, _)| m));
        if let Some(out) = self.latest_norm.lookup_weighted(&xg, Some(&gg), &key) {
            return Ok(out);
        }
        let xr = self.read_apart(&p.x, "device plan norm input (must be F32)")?;
        let gr = self.read_apart(&p.gamma, "device plan norm weight (must be F32)")?;
        let ph = self.placeholder;
        let out = match quant {
            None => {
                let out = self.normed_scratch(4 * (k * n) as u64)?;
                let d = self
                    .backend
                    .rms_norm_dispatch(k, n, p.eps.get(), true, [ph, ph, ph])?;
                self.dispatch(d, vec![xr, gr, out], 2, (out, None));
                out
            }
            Some((mode, bytes)) => {
                let out = self.quantized_scratch(bytes)?;
                let t = self.backend.tuning();
                let d = self.backend.quantize_norm_dispatch(
                    &t,
                    mode,
                    k,
                    n,
                    Some((p.eps.get(), ph)),
                    ph,
                    ph,
                )?;
                self.dispatch(d, vec![xr, out, gr], 1, (out, None));
                self.stats.quantizations += 1;
                out
            }
        };
        self.latest_norm.record_weighted(xg, Some(gg), key, out);
        Ok(out)
    }

    /// A GEMV (gated when `up` is given) of `w` times `x` into `dst`; with
    /// quantized activations, `x` is quantized first (once for both weights
    /// of a gated GEMV) into the reusable scratch. With a norm prologue,
    /// `x` (the normed product, never stored) is computed first into a
    /// scratch buffer by the norm kernel, and read from there.
    #[allow(clippy::too_many_arguments)]
    fn gemv_step(
        &mut self,
        g: &Graph,
        prologue: Option<&NormLoad>,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        ops: &Operands,
        dst: &TensorDesc,
    ) -> Result<(), VulkanError> {
        self.supports(w, x)?;
        let (k, m, n) = (w.ne()[0], w.ne()[1], x.n_rows());
        check_len("GEMV activations", k * n, x.n_elements())?;
        check_len("GEMV output", m * n, dst.n_elements())?;
        if let Some((u, _)) = up {
            if u.dtype() != w.dtype() {
                return Err(Error::UnsupportedDType {
                    what: "gated GEMV up weights (the gate's format)",
                    dtype: u.dtype(),
                }
                .into());
            }
            if u.ne() != w.ne() {
                return Err(Error::ShapeMismatch {
                    what: "gated GEMV up weights (the gate's shape)",
                    expected: w.ne(),
                    actual: u.ne(),
                }
                .into());
            }
        }
        let gt = gemv_type(w.dtype())?;
        let wr = self.read(w, dst, false)?;
        let ur = match up {
            Some((u, _)) => Some(self.read(u, dst, false)?),
            None => None,
        };
        let mode = self.mode.act_quant(w.dtype());
        let q_bytes = quantized_bytes(mode, k, n)?;
        let mut xr = match prologue {
            None => self.read_f32(x, dst, false, "device plan GEMV activations (must be F32)")?,
            Some(_) => Self::dummy(),
        };
        let (opr, chain) = self.operands(g, epilogue, ops, dst, m, n)?;
        let out = self.write(dst)?;
        if let Some(p) = prologue {
            xr = self.norm_prologue(p, k, n, q_bytes.map(|b| (mode, b)))?;
        } else if let Some(bytes) = q_bytes {
            let key = (mode, k, n);
            let held = match self.latest_quant.lookup(&xr, &key) {
                Some(qr) => Some(qr),
                None => self.fold_into_combine(&xr, key, bytes)?.inspect(|qr| {
                    self.latest_quant.record(xr, key, *qr);
                }),
            };
            xr = match held {
                Some(qr) => qr,
                None => {
                    let qr = self.quantized_scratch(bytes)?;
                    let p = self.placeholder;
                    let t = self.backend.tuning();
                    let d = self.backend.quantize_dispatch(&t, mode, k, n, p, p)?;
                    self.dispatch(d, vec![xr, qr], 1, (qr, None));
                    self.stats.quantizations += 1;
                    self.latest_quant.record(xr, key, qr);
                    qr
                }
            };
        }
        let n_bind = if up.is_some() { 5 } else { 4 };
        let d = self.backend.gemv_dispatch(
            &self.backend.tuning(),
            gt,
            mode,
            up.map(|(_, a)| a),
            m,
            k,
            n,
            chain,
            vec![self.placeholder; n_bind],
        )?;
        let mut bindings = vec![wr, xr, out.0, opr];
        bindings.extend(ur);
        self.dispatch(d, bindings, 2, out);
        Ok(())
    }
}

impl<'a> Builder<'a, '_> {
    /// Where the command recorded last is an attention's joining pass whose
    /// output is exactly `x` and a GEMV wants `x` as one column of Q8_0 or
    /// Q8_1 activations (`key`: mode, K, columns) of `bytes`: makes that
    /// pass write them too, into the quantized scratch (which it neither
    /// reads nor writes otherwise), and returns that region. `None`,
    /// changing nothing, elsewhere: heads not whole 32-value blocks, Q8_K,
    /// the tuning's switch off.
    fn fold_into_combine(
        &mut self,
        x: &Region,
        key: (ActQuant, usize, usize),
        bytes: u64,
    ) -> Result<Option<Region>, VulkanError> {
        let Some(c) = self.last_combine.take() else {
            return Ok(None);
        };
        let (mode, k, n) = key;
        let foldable = self.backend.tuning().fold_attention_quantizer
            && c.cmd + 1 == self.cmds.len()
            && c.out == *x
            && n == 1
            && c.head_dim.is_multiple_of(32)
            && Some(k) == c.n_head.checked_mul(c.head_dim);
        if !foldable {
            return Ok(None);
        }
        let Some(quantizing) = self.backend.quantizing_combine_kernel(mode)? else {
            return Ok(None);
        };
        let qr = self.quantized_scratch(bytes)?;
        let Some(Cmd::Dispatch {
            kernel,
            bindings,
            writes,
            ..
        }) = self.cmds.last_mut()
        else {
            unreachable!("the joining pass is the last command")
        };
        *kernel = quantizing;
        writes.push(bindings.len());
        bindings.push(qr);
        self.wrote(&qr);
        Ok(Some(qr))
    }

    /// The binding through which a decode kernel reaches `t` in place: the
    /// region from the descriptor offset at or below `t` to its end, and
    /// `t`'s offset in it in f32 elements (the decode kernels index every
    /// tensor from an offset, so they need no copy of a misaligned one;
    /// the row write must write its row in place).
    fn window(&self, t: &TensorDesc, what: &'static str) -> Result<(Region, u32), VulkanError> {
        placement::require_f32(t, what)?;
        let r = self.region(t)?;
        if !r.offset.is_multiple_of(4) {
            return Err(unsupported(
                "an F32 tensor at a byte offset not a multiple of 4 on the Vulkan device plan",
            )
            .into());
        }
        let start = r.offset / self.align * self.align;
        let at = u32_of("decode tensor offset", ((r.offset - start) / 4) as usize)?;
        let window = Region {
            offset: start,
            size: r.offset + r.size - start,
            ..r
        };
        Ok((words(window), at))
    }

    /// Checks that a decode kernel writing `out` may read `t`: apart from
    /// it, or (`exact_ok`: the kernel reads each element it overwrites
    /// first, in the invocation that writes it) exactly on it. Any other
    /// overlap is left to the host plan.
    fn decode_source(
        t: &TensorDesc,
        out: &TensorDesc,
        exact_ok: bool,
        what: &'static str,
    ) -> Result<(), Error> {
        match t.overlap(out) {
            Overlap::Disjoint => Ok(()),
            Overlap::Exact if exact_ok => Ok(()),
            _ => Err(unsupported(what)),
        }
    }

    /// Records attention's split pass (bindings q, k, v, position, output
    /// or partials; with `append`, also its four bindings, the caches
    /// written).
    fn split_pass(
        &mut self,
        shape: &AttentionShape,
        rows: usize,
        splits: usize,
        at: [u32; 5],
        bindings: [Region; 5],
        append: Option<AppendBindings>,
    ) -> Result<(), VulkanError> {
        let p = self.placeholder;
        let words = append.map(|a| a.words);
        let n = if append.is_some() { 9 } else { 5 };
        let d =
            self.backend
                .attention_dispatch(shape, rows, splits, at, words.as_ref(), vec![p; n])?;
        let mut bindings = bindings.to_vec();
        let mut writes = vec![4];
        if let Some(a) = append {
            bindings.extend(a.bindings);
            writes = vec![1, 2, 4, 8];
        }
        self.dispatch_in_place(d, bindings, writes);
        Ok(())
    }

    /// Records the first attention pass and, over several splits, the pass
    /// joining them through the reused partials scratch; with `append`, the
    /// first pass does the key/value append too.
    #[allow(clippy::too_many_arguments)]
    fn attention_passes(
        &mut self,
        shape: &AttentionShape,
        rows: usize,
        q: (Region, u32),
        k: (Region, u32),
        v: (Region, u32),
        pos: (Region, u32),
        out: (Region, u32),
        append: Option<AppendBindings>,
    ) -> Result<bool, VulkanError> {
        let splits = attention_splits(shape, rows, self.backend.tuning().attention_workgroups);
        if splits == 1 {
            let at = [q.1, k.1, v.1, pos.1, out.1];
            self.split_pass(shape, rows, 1, at, [q.0, k.0, v.0, pos.0, out.0], append)?;
            return Ok(false);
        }
        let floats = shape
            .n_head
            .checked_mul(splits)
            .and_then(|n| n.checked_mul(shape.head_dim + 2))
            .ok_or(Error::Overflow {
                what: "attention partial results",
            })?;
        let mut kept = self.attention_parts;
        let parts = self.reused_scratch(&mut kept, 4 * floats as u64)?;
        self.attention_parts = kept;
        let at = [q.1, k.1, v.1, pos.1, 0];
        self.split_pass(
            shape,
            rows,
            splits,
            at,
            [q.0, k.0, v.0, pos.0, parts],
            append,
        )?;
        let p = self.placeholder;
        let d = self.backend.attention_combine_dispatch(
            shape,
            rows,
            splits,
            [pos.1, out.1],
            vec![p; 3],
        )?;
        self.dispatch(d, vec![parts, pos.0, out.0], 2, (out.0, None));
        Ok(true)
    }
}

impl<'a> CommandSink for Builder<'a, '_> {
    type Error = VulkanError;

    fn gemv(
        &mut self,
        g: &Graph,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        ops: &Operands,
        dst: &TensorDesc,
    ) -> Result<(), VulkanError> {
        self.gemv_step(g, None, w, up, x, epilogue, ops, dst)
    }

    fn norm_gemv(
        &mut self,
        g: &Graph,
        prologue: &NormLoad,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        ops: &Operands,
        dst: &TensorDesc,
    ) -> Result<(), VulkanError> {
        self.gemv_step(g, Some(prologue), w, up, x, epilogue, ops, dst)
    }

    /// `dst = rms_norm(x, eps)`, one workgroup a column; in place where
    /// `x` is `dst` (each lane writes what it read).
    fn rms_norm(&mut self, eps: Eps, x: &TensorDesc, dst: &TensorDesc) -> Result<(), VulkanError> {
        let k = x.ne()[0];
        let n = x.n_rows();
        check_len("rms_norm output", x.n_elements(), dst.n_elements())?;
        fused_core::norm::check(k, x.n_elements(), None, dst.n_elements())?;
        let xr = self.read_f32(x, dst, true, "device plan rms_norm input (must be F32)")?;
        let out = self.write(dst)?;
        let p = self.placeholder;
        let d = self
            .backend
            .rms_norm_dispatch(k, n, eps.get(), false, [p, p, p])?;
        self.dispatch(d, vec![xr, Self::dummy(), out.0], 2, out);
        Ok(())
    }

    /// A (signed) FWHT of every row of `x` into `dst`.
    fn fwht(
        &mut self,
        desc: &FwhtDesc,
        x: &TensorDesc,
        signs: Option<&TensorDesc>,
        dst: &TensorDesc,
    ) -> Result<(), VulkanError> {
        let sign_values = signs.map(|s| vec![0.0f32; s.n_elements()]);
        desc.check(x.n_elements(), sign_values.as_deref(), dst.n_elements())?;
        let xr = self.read_f32(x, dst, false, "device plan FWHT input (must be F32)")?;
        let sr = match signs {
            Some(s) => self.read_f32(s, dst, false, "device plan FWHT signs (must be F32)")?,
            None => Self::dummy(),
        };
        let out = self.write(dst)?;
        let rows = x.n_elements() / desc.n();
        let p = self.placeholder;
        let t = self.backend.tuning();
        let d = self.backend.fwht_dispatch(&t, desc, rows, p, p, p)?;
        self.dispatch(d, vec![xr, sr, out.0], 2, out);
        Ok(())
    }
    /// `dst = a op b` for an add, multiply or GLU node; `b` may be repeated
    /// over the rows of `a` (GGML's broadcast) where the kernels index it
    /// so: a row-bias add, a sign multiply.
    fn binary(
        &mut self,
        op: BinaryOp,
        broadcast: Broadcast,
        a: &TensorDesc,
        b: &TensorDesc,
        dst: &TensorDesc,
    ) -> Result<(), VulkanError> {
        let ne0 = u32_of("row length", a.ne()[0])?;
        let (code, act, params) = match (broadcast, op) {
            (Broadcast::Elementwise, BinaryOp::Add) => (EltOp::Add, Activation::Identity, [0; 2]),
            (Broadcast::Elementwise, BinaryOp::Mul) => (EltOp::Mul, Activation::Identity, [0; 2]),
            (Broadcast::Elementwise, BinaryOp::Glu(act)) => (EltOp::Glu, act, [0; 2]),
            (Broadcast::Rows { rows: 1 }, BinaryOp::Add) => {
                (EltOp::RowBias, Activation::Identity, [ne0, 0])
            }
            (Broadcast::Rows { rows }, BinaryOp::Mul) => (
                EltOp::Signs,
                Activation::Identity,
                [ne0, u32_of("rows", rows)?],
            ),
            _ => {
                return Err(unsupported(
                    "a broadcast element-wise operand (other than over rows) on the Vulkan device plan",
                )
                .into());
            }
        };
        self.eltwise(code, act, params, a, Some(b), dst)
    }

    fn add_row_bias(
        &mut self,
        a: &TensorDesc,
        bias: &TensorDesc,
        rows: usize,
        out: &TensorDesc,
    ) -> Result<(), VulkanError> {
        let params = [u32_of("bias rows", rows)?, 0];
        self.eltwise(
            EltOp::RowBias,
            Activation::Identity,
            params,
            a,
            Some(bias),
            out,
        )
    }

    fn unary(
        &mut self,
        act: Activation,
        a: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), VulkanError> {
        self.eltwise(EltOp::Unary, act, [0; 2], a, None, out)
    }

    /// The identity activation: a copy, as the host-slice executor makes it.
    fn copy(&mut self, a: &TensorDesc, out: &TensorDesc) -> Result<(), VulkanError> {
        self.eltwise(EltOp::Unary, Activation::Identity, [0; 2], a, None, out)
    }

    /// RoPE at the position in `pos`, one invocation per pair; in place
    /// where `out` is `x`.
    fn rope(
        &mut self,
        mode: RopeMode,
        x: &TensorDesc,
        table: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), VulkanError> {
        let [d, rows, _, _] = table.ne();
        if d == 0 || !d.is_multiple_of(2) || x.ne()[0] != d {
            return Err(Error::ShapeMismatch {
                what: "RoPE table (one row of the head size, even)",
                expected: [x.ne()[0], rows, 1, 1],
                actual: table.ne(),
            }
            .into());
        }
        check_len("RoPE output", x.n_elements(), out.n_elements())?;
        check_len("RoPE position", 1, pos.n_elements())?;
        Self::decode_source(x, out, true, "a RoPE input partly over its output")?;
        let apart = "a RoPE table or position overlapping its output";
        Self::decode_source(table, out, false, apart)?;
        Self::decode_source(pos, out, false, apart)?;
        let what = "device plan RoPE operand (must be contiguous F32)";
        let (xr, tr, pr) = (
            self.window(x, what)?,
            self.window(table, what)?,
            self.window(pos, what)?,
        );
        let or = self.window(out, what)?;
        let p = self.placeholder;
        let heads = x.n_elements() / d;
        let at = [xr.1, tr.1, pr.1, or.1];
        let dispatch = self
            .backend
            .rope_dispatch(mode, d, heads, rows, at, vec![p; 4])?;
        self.dispatch(dispatch, vec![xr.0, tr.0, pr.0, or.0], 3, (or.0, None));
        Ok(())
    }

    /// The row write at the position in `pos`: where `out` is `dst` (the
    /// KV-cache append) one dispatch writes the row alone; otherwise one
    /// dispatch writes the whole result. Barriers see the whole of `out`
    /// written, since the row is known only when the run reads `pos`.
    fn set_row(
        &mut self,
        dst: &TensorDesc,
        row: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), VulkanError> {
        let [n, rows, _, _] = dst.ne();
        check_len("row-write row", n, row.n_elements())?;
        check_len("row-write output", dst.n_elements(), out.n_elements())?;
        check_len("row-write position", 1, pos.n_elements())?;
        let in_place = match dst.overlap(out) {
            Overlap::Exact => true,
            Overlap::Disjoint => false,
            Overlap::Partial => {
                return Err(Error::AliasViolation {
                    what: "a row-write destination partly over its output",
                }
                .into());
            }
        };
        // The whole-result pass reads each value in the invocation that
        // writes it, so the row may be the output; the row-only pass never
        // reads what it writes.
        Self::decode_source(row, out, true, "a written row partly over its output")?;
        Self::decode_source(pos, out, false, "a row-write position over its output")?;
        let what = "device plan row-write operand (must be contiguous F32)";
        let dr = if in_place {
            (Self::dummy(), 0)
        } else {
            self.window(dst, what)?
        };
        let (rr, pr) = (self.window(row, what)?, self.window(pos, what)?);
        let or = self.window(out, what)?;
        let p = self.placeholder;
        let at = [dr.1, rr.1, pr.1, or.1];
        let d = self
            .backend
            .set_row_dispatch(n, rows, !in_place, at, vec![p; 4])?;
        self.dispatch(d, vec![dr.0, rr.0, pr.0, or.0], 3, (or.0, None));
        Ok(())
    }

    /// The fused key/value append as one dispatch: RoPE of q into its
    /// destination (in place where that is q), RoPE of k into row `pos` of
    /// `k_cache` (`k_rope` is not written), v into row `pos` of its cache.
    /// Barriers see q's destination and both whole caches written. Sources
    /// that overlap a write (other than q or v exactly on its own
    /// destination) are refused, as the parts' kernels refuse them.
    #[allow(clippy::too_many_arguments)]
    fn kv_append(&mut self, a: &KvAppendOperands) -> Result<(), VulkanError> {
        let dims = a.dims()?;
        let (table, pos, k, k_cache) = (&a.table, &a.pos, &a.k, &a.k_cache);
        let (q, v) = (a.q.as_ref(), a.v.as_ref());
        // Every write apart from every read and every other write, but for
        // q and the v row exactly on their own destinations (each value read
        // by the invocation that then writes it): reads carry the index of
        // the write they may lie on.
        let mut reads = vec![(table, None), (pos, None), (k, None)];
        let mut writes = vec![k_cache];
        for (x, out) in q.into_iter().chain(v) {
            reads.push((x, Some(writes.len())));
            writes.push(out);
        }
        for (i, w) in writes.iter().enumerate() {
            for &(t, own) in &reads {
                let what = "a key/value append source over a result";
                Self::decode_source(t, w, own == Some(i), what)?;
            }
            for o in &writes[..i] {
                Self::decode_source(o, w, false, "key/value append results overlapping")?;
            }
        }
        let what = "device plan key/value append operand (must be contiguous F32)";
        let (tr, pr, kr, kcr) = (
            self.window(table, what)?,
            self.window(pos, what)?,
            self.window(k, what)?,
            self.window(k_cache, what)?,
        );
        // A part that did not join is bound to k's memory and touched by no
        // invocation, so that it adds no access of its own.
        let (qr, qor) = match q {
            Some((x, out)) => (self.window(x, what)?, self.window(out, what)?),
            None => (kr, kcr),
        };
        let (vr, vcr) = match v {
            Some((row, cache)) => (self.window(row, what)?, self.window(cache, what)?),
            None => (kr, kcr),
        };
        let shape = KvAppendShape {
            mode: a.mode,
            d: dims.head_dim,
            q_heads: dims.q_len / dims.head_dim,
            k_heads: dims.k_len / dims.head_dim,
            v_len: dims.v_len,
            table_rows: dims.table_rows,
            k_rows: dims.k_rows,
            v_rows: dims.v_rows,
        };
        let at = [tr.1, pr.1, kr.1, kcr.1, qr.1, qor.1, vr.1, vcr.1];
        let p = self.placeholder;
        let dispatch = self.backend.kv_append_dispatch(&shape, at, vec![p; 8])?;
        let bindings = vec![tr.0, pr.0, kr.0, kcr.0, qr.0, qor.0, vr.0, vcr.0];
        self.dispatch_in_place(dispatch, bindings, vec![3, 5, 7]);
        if let (Some((q, q_out)), Some((v, v_cache))) = (q, v) {
            let mut exact = [Self::dummy(); 8];
            for (e, t) in exact
                .iter_mut()
                .zip([table, pos, k, k_cache, q, q_out, v, v_cache])
            {
                *e = self.region(t)?;
            }
            self.last_append = Some(RecordedAppend {
                cmd: self.cmds.len() - 1,
                windows: [tr, pr, kr, kcr, qr, qor, vr, vcr],
                exact,
                shape,
            });
        }
        Ok(())
    }

    /// Attention over cache rows `0..=pos`: one workgroup per key/value
    /// head (its query heads together) and split of the cache, and a pass
    /// joining the splits per query head where the cache has more than
    /// one; `out` may be `q`.
    fn attention(
        &mut self,
        shape: &AttentionShape,
        q: &TensorDesc,
        k: &TensorDesc,
        v: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), VulkanError> {
        let rows = attention_rows(shape, q, k, v, pos, out)?;
        if shape.head_dim > ATTENTION_MAX_HEAD {
            return Err(unsupported("an attention head of more than 256 values on Vulkan").into());
        }
        Self::decode_source(q, out, true, "an attention query partly over its output")?;
        let apart = "an attention cache or position overlapping its output";
        for t in [k, v, pos] {
            Self::decode_source(t, out, false, apart)?;
        }
        let what = "device plan attention operand (must be contiguous F32)";
        let (qr, kr, vr, pr) = (
            self.window(q, what)?,
            self.window(k, what)?,
            self.window(v, what)?,
            self.window(pos, what)?,
        );
        let or = self.window(out, what)?;
        let append = self.append_into_attention(shape, rows, q, k, v, pos, out)?;
        let qr = append.map_or(qr, |a| a.q);
        if self.attention_passes(shape, rows, qr, kr, vr, pr, or, append)? {
            self.last_combine = Some(JoinedAttention {
                cmd: self.cmds.len() - 1,
                out: words(self.region(out)?),
                head_dim: shape.head_dim,
                n_head: shape.n_head,
            });
        }
        Ok(())
    }

    /// The first index of each column's maximum: one workgroup a column,
    /// or over long columns one per split and a pass joining the splits.
    fn argmax(&mut self, x: &TensorDesc, out: &TensorDesc) -> Result<(), VulkanError> {
        let n = x.ne()[0];
        if n == 0 || n > MAX_ARGMAX_LEN {
            return Err(Error::LengthMismatch {
                what: "argmax column (1 to 2^24 values)",
                expected: n.clamp(1, MAX_ARGMAX_LEN),
                actual: n,
            }
            .into());
        }
        let cols = x.n_elements() / n;
        check_len("argmax output", cols, out.n_elements())?;
        Self::decode_source(x, out, false, "an argmax input overlapping its output")?;
        let what = "device plan argmax operand (must be contiguous F32)";
        let (xr, or) = (self.window(x, what)?, self.window(out, what)?);
        let splits = argmax_splits(n);
        let p = self.placeholder;
        if splits == 1 {
            let d = self.backend.argmax_dispatch(
                ArgMaxPass::Whole,
                n,
                cols,
                1,
                [xr.1, or.1],
                vec![p; 2],
            )?;
            self.dispatch(d, vec![xr.0, or.0], 1, (or.0, None));
            return Ok(());
        }
        let pairs = cols.checked_mul(splits).ok_or(Error::Overflow {
            what: "argmax partial results",
        })?;
        let parts = self.scratch(8 * pairs as u64)?;
        let d = self.backend.argmax_dispatch(
            ArgMaxPass::Splits,
            n,
            cols,
            splits,
            [xr.1, 0],
            vec![p; 2],
        )?;
        self.dispatch(d, vec![xr.0, parts], 1, (parts, None));
        let d = self.backend.argmax_dispatch(
            ArgMaxPass::Join,
            n,
            cols,
            splits,
            [0, or.1],
            vec![p; 2],
        )?;
        self.dispatch(d, vec![parts, or.0], 1, (or.0, None));
        Ok(())
    }
}

/// A pool of `count` timestamp queries.
pub(crate) fn create_timestamps(d: &ash::Device, count: u32) -> Result<vk::QueryPool, VulkanError> {
    let info = vk::QueryPoolCreateInfo::default()
        .query_type(vk::QueryType::TIMESTAMP)
        .query_count(count);
    // SAFETY: valid create info.
    unsafe { d.create_query_pool(&info, None) }.map_err(VulkanError::vk("vkCreateQueryPool"))
}

/// Every stage a barrier waits for and releases: compute and transfer.
fn work_stages() -> vk::PipelineStageFlags {
    vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER
}

fn write_access() -> vk::AccessFlags {
    vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE
}

fn any_access() -> vk::AccessFlags {
    vk::AccessFlags::SHADER_READ
        | vk::AccessFlags::SHADER_WRITE
        | vk::AccessFlags::TRANSFER_READ
        | vk::AccessFlags::TRANSFER_WRITE
}

impl<'a> DevicePlan<'a> {
    /// Records `plan` (made for `g`) for `backend`, over zeroed device
    /// buffers of `sizes` bytes (one per [`BufferId`], in order), with GEMV
    /// activations fed per `mode`. Anything the device plan cannot run is
    /// refused here, before a command is recorded (see the module docs).
    pub fn new(
        backend: &'a VulkanBackend,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        sizes: &[usize],
    ) -> Result<DevicePlan<'a>, VulkanError> {
        let ctx = backend.context();
        let placeholder = ctx.buffer(4)?;
        let mut b = Builder {
            backend,
            placeholder: &placeholder,
            sizes,
            align: ctx.storage_offset_alignment().max(BINDING_ALIGN),
            mode,
            scratch: Vec::new(),
            quantized: None,
            normed: None,
            attention_parts: None,
            latest_norm: LatestQuantization::new(),
            latest_quant: LatestQuantization::new(),
            last_combine: None,
            last_append: None,
            cmds: Vec::new(),
            stats: DevicePlanStats::default(),
        };
        for step in &plan.steps {
            if lower_into(g, step, &mut b)? {
                b.stats.kernel_steps += 1;
            }
        }
        b.add_look_aheads(backend.tuning().l2_between, backend.tuning().l2_reach)?;
        let buffers = sizes
            .iter()
            .map(|&s| ctx.buffer(s as u64))
            .collect::<Result<Vec<_>, _>>()?;
        // Graph inputs a command overwrites: kept in pristine copies.
        let written: Vec<Region> = b.cmds.iter().flat_map(|c| c.access().1).collect();
        let mut pristine = Vec::new();
        for node in g.nodes() {
            // State (a KV cache) is overwritten on purpose and kept as runs
            // leave it.
            if node.op() != Op::Input || node.is_state() {
                continue;
            }
            let t = node.tensor();
            let Ok(r) = b.region(t) else {
                continue; // never bound: nothing to keep
            };
            if written.iter().any(|w| w.overlaps(&r)) {
                pristine.push((r, b.new_scratch(r.size)?));
            }
        }
        let mirrors = HostMirrors::new(ctx, g, &b, &written, &pristine)?;
        let Builder {
            scratch,
            cmds,
            stats,
            ..
        } = b;
        let mut dp = DevicePlan {
            backend,
            buffers,
            sizes: sizes.to_vec(),
            scratch,
            dummy: placeholder,
            pristine,
            stats,
            cmds,
            sets: Vec::new(),
            descriptor_pool: vk::DescriptorPool::null(),
            run_cb: vk::CommandBuffer::null(),
            restore_cb: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            queries: vk::QueryPool::null(),
            mirrors,
        };
        dp.record()?;
        Ok(dp)
    }

    /// What one run records.
    #[cfg(feature = "lab")]
    pub fn device_stats(&self) -> DevicePlanStats {
        self.stats
    }

    fn vk_buffer(&self, slot: Slot) -> vk::Buffer {
        match slot {
            Slot::Graph(i) => self.buffers[i].buffer,
            Slot::Scratch(i) => self.scratch[i].buffer,
            Slot::Dummy => self.dummy.buffer,
        }
    }

    /// Creates the fence, query and descriptor pools, writes the descriptor
    /// sets, and records the run and restore command buffers.
    fn record(&mut self) -> Result<(), VulkanError> {
        let ctx = self.backend.context();
        let d = &ctx.device;
        // SAFETY: a fresh fence of this device.
        self.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(VulkanError::vk("vkCreateFence"))?;
        if ctx.info().timestamp_period_ns.is_some() {
            self.queries = create_timestamps(d, 2)?;
        }
        let n_sets = self
            .cmds
            .iter()
            .filter(|c| matches!(c, Cmd::Dispatch { .. }))
            .count() as u32;
        let n_descriptors: u32 = self
            .cmds
            .iter()
            .map(|c| match c {
                Cmd::Dispatch { bindings, .. } => bindings.len() as u32,
                Cmd::Copy { .. } => 0,
            })
            .sum();
        if n_sets > 0 {
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: n_descriptors,
            }];
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(n_sets)
                .pool_sizes(&sizes);
            // SAFETY: valid create info.
            self.descriptor_pool = unsafe { d.create_descriptor_pool(&info, None) }
                .map_err(VulkanError::vk("vkCreateDescriptorPool"))?;
        }
        // The command pool is used under the kernel-cache lock, which also
        // keeps the pipelines looked up below.
        let kernels = ctx
            .kernels
            .lock()
            .map_err(|_| VulkanError::Unsupported("kernel cache poisoned".into()))?;
        self.sets = self.descriptor_sets(&kernels)?;
        let n_copies = self.mirrors.n_inputs();
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(ctx.command_pool())
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(2 + n_copies as u32);
        // SAFETY: the pool belongs to this device; the lock is held.
        let mut cbs = unsafe { d.allocate_command_buffers(&alloc) }
            .map_err(VulkanError::vk("vkAllocateCommandBuffers"))?;
        (self.run_cb, self.restore_cb) = (cbs[0], cbs[1]);
        let copies = cbs.split_off(2);
        // SAFETY: fresh command buffers of this device, under the lock; the
        // graph and scratch buffers live as long as the plan.
        unsafe {
            self.mirrors
                .record_copies(d, &copies, |s| self.vk_buffer(s))?;
        }
        self.mirrors.copies = copies;
        let begin = vk::CommandBufferBeginInfo::default();
        let cb = self.run_cb;
        // SAFETY: every handle recorded belongs to this device and lives as
        // long as the plan: buffers and pools are owned by it, pipelines by
        // the context's cache (destroyed only with the context, which the
        // plan borrows). The command pool is used under the lock.
        unsafe {
            d.begin_command_buffer(cb, &begin)
                .map_err(VulkanError::vk("vkBeginCommandBuffer"))?;
            if !self.queries.is_null() {
                d.cmd_reset_query_pool(cb, self.queries, 0, 2);
            }
            self.entry_barrier(cb);
            if !self.queries.is_null() {
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, self.queries, 0);
            }
            self.stats.barriers = self.record_commands(cb, &kernels, None, &[])?;
            if !self.queries.is_null() {
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.queries, 1);
            }
            self.mirrors.record_readbacks(d, cb, |s| self.vk_buffer(s));
            self.exit_barrier(cb);
            d.end_command_buffer(cb)
                .map_err(VulkanError::vk("vkEndCommandBuffer"))?;
            let rb = self.restore_cb;
            d.begin_command_buffer(rb, &begin)
                .map_err(VulkanError::vk("vkBeginCommandBuffer"))?;
            self.entry_barrier(rb);
            for (r, i) in &self.pristine {
                let region = vk::BufferCopy {
                    src_offset: 0,
                    dst_offset: r.offset,
                    size: r.size,
                };
                d.cmd_copy_buffer(
                    rb,
                    self.scratch[*i].buffer,
                    self.vk_buffer(r.slot),
                    &[region],
                );
            }
            self.exit_barrier(rb);
            d.end_command_buffer(rb)
                .map_err(VulkanError::vk("vkEndCommandBuffer"))?;
        }
        Ok(())
    }

    /// One descriptor set per command, allocated from the plan's pool and
    /// written with the dispatch's bindings (a null handle for a copy).
    fn descriptor_sets(
        &self,
        kernels: &HashMap<KernelKey, Kernel>,
    ) -> Result<Vec<vk::DescriptorSet>, VulkanError> {
        let d = &self.backend.context().device;
        let mut sets = Vec::with_capacity(self.cmds.len());
        for cmd in &self.cmds {
            let Cmd::Dispatch {
                kernel, bindings, ..
            } = cmd
            else {
                sets.push(vk::DescriptorSet::null());
                continue;
            };
            let k = kernels
                .get(kernel)
                .ok_or_else(|| VulkanError::Unsupported(format!("kernel {kernel:?} not built")))?;
            let layouts = [k.set_layout];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(self.descriptor_pool)
                .set_layouts(&layouts);
            // SAFETY: the pool was sized for one set per dispatch and their
            // bindings; the layout belongs to this device.
            let set = unsafe { d.allocate_descriptor_sets(&info) }
                .map_err(VulkanError::vk("vkAllocateDescriptorSets"))?[0];
            let infos: Vec<[vk::DescriptorBufferInfo; 1]> = bindings
                .iter()
                .map(|r| {
                    [vk::DescriptorBufferInfo {
                        buffer: self.vk_buffer(r.slot),
                        offset: r.offset,
                        range: r.size,
                    }]
                })
                .collect();
            let writes = storage_writes(set, &infos);
            // SAFETY: the set is fresh and not in use; every buffer is the
            // plan's and each range lies within it.
            unsafe { d.update_descriptor_sets(&writes, &[]) };
            sets.push(set);
        }
        Ok(sets)
    }

    /// Records the plan's commands into `cb`, but for those whose indices
    /// are in `skip` (sorted; a leave-out profile's). Without `profile`, a
    /// barrier goes only between recorded commands that depend on each
    /// other, and the count of those barriers is returned. With `profile`,
    /// every command waits for the one before it to finish and is followed
    /// by a timestamp (query `i + 1` after command `i`; the caller writes
    /// query 0 before), so each command is timed alone; the count is then 0.
    ///
    /// # Safety
    /// `cb` is recording, and the kernel-cache lock that `kernels` comes
    /// from is held; `profile` has a query for each command and one more,
    /// and goes with an empty `skip`.
    unsafe fn record_commands(
        &self,
        cb: vk::CommandBuffer,
        kernels: &HashMap<KernelKey, Kernel>,
        profile: Option<vk::QueryPool>,
        skip: &[usize],
    ) -> Result<u64, VulkanError> {
        let d = &self.backend.context().device;
        let mut barriers = 0;
        let mut pending_writes: Vec<Region> = Vec::new();
        let mut pending_reads: Vec<Region> = Vec::new();
        let kept = self
            .cmds
            .iter()
            .zip(&self.sets)
            .enumerate()
            .filter(|(i, _)| skip.binary_search(i).is_err());
        for (i, (cmd, &set)) in kept {
            if profile.is_some() {
                if i > 0 {
                    // SAFETY: guaranteed by the caller.
                    unsafe { self.entry_barrier(cb) };
                }
            } else {
                let (reads, writes) = cmd.access();
                let hazard = reads
                    .iter()
                    .any(|r| pending_writes.iter().any(|w| w.overlaps(r)))
                    || pending_writes
                        .iter()
                        .chain(&pending_reads)
                        .any(|p| writes.iter().any(|w| p.overlaps(w)));
                if hazard {
                    // SAFETY: guaranteed by the caller.
                    unsafe { self.barrier(cb, &pending_writes) };
                    barriers += 1;
                    pending_writes.clear();
                    pending_reads.clear();
                }
                pending_reads.extend(reads);
                pending_writes.extend(writes);
            }
            // SAFETY: `cb` is recording (the caller); every handle is this
            // device's and outlives the command buffer (see `record`).
            unsafe {
                match cmd {
                    Cmd::Copy { src, dst } => {
                        let region = vk::BufferCopy {
                            src_offset: src.offset,
                            dst_offset: dst.offset,
                            size: src.size,
                        };
                        d.cmd_copy_buffer(
                            cb,
                            self.vk_buffer(src.slot),
                            self.vk_buffer(dst.slot),
                            &[region],
                        );
                    }
                    Cmd::Dispatch {
                        kernel,
                        push,
                        groups,
                        ..
                    } => {
                        let k = kernels.get(kernel).ok_or_else(|| {
                            VulkanError::Unsupported(format!("kernel {kernel:?} not built"))
                        })?;
                        d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, k.pipeline);
                        d.cmd_bind_descriptor_sets(
                            cb,
                            vk::PipelineBindPoint::COMPUTE,
                            k.layout,
                            0,
                            &[set],
                            &[],
                        );
                        if !push.is_empty() {
                            d.cmd_push_constants(
                                cb,
                                k.layout,
                                vk::ShaderStageFlags::COMPUTE,
                                0,
                                push,
                            );
                        }
                        d.cmd_dispatch(cb, groups[0], groups[1], groups[2]);
                    }
                }
                if let Some(q) = profile {
                    d.cmd_write_timestamp(
                        cb,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        q,
                        i as u32 + 1,
                    );
                }
            }
        }
        Ok(barriers)
    }

    /// Records a barrier that makes `writes` visible to every later
    /// compute or transfer access (an execution dependency only when empty).
    ///
    /// # Safety
    /// `cb` is recording.
    unsafe fn barrier(&self, cb: vk::CommandBuffer, writes: &[Region]) {
        let barriers: Vec<vk::BufferMemoryBarrier<'_>> = writes
            .iter()
            .map(|w| {
                vk::BufferMemoryBarrier::default()
                    .src_access_mask(write_access())
                    .dst_access_mask(any_access())
                    .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .buffer(self.vk_buffer(w.slot))
                    .offset(w.offset)
                    .size(w.size)
            })
            .collect();
        // SAFETY: guaranteed by the caller; the buffers are the plan's.
        unsafe {
            self.backend.context().device.cmd_pipeline_barrier(
                cb,
                work_stages(),
                work_stages(),
                vk::DependencyFlags::empty(),
                &[],
                &barriers,
                &[],
            );
        }
    }

    /// Orders the commands after everything submitted before (uploads,
    /// restores, the previous run).
    ///
    /// # Safety
    /// `cb` is recording.
    unsafe fn entry_barrier(&self, cb: vk::CommandBuffer) {
        let m = vk::MemoryBarrier::default()
            .src_access_mask(write_access())
            .dst_access_mask(any_access());
        // SAFETY: guaranteed by the caller.
        unsafe {
            self.backend.context().device.cmd_pipeline_barrier(
                cb,
                work_stages(),
                work_stages(),
                vk::DependencyFlags::empty(),
                &[m],
                &[],
                &[],
            );
        }
    }

    /// Makes every write visible to the host and to later submissions.
    ///
    /// # Safety
    /// `cb` is recording.
    unsafe fn exit_barrier(&self, cb: vk::CommandBuffer) {
        let m = vk::MemoryBarrier::default()
            .src_access_mask(write_access())
            .dst_access_mask(any_access() | vk::AccessFlags::HOST_READ);
        // SAFETY: guaranteed by the caller.
        unsafe {
            self.backend.context().device.cmd_pipeline_barrier(
                cb,
                work_stages(),
                work_stages() | vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[m],
                &[],
                &[],
            );
        }
    }

    /// Runs the plan once over the device buffers as they are.
    pub(crate) fn run_now(&self) -> Result<(), VulkanError> {
        // SAFETY: the run command buffer is executable, not pending (every
        // submission is waited for) and refers only to objects the plan
        // owns or borrows.
        // The inputs' copies written since the last run go first, in the
        // same submission.
        let mut cbs = self.mirrors.pending();
        cbs.push(self.run_cb);
        // SAFETY: as above, for the copies too (recorded once, waited for).
        let ran = unsafe { self.backend.context().submit_and_wait(&cbs, self.fence) };
        self.mirrors.ran(ran.is_ok());
        ran
    }

    /// Copies the graph inputs the plan overwrites back from their pristine
    /// copies (nothing to do when it overwrites none).
    pub(crate) fn restore(&self) -> Result<(), VulkanError> {
        if self.pristine.is_empty() {
            return Ok(());
        }
        self.mirrors.restored();
        // SAFETY: as in `run`, for the restore command buffer.
        unsafe {
            self.backend
                .context()
                .submit_and_wait(&[self.restore_cb], self.fence)
        }
    }

    /// Restores the inputs, then one timed run.
    pub(crate) fn timed_run(&self) -> Result<PlanTiming, VulkanError> {
        self.restore()?;
        let start = Instant::now();
        self.run_now()?;
        let wall = start.elapsed();
        let ctx = self.backend.context();
        let device = match ctx.info().timestamp_period_ns {
            Some(period) if !self.queries.is_null() => {
                let mut ts = [0u64; 2];
                // SAFETY: both queries were written by the run just waited for.
                unsafe {
                    ctx.device.get_query_pool_results(
                        self.queries,
                        0,
                        &mut ts,
                        vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                    )
                }
                .map_err(VulkanError::vk("vkGetQueryPoolResults"))?;
                let ticks = ts[1].wrapping_sub(ts[0]) & ctx.timestamp_mask();
                Some(Duration::from_nanos(
                    (ticks as f64 * f64::from(period)).round() as u64,
                ))
            }
            _ => None,
        };
        Ok(PlanTiming { device, wall })
    }
}

/// The core's resident-plan contract: writes and reads by byte range (one
/// that touches an input the plan overwrites saves it again), one command
/// buffer a run, restores, timestamps.
impl ResidentPlan for DevicePlan<'_> {
    type Error = VulkanError;

    fn buffer_sizes(&self) -> &[usize] {
        &self.sizes
    }

    fn write(&mut self, id: BufferId, offset: usize, bytes: &[u8]) -> Result<(), VulkanError> {
        let i = buffer_range(&self.sizes, id, offset, bytes.len())?;
        let ctx = self.backend.context();
        // Bytes an input's mirror covers reach the device at the next run.
        let covered = self
            .mirrors
            .write(ctx, Slot::Graph(i), offset as u64, bytes)?;
        if !covered {
            ctx.write_at(&self.buffers[i], offset, bytes)?;
        }
        let end = offset + bytes.len();
        for (r, s) in &self.pristine {
            // A mirror that covered the write updates this copy at the next
            // run.
            if r.slot != Slot::Graph(i) || (covered && self.mirrors.keeps_pristine(r)) {
                continue;
            }
            let (lo, hi) = (
                (r.offset as usize).max(offset),
                ((r.offset + r.size) as usize).min(end),
            );
            if lo < hi {
                ctx.write_at(
                    &self.scratch[*s],
                    lo - r.offset as usize,
                    &bytes[lo - offset..hi - offset],
                )?;
            }
        }
        Ok(())
    }

    fn read(&self, id: BufferId, offset: usize, out: &mut [u8]) -> Result<(), VulkanError> {
        let i = buffer_range(&self.sizes, id, offset, out.len())?;
        let ctx = self.backend.context();
        if self.mirrors.read(ctx, Slot::Graph(i), offset as u64, out)? {
            return Ok(());
        }
        ctx.read_at(&self.buffers[i], offset, out)?;
        self.mirrors
            .overlay_inputs(ctx, Slot::Graph(i), offset as u64, out)
    }

    fn run(&mut self) -> Result<(), VulkanError> {
        self.run_now()
    }

    fn restore_inputs(&mut self) -> Result<(), VulkanError> {
        self.restore()
    }

    fn time_once(&mut self) -> Result<PlanTiming, VulkanError> {
        self.timed_run()
    }

    fn stats(&self) -> PlanStats {
        let s = self.stats;
        PlanStats {
            kernel_steps: s.kernel_steps,
            launches: s.dispatches,
            barriers: s.barriers,
            quantizations: s.quantizations,
            copies: s.copies,
            copy_bytes: s.copy_bytes,
            resident_bytes: self
                .buffers
                .iter()
                .chain(&self.scratch)
                .map(|b| b.size())
                .sum(),
            host_steps: false,
        }
    }
}

impl Drop for DevicePlan<'_> {
    fn drop(&mut self) {
        let ctx = self.backend.context();
        let d = &ctx.device;
        // SAFETY: the objects belong to this device and no submission of
        // them is pending (every submission is waited for, and a failed
        // wait waits for the device). The command pool is used under the
        // kernel-cache lock.
        unsafe {
            let cbs: Vec<vk::CommandBuffer> = [self.run_cb, self.restore_cb]
                .into_iter()
                .chain(self.mirrors.copies.iter().copied())
                .filter(|c| !c.is_null())
                .collect();
            if !cbs.is_empty() {
                let _guard = ctx.kernels.lock();
                d.free_command_buffers(ctx.command_pool(), &cbs);
            }
            if !self.descriptor_pool.is_null() {
                d.destroy_descriptor_pool(self.descriptor_pool, None);
            }
            if !self.queries.is_null() {
                d.destroy_query_pool(self.queries, None);
            }
            if !self.fence.is_null() {
                d.destroy_fence(self.fence, None);
            }
        }
    }
}
