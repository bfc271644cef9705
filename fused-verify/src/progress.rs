//! The progress bar of the long modes (`test`, `perf`).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr, drawn only once a run has taken a second and
/// only when stderr is a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    shown: bool,
}

impl Progress {
    /// A hidden bar for `total` steps.
    pub fn new(total: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {pos}/{len} cases, {elapsed} (eta {eta}) {msg}")
        {
            bar.set_style(style);
        }
        Progress {
            bar,
            start: Instant::now(),
            shown: false,
        }
    }

    /// Advances by one step.
    pub fn inc(&mut self, msg: &str) {
        if !self.shown
            && self.start.elapsed() > Duration::from_secs(1)
            && std::io::stderr().is_terminal()
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.set_message(msg.to_string());
        self.bar.inc(1);
    }

    /// Runs `f` (which prints) with the bar cleared.
    pub fn bar_suspend(&self, f: impl FnOnce()) {
        self.bar.suspend(f);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
