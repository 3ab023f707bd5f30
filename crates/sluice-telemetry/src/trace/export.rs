//! The export queue and the task that empties it: spans in batches to the OTLP/HTTP endpoint.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use sluice_upstream::{Lane, Upstream};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::otlp;
use super::span::SpanData;
use sluice_config::{TelemetryConfig, TraceHeader};

/// The most of a collector's answer that is read (to keep its connection reusable).
const MAX_ANSWER: usize = 64 * 1024;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropReason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// Finished spans waiting for export, bounded in spans. Requests push without waiting.
#[derive(Debug)]
pub(super) struct SpanQueue {
    spans: Mutex<VecDeque<SpanData>>,
    cap: usize,
    batch: usize,
    /// Wakes the exporter when a batch is full or the gateway stops.
    wake: Notify,
    closed: std::sync::atomic::AtomicBool,
    exported: Counter,
    dropped: Family<DropReason, Counter>,
    exports: Family<Outcome, Counter>,
}

impl SpanQueue {
    pub(super) fn new(cap: usize, batch: usize) -> Self {
        SpanQueue {
            spans: Mutex::new(VecDeque::new()),
            cap,
            batch,
            wake: Notify::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
            exported: Counter::default(),
            dropped: Family::default(),
            exports: Family::default(),
        }
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "trace_spans_exported",
            "Spans the OTLP collector accepted",
            self.exported.clone(),
        );
        registry.register(
            "trace_spans_dropped",
            "Spans not exported: the queue was full, or the collector failed or refused them",
            self.dropped.clone(),
        );
        registry.register(
            "trace_exports",
            "OTLP export requests by outcome (ok, failed)",
            self.exports.clone(),
        );
    }

    /// Queues a request's spans whole, or drops them all when they do not fit.
    pub(super) fn push(&self, spans: Vec<SpanData>) {
        let n = spans.len();
        let full_batch = {
            let mut q = self.spans.lock();
            if q.len() + n > self.cap {
                drop(q);
                self.drop_spans("queue_full", n);
                return;
            }
            q.extend(spans);
            q.len() >= self.batch
        };
        if full_batch {
            self.wake.notify_one();
        }
    }

    fn drop_spans(&self, reason: &'static str, n: usize) {
        self.dropped
            .get_or_create(&DropReason { reason })
            .inc_by(n as u64);
    }

    pub(super) fn take_batch(&self) -> Vec<SpanData> {
        let mut q = self.spans.lock();
        let n = q.len().min(self.batch);
        q.drain(..n).collect()
    }

    fn len(&self) -> usize {
        self.spans.lock().len()
    }

    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Asks the exporter to send what is queued and stop.
    pub(super) fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.wake.notify_one();
    }
}

/// The exporter task's state.
pub(super) struct Exporter {
    client: Upstream,
    path: http::uri::PathAndQuery,
    headers: Vec<TraceHeader>,
    service: String,
    interval: Duration,
    timeout: Duration,
    queue: Arc<SpanQueue>,
}

impl Exporter {
    pub(super) fn new(
        cfg: &TelemetryConfig,
        endpoint: http::Uri,
        queue: Arc<SpanQueue>,
    ) -> Result<Exporter, sluice_upstream::UpstreamConfigError> {
        let mut parts = endpoint.into_parts();
        let path = parts
            .path_and_query
            .take()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/v1/traces"));
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        let base = http::Uri::from_parts(parts).unwrap_or_default();
        let client = Upstream::new(sluice_upstream::UpstreamConfig {
            name: "otlp".to_string(),
            base_url: base,
            protocol: sluice_upstream::Protocol::Auto,
            connect_timeout: cfg.export_timeout.min(Duration::from_secs(5)),
            ..sluice_upstream::UpstreamConfig::default()
        })?;
        Ok(Exporter {
            client,
            path,
            headers: cfg.headers.clone(),
            service: cfg.service_name.clone(),
            interval: cfg.batch_interval,
            timeout: cfg.export_timeout,
            queue,
        })
    }

    /// Sends a batch when one is full or `batch_interval` passed, until the queue is closed
    /// (then what is left is sent, each request bounded by `export_timeout`).
    pub(super) async fn run(self) {
        loop {
            let closed = self.queue.is_closed();
            if !closed {
                tokio::select! {
                    _ = self.queue.wake.notified() => {}
                    _ = tokio::time::sleep(self.interval) => {}
                }
            }
            loop {
                let batch = self.queue.take_batch();
                if batch.is_empty() {
                    break;
                }
                self.export(batch).await;
                if self.queue.len() < self.queue.batch && !self.queue.is_closed() {
                    // A partial batch waits for the next tick.
                    break;
                }
            }
            if closed {
                return;
            }
        }
    }

    async fn export(&self, batch: Vec<SpanData>) {
        let n = batch.len();
        let body = Bytes::from(otlp::export_request(&self.service, &batch));
        drop(batch);
        let mut req = http::Request::new(body);
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = self.path.as_str().parse().unwrap_or_default();
        let h = req.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-protobuf"),
        );
        for th in &self.headers {
            h.insert(th.name.clone(), th.value.clone());
        }
        req.extensions_mut().insert(Lane::Short);
        let deadline = Instant::now() + self.timeout;
        let ok = match self.client.send(req, deadline).await {
            Ok(resp) => {
                let status = resp.status();
                // Read the answer (bounded) so the connection can be reused.
                let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER);
                let _ = tokio::time::timeout_at(deadline, body.collect()).await;
                if !status.is_success() {
                    tracing::debug!(%status, "OTLP collector refused spans");
                }
                status.is_success()
            }
            Err(e) => {
                tracing::debug!(error = %e, "OTLP export failed");
                false
            }
        };
        let outcome = if ok { "ok" } else { "failed" };
        self.queue.exports.get_or_create(&Outcome { outcome }).inc();
        if ok {
            self.queue.exported.inc_by(n as u64);
        } else {
            self.queue.drop_spans("export_failed", n);
        }
    }
}

/// Posts an OTLP/HTTP protobuf body to the collector `[telemetry]` names, at another signal's
/// path (`/v1/logs` beside `/v1/traces`), with the same headers and timeout: `Ok` on a 2xx.
pub type Poster = Arc<
    dyn Fn(
            Vec<u8>,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// A [`Poster`] for `path` on `[telemetry]`'s collector; `None` without an endpoint.
///
/// # Errors
/// The collector's address is rejected as an upstream.
pub fn poster(
    cfg: &TelemetryConfig,
    path: &'static str,
) -> Option<Result<Poster, sluice_upstream::UpstreamConfigError>> {
    let endpoint = cfg.endpoint.clone()?;
    let mut parts = endpoint.into_parts();
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    let base = http::Uri::from_parts(parts).unwrap_or_default();
    let client = match Upstream::new(sluice_upstream::UpstreamConfig {
        name: "otlp-logs".to_string(),
        base_url: base,
        protocol: sluice_upstream::Protocol::Auto,
        connect_timeout: cfg.export_timeout.min(Duration::from_secs(5)),
        ..sluice_upstream::UpstreamConfig::default()
    }) {
        Ok(c) => c,
        Err(e) => return Some(Err(e)),
    };
    let headers = Arc::new(cfg.headers.clone());
    let timeout = cfg.export_timeout;
    Some(Ok(Arc::new(move |body: Vec<u8>| {
        let (client, headers) = (client.clone(), headers.clone());
        Box::pin(async move {
            let mut req = http::Request::new(Bytes::from(body));
            *req.method_mut() = http::Method::POST;
            *req.uri_mut() = http::Uri::from_static(path);
            let h = req.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/x-protobuf"),
            );
            for th in headers.iter() {
                h.insert(th.name.clone(), th.value.clone());
            }
            req.extensions_mut().insert(Lane::Short);
            let deadline = Instant::now() + timeout;
            let resp = client
                .send(req, deadline)
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER);
            let _ = tokio::time::timeout_at(deadline, body.collect()).await;
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("the collector answered {status}"))
            }
        })
    })))
}
