//! The `model` mode's report: every counted check, each backend run's
//! measurements, the reference's decoding, and the summary table.

use std::fmt::Write as _;

use crate::report::Totals;
use crate::verify::Outcome;

use super::checks::{Divergence, Threshold};

/// The JSON document of a `model` run (schema `fused-verify/model/1`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ModelReport {
    /// `fused-verify/model/1`.
    pub schema: &'static str,
    /// The GGUF file.
    pub file: String,
    /// The prompt.
    pub prompt: String,
    /// Its token ids.
    pub prompt_ids: Vec<u32>,
    /// Teacher-forced steps checked.
    pub steps: usize,
    /// Greedy tokens compared.
    pub tokens: usize,
    /// The reference's own decoding.
    pub reference: Option<ReferenceRun>,
    /// One entry per backend and activation mode that ran.
    pub runs: Vec<BackendRun>,
    /// Every counted check, in order.
    pub checks: Vec<ModelCheck>,
    /// Failures outside the checks (the file could not be read, a backend
    /// named with `--backend` did not run, a validation message).
    pub errors: Vec<String>,
    /// The totals of the closing line (errors count as failures).
    pub summary: Totals,
}

/// The f64 reference's greedy decoding of the prompt.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReferenceRun {
    /// Its greedy tokens (the forced tokens of every backend's steps).
    pub tokens: Vec<u32>,
    /// Their text.
    pub text: String,
    /// Top-1 minus top-2 logit at each step.
    pub margins: Vec<f64>,
    /// Seconds to read and dequantize the weights.
    pub load_s: f64,
    /// Seconds for the decoding.
    pub decode_s: f64,
}

/// One backend in one activation mode.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BackendRun {
    /// The backend's name.
    pub backend: String,
    /// What it ran on.
    pub device: String,
    /// `f32` or `ggml`.
    pub mode: &'static str,
    /// NMSE of the logits against the reference, per teacher-forced step.
    pub nmse: Vec<f64>,
    /// Their mean.
    pub mean: f64,
    /// Their largest.
    pub worst: f64,
    /// The NMSE threshold of the mode.
    pub threshold: Threshold,
    /// The largest `|Δ logit|` against the reference over those steps.
    pub max_abs: f64,
    /// Its greedy tokens.
    pub greedy: Vec<u32>,
    /// Their text.
    pub text: String,
    /// Where its greedy tokens part from those they are compared with.
    pub divergence: Option<Divergence>,
    /// Forward passes run.
    pub passes: usize,
    /// Seconds to load the model onto the backend.
    pub load_s: f64,
    /// Seconds for the forward passes.
    pub run_s: f64,
}

/// One counted check.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModelCheck {
    /// The backend (or `reference`).
    pub backend: String,
    /// `f32`, `ggml`, or `f64` for the reference.
    pub mode: &'static str,
    /// `logits`, `greedy` or `paris`.
    pub check: &'static str,
    /// Its verdict.
    pub outcome: Outcome,
    /// What was measured, or why it failed or was skipped.
    pub detail: String,
}

impl ModelCheck {
    /// The check as one line: `ok   cpu-avx2 ggml logits: …`.
    pub fn line(&self) -> String {
        let tag = match self.outcome {
            Outcome::Pass => "ok  ",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "SKIP",
        };
        format!(
            "{tag} {} {} {}: {}",
            self.backend, self.mode, self.check, self.detail
        )
    }
}

impl ModelReport {
    /// Counts every check and error into the totals.
    pub fn tally(&mut self) {
        let mut t = Totals::default();
        for c in &self.checks {
            t.add(c.outcome);
        }
        t.failed += self.errors.len();
        self.summary = t;
    }

    /// Whether the run failed.
    pub fn failed(&self) -> bool {
        self.summary.failed > 0 || !self.errors.is_empty()
    }

    /// The summary table: per backend and mode, the largest NMSE against
    /// its threshold, the largest |Δ logit|, and each check's verdict.
    pub fn table(&self) -> String {
        let verdict = |b: &str, m: &str, c: &str| {
            self.checks
                .iter()
                .find(|x| x.backend == b && x.mode == m && x.check == c)
                .map_or("-", |x| match x.outcome {
                    Outcome::Pass => "ok",
                    Outcome::Fail => "FAIL",
                    Outcome::Skip => "skip",
                })
        };
        let mut rows = vec![[
            "backend".to_string(),
            "mode".into(),
            "mean NMSE".into(),
            "worst NMSE".into(),
            "limits".into(),
            "max |Δ|".into(),
            "logits".into(),
            "greedy".into(),
            "paris".into(),
            "s".into(),
        ]];
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for c in &self.checks {
            if seen.contains(&(c.backend.as_str(), c.mode)) {
                continue;
            }
            seen.push((&c.backend, c.mode));
            let run = self
                .runs
                .iter()
                .find(|r| r.backend == c.backend && r.mode == c.mode);
            let e = |f: fn(&BackendRun) -> String| run.map_or_else(|| "-".to_string(), f);
            rows.push([
                c.backend.clone(),
                c.mode.to_string(),
                e(|r| format!("{:.2e}", r.mean)),
                e(|r| format!("{:.2e}", r.worst)),
                e(|r| format!("{:.0e}/{:.0e}", r.threshold.mean, r.threshold.step)),
                e(|r| format!("{:.2e}", r.max_abs)),
                verdict(&c.backend, c.mode, "logits").into(),
                verdict(&c.backend, c.mode, "greedy").into(),
                verdict(&c.backend, c.mode, "paris").into(),
                e(|r| format!("{:.1}", r.load_s + r.run_s)),
            ]);
        }
        let mut width = [0usize; 10];
        for r in &rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in &rows {
            let cells: Vec<String> = r
                .iter()
                .zip(width)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i < 2 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(backend: &str, mode: &'static str, check: &'static str, o: Outcome) -> ModelCheck {
        ModelCheck {
            backend: backend.into(),
            mode,
            check,
            outcome: o,
            detail: "d".into(),
        }
    }

    #[test]
    fn tally_line_and_table() {
        let mut r = ModelReport {
            checks: vec![
                check("reference", "f64", "paris", Outcome::Pass),
                check("cpu-avx2", "f32", "logits", Outcome::Pass),
                check("cpu-avx2", "f32", "greedy", Outcome::Fail),
                check("cuda", "f32", "logits", Outcome::Skip),
            ],
            runs: vec![BackendRun {
                backend: "cpu-avx2".into(),
                device: String::new(),
                mode: "f32",
                nmse: vec![1e-12, 3e-11],
                mean: 1.55e-11,
                worst: 3e-11,
                threshold: Threshold {
                    mean: 1e-9,
                    step: 1e-8,
                },
                max_abs: 0.0,
                greedy: Vec::new(),
                text: String::new(),
                divergence: None,
                passes: 0,
                load_s: 0.0,
                run_s: 0.0,
            }],
            errors: vec!["x".into()],
            ..ModelReport::default()
        };
        r.tally();
        assert_eq!(r.summary.line(), "2 passed, 2 failed, 1 skipped");
        assert!(r.failed());
        assert_eq!(
            r.checks[2].line(),
            "FAIL cpu-avx2 f32 greedy: d",
            "{:?}",
            r.checks[2]
        );
        let t = r.table();
        assert_eq!(t.lines().count(), 4, "{t}");
        let cpu = t.lines().find(|l| l.starts_with("cpu-avx2")).unwrap();
        assert!(cpu.contains("3.00e-11") && cpu.contains("1e-9/1e-8") && cpu.contains("FAIL"));
    }
}
