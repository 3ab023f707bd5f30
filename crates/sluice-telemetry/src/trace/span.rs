//! Spans as the exporter sends them, and the request span the request path fills in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_upstream::PhaseTimings;
use tokio::time::Instant;

/// OTLP `Span.SpanKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// OTLP `Status.StatusCode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusCode {
    Unset = 0,
    Error = 2,
}

/// An attribute value (OTLP `AnyValue`, the kinds spans use here).
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::Str(s.to_string())
    }
}

impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(s)
    }
}

impl From<u64> for AttrValue {
    fn from(n: u64) -> Self {
        AttrValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

/// One finished span.
#[derive(Clone, Debug)]
pub struct SpanData {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    /// The parent is another process's span (the client's `traceparent`).
    pub parent_is_remote: bool,
    pub name: String,
    pub kind: SpanKind,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub attributes: Vec<(&'static str, AttrValue)>,
    pub status: StatusCode,
    pub status_message: String,
}

/// Maps the request's monotonic instants to wall-clock time (spans carry Unix nanoseconds),
/// from one reading of both clocks taken together.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    wall: SystemTime,
    mono: Instant,
}

impl Clock {
    pub fn now() -> Clock {
        Clock {
            wall: SystemTime::now(),
            mono: Instant::now(),
        }
    }

    pub fn unix_nanos(&self, t: Instant) -> u64 {
        let wall = if t >= self.mono {
            self.wall + (t - self.mono)
        } else {
            self.wall - (self.mono - t)
        };
        wall.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// One attempt as the request span records it.
#[derive(Clone, Debug)]
pub struct AttemptSpan {
    /// The upstream's name.
    pub upstream: String,
    pub started: Instant,
    pub duration: Duration,
    /// `ok` or the failure class.
    pub outcome: &'static str,
    pub cause: &'static str,
    pub status: Option<u16>,
    /// The upstream phases, when known (the attempt that answered).
    pub timings: Option<PhaseTimings>,
}

/// The request's span while it runs: its ids and what the request path records into it.
/// Finished (turned into [`SpanData`]) by the [`super::Tracer`] when the request ends.
#[derive(Debug)]
pub struct RequestSpan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub clock: Clock,
    /// `gen_ai.operation.name`.
    pub operation: &'static str,
    /// `gen_ai.provider.name`.
    pub provider: &'static str,
    /// The usage and model the response reported.
    pub usage: super::genai::Usage,
}

impl RequestSpan {
    /// Reads usage and the response model from a non-streaming response body.
    pub fn observe_body(&mut self, body: &[u8]) {
        self.usage.observe_body(body);
    }

    /// Reads usage and the response model from relayed SSE bytes (whole events).
    pub fn observe_sse(&mut self, bytes: &[u8]) {
        self.usage.observe_sse(bytes);
    }
}
