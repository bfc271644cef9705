//! The CPU backend's entry points other than the plain GEMV, each against
//! its reference: the (signed) FWHT, the unfused element-wise ops and the
//! packed-weights GEMV. Every function reads its case from `u`, panics on a
//! breach of the oracle, and returns early (no finding) when the fuzzer
//! data runs out.

use arbitrary::{Result, Unstructured};
use fused_core::element::{Activation, glu};
use fused_core::fwht::{FwhtDesc, fwht};
use fused_core::job::GemvJob;
use fused_core::reference::gemv::gemv_job;
use fused_core::weights::WeightMatrix;
use fused_cpu::CpuBackend;
use fused_cpu::packed::PackedWeights;

use crate::bits::assert_same;
use crate::data;
use crate::gemv_case::GemvCase;

/// `exact`, or with probability 1/8 a length a few elements off.
fn skewed(u: &mut Unstructured<'_>, exact: usize) -> Result<usize> {
    Ok(if u.ratio(1, 8)? {
        exact.saturating_add_signed(u.int_in_range(-2..=2)?)
    } else {
        exact
    })
}

/// The signed or unsigned FWHT: the scalar ISA errs exactly when the core's
/// reference does and otherwise equals it bit for bit; the best ISA errs
/// exactly when the reference does and lies within an NMSE of 1e-9.
pub fn check_fwht(u: &mut Unstructured<'_>, scalar: &CpuBackend, best: &CpuBackend) -> Result<()> {
    let n = if u.ratio(1, 16)? {
        u.int_in_range(0..=300usize)?
    } else {
        1usize << u.int_in_range(0..=10u32)?
    };
    let Ok(mut desc) = FwhtDesc::new(n) else {
        return Ok(());
    };
    if u.ratio(1, 4)? {
        desc = desc.with_scale(f32::from_bits(u.arbitrary()?));
    }
    let rows = u.int_in_range(0..=8usize)?;
    let sign_blocks = u.int_in_range(0..=3usize)?;
    let signed = sign_blocks > 0 && u.ratio(2, 3)?;
    if signed {
        let Ok(d) = desc.with_signs(sign_blocks * n) else {
            return Ok(());
        };
        desc = d;
    }
    let seed: u32 = u.arbitrary()?;
    let x = data::values(skewed(u, rows * n)?, seed, 4.0);
    let signs: Option<Vec<f32>> = if u.ratio(7, 8)? == signed {
        let len = skewed(u, sign_blocks.max(1) * n)?;
        Some(
            data::values(len, seed ^ 9, 1.0)
                .into_iter()
                .map(|v| if v < 0.0 { -1.0 } else { 1.0 })
                .collect(),
        )
    } else {
        None
    };
    let out_len = skewed(u, x.len())?;
    let mut want = vec![0.0f32; out_len];
    let r = fwht(&desc, &x, signs.as_deref(), &mut want);
    let mut y = vec![0.0f32; out_len];
    let s = scalar.fwht(&desc, &x, signs.as_deref(), &mut y);
    assert_eq!(s.is_ok(), r.is_ok(), "scalar fwht {s:?} vs reference {r:?}");
    if s.is_ok() {
        assert_same("scalar fwht vs reference", &y, &want);
    }
    let mut y = vec![0.0f32; out_len];
    let b = best.fwht(&desc, &x, signs.as_deref(), &mut y);
    assert_eq!(b.is_ok(), r.is_ok(), "best fwht {b:?} vs reference {r:?}");
    if b.is_ok() && desc.scale().is_finite() && desc.scale().abs() < 1e3 {
        crate::close::assert_nmse("best fwht vs reference", &y, &want, 1e-9);
    }
    Ok(())
}

/// The element-wise ops over arbitrary f32 bit patterns (NaN, infinities,
/// subnormals): errors exactly on mismatched lengths; on the scalar ISA
/// the core's element functions bit for bit; on every ISA additions and
/// multiplications single IEEE operations, and activations the same bits
/// in every position (a vector lane equals the scalar tail).
pub fn check_elementwise(
    u: &mut Unstructured<'_>,
    scalar: &CpuBackend,
    best: &CpuBackend,
) -> Result<()> {
    let n = u.int_in_range(0..=2100usize)?;
    let vals = |u: &mut Unstructured<'_>, len: usize| -> Result<Vec<f32>> {
        let raw = u.ratio(1, 2)?;
        let seed: u32 = u.arbitrary()?;
        let mut v = data::values(len, seed, 30.0);
        if raw {
            for x in v.iter_mut() {
                if u.is_empty() {
                    break;
                }
                *x = f32::from_bits(u.arbitrary()?);
            }
        }
        Ok(v)
    };
    let a = vals(u, n)?;
    let b_len = skewed(u, n)?;
    let b = vals(u, b_len)?;
    let out_len = skewed(u, n)?;
    let act = *u.choose(&Activation::ALL)?;
    let op = u.int_in_range(0..=5u8)?;
    for (be, exact) in [(scalar, true), (best, false)] {
        let mut y = vec![0.0f32; out_len];
        let ok_len = b_len == n && out_len == n;
        let mut ok = ok_len;
        let want: Vec<f32> = match op {
            0 => {
                let r = be.add(&a, &b, &mut y);
                assert_eq!(r.is_ok(), ok_len, "add {r:?}");
                a.iter().zip(&b).map(|(x, y)| x + y).collect()
            }
            1 => {
                let r = be.mul(&a, &b, &mut y);
                assert_eq!(r.is_ok(), ok_len, "mul {r:?}");
                a.iter().zip(&b).map(|(x, y)| x * y).collect()
            }
            2 => {
                let r = be.copy(&a, &mut y);
                assert_eq!(r.is_ok(), out_len == n, "copy {r:?}");
                ok = r.is_ok();
                a.clone()
            }
            3 => {
                let m = b_len;
                let r = be.add_row_bias(&a, &b, &mut y);
                ok = out_len == n && m > 0 && n % m == 0;
                assert_eq!(r.is_ok(), ok, "add_row_bias {r:?}");
                if !ok {
                    continue;
                }
                a.iter().enumerate().map(|(i, x)| x + b[i % m]).collect()
            }
            4 => {
                let r = be.unary(act, &a, &mut y);
                assert_eq!(r.is_ok(), out_len == n, "unary {r:?}");
                ok = r.is_ok();
                if r.is_err() {
                    continue;
                }
                if !exact {
                    lanes_agree("unary", &y, |i| {
                        let mut one = [0.0f32];
                        be.unary(act, &a[i..=i], &mut one).expect("one element");
                        one[0]
                    });
                    continue;
                }
                a.iter().map(|&x| act.apply(x)).collect()
            }
            _ => {
                let r = be.glu(act, &a, &b, &mut y);
                assert_eq!(r.is_ok(), ok_len, "glu {r:?}");
                if r.is_err() {
                    continue;
                }
                if !exact {
                    lanes_agree("glu", &y, |i| {
                        let mut one = [0.0f32];
                        be.glu(act, &a[i..=i], &b[i..=i], &mut one)
                            .expect("one element");
                        one[0]
                    });
                    continue;
                }
                a.iter().zip(&b).map(|(&g, &v)| glu(act, g, v)).collect()
            }
        };
        if ok {
            assert_same("element-wise vs IEEE / core", &y, &want);
        }
    }
    Ok(())
}

/// Element `i` of a vector result equals the same op on element `i` alone
/// (checked at a few positions: the first, the last, and some between).
fn lanes_agree(what: &str, y: &[f32], one: impl Fn(usize) -> f32) {
    let n = y.len();
    for i in [0, 1, 7, 8, 15, 16, 17, n / 2, n.wrapping_sub(1)] {
        if i < n {
            assert_same(what, &[y[i]], &[one(i)]);
        }
    }
}

/// The packed-weights GEMV (Q4_0 with Q8_0 activations only): packing
/// refuses other formats with a typed error; a packed call errs where the
/// reference does (or refuses what it lacks a kernel for), and otherwise,
/// for weights from bounded values, lies within an NMSE of the reference.
pub fn check_packed(c: &GemvCase, best: &CpuBackend) {
    let Some(epilogue) = c.epilogue else { return };
    let Ok(w) = WeightMatrix::new(c.dtype, c.m, c.k, &c.w) else {
        return;
    };
    let packed = match PackedWeights::pack(&w) {
        Ok(p) => p,
        Err(e) => {
            assert_ne!(c.dtype, fused_core::DType::Q4_0, "Q4_0 packs: {e:?}");
            return;
        }
    };
    let mut scratch = vec![0u8; w.row(0).map(<[u8]>::len).unwrap_or(0)];
    if c.m > 0 {
        packed
            .unpack_row(c.m - 1, &mut scratch)
            .expect("unpack the last row");
        assert_eq!(scratch, w.row(c.m - 1).expect("last row"), "unpacked row");
    }
    let ops: Vec<&[f32]> = c.operands.iter().map(Vec::as_slice).collect();
    let job = GemvJob::new(&w, &c.x, c.n_cols)
        .with_mode(c.mode)
        .with_epilogue(epilogue, &ops);
    let mut want = vec![0.0f32; c.y_len];
    let reference = gemv_job(&job, &mut want);
    let pjob = GemvJob::new(&packed, &c.x, c.n_cols)
        .with_mode(c.mode)
        .with_epilogue(epilogue, &ops);
    let mut y = vec![0.0f32; c.y_len];
    let r = best.gemv_packed(&pjob, &mut y);
    if r.is_ok() {
        assert!(
            reference.is_ok(),
            "packed Ok where the reference says {reference:?}"
        );
        if c.sane {
            crate::close::assert_nmse("packed GEMV vs reference", &y, &want, 1e-4);
        }
    }
}
