//! The built binary: exit codes, the JSON schema and the skip rules.

use std::path::PathBuf;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn last_line(o: &Output) -> String {
    stdout(o).lines().last().unwrap_or_default().to_string()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("fused-verify-{}-{name}", std::process::id()))
}

/// `N passed, N failed, N skipped` as numbers.
fn counts(line: &str) -> [usize; 3] {
    let n: Vec<usize> = line
        .split(", ")
        .map(|p| p.split(' ').next().unwrap().parse().unwrap())
        .collect();
    [n[0], n[1], n[2]]
}

#[test]
fn filtered_run_passes_and_writes_the_json_schema() {
    let json = tmp("ok.json");
    let o = run(&[
        "test",
        "--backend",
        "cpu",
        "--filter",
        "gemv/q4_0/",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    let [passed, failed, _] = counts(&last_line(&o));
    assert!(passed > 0 && failed == 0, "{}", last_line(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    assert_eq!(v["schema"], "fused-verify/test/1");
    assert_eq!(v["summary"]["passed"], passed);
    assert_eq!(v["summary"]["failed"], 0);
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        for key in [
            "backend", "case", "pattern", "dtype", "outcome", "checks", "metrics",
        ] {
            assert!(r.get(key).is_some(), "result without {key}: {r}");
        }
        assert!(r["case"].as_str().unwrap().contains("gemv/q4_0/"));
    }
    let cpu_scalar = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "cpu-scalar")
        .unwrap();
    assert_eq!(cpu_scalar["available"], true);
    assert!(cpu_scalar["cases_run"].as_u64().unwrap() > 0);
    assert!(
        v["table"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["backend"] == "cpu-scalar")
    );
}

#[test]
fn a_requested_backend_that_runs_nothing_fails_unless_allowed() {
    // These tests build fused-verify without the `cuda` feature.
    let o = run(&["--backend", "cuda", "--filter", "fwht/"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("backend cuda ran no case"));
    let [passed, _, skipped] = counts(&last_line(&o));
    assert!(passed > 0, "the reference checks still run");
    assert!(skipped > 0);

    let o = run(&["--backend", "cuda", "--filter", "fwht/", "--allow-skip"]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("SKIP cuda"));
}

#[test]
fn vulkan_runs_q4_1_in_both_activation_modes() {
    // Vulkan has GEMVs of Q4_1 weights with f32 activations and in GGML's
    // mode (Q8_1 activations): every case runs and passes, none is skipped
    // as unsupported; without a device the whole backend is skipped.
    let json = tmp("q4_1.json");
    let o = run(&[
        "--backend",
        "vulkan",
        "--filter",
        "gemv/q4_1/63/",
        "--allow-skip",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    let vk = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "vulkan")
        .unwrap();
    let (mut ggml, mut f32acts) = (0, 0);
    for r in v["results"].as_array().unwrap() {
        if r["backend"] != "vulkan" {
            continue;
        }
        if vk["available"] != true {
            assert_eq!(r["outcome"], "skip", "{r}");
            continue;
        }
        assert_eq!(r["outcome"], "pass", "{r}");
        if r["case"].as_str().unwrap().contains("/ggml/") {
            ggml += 1;
        } else {
            f32acts += 1;
        }
    }
    assert_eq!(vk["cases_unsupported"], 0);
    if vk["available"] == true {
        assert!(
            ggml > 0 && f32acts > 0,
            "{ggml} GGML-mode, {f32acts} f32 cases"
        );
        assert!(!stdout(&o).contains("SKIP vulkan: "), "{}", stdout(&o));
    }
}

#[test]
fn a_filter_that_matches_nothing_fails() {
    let o = run(&["--backend", "cpu-scalar", "--filter", "no-such-case"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(last_line(&o), "0 passed, 1 failed, 0 skipped");
}

#[test]
fn a_failed_check_fails_the_run() {
    // Zero tolerance: the best SIMD ISA reorders sums, so some case must
    // exceed 0 ulp (on a machine without SIMD only the scalar backend runs,
    // and it matches the reference exactly: then nothing fails).
    let o = run(&[
        "--backend",
        "cpu",
        "--filter",
        "gemv/f32/medium",
        "--tolerance-scale",
        "0",
    ]);
    let [_, failed, _] = counts(&last_line(&o));
    if fused_cpu::Isa::detect() > fused_cpu::Isa::Scalar {
        assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
        assert!(failed > 0);
        assert!(stdout(&o).contains("FAIL cpu-"));
    } else {
        assert!(o.status.success());
    }
}

#[test]
fn bad_arguments_are_rejected() {
    let o = run(&["--cases", "huge"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn perf_mode_reports_speed_and_barriers() {
    let json = tmp("perf.json");
    let svg = tmp("perf.svg");
    let o = run(&[
        "perf",
        "--plot",
        svg.to_str().unwrap(),
        "--backend",
        "cpu-scalar",
        "--filter",
        "fwht_signed",
        "--reps",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    assert_eq!(v["schema"], "fused-verify/perf/1");
    let plot = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_file(&svg).ok();
    assert!(plot.starts_with("<svg") && plot.contains("fwht_signed"));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert!(r["fused_us"].as_f64().unwrap() > 0.0);
    assert!(r["gbs"].as_f64().unwrap() > 0.0);
    assert!(r["pct_of_ceiling"].as_f64().unwrap() > 0.0);
    assert!(r["barriers_fused"].as_u64().unwrap() < r["barriers_unfused"].as_u64().unwrap());
}

#[test]
fn a_backend_pattern_that_selects_nothing_fails_unless_skips_are_allowed() {
    let o = run(&["test", "--backend", "nosuch", "--filter", "gemv/q4_0/"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("--backend nosuch: no backend it selects ran a case"),
        "{}",
        stdout(&o)
    );
    let o = run(&[
        "test",
        "--backend",
        "nosuch",
        "--filter",
        "gemv/q4_0/",
        "--allow-skip",
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
}
