//! The quick case set on every CPU instruction set this machine has: no
//! failure, and every available CPU backend ran cases.

use clap::Parser;
use fused_verify::cli::Cli;
use fused_verify::run::run_tests;

#[test]
fn quick_set_passes_on_the_cpu() {
    let cli = Cli::parse_from(["fused-verify", "--backend", "cpu"]);
    let r = run_tests(&cli, false);
    let failures: Vec<String> = r
        .results
        .iter()
        .filter(|c| c.outcome == fused_verify::verify::Outcome::Fail)
        .take(10)
        .map(|c| format!("{} {}: {:?}", c.backend, c.case, c.checks))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.summary.passed > 0);
    for b in r.backends.iter().filter(|b| b.name.starts_with("cpu")) {
        assert_eq!(b.available, b.cases_run > 0, "{b:?}");
        if b.available {
            assert_eq!(b.cases_run, r.n_cases, "{b:?}");
        }
    }
}
