//! Progress bars on stderr for the long-running commands (`put`, `get`,
//! `mkfs`), drawn only when stderr is a terminal: scripts, pipes and the
//! tests see exactly the output they saw before (and `put`/`get` skip the
//! walk that counts the tree for the bar's total).
//!
//! While a bar is shown, the one-line messages of `util::eprint_line` go
//! through [`suspend`], so they print above the bar instead of through it.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

/// The bar on screen, if any, for [`suspend`].
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// True if progress should be drawn: stderr is a terminal.
pub fn enabled() -> bool {
    std::io::stderr().is_terminal()
}

/// Runs `f` (which prints to stderr) with the active bar, if any, cleared
/// from the screen and redrawn afterwards.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    let bar = ACTIVE.lock().ok().and_then(|a| a.clone());
    match bar {
        Some(b) => b.suspend(f),
        None => f(),
    }
}

/// A template, or the default style if the template does not parse (it is
/// a constant, so that would be a bug here, not a reason to panic).
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// One progress display; cleared from the screen when dropped.
pub struct Progress {
    bar: Option<ProgressBar>,
    files_total: u64,
    files_done: u64,
}

impl Progress {
    /// No display at all (stderr is not a terminal).
    pub fn hidden() -> Self {
        Progress { bar: None, files_total: 0, files_done: 0 }
    }

    fn show(bar: ProgressBar) -> Option<ProgressBar> {
        if let Ok(mut a) = ACTIVE.lock() {
            *a = Some(bar.clone());
        }
        Some(bar)
    }

    /// A copy of `files` files holding `bytes` bytes: bytes and files done
    /// of the totals, rate and ETA.
    pub fn copy(bytes: u64, files: u64) -> Self {
        let bar = ProgressBar::new(bytes).with_style(
            style(
                "{elapsed_precise} [{wide_bar}] {binary_bytes}/{binary_total_bytes} {msg} \
                 {binary_bytes_per_sec} ETA {eta}",
            )
            .progress_chars("=> "),
        );
        bar.set_message(format!("0/{files} files"));
        // Redraws from a timer too, so the rate and ETA move while one big
        // file is being copied.
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar: Self::show(bar), files_total: files, files_done: 0 }
    }

    /// A task without a known size: a spinner with the elapsed time.
    pub fn spinner(msg: String) -> Self {
        let bar = ProgressBar::new_spinner().with_style(style("{spinner} {elapsed_precise} {msg}"));
        bar.set_message(msg);
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress { bar: Self::show(bar), files_total: 0, files_done: 0 }
    }

    /// `n` more bytes copied.
    pub fn bytes(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// One more file (of any type) done.
    pub fn file_done(&mut self) {
        if let Some(b) = &self.bar {
            self.files_done += 1;
            b.set_message(format!("{}/{} files", self.files_done, self.files_total));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            if let Ok(mut a) = ACTIVE.lock() {
                *a = None;
            }
            b.finish_and_clear();
        }
    }
}
