//! The embedded example's checks on the host: the scalar ISA against the
//! core's reference, bit for bit, with the same output as on the board.

#[test]
fn every_check_passes_on_the_host() {
    let mut out = String::new();
    let report = fused_embedded::run(&mut out, &mut fused_embedded::NoProbe);
    assert_eq!(report.failed, 0, "{out}");
    assert_eq!(report.passed, 6, "{out}");
    assert_eq!(out.lines().last(), Some("6 passed, 0 failed"), "{out}");
}
