//! The plan executor on a transformer decode layer: the fused plan equals
//! the same graph run unfused on the same backend bit for bit, matches the
//! core reference (bit for bit on the scalar ISA), and needs fewer kernel
//! steps and barriers.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::plan;
use fused_core::reference::eval::eval_graph;
use fused_core::tensor::TensorDesc;
use fused_cpu::exec::{CpuMemory, Executor};
use fused_cpu::{CpuBackend, Isa};

mod common;
use common::{bits, nmse, quantized};

struct Layer {
    g: Graph,
    mem: Memory,
    out: NodeId,
}

/// o-proj + residual (in place), gate/up GLU, down + residual (in place),
/// signed-FWHT-rotated projection + residual; all activations in buffer 1,
/// weights in buffer 0.
fn layer(dtype: DType, h: usize, f: usize) -> Layer {
    let mut g = Graph::new();
    let mut wnext = 0usize;
    let mut anext = 0usize;
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let mut seed = 0x9e37_79b9u32;
    let mut rnd = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    };
    let mut weight = |g: &mut Graph, k: usize, m: usize, inits: &mut Vec<(TensorDesc, Vec<u8>)>| {
        let rb = dtype.row_bytes(k).unwrap();
        let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], fused_core::tensor::BufferId(0), wnext)
            .unwrap();
        wnext += (rb * m).div_ceil(64) * 64;
        inits.push((t, quantized(dtype, m, k, |_| rnd(k))));
        g.input(t).unwrap()
    };
    let w_o = weight(&mut g, h, h, &mut inits);
    let w_g = weight(&mut g, h, f, &mut inits);
    let w_u = weight(&mut g, h, f, &mut inits);
    let w_d = weight(&mut g, f, h, &mut inits);
    let w_r = weight(&mut g, h, h, &mut inits);
    let mut place = |n: usize| {
        let p = Place::at(1, anext);
        anext += (4 * n).div_ceil(64) * 64;
        p
    };
    let act_in =
        |g: &mut Graph, n: usize, p: Place, v: Vec<f32>, inits: &mut Vec<(TensorDesc, Vec<u8>)>| {
            let t = TensorDesc::contiguous(DType::F32, [n, 1, 1, 1], p.buffer, p.offset).unwrap();
            inits.push((t, v.iter().flat_map(|x| x.to_le_bytes()).collect()));
            g.input(t).unwrap()
        };
    let (ph, pa, ps) = (place(h), place(h), place(h));
    let (vh, va) = (rnd(h), rnd(h));
    let h0 = act_in(&mut g, h, ph, vh, &mut inits);
    let attn = act_in(&mut g, h, pa, va, &mut inits);
    let signs_v: Vec<f32> = rnd(h)
        .iter()
        .map(|v| if *v < 0.0 { -1.0 } else { 1.0 })
        .collect();
    let signs = act_in(&mut g, h, ps, signs_v, &mut inits);
    let had = {
        let t =
            TensorDesc::contiguous(DType::F32, [h, h, 1, 1], fused_core::tensor::BufferId(2), 0)
                .unwrap();
        g.input(t).unwrap()
    };
    let o = g.mul_mat(w_o, attn, place(h)).unwrap();
    let h1 = g.add(o, h0, ph).unwrap(); // in place on the residual stream
    let norm = g.other("rms_norm", &[h1], [h, 1, 1, 1], place(h)).unwrap();
    let gate = g.mul_mat(w_g, norm, place(f)).unwrap();
    let up = g.mul_mat(w_u, norm, place(f)).unwrap();
    let a = g.glu(Activation::Silu, gate, up, place(f)).unwrap();
    let down = g.mul_mat(w_d, a, place(h)).unwrap();
    let h2 = g.add(down, h1, ph).unwrap();
    let norm2 = g.other("rms_norm", &[h2], [h, 1, 1, 1], place(h)).unwrap();
    let signed = g.mul(norm2, signs, place(h)).unwrap();
    let rot = g.mul_mat_hadamard(had, signed, place(h)).unwrap();
    let proj = g.mul_mat(w_r, rot, place(h)).unwrap();
    let out = g.add(proj, h2, place(h)).unwrap();
    g.mark_output(out).unwrap();
    let mut mem = Memory::new(&[wnext, anext, 4 * h * h]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes).unwrap();
    }
    Layer { g, mem, out }
}

#[test]
fn decode_layer_fused_equals_unfused_and_reference() {
    for dtype in [DType::Q4_0, DType::F16, DType::Q8_0, DType::Q4_K] {
        let (h, f) = (256, 512);
        let l = layer(dtype, h, f);
        let p = plan(&l.g);
        assert_eq!(p.fused_steps(), 5, "{dtype}: {:#?}", p.refusals);
        let out_t = *l.g.tensor(l.out).unwrap();
        let mut ref_mem = l.mem.clone();
        eval_graph(&l.g, &mut ref_mem, GemvMode::Ggml).unwrap();
        let want = ref_mem.read(&out_t).unwrap();
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                let be = CpuBackend::with_isa(isa, threads).unwrap();
                let ex = Executor::new(&be, GemvMode::Ggml);
                let mut m_fused = CpuMemory::from_reference(&l.mem, 3).unwrap();
                let mut m_unfused = m_fused.clone();
                let sf = ex.run(&l.g, &p, &mut m_fused).unwrap();
                let su = ex.run_graph(&l.g, &mut m_unfused).unwrap();
                let (yf, yu) = (
                    m_fused.read_f32(&out_t).unwrap(),
                    m_unfused.read_f32(&out_t).unwrap(),
                );
                assert_eq!(
                    bits(&yf),
                    bits(&yu),
                    "{dtype} {isa} t{threads}: fused != unfused"
                );
                if isa == Isa::Scalar {
                    assert_eq!(
                        bits(&yf),
                        bits(&want),
                        "{dtype}: scalar executor != reference"
                    );
                } else {
                    assert!(
                        nmse(&yf, &want) < 1e-8,
                        "{dtype} {isa}: NMSE {}",
                        nmse(&yf, &want)
                    );
                }
                assert_eq!(sf.kernel_steps, 7, "{dtype}");
                assert_eq!(su.kernel_steps, 13, "{dtype}");
                assert_eq!(sf.counters.barriers, 7);
                assert_eq!(su.counters.barriers, 13);
            }
        }
    }
}

/// Attention long enough to run one task a head on the pool equals the
/// core's definition bit for bit, and a short one (on the calling thread)
/// too; a cache shorter than the context is a typed error.
#[test]
fn parallel_attention_equals_the_definition() {
    use fused_core::decode::{AttentionShape, attention};
    use fused_core::exec::StepKernels;
    let b = CpuBackend::new(4).expect("a backend");
    let shape = AttentionShape {
        head_dim: 64,
        n_head: 8,
        n_kv: 2,
        scale: 0.125,
    };
    let rows = 300;
    let fill = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .collect()
    };
    let (q, k, v) = (
        fill(shape.q_dim(), 1),
        fill(rows * shape.kv_dim(), 2),
        fill(rows * shape.kv_dim(), 3),
    );
    for len in [1, 7, rows] {
        let mut want = vec![0.0f32; shape.q_dim()];
        let mut scores = vec![0.0f32; len];
        attention(&shape, &q, &k, &v, len, &mut scores, &mut want).expect("the definition");
        let mut got = vec![f32::NAN; shape.q_dim()];
        StepKernels::attention(&b, &shape, &q, &k, &v, len, &mut got).expect("the CPU");
        assert_eq!(bits(&got), bits(&want), "context {len}");
    }
    let mut out = vec![0.0f32; shape.q_dim()];
    let short = &k[..10 * shape.kv_dim()];
    assert!(StepKernels::attention(&b, &shape, &q, short, &v, rows, &mut out).is_err());
}
