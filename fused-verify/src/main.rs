//! fused-verify: the cross-backend verification and performance CLI of `fused`.
//!
//! Not implemented yet: for now it only says so.

fn main() {
    println!(
        "fused-verify {}: the verify CLI is not implemented yet; nothing was run.",
        env!("CARGO_PKG_VERSION")
    );
}
