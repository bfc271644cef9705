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
