//! `fused-verify`: see the library docs. Exit status 1 on any failure.

use std::process::ExitCode;

use clap::Parser;
use fused_verify::cli::{Cli, Mode};

fn write_json<T: serde::Serialize>(cli: &Cli, value: &T) -> Result<(), String> {
    let Some(path) = &cli.json else {
        return Ok(());
    };
    let text = serde_json::to_string(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn plot(cli: &Cli, chart: &fused_verify::plot::BarChart<'_>) -> Result<(), String> {
    match &cli.plot {
        Some(path) => fused_verify::plot::write_svg(path, chart),
        None => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (failed, line, json) = match cli.mode {
        Mode::Test => {
            let r = fused_verify::run::run_tests(&cli, true);
            (r.failed(), r.summary.line(), write_json(&cli, &r))
        }
        Mode::Perf => {
            let r = fused_verify::perf::run_perf(&cli, true);
            let line = format!(
                "{} passed, {} failed, {} skipped",
                r.rows.len(),
                r.errors.len(),
                r.skipped.len()
            );
            (
                !r.errors.is_empty(),
                line,
                write_json(&cli, &r).and(plot(&cli, &r.chart())),
            )
        }
        Mode::Gguf => {
            let Some(path) = cli.file.clone() else {
                eprintln!("error: `gguf` needs a FILE");
                return ExitCode::from(2);
            };
            let threads = cli
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            match fused_verify::gguf::gguf_cases(&path, cli.rows, cli.seed, threads) {
                Ok((cases, passed_over)) => {
                    for p in &passed_over {
                        println!("SKIP tensor {p}");
                    }
                    let dumped = match &cli.dump {
                        None => Ok(()),
                        Some(dir) => {
                            let backends: Vec<_> = fused_verify::backend::registry()
                                .into_iter()
                                .filter(|b| fused_verify::backend::selected(b.name(), &cli.backend))
                                .collect();
                            fused_verify::gguf::dump(
                                dir,
                                &path,
                                &cases,
                                &backends,
                                cli.tolerance_scale,
                            )
                            .map(|n| {
                                println!(
                                    "dumped {n} .npy files and {} to {}",
                                    fused_verify::gguf::DUMP_MANIFEST,
                                    dir.display()
                                );
                            })
                        }
                    };
                    let r = fused_verify::run::run_cases(&cli, cases, "gguf", false, true);
                    match dumped {
                        Ok(()) => (r.failed(), r.summary.line(), write_json(&cli, &r)),
                        Err(e) => {
                            println!("FAIL --dump: {e}");
                            (true, r.summary.line(), write_json(&cli, &r))
                        }
                    }
                }
                Err(e) => {
                    println!("FAIL reading {}: {e}", path.display());
                    (true, "0 passed, 1 failed, 0 skipped".to_string(), Ok(()))
                }
            }
        }
        Mode::Model => {
            let r = fused_verify::model::run_model(&cli, true);
            (r.failed(), r.summary.line(), write_json(&cli, &r))
        }
        Mode::Decode => {
            let r = fused_verify::decode::run_decode(&cli, true);
            let line = format!(
                "{} passed, {} failed, 0 skipped",
                r.rows.iter().filter(|r| r.fused_eq_unfused).count(),
                r.errors.len()
            );
            (
                !r.errors.is_empty(),
                line,
                write_json(&cli, &r).and(plot(&cli, &r.chart())),
            )
        }
    };
    let mut failed = failed;
    if let Err(e) = json {
        println!("FAIL writing the report: {e}");
        failed = true;
    }
    println!("{line}");
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
