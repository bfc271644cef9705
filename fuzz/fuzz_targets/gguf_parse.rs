//! `Gguf::parse` over arbitrary bytes. Oracle: a typed error (whose message
//! formats), or a file that satisfies every documented guarantee, re-parses
//! to the same result, and whose header writes back to the same bytes
//! (`fused_fuzz::gguf_check`).

#![no_main]

use fused_gguf::Gguf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    match Gguf::parse(bytes) {
        Err(e) => {
            let _ = e.to_string();
            let again = Gguf::parse(bytes).expect_err("parsing is deterministic");
            assert_eq!(format!("{e:?}"), format!("{again:?}"));
        }
        Ok(g) => {
            fused_fuzz::gguf_check::check(bytes, &g);
            let again = Gguf::parse(bytes).expect("parsing is deterministic");
            assert_eq!(format!("{g:?}"), format!("{again:?}"));
        }
    }
});
