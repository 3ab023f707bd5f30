//! Where the access log goes and how its lines are written (`server.access_log`,
//! `server.log_format`). The gateway's telemetry writes them.

use std::path::PathBuf;

/// Where access log lines go (`server.access_log`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessLogSink {
    /// Standard output (the default).
    Stdout,
    /// A file, appended to (created if missing).
    File(PathBuf),
    /// Nowhere: the line is not even formatted.
    Off,
}

/// How lines are written (`server.log_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `key=value` pairs; values with spaces, quotes or control characters are quoted and
    /// escaped, so a client-supplied value can never forge a field or a line.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Lines waiting for the writer, at most, by default (`server.access_log_queue`).
pub const DEFAULT_QUEUE: usize = 16 * 1024;
