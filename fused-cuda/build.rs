//! Build script of fused-cuda.
//!
//! Without the `cuda` feature it does nothing. With it, it compiles every
//! kernel in `kernels/` twice with nvcc into `OUT_DIR`, where `src/` embeds
//! both: a cubin for `$FUSED_CUDA_ARCH` (default `sm_90`, the H100/H200: no
//! JIT at load) and portable PTX for `compute_80` (any GPU of compute
//! capability 8.0 or newer; the driver JIT-compiles it). `src/device.rs`
//! tries the cubin first and falls back to the PTX. nvcc is, in this order:
//! `$FUSED_NVCC`; the wheel nvcc that `scripts/test` installs in
//! `<workspace>/.tools/cuda`; `nvcc` on `PATH`.
//!
//! Every kernel is compiled with `-fmad=false`: no multiply-add contraction
//! except where the source asks for `fmaf`, so the epilogue stages and the
//! unfused element-wise kernels round the same way (see `kernels/common.cuh`).

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The kernels, by file stem: `kernels/<stem>.cu` becomes `$OUT_DIR/<stem>.ptx`.
const KERNELS: &[&str] = &["probe", "elementwise", "gemv", "fwht", "decode"];

/// The portable target, embedded as PTX beside the cubin.
const PORTABLE_ARCH: &str = "compute_80";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FUSED_NVCC");
    println!("cargo:rerun-if-env-changed=FUSED_CUDA_ARCH");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }

    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    let nvcc = find_nvcc(&manifest);
    let arch = env::var("FUSED_CUDA_ARCH").unwrap_or_else(|_| "sm_90".to_owned());

    // Every header the kernels include.
    let kernels = manifest.join("kernels");
    let headers = std::fs::read_dir(&kernels)
        .unwrap_or_else(|e| fail(&format!("reading {}: {e}", kernels.display())));
    for entry in headers.flatten() {
        if entry.path().extension().is_some_and(|x| x == "cuh") {
            println!("cargo:rerun-if-changed={}", entry.path().display());
        }
    }
    // All compilations run at once; each is checked when it ends.
    let mut jobs = Vec::new();
    for stem in KERNELS {
        let src = manifest.join("kernels").join(format!("{stem}.cu"));
        println!("cargo:rerun-if-changed={}", src.display());
        let targets = [
            ("-cubin", arch.clone(), out.join(format!("{stem}.cubin"))),
            (
                "-ptx",
                PORTABLE_ARCH.to_owned(),
                out.join(format!("{stem}.ptx")),
            ),
        ];
        for (kind, target, dst) in targets {
            let child = Command::new(&nvcc)
                .arg(kind)
                .arg(format!("-arch={target}"))
                .args(["-O3", "-std=c++17", "-fmad=false"])
                .arg("-o")
                .arg(&dst)
                .arg(&src)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| fail(&format!("could not run {}: {e}", nvcc.display())));
            jobs.push((src.clone(), child));
        }
    }
    for (src, child) in jobs {
        let output = child
            .wait_with_output()
            .unwrap_or_else(|e| fail(&format!("waiting for nvcc: {e}")));
        if !output.status.success() {
            fail(&format!(
                "{} failed on {} ({}):\n{}{}",
                nvcc.display(),
                src.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
}

/// The nvcc to use, or a build error that says how to provide one.
fn find_nvcc(manifest: &Path) -> PathBuf {
    if let Some(p) = env::var_os("FUSED_NVCC") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            fail(&format!("FUSED_NVCC={} is not a file", p.display()));
        }
        return p;
    }
    let wheel = manifest.join("../.tools/cuda/nvidia/cu13/bin/nvcc");
    if wheel.is_file() {
        println!("cargo:rerun-if-changed={}", wheel.display());
        return wheel;
    }
    let on_path = Command::new("nvcc").arg("--version").output();
    if matches!(on_path, Ok(ref o) if o.status.success()) {
        return PathBuf::from("nvcc");
    }
    fail(
        "the `cuda` feature needs nvcc, and none was found: not in $FUSED_NVCC, \
         not at <workspace>/.tools/cuda/nvidia/cu13/bin/nvcc (run scripts/test, which \
         installs it), and not on PATH",
    )
}

fn fail(msg: &str) -> ! {
    eprintln!("error: fused-cuda build script: {msg}");
    panic!("fused-cuda build script: {msg}");
}
