//! Where the daemon's messages go, through the `log` facade: the
//! adapter's warnings (corruption found while serving a request,
//! `errors=` actions), the transports' errors (a reply that could not be
//! sent) and, at the `debug` level, every request decoded, every error
//! reply and the negotiated capabilities.
//!
//! A daemon in the foreground writes to stderr; one in the background
//! (whose stdio is /dev/null) writes to a log file if given one, else to
//! syslog, as daemons do. Without a logger the messages cost nothing.

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::fs::File;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// Where messages are written, chosen with [`init_log`]: `Stderr` for a
/// daemon in the foreground, `File` or `Syslog` for one in the
/// background, whose stderr is /dev/null.
#[derive(Debug)]
pub enum LogTarget {
    /// The process's stderr (a foreground daemon).
    Stderr,
    /// Appended to this file, one line each.
    File(File),
    /// syslog(3), facility daemon, identity "uext4".
    Syslog,
}

struct Logger {
    /// The adapter's messages up to this level.
    level: LevelFilter,
    sink: Sink,
}

enum Sink {
    Stderr,
    File(Mutex<File>),
    Syslog,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// The `log` entry point: forwards to the installed [`Logger`].
struct Facade;

static FACADE: Facade = Facade;

impl Log for Facade {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        LOGGER.get().is_some_and(|l| l.enabled(m))
    }

    fn log(&self, record: &Record<'_>) {
        if let Some(l) = LOGGER.get() {
            if l.enabled(record.metadata()) {
                l.write(record);
            }
        }
    }

    fn flush(&self) {}
}

impl Logger {
    /// Below `debug`, other crates' warnings are noise: only their errors
    /// are shown, and this crate's and the engine's messages (a quota
    /// usage clamped at zero) up to the chosen level.
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        let t = m.target();
        let ours = t.starts_with("uext4_fuse") || t == "uext4" || t.starts_with("uext4::");
        if ours || self.level >= LevelFilter::Debug {
            m.level() <= self.level
        } else {
            m.level() <= Level::Error
        }
    }

    fn write(&self, r: &Record<'_>) {
        let line = format!("uext4-fuse {} {}: {}", r.level(), r.target(), r.args());
        // A closed or full log is no reason to fail a request: errors
        // writing it are dropped.
        match &self.sink {
            Sink::Stderr => {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
            Sink::File(f) => {
                let _ = writeln!(f.lock().unwrap_or_else(|p| p.into_inner()), "{line}");
            }
            Sink::Syslog => syslog(r.level(), &line),
        }
    }
}

fn syslog(level: Level, line: &str) {
    let prio = match level {
        Level::Error => libc::LOG_ERR,
        Level::Warn => libc::LOG_WARNING,
        Level::Info => libc::LOG_INFO,
        Level::Debug | Level::Trace => libc::LOG_DEBUG,
    };
    // Interior NULs cannot be sent; they would end the message anyway.
    let Ok(msg) = std::ffi::CString::new(line.replace('\0', " ")) else { return };
    // SAFETY: both pointers are valid NUL-terminated strings for the
    // call's duration; the "%s" format consumes exactly one string
    // argument, so the message is never read as a format.
    unsafe { libc::syslog(prio | libc::LOG_DAEMON, c"%s".as_ptr(), msg.as_ptr()) };
}

/// Sends the daemon's messages up to `level` to `target` from now on (at
/// `Debug`, every request and other crates' messages too). Only the first call installs
/// the logger.
pub fn init_log(level: LevelFilter, target: LogTarget) {
    if !matches!(target, LogTarget::Stderr) {
        log_panics();
    }
    let sink = match target {
        LogTarget::Stderr => Sink::Stderr,
        LogTarget::File(f) => Sink::File(Mutex::new(f)),
        LogTarget::Syslog => {
            // SAFETY: the identity is a 'static NUL-terminated string, as
            // openlog requires (it keeps the pointer).
            unsafe { libc::openlog(c"uext4".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
            Sink::Syslog
        }
    };
    if LOGGER.set(Logger { level, sink }).is_ok() && log::set_logger(&FACADE).is_ok() {
        // Other crates' errors pass at any level.
        log::set_max_level(level.max(LevelFilter::Error));
    }
}

/// Sends every panic's place and message to the log too: the dispatcher
/// catches a request's panic and logs the request with the message
/// (`dispatch::guarded`), but only the panic hook knows where it happened,
/// and the default hook writes to stderr, which a daemon in the
/// background has pointed at /dev/null. (A foreground daemon logging to
/// stderr already gets it from the default hook.)
fn log_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let p = info.payload();
        let message =
            p.downcast_ref::<&str>().copied().or_else(|| p.downcast_ref::<String>().map(String::as_str)).unwrap_or("");
        let at = info.location().map_or_else(|| "?".to_string(), |l| l.to_string());
        log::error!("thread '{}' panicked at {at}: {message}", thread.name().unwrap_or("?"));
        previous(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At the default level the engine's warnings (a quota usage clamped
    /// at zero) reach the log as the adapter's do; other crates' only
    /// from `debug` on.
    #[test]
    fn engine_warnings_are_logged() {
        let l = Logger { level: LevelFilter::Warn, sink: Sink::Stderr };
        fn m(target: &str, level: Level) -> Metadata<'_> {
            log::MetadataBuilder::new().target(target).level(level).build()
        }
        assert!(l.enabled(&m("uext4::quota", Level::Warn)));
        assert!(l.enabled(&m("uext4_fuse::adapter", Level::Warn)));
        assert!(!l.enabled(&m("uext4::fs::open_files", Level::Debug)));
        assert!(!l.enabled(&m("fuser::session", Level::Warn)));
        assert!(!l.enabled(&m("uext4x", Level::Warn)));
    }
}
