//! Launch options of the CUDA backend (the same type in builds without the
//! `cuda` feature, whose backend cannot be created).

/// How a [`CudaBackend`](crate::CudaBackend) launches its kernels. The
/// defaults are the fastest measured on the H200 (BENCHMARKS.md);
/// `FUSED_CUDA_PDL=0` and `FUSED_CUDA_STREAM` in the environment change them
/// when the backend is created,
/// [`CudaBackend::set_options`](crate::CudaBackend::set_options) changes
/// the options later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Programmatic dependent launch (`src/pdl.rs`): every kernel may start
    /// while the kernel before it on the stream still runs (its blocks are
    /// scheduled as the previous kernel's blocks retire) and waits for that
    /// kernel's results before it touches them. Only where the device
    /// supports it ([`CudaBackend::options`](crate::CudaBackend::options)).
    pub pdl: bool,
    /// The streaming integer GEMV (one activation column, Q8_0 / Q4_0 /
    /// Q4_K weights on quantized activations, sm_90): weights copied into a
    /// ring of shared-memory stages by the Tensor Memory Accelerator; `None`
    /// keeps the register-loading kernels.
    pub stream: Option<StreamShape>,
}

/// The ring of the streaming integer GEMV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamShape {
    /// Weight units (32-element blocks) per piece: rounded down to a
    /// multiple of 32, at least 32.
    pub piece_units: u32,
    /// Pieces in flight per block (1..=16).
    pub stages: u32,
    /// Blocks per streaming multiprocessor (the grid is this times the
    /// SM count, at most one block per row).
    pub blocks_per_sm: u32,
}

impl StreamShape {
    /// The shape as the kernels take it: piece a multiple of 32 units,
    /// 1..=16 stages, at least one block per SM.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn clamped(self) -> StreamShape {
        StreamShape {
            piece_units: (self.piece_units / 32).max(1) * 32,
            stages: self.stages.clamp(1, 16),
            blocks_per_sm: self.blocks_per_sm.max(1),
        }
    }

    /// `"piece,stages,blocks"` (as `FUSED_CUDA_STREAM` takes it).
    fn parse(s: &str) -> Option<StreamShape> {
        let v: Vec<u32> = s
            .split(',')
            .map(|p| p.trim().parse().ok())
            .collect::<Option<_>>()?;
        match v[..] {
            [piece_units, stages, blocks_per_sm] => Some(StreamShape {
                piece_units,
                stages,
                blocks_per_sm,
            }),
            _ => None,
        }
    }
}

impl Default for LaunchOptions {
    fn default() -> LaunchOptions {
        LaunchOptions {
            pdl: true,
            stream: Some(StreamShape {
                piece_units: 256,
                stages: 6,
                blocks_per_sm: 2,
            }),
        }
    }
}

impl LaunchOptions {
    /// The defaults, with `pdl` off where `FUSED_CUDA_PDL=0` is set and
    /// the streaming GEMV off (`0`) or shaped (`piece,stages,blocks`) by
    /// `FUSED_CUDA_STREAM`.
    pub fn from_env() -> LaunchOptions {
        let d = LaunchOptions::default();
        LaunchOptions {
            pdl: std::env::var("FUSED_CUDA_PDL").map_or(d.pdl, |v| v != "0"),
            stream: match std::env::var("FUSED_CUDA_STREAM") {
                Ok(v) if v == "0" => None,
                Ok(v) => StreamShape::parse(&v).or(d.stream),
                Err(_) => d.stream,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_shapes_parse_and_clamp_to_what_the_kernels_take() {
        let s = StreamShape::parse("100, 40,0").unwrap();
        assert_eq!(
            s.clamped(),
            StreamShape {
                piece_units: 96,
                stages: 16,
                blocks_per_sm: 1
            }
        );
        assert_eq!(
            StreamShape::parse("1,2").or(StreamShape::parse("a,2,3")),
            None
        );
        let d = LaunchOptions::default().stream.unwrap();
        assert_eq!(d.clamped(), d, "the default needs no clamping");
    }
}
