//! # fused-testkit: what every test of the workspace shares
//!
//! - [`rng`]: one deterministic generator ([`Rng`]), so a seed names the
//!   same data in every crate;
//! - [`data`]: random weights quantized into any format;
//! - [`compare`]: bit-for-bit and NMSE checks that say where they fail;
//! - [`skip`]: open a backend, or say `skipped: <why>` (and fail where the
//!   caller demanded it);
//! - [`layer`]: a decode-layer graph (attention output projection and a
//!   gated feed-forward block, each with its residual add in place) with
//!   its initial memory;
//! - [`decode`]: the decode ops (RoPE, the KV-cache row writes, attention,
//!   argmax) as a graph laid out as a test asks, and a run of a resident
//!   plan of it against the core's reference;
//! - [`stacked_qkv`]: attention's half of a decode layer with q, k and v
//!   stacked in one GEMV, whose key/value append becomes the GEMV's tail;
//! - [`suite`]: the backend-contract suite, written once over
//!   [`fused_core::backend::Backend`] and instantiated in each backend
//!   crate by [`contract_suite!`].
//!
//! Not a product crate (`publish = false`): the workspace's tests, benches
//! and verifier depend on it.

pub mod compare;
pub mod data;
pub mod decode;
pub mod greedy_head;
pub mod layer;
pub mod rng;
pub mod skip;
pub mod stacked_qkv;
pub mod suite;
pub mod written_plan;

pub use rng::Rng;

/// Instantiates the backend-contract suite ([`suite`]) for one backend:
/// one `#[test]` a check. `$open` is an expression of type `Option<B>`
/// (`None`: the backend cannot run here and has said why, e.g. through
/// [`skip::backend_or_skip`]).
///
/// ```ignore
/// fused_testkit::contract_suite!(fused_testkit::skip::backend_or_skip(
///     "cpu", None, || fused_cpu::CpuBackend::new(2)
/// ));
/// ```
#[macro_export]
macro_rules! contract_suite {
    ($open:expr) => {
        #[test]
        fn contract_decode_layer_fused_equals_unfused() {
            if let Some(b) = $open {
                $crate::suite::decode_layer_fused_equals_unfused(&b);
            }
        }

        #[test]
        fn contract_recorded_runs_equal_issued_runs() {
            if let Some(b) = $open {
                $crate::suite::recorded_runs_equal_issued_runs(&b);
            }
        }

        #[test]
        fn contract_decode_ops_match_the_reference() {
            if let Some(b) = $open {
                $crate::suite::decode_ops_match_the_reference(&b);
            }
        }

        #[test]
        fn contract_norm_prologue_fused_equals_unfused() {
            if let Some(b) = $open {
                $crate::suite::norm_prologue_fused_equals_unfused(&b);
            }
        }

        #[test]
        fn contract_every_weight_format_with_an_epilogue() {
            if let Some(b) = $open {
                $crate::suite::every_weight_format_with_an_epilogue(&b);
            }
        }

        #[test]
        fn contract_signed_fwht_equals_sign_multiply_then_transform() {
            if let Some(b) = $open {
                $crate::suite::signed_fwht_equals_sign_multiply_then_transform(&b);
            }
        }

        #[test]
        fn contract_restored_inputs_make_runs_repeatable() {
            if let Some(b) = $open {
                $crate::suite::restored_inputs_make_runs_repeatable(&b);
            }
        }

        #[test]
        fn contract_partial_writes_touch_only_their_bytes() {
            if let Some(b) = $open {
                $crate::suite::partial_writes_touch_only_their_bytes(&b);
            }
        }

        #[test]
        fn contract_rewritten_weights_are_used() {
            if let Some(b) = $open {
                $crate::suite::rewritten_weights_are_used(&b);
            }
        }

        #[test]
        fn contract_empty_reduction_gives_the_epilogue_of_zero() {
            if let Some(b) = $open {
                $crate::suite::empty_reduction_gives_the_epilogue_of_zero(&b);
            }
        }

        #[test]
        fn contract_bad_input_is_a_typed_error() {
            if let Some(b) = $open {
                $crate::suite::bad_input_is_a_typed_error(&b);
            }
        }
    };
}
