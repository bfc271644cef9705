//! GEMV batches (`gemv_batch`, `gemv_quantized_batch`: independent calls
//! over shared activations, each after the first overlapping the one before
//! it where `LaunchOptions::overlap` is on, runs of one-column jobs of one
//! kernel in one launch where `LaunchOptions::group` is; every combination
//! here) against the same jobs run one call at a time, bit for bit, on the
//! first CUDA device (skipped without one), also with each job asking L2
//! for the next job's weights (`GemvJob::with_l2_ahead`); a batch's launch
//! count; a bad job refusing the whole batch.

mod common;

use common::{
    Rng, assert_bits_eq, backend_or_skip, chain, chain_operands, download, upload_weights,
};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_cuda::{
    AheadAt, CudaBackend, CudaError, DeviceVec, DeviceWeights, GemvJob, LaunchOptions,
};

/// One job's data: weights (and up weights for the gated form), the chain's
/// operands when it has the epilogue.
struct JobData {
    w: DeviceWeights,
    up: Option<DeviceWeights>,
    ops: Option<[DeviceVec; 3]>,
}

/// Jobs of different heights over one K: plain, with the epilogue chain,
/// gated with the chain, a one-row plain one, then [`RUN`] more, plain and
/// with the chain by turns (a run longer than one group launch takes).
fn job_data(
    be: &CudaBackend,
    rng: &mut Rng,
    dtype: DType,
    k: usize,
    n_cols: usize,
) -> Vec<JobData> {
    let up = |rng: &mut Rng, m: usize| upload_weights(be, rng, dtype, m, k);
    let mut out = Vec::new();
    let run = (0..RUN).map(|i| (64 + 13 * i, i % 2 == 0, false));
    let first = [
        (96, false, false),
        (33, true, false),
        (130, true, true),
        (1, false, false),
    ];
    for (m, epi, glu) in first.into_iter().chain(run) {
        let w = up(rng, m);
        let u = glu.then(|| up(rng, m));
        let ops = epi.then(|| chain_operands(rng, m, n_cols).map(|v| be.upload(&v).unwrap()));
        out.push(JobData { w, up: u, ops });
    }
    out
}

/// Jobs after the first four of [`job_data`].
const RUN: usize = 9;

/// Launches of a batch of [`job_data`]'s jobs of `n_cols` columns, less the
/// quantizer: one a job, or, with `group` and one column, one for the first
/// two, one for the gated job, one for the next 8 (the most a group takes),
/// one for the last 2.
fn batch_launches(n_jobs: usize, n_cols: usize, group: bool) -> u64 {
    if group && n_cols == 1 {
        4
    } else {
        n_jobs as u64
    }
}

/// The jobs of `data` writing into `ys`.
fn jobs<'a>(
    data: &'a [JobData],
    ops: &'a [Vec<&'a DeviceVec>],
    epi: &'a Epilogue,
    ys: &'a mut [DeviceVec],
) -> Vec<GemvJob<'a>> {
    jobs_ahead(data, ops, epi, ys, None)
}

/// [`jobs`], each job also asking L2 (when `ahead` is `(mode, at)`) for the
/// first half of the next job's weights (the last job: the first's) in the
/// layout `mode` reads, at `at`.
fn jobs_ahead<'a>(
    data: &'a [JobData],
    ops: &'a [Vec<&'a DeviceVec>],
    epi: &'a Epilogue,
    ys: &'a mut [DeviceVec],
    ahead: Option<(ActQuant, AheadAt)>,
) -> Vec<GemvJob<'a>> {
    data.iter()
        .zip(ops)
        .zip(ys.iter_mut())
        .enumerate()
        .map(|(i, ((d, ops), y))| {
            let mut j = GemvJob::new(&d.w, y);
            if d.ops.is_some() {
                j = j.with_epilogue(epi, ops);
            }
            if let Some(u) = &d.up {
                j = j.with_glu(u, Activation::Silu);
            }
            if let Some((mode, at)) = ahead {
                let next = &data[(i + 1) % data.len()].w;
                j = j.with_l2_ahead_at(next, mode, next.bytes() / 2, at);
            }
            j
        })
        .collect()
}

fn poisoned(be: &CudaBackend, data: &[JobData], n_cols: usize) -> Vec<DeviceVec> {
    data.iter()
        .map(|d| be.upload(&vec![f32::NAN; d.w.rows() * n_cols]).unwrap())
        .collect()
}

#[test]
fn batched_gemvs_equal_single_calls_bit_for_bit() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(41);
    let cases = [
        (DType::F16, ActQuant::F32),
        (DType::Q4_0, ActQuant::F32),
        (DType::Q4_0, ActQuant::Q8_0),
        (DType::Q8_0, ActQuant::Q8_0),
        (DType::Q4_K, ActQuant::Q8_K),
        (DType::Q4_1, ActQuant::Q8_1),
        (DType::Q6_K, ActQuant::Q8_K),
    ];
    let epi = chain();
    // Rounds of batches enqueued back to back before anything is read, each
    // on new activations: a batch's quantizer overwrites the scratch that
    // the previous batch's overlapping GEMVs read, so a job that ran ahead
    // of its inputs, or a quantizer that ran ahead of the jobs before it,
    // shows as a difference.
    const ROUNDS: usize = 6;
    let saved = be.options();
    let runs = cases
        .into_iter()
        .flat_map(|c| [1usize, 3].map(|n| (c, n)))
        .flat_map(|r| [(true, true), (true, false), (false, true), (false, false)].map(|o| (r, o)));
    for (((dtype, mode), n_cols), (overlap, group)) in runs {
        be.set_options(LaunchOptions {
            overlap,
            group,
            ..saved
        });
        let k = 1024;
        let data = job_data(&be, &mut rng, dtype, k, n_cols);
        let ops: Vec<Vec<&DeviceVec>> = data
            .iter()
            .map(|d| d.ops.as_ref().map_or(vec![], |o| o.iter().collect()))
            .collect();
        let xs: Vec<DeviceVec> = (0..ROUNDS)
            .map(|_| be.upload(&rng.vec_scaled(k * n_cols, 2.0)).unwrap())
            .collect();
        let mut batched: Vec<Vec<DeviceVec>> =
            xs.iter().map(|_| poisoned(&be, &data, n_cols)).collect();
        for (round, (x, ys)) in xs.iter().zip(batched.iter_mut()).enumerate() {
            common::reset_launches(&be);
            // Rounds 1 and 3 mod 4 ask L2 for the next job's weights, at
            // the blocks' start and end by turns: the same results.
            let ahead = match round % 4 {
                1 => Some((mode, AheadAt::Start)),
                3 => Some((mode, AheadAt::End)),
                _ => None,
            };
            be.gemv_batch(
                x,
                n_cols,
                mode,
                &mut jobs_ahead(&data, &ops, &epi, ys, ahead),
            )
            .unwrap();
            let quantizer = u64::from(mode != ActQuant::F32);
            assert_eq!(
                common::launches(&be),
                batch_launches(data.len(), n_cols, group) + quantizer,
                "{dtype} {n_cols} cols, group {group}"
            );
        }
        // The same on activations quantized beforehand, when quantized.
        let pre: Option<Vec<Vec<DeviceVec>>> = (mode != ActQuant::F32).then(|| {
            xs.iter()
                .map(|x| {
                    let acts = be.quantize_acts(mode, x, n_cols).unwrap();
                    let mut ys = poisoned(&be, &data, n_cols);
                    be.gemv_quantized_batch(&acts, &mut jobs(&data, &ops, &epi, &mut ys))
                        .unwrap();
                    be.synchronize().unwrap(); // `acts` is freed below
                    ys
                })
                .collect()
        });
        for (round, x) in xs.iter().enumerate() {
            for (j, d) in data.iter().enumerate() {
                let mut y = be.upload(&vec![f32::NAN; d.w.rows() * n_cols]).unwrap();
                let (e, o): (&Epilogue, &[&DeviceVec]) = match d.ops {
                    Some(_) => (&epi, &ops[j]),
                    None => (&Epilogue::NONE, &[]),
                };
                match &d.up {
                    Some(u) => be.gemv_batch(
                        x,
                        n_cols,
                        mode,
                        &mut [fused_cuda::GemvJob::new(&d.w, &mut y)
                            .with_glu(u, Activation::Silu)
                            .with_epilogue(e, o)],
                    ),
                    None => be.gemv_batch(
                        x,
                        n_cols,
                        mode,
                        &mut [GemvJob::new(&d.w, &mut y).with_epilogue(e, o)],
                    ),
                }
                .unwrap();
                let single = download(&be, &y);
                assert!(single.iter().all(|v| !v.is_nan()), "unwritten output");
                let what = format!(
                    "{dtype} {mode:?} {n_cols} cols, overlap {overlap}, group {group}, round {round}, job {j}"
                );
                assert_bits_eq(&download(&be, &batched[round][j]), &single, &what);
                if let Some(pre) = &pre {
                    let what = format!("{what}, quantized beforehand");
                    assert_bits_eq(&download(&be, &pre[round][j]), &single, &what);
                }
            }
        }
    }
    be.set_options(saved);
}

#[test]
fn a_bad_job_refuses_the_whole_batch() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(42);
    let (k, n_cols) = (256, 1);
    let data = job_data(&be, &mut rng, DType::Q4_0, k, n_cols);
    let ops: Vec<Vec<&DeviceVec>> = data
        .iter()
        .map(|d| d.ops.as_ref().map_or(vec![], |o| o.iter().collect()))
        .collect();
    let x = be.upload(&rng.vec_scaled(k, 1.0)).unwrap();
    let epi = chain();
    // The third job's output (the gated one, 130 rows) one element short:
    // the jobs before it are fine, and nothing may be enqueued for them.
    let mut ys: Vec<DeviceVec> = data
        .iter()
        .enumerate()
        .map(|(i, d)| be.alloc(d.w.rows() - usize::from(i == 2)).unwrap())
        .collect();
    for mode in [ActQuant::F32, ActQuant::Q8_0] {
        common::reset_launches(&be);
        let r = be.gemv_batch(&x, n_cols, mode, &mut jobs(&data, &ops, &epi, &mut ys));
        assert!(
            matches!(
                r,
                Err(CudaError::Core(fused_core::Error::LengthMismatch { .. }))
            ),
            "{mode:?}: {r:?}"
        );
        assert_eq!(common::launches(&be), 0, "{mode:?}: nothing enqueued");
    }
    // Activations of another mode than the weights take.
    let acts = be.quantize_acts(ActQuant::Q8_K, &x, n_cols).unwrap();
    common::reset_launches(&be);
    let mut ys: Vec<DeviceVec> = data.iter().map(|d| be.alloc(d.w.rows()).unwrap()).collect();
    let r = be.gemv_quantized_batch(&acts, &mut jobs(&data, &ops, &epi, &mut ys));
    assert!(
        matches!(r, Err(CudaError::Core(fused_core::Error::Unsupported(_)))),
        "Q4_0 weights with Q8_K activations: {r:?}"
    );
    assert_eq!(common::launches(&be), 0);
    // An L2 look-ahead past the end of the next weights' layout, or in a
    // layout they lack (F16 has no integer layout), refuses the batch.
    let f16 = job_data(&be, &mut rng, DType::F16, k, n_cols);
    let bad: [(&DeviceWeights, ActQuant, usize); 3] = [
        (&data[1].w, ActQuant::F32, data[1].w.bytes() + 16),
        (&f16[0].w, ActQuant::Q8_0, 16),
        (&data[1].w, ActQuant::Q8_K, 16),
    ];
    for (next, next_mode, bytes) in bad {
        for mode in [ActQuant::F32, ActQuant::Q8_0] {
            common::reset_launches(&be);
            let mut ys: Vec<DeviceVec> =
                data.iter().map(|d| be.alloc(d.w.rows()).unwrap()).collect();
            let mut js = jobs(&data, &ops, &epi, &mut ys);
            let last = js.pop().unwrap().with_l2_ahead(next, next_mode, bytes);
            js.push(last);
            let r = be.gemv_batch(&x, n_cols, mode, &mut js);
            assert!(
                matches!(
                    r,
                    Err(CudaError::Core(
                        fused_core::Error::LengthMismatch { .. }
                            | fused_core::Error::Unsupported(_)
                    ))
                ),
                "{mode:?}, look-ahead {next_mode:?} {bytes} bytes: {r:?}"
            );
            assert_eq!(common::launches(&be), 0, "{mode:?}: nothing enqueued");
        }
    }
    be.synchronize().unwrap();
}
