//! A backend, or `skipped: <why>`.

use std::fmt::Display;
use std::io::Write;

/// Opens a backend with `open`. Where it cannot be opened here, prints
/// `skipped: no <name> device (<why>)` and returns `None`, unless the
/// environment variable `require` is set (CI machines that have the
/// device), which turns the skip into a failure.
#[track_caller]
pub fn backend_or_skip<B, E: Display>(
    name: &str,
    require: Option<&str>,
    open: impl FnOnce() -> Result<B, E>,
) -> Option<B> {
    match open() {
        Ok(b) => Some(b),
        Err(e) => {
            if let Some(var) = require
                && std::env::var_os(var).is_some()
            {
                panic!("{var} is set, but the {name} backend cannot open: {e}");
            }
            let _ = writeln!(std::io::stderr(), "skipped: no {name} device ({e})");
            None
        }
    }
}

/// The file name of the model `scripts/fetch-model` caches.
pub const SHIPPED_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The model `scripts/fetch-model` cached in the workspace's `.models`, or
/// why there is none.
pub fn shipped_model() -> Result<std::path::PathBuf, String> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.models")
        .join(SHIPPED_MODEL);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found (run scripts/fetch-model)",
            p.display()
        ))
    }
}

/// The shipped model's path ([`shipped_model`]); where it is not cached,
/// prints `skipped: <why>` and returns from the calling test, unless the
/// environment variable `FUSED_REQUIRE_MODEL` is set (the test command
/// fetches the model first), which turns the skip into a failure.
#[macro_export]
macro_rules! model_or_skip {
    () => {
        match $crate::skip::shipped_model() {
            Ok(p) => p,
            Err(why) => {
                assert!(
                    std::env::var_os("FUSED_REQUIRE_MODEL").is_none(),
                    "FUSED_REQUIRE_MODEL is set, but {why}"
                );
                println!("skipped: {why}");
                return;
            }
        }
    };
}
