//! `[telemetry]`: where OpenTelemetry traces go, how many are sampled, how they are batched.

use std::time::Duration;

use super::raw::RawTelemetry;
use super::units::DurationValue;
use super::ConfigError;

/// `[telemetry]`. Traces are exported only when `endpoint` is set.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP traces URL spans are POSTed to (protobuf). Written in the file as the
    /// collector's base URL (`http://127.0.0.1:4318`, `/v1/traces` is appended) or the full
    /// traces URL (any path other than `/`). `None`: no traces.
    pub endpoint: Option<http::Uri>,
    /// Share of new traces recorded, 0.0 to 1.0, decided from the trace id (OpenTelemetry's
    /// `TraceIdRatioBased`); a request carrying a `traceparent` follows its sampled flag.
    /// Default 1.0.
    pub sampling_ratio: f64,
    /// `service.name` of the spans. Default `sluice`.
    pub service_name: String,
    /// Extra headers on each export (e.g. a vendor's API key); values are secrets, never
    /// printed.
    pub headers: Vec<TraceHeader>,
    /// Spans per export request. Default 512.
    pub batch_size: usize,
    /// Longest a finished span waits before it is exported. Default 5 s.
    pub batch_interval: Duration,
    /// Most spans waiting for export; when full, new spans are dropped and counted
    /// (`sluice_trace_spans_dropped_total{reason="queue_full"}`). Default 2048.
    pub queue_size: usize,
    /// Deadline of one export request. Default 10 s.
    pub export_timeout: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            endpoint: None,
            sampling_ratio: 1.0,
            service_name: "sluice".to_string(),
            headers: Vec::new(),
            batch_size: 512,
            batch_interval: Duration::from_secs(5),
            queue_size: 2048,
            export_timeout: Duration::from_secs(10),
        }
    }
}

/// One header of `telemetry.headers`. `Debug` hides the value.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceHeader {
    /// Header name, lower case.
    pub name: http::HeaderName,
    /// Its value (sent marked sensitive).
    pub value: http::HeaderValue,
}

impl std::fmt::Debug for TraceHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: <redacted>", self.name)
    }
}

/// Validates `[telemetry]`.
pub(super) fn telemetry_config(raw: Option<RawTelemetry>) -> Result<TelemetryConfig, ConfigError> {
    let RawTelemetry {
        endpoint,
        sampling_ratio,
        service_name,
        headers,
        batch_size,
        batch_interval,
        queue_size,
        export_timeout,
    } = raw.unwrap_or_default();
    let d = TelemetryConfig::default();
    let endpoint = endpoint.map(|e| traces_url(&e)).transpose()?;
    let sampling_ratio = sampling_ratio.unwrap_or(d.sampling_ratio);
    if !(sampling_ratio.is_finite() && (0.0..=1.0).contains(&sampling_ratio)) {
        return Err(ConfigError::new(
            "telemetry.sampling_ratio",
            "must be a number from 0.0 (no new traces) to 1.0 (every request), e.g. 0.01",
        ));
    }
    let service_name = service_name.unwrap_or(d.service_name);
    if service_name.is_empty() {
        return Err(ConfigError::new(
            "telemetry.service_name",
            "must not be empty",
        ));
    }
    let mut out_headers = Vec::new();
    for (name, value) in headers.unwrap_or_default() {
        let path = format!("telemetry.headers.{name}");
        let name = http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map_err(|_| ConfigError::new(&path, "is not a valid header name"))?;
        let mut value = http::HeaderValue::from_str(&value)
            .map_err(|_| ConfigError::new(&path, "is not a valid header value"))?;
        value.set_sensitive(true);
        out_headers.push(TraceHeader { name, value });
    }
    let count = |field: &str, v: Option<usize>, default: usize, max: usize| {
        let n = v.unwrap_or(default);
        if n == 0 || n > max {
            return Err(ConfigError::new(
                format!("telemetry.{field}"),
                format!("must be from 1 to {max}"),
            ));
        }
        Ok(n)
    };
    let batch_size = count("batch_size", batch_size, d.batch_size, 65_536)?;
    let queue_size = count("queue_size", queue_size, d.queue_size, 1 << 20)?;
    if queue_size < batch_size {
        return Err(ConfigError::new(
            "telemetry.queue_size",
            format!("must be at least batch_size ({batch_size})"),
        ));
    }
    let dur = |field: &str, v: Option<DurationValue>, default: Duration| match v {
        None => Ok(default),
        Some(DurationValue(x)) if x.is_zero() => Err(ConfigError::new(
            format!("telemetry.{field}"),
            "must be greater than zero",
        )),
        Some(DurationValue(x)) => Ok(x),
    };
    Ok(TelemetryConfig {
        endpoint,
        sampling_ratio,
        service_name,
        headers: out_headers,
        batch_size,
        batch_interval: dur("batch_interval", batch_interval, d.batch_interval)?,
        queue_size,
        export_timeout: dur("export_timeout", export_timeout, d.export_timeout)?,
    })
}

/// `http://host:4318` → `http://host:4318/v1/traces`; a URL with a path is taken as it is.
fn traces_url(raw: &str) -> Result<http::Uri, ConfigError> {
    let bad = |why: &str| {
        ConfigError::new(
            "telemetry.endpoint",
            format!("`{raw}` {why}; write e.g. \"http://127.0.0.1:4318\" (OTLP/HTTP)"),
        )
    };
    let uri: http::Uri = raw.parse().map_err(|_| bad("is not a URL"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(bad("needs an http:// or https:// scheme")),
    }
    if uri.authority().is_none() {
        return Err(bad("has no host"));
    }
    if uri.query().is_some() {
        return Err(bad("must not have a query"));
    }
    if matches!(uri.path(), "" | "/") {
        let base = raw.trim_end_matches('/');
        return format!("{base}/v1/traces")
            .parse()
            .map_err(|_| bad("is not a URL"));
    }
    Ok(uri)
}
