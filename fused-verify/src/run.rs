//! The `test` mode: the core self-check, then every generated case on
//! every selected backend, then the report.
//!
//! Skip rules: a backend that cannot run here has all its cases counted as
//! skipped and is reported (`SKIP name: reason`); a case a backend has no
//! kernel for is counted as skipped on it, its reason in the case's result
//! and a per-backend count printed. When `--backend` names it exactly
//! (`cpu-avx512`), when a `--backend` family (`cpu`) has no member that ran
//! a case, or when an available backend ran no case (a filter that matches
//! nothing), the run fails unless `--allow-skip`.

use crate::backend::{Availability, Backend, family_errors, named, registry, selected};
use crate::cases::{Case, generate};
use crate::cli::Cli;
use crate::progress::Progress;
use crate::report::{BackendStatus, TestReport, Totals, summarize};
use crate::selfcheck;
use crate::verify::{CaseResult, Outcome, check_backend, prepare};

/// Runs the `test` mode and returns the report (printing as it goes when
/// `print` is set).
pub fn run_tests(cli: &Cli, print: bool) -> TestReport {
    let run_selfcheck = cli.backend.is_empty() && cli.filter.is_none();
    let label = format!("{:?}", cli.cases).to_lowercase();
    run_cases(
        cli,
        generate(cli.cases, cli.seed),
        &label,
        run_selfcheck,
        print,
    )
}

/// Runs `cases` (those matching `--filter`) on the selected backends,
/// after the core self-check when `run_selfcheck` is set.
pub fn run_cases(
    cli: &Cli,
    mut cases: Vec<Case>,
    label: &str,
    run_selfcheck: bool,
    print: bool,
) -> TestReport {
    let backends = registry();
    let chosen: Vec<&dyn Backend> = backends
        .iter()
        .map(|b| b.as_ref())
        .filter(|b| selected(b.name(), &cli.backend))
        .collect();
    if let Some(f) = &cli.filter {
        cases.retain(|c| c.id().contains(f.as_str()));
    }
    let mut totals = Totals::default();
    let mut errors = Vec::new();

    let selfcheck = if run_selfcheck {
        selfcheck::run().checks
    } else {
        Vec::new()
    };
    if print && run_selfcheck {
        println!("== core self-check");
    }
    for c in &selfcheck {
        totals.add(if c.ok { Outcome::Pass } else { Outcome::Fail });
        if print {
            println!("{} {}", if c.ok { "ok  " } else { "FAIL" }, c.detail);
        }
    }

    let mut status: Vec<BackendStatus> = backends
        .iter()
        .map(|b| {
            let avail = b.availability();
            BackendStatus {
                name: b.name().to_string(),
                available: avail == Availability::Ready,
                skip_reason: match avail {
                    Availability::Ready => None,
                    Availability::Skip(r) => Some(r),
                },
                requested: named(b.name(), &cli.backend),
                cases_run: 0,
                cases_unsupported: 0,
            }
        })
        .collect();
    if print {
        println!(
            "== {} {label} cases (seed {}) on {}",
            cases.len(),
            cli.seed,
            chosen
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for s in status.iter().filter(|s| !s.available) {
            if let Some(r) = &s.skip_reason {
                println!("SKIP {}: {r}", s.name);
            }
        }
        for b in chosen
            .iter()
            .filter(|b| b.availability() == Availability::Ready)
        {
            if let Some(device) = b.device() {
                println!("on   {}: {device}", b.name());
            }
        }
    }

    let mut results: Vec<CaseResult> = Vec::new();
    let mut progress = Progress::new(cases.len() as u64);
    let mut printed_failures = 0usize;
    for case in &cases {
        let p = prepare(case);
        let mut case_results = vec![p.result.clone()];
        for be in &chosen {
            match be.availability() {
                Availability::Ready => {
                    let r = check_backend(*be, &p, cli.tolerance_scale);
                    if let Some(s) = status.iter_mut().find(|s| s.name == be.name()) {
                        if r.outcome == Outcome::Skip {
                            s.cases_unsupported += 1;
                        } else {
                            s.cases_run += 1;
                        }
                    }
                    case_results.push(r);
                }
                Availability::Skip(reason) => {
                    case_results.push(CaseResult::skipped(be.name(), case, &reason));
                }
            }
        }
        for r in &case_results {
            totals.add(r.outcome);
            if r.outcome == Outcome::Fail && print && (cli.verbose || printed_failures < 20) {
                printed_failures += 1;
                progress.bar_suspend(|| {
                    println!("FAIL {} {}", r.backend, r.case);
                    for c in r.checks.iter().filter(|c| !c.ok) {
                        println!("     {}: {}", c.name, c.detail);
                    }
                });
            }
        }
        results.extend(case_results);
        progress.inc(case.pattern.name());
    }
    progress.finish();
    if print {
        print_unsupported(&status, &results);
    }

    for s in &status {
        let in_run = chosen.iter().any(|b| b.name() == s.name);
        if !in_run || s.cases_run > 0 {
            continue;
        }
        let why = match &s.skip_reason {
            Some(r) => r.clone(),
            None if s.cases_unsupported > 0 => format!(
                "it has no kernel for any of the {} matching cases",
                s.cases_unsupported
            ),
            None => "no case matched".to_string(),
        };
        let counts = s.requested || s.available;
        if counts && !cli.allow_skip {
            errors.push(format!(
                "backend {} ran no case ({why}); pass --allow-skip to accept",
                s.name
            ));
        } else if print && s.available {
            println!("SKIP {}: ran no case ({why})", s.name);
        }
    }
    let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
    let ran: Vec<&str> = status
        .iter()
        .filter(|s| s.cases_run > 0)
        .map(|s| s.name.as_str())
        .collect();
    errors.extend(family_errors(cli, &names, &ran));
    totals.failed += errors.len();
    let table = summarize(&results);
    if print {
        if printed_failures < totals.failed && !cli.verbose {
            println!(
                "({} more failures; --verbose prints all)",
                totals.failed - printed_failures
            );
        }
        println!("== summary");
        if cli.markdown {
            print!("{}", crate::report::table_markdown(&table));
        } else {
            print!("{}", crate::report::table_text(&table));
        }
        for e in &errors {
            println!("FAIL {e}");
        }
    }
    TestReport {
        schema: "fused-verify/test/1",
        cases: label.to_string(),
        seed: cli.seed,
        filter: cli.filter.clone(),
        n_cases: cases.len(),
        backends: status,
        selfcheck,
        errors,
        summary: totals,
        table,
        results,
    }
}

/// `SKIP name: N cases unsupported` per backend that ran, with each
/// distinct reason and its count.
fn print_unsupported(status: &[BackendStatus], results: &[CaseResult]) {
    for s in status
        .iter()
        .filter(|s| s.available && s.cases_unsupported > 0)
    {
        let mut reasons: Vec<(String, usize)> = Vec::new();
        let why = results
            .iter()
            .filter(|r| r.backend == s.name && r.outcome == Outcome::Skip)
            .filter_map(|r| r.checks.first().map(|c| c.detail.clone()));
        for w in why {
            match reasons.iter_mut().find(|(r, _)| *r == w) {
                Some((_, n)) => *n += 1,
                None => reasons.push((w, 1)),
            }
        }
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        println!(
            "SKIP {}: {} cases it has no kernel for ({} run)",
            s.name, s.cases_unsupported, s.cases_run
        );
        for (r, n) in reasons {
            println!("     {n} × {r}");
        }
    }
}

impl TestReport {
    /// Whether the run failed: a failed check or a run-level error.
    pub fn failed(&self) -> bool {
        self.summary.failed > 0 || !self.errors.is_empty()
    }
}
