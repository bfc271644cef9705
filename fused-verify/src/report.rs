//! Reports: the summary table per backend × pattern × format (plain text or
//! Markdown), the JSON document, and the closing `N passed, N failed, N
//! skipped` line.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::verify::{CaseResult, Check, Outcome};

/// Passed, failed and skipped counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// Checks or cases that passed.
    pub passed: usize,
    /// Checks or cases that failed.
    pub failed: usize,
    /// Cases not run.
    pub skipped: usize,
}

impl Totals {
    /// Counts one outcome.
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Pass => self.passed += 1,
            Outcome::Fail => self.failed += 1,
            Outcome::Skip => self.skipped += 1,
        }
    }

    /// The closing line: `N passed, N failed, N skipped`.
    pub fn line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// One row of the summary table.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Row {
    /// Backend name.
    pub backend: String,
    /// Pattern name.
    pub pattern: String,
    /// Weight format name.
    pub dtype: String,
    /// Counts.
    pub totals: Totals,
    /// Largest NMSE against f64.
    pub worst_nmse: Option<f64>,
    /// Largest ulp distance against the same-quantization reference.
    pub worst_ulp: Option<u64>,
    /// Largest absolute error against f64.
    pub worst_abs: Option<f64>,
}

fn worse<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y > x { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Groups results by backend, pattern and format, in that order; a backend
/// that ran no case at all gets one row (pattern and format `*`).
pub fn summarize(results: &[CaseResult]) -> Vec<Row> {
    let ran: std::collections::HashSet<&str> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Skip)
        .map(|r| r.backend.as_str())
        .collect();
    let mut rows: BTreeMap<(String, &str, String), Row> = BTreeMap::new();
    for r in results {
        let (pattern, dtype) = if ran.contains(r.backend.as_str()) {
            (r.pattern, r.dtype.as_str())
        } else {
            ("*", "*")
        };
        let row = rows
            .entry((r.backend.clone(), pattern, dtype.to_string()))
            .or_insert_with(|| Row {
                backend: r.backend.clone(),
                pattern: pattern.to_string(),
                dtype: dtype.to_string(),
                ..Row::default()
            });
        row.totals.add(r.outcome);
        row.worst_nmse = worse(row.worst_nmse, r.metrics.nmse);
        row.worst_ulp = worse(row.worst_ulp, r.metrics.max_ulp);
        row.worst_abs = worse(row.worst_abs, r.metrics.max_abs);
    }
    rows.into_values().collect()
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

fn cells(r: &Row) -> [String; 9] {
    [
        r.backend.clone(),
        r.pattern.clone(),
        r.dtype.clone(),
        r.totals.passed.to_string(),
        r.totals.failed.to_string(),
        r.totals.skipped.to_string(),
        opt(r.worst_nmse, |v| format!("{v:.2e}")),
        opt(r.worst_ulp, |v| v.to_string()),
        opt(r.worst_abs, |v| format!("{v:.2e}")),
    ]
}

const HEADER: [&str; 9] = [
    "backend", "pattern", "dtype", "pass", "fail", "skip", "max NMSE", "max ulp", "max abs",
];

/// The table as aligned plain text.
pub fn table_text(rows: &[Row]) -> String {
    let all: Vec<[String; 9]> = std::iter::once(HEADER.map(str::to_string))
        .chain(rows.iter().map(cells))
        .collect();
    let mut width = [0usize; 9];
    for r in &all {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    for r in &all {
        let line: Vec<String> = r
            .iter()
            .zip(width)
            .enumerate()
            .map(|(i, (c, w))| {
                if i < 3 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// The table as Markdown.
pub fn table_markdown(rows: &[Row]) -> String {
    let mut out = format!("| {} |\n|{}\n", HEADER.join(" | "), "---|".repeat(9));
    for r in rows {
        let _ = writeln!(out, "| {} |", cells(r).join(" | "));
    }
    out
}

/// What became of one backend in a run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BackendStatus {
    /// Its name.
    pub name: String,
    /// Whether it could run here.
    pub available: bool,
    /// Why not.
    pub skip_reason: Option<String>,
    /// Whether `--backend` named it exactly (a family such as `cpu` does
    /// not request each member).
    pub requested: bool,
    /// Cases it ran.
    pub cases_run: usize,
    /// Cases it skipped for want of a kernel (a weight format, an
    /// activation mode or a column count it lacks).
    pub cases_unsupported: usize,
}

/// The JSON document of a `test` run (schema `fused-verify/test/1`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct TestReport {
    /// `fused-verify/test/1`.
    pub schema: &'static str,
    /// The case set: `quick`, `full` or `gguf`.
    pub cases: String,
    /// The base seed.
    pub seed: u64,
    /// The `--filter`, if any.
    pub filter: Option<String>,
    /// Number of generated cases after filtering.
    pub n_cases: usize,
    /// Every backend of the registry.
    pub backends: Vec<BackendStatus>,
    /// The core self-check lines (empty when not run).
    pub selfcheck: Vec<Check>,
    /// Run-level failures (a requested backend that ran nothing).
    pub errors: Vec<String>,
    /// The totals of the closing line.
    pub summary: Totals,
    /// The summary table.
    pub table: Vec<Row>,
    /// Every case result.
    pub results: Vec<CaseResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_table() {
        let mut t = Totals::default();
        for o in [Outcome::Pass, Outcome::Pass, Outcome::Fail, Outcome::Skip] {
            t.add(o);
        }
        assert_eq!(t.line(), "2 passed, 1 failed, 1 skipped");
        let rows = vec![Row {
            backend: "cpu-scalar".into(),
            pattern: "gemv".into(),
            dtype: "q4_0".into(),
            totals: t,
            worst_nmse: Some(1.5e-5),
            worst_ulp: None,
            worst_abs: Some(0.25),
        }];
        let md = table_markdown(&rows);
        assert!(md.contains("| cpu-scalar | gemv | q4_0 | 2 | 1 | 1 | 1.50e-5 | - | 2.50e-1 |"));
        let text = table_text(&rows);
        assert_eq!(text.lines().count(), 2);
    }
}
