//! Block decoding and dot products over arbitrary bytes, for every format.
//! Oracle: `dequantize_row`, `quantize_row` and `vec_dot` never panic; they
//! return a typed error exactly when a length is wrong (or, for `vec_dot`,
//! the format has no dot product); F32 rows decode and re-encode to the
//! same bytes; decoded values re-quantize and decode again without failing.

#![no_main]

use arbitrary::{Result, Unstructured};
use fused_core::DType;
use fused_core::quant::{dequantize_row, quantize_row, vec_dot};
use libfuzzer_sys::fuzz_target;

/// Checks one row of `dtype` read from `u`.
fn one(u: &mut Unstructured<'_>) -> Result<()> {
    let dtype = *u.choose(&DType::ALL)?;
    let blocks = u.int_in_range(0..=4usize)?;
    // Mostly exact lengths, sometimes off by a few elements or bytes.
    let n_skew: i8 = if u.ratio(1, 8)? {
        u.int_in_range(-3..=3)?
    } else {
        0
    };
    let b_skew: i8 = if u.ratio(1, 8)? {
        u.int_in_range(-3..=3)?
    } else {
        0
    };
    let n = (blocks * dtype.block_len()).saturating_add_signed(n_skew.into());
    let exact = dtype.row_bytes(blocks * dtype.block_len()).unwrap_or(0);
    let want = exact.saturating_add_signed(b_skew.into());
    let src = u.bytes(want.min(u.len()))?;
    let aligned = n.is_multiple_of(dtype.block_len());
    let valid = aligned && dtype.row_bytes(n).ok() == Some(src.len());

    let mut dst = vec![0.0f32; n];
    let r = dequantize_row(dtype, src, &mut dst);
    assert_eq!(r.is_ok(), valid, "{dtype:?} n={n} src={} {r:?}", src.len());
    if !valid {
        return Ok(());
    }
    let mut bytes = vec![0u8; src.len()];
    quantize_row(dtype, &dst, &mut bytes).expect("valid lengths re-quantize");
    if dtype == DType::F32 {
        assert_eq!(bytes, src, "F32 round trip");
    }
    let mut again = vec![0.0f32; n];
    dequantize_row(dtype, &bytes, &mut again).expect("valid lengths decode");
    assert!(
        quantize_row(dtype, &dst, &mut bytes[..src.len().saturating_sub(1)]).is_err()
            || src.is_empty()
    );

    // Dot product: the weight row as given against arbitrary activation bytes.
    let x_dtype = dtype.vec_dot_type();
    let x_len = x_dtype.and_then(|d| d.row_bytes(n).ok()).unwrap_or(0);
    let x_skew: i8 = if u.ratio(1, 8)? {
        u.int_in_range(-3..=3)?
    } else {
        0
    };
    let x_want = x_len.saturating_add_signed(x_skew.into());
    let x_q = u.bytes(x_want.min(u.len()))?;
    let r = vec_dot(dtype, src, x_q, n);
    assert_eq!(
        r.is_ok(),
        x_dtype.is_some() && x_q.len() == x_len,
        "{dtype:?} vec_dot n={n} x={} {r:?}",
        x_q.len()
    );
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    while !u.is_empty() {
        if one(&mut u).is_err() {
            break;
        }
    }
});
