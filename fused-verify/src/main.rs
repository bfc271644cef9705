//! `fused-verify`: the project's main job.
//!
//! Until the cross-backend verifier lands (its own issue), this runs the
//! core's self-check on the CPU: the reference GEMV of every weight format
//! against the f64 reference, the FWHT against its inverse, and a
//! transformer decode layer planned by the core, its fused plan against the
//! unfused graph bit for bit. It needs no GPU and no toolkit.

mod selfcheck;

use std::process::ExitCode;

fn main() -> ExitCode {
    println!("fused-verify: core self-check (the cross-backend verifier is not built yet)");
    let report = selfcheck::run();
    for line in &report.lines {
        println!("{line}");
    }
    println!("{} passed, {} failed", report.passed, report.failed);
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
