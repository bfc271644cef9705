//! Where a token's time goes: the forward pass split into its phases, each
//! timed on the host around the call that runs it (a plan run waits for its
//! backend, so its time includes the device's work).

use std::fmt;
use std::time::{Duration, Instant};

/// A phase of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The token's embedding row dequantized.
    Embed,
    /// The whole-token plan: its write, run and the read of the logits.
    Token,
    /// The q/k/v plan (with the attention norm as its prologue, or after
    /// a host norm).
    Qkv,
    /// RoPE on q and k.
    Rope,
    /// Attention over the host KV cache (append, scores, softmax, mix).
    Attention,
    /// The plan(s) after attention: o-proj + residual, the FFN norm, the
    /// gated FFN and down + residual.
    Post,
    /// RMSNorms run on the host (where a backend refused the prologue).
    HostNorm,
    /// The output head plan (with the output norm as its prologue).
    Head,
    /// Picking the next token from the logits.
    Sample,
}

impl Phase {
    /// Every phase, in the order of a token.
    pub const ALL: [Phase; 9] = [
        Phase::Embed,
        Phase::Token,
        Phase::Qkv,
        Phase::Rope,
        Phase::Attention,
        Phase::Post,
        Phase::HostNorm,
        Phase::Head,
        Phase::Sample,
    ];

    fn name(self) -> &'static str {
        match self {
            Phase::Embed => "embedding",
            Phase::Token => "whole-token plan",
            Phase::Qkv => "q/k/v plan",
            Phase::Rope => "RoPE (host)",
            Phase::Attention => "attention (host)",
            Phase::Post => "o-proj + FFN plan",
            Phase::HostNorm => "RMSNorm (host)",
            Phase::Head => "head plan",
            Phase::Sample => "sampling (host)",
        }
    }
}

/// Time per phase, summed over the tokens timed.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    totals: [Duration; Phase::ALL.len()],
    tokens: usize,
}

impl Profile {
    /// Adds the time since `start` to `phase`.
    pub fn add(&mut self, phase: Phase, start: Instant) {
        self.totals[phase as usize] += start.elapsed();
    }

    /// Counts one more token.
    pub fn token(&mut self) {
        self.tokens += 1;
    }

    /// The tokens counted.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The time of `phase` over all tokens.
    pub fn total(&self, phase: Phase) -> Duration {
        self.totals[phase as usize]
    }
}

/// A table: each phase's time a token and its share of the timed total.
impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all: Duration = self.totals.iter().sum();
        let n = self.tokens.max(1) as f64;
        writeln!(f, "| phase | µs a token | share |")?;
        writeln!(f, "|---|---|---|")?;
        // Phases a path never enters (host attention on the whole-token
        // path, the whole-token plan on the layered one) are left out.
        for p in Phase::ALL.into_iter().filter(|&p| !self.total(p).is_zero()) {
            let t = self.total(p).as_secs_f64();
            let share = if all.is_zero() {
                0.0
            } else {
                100.0 * t / all.as_secs_f64()
            };
            writeln!(f, "| {} | {:.1} | {share:.1} % |", p.name(), 1e6 * t / n)?;
        }
        write!(
            f,
            "| total ({} tokens) | {:.1} | 100 % |",
            self.tokens,
            1e6 * all.as_secs_f64() / n
        )
    }
}
