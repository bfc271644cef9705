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
use std::sync::Mutex;

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
    // As many compilations at once as cargo runs jobs (NUM_JOBS), the
    // longest first: gemv.cu's pair takes most of the time, and ten nvcc
    // processes at once (1.7 GB apiece for gemv.cu) would crowd a small
    // machine's memory.
    let mut jobs = Vec::new();
    for stem in KERNELS {
        let src = manifest.join("kernels").join(format!("{stem}.cu"));
        println!("cargo:rerun-if-changed={}", src.display());
        jobs.push(Job {
            src: src.clone(),
            kind: "-cubin",
            target: arch.clone(),
            dst: out.join(format!("{stem}.cubin")),
        });
        jobs.push(Job {
            src,
            kind: "-ptx",
            target: PORTABLE_ARCH.to_owned(),
            dst: out.join(format!("{stem}.ptx")),
        });
    }
    jobs.sort_by_key(|j| !j.src.ends_with("gemv.cu"));
    let workers = env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, jobs.len());
    let queue = Mutex::new(jobs.into_iter());
    let failure = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    if failure.lock().expect("no worker panics").is_some() {
                        return;
                    }
                    let Some(job) = queue.lock().expect("no worker panics").next() else {
                        return;
                    };
                    if let Err(msg) = job.run(&nvcc) {
                        *failure.lock().expect("no worker panics") = Some(msg);
                        return;
                    }
                }
            });
        }
    });
    if let Some(msg) = failure.into_inner().expect("no worker panics") {
        fail(&msg);
    }
}

/// One nvcc compilation: `src` to `dst`, a `-cubin` or `-ptx` for `target`.
struct Job {
    src: PathBuf,
    kind: &'static str,
    target: String,
    dst: PathBuf,
}

impl Job {
    /// Runs nvcc; on failure, the message with nvcc's output.
    fn run(&self, nvcc: &Path) -> Result<(), String> {
        let output = Command::new(nvcc)
            .arg(self.kind)
            .arg(format!("-arch={}", self.target))
            .args(["-O3", "-std=c++17", "-fmad=false"])
            .arg("-o")
            .arg(&self.dst)
            .arg(&self.src)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("could not run {}: {e}", nvcc.display()))?;
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "{} failed on {} ({}):\n{}{}",
            nvcc.display(),
            self.src.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
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
