//! Logging to stderr through the `log` facade fuser reports with: warnings
//! (corruption found while serving a request, a reply that could not be
//! sent) and, with the `debug` mount option, every request fuser decodes,
//! every error reply and the negotiated capabilities. Without a logger the
//! messages cost nothing (a daemon whose stderr is /dev/null installs none).

use std::io::Write;

struct Stderr;

/// Without `debug`, fuser's own warnings (an unmount of a path that is
/// already gone at the end of every session, unimplemented requests) are
/// noise: only its errors are shown, and the adapter's warnings.
static DEBUG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        DEBUG.load(std::sync::atomic::Ordering::Relaxed)
            || m.level() <= log::Level::Error
            || m.target().starts_with("uext4_fuse")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut e = std::io::stderr().lock();
        // A closed stderr is no reason to fail a request.
        let _ = writeln!(e, "uext4-fuse {} {}: {}", record.level(), record.target(), record.args());
    }

    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

/// Prints fuser's and the adapter's warnings to stderr from now on, and
/// with `debug` also every request, error reply and the negotiated
/// capabilities. Only the first call installs the logger.
pub fn enable_stderr_log(debug: bool) {
    DEBUG.store(debug, std::sync::atomic::Ordering::Relaxed);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(if debug { log::LevelFilter::Debug } else { log::LevelFilter::Warn });
    }
}
