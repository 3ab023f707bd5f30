//! The ingress's metrics: connections refused, closed and open, requests refused before any
//! work, and the memory budget.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::limits::ConnLimits;
use crate::body_budget::BodyBudget;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// Why a request was refused at the ingress, before any work. A metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestRefusal {
    /// The memory budget for bodies is spent.
    MemoryBudget,
    /// The client address is blocked for its cancels.
    Blocked,
    /// The connection's request rate is spent.
    RequestRate,
    /// HTTP/1.1 without exactly one Host header.
    InvalidHost,
    /// A head hyper could not parse (answered with the API's error format).
    MalformedHead,
}

impl RequestRefusal {
    fn as_str(self) -> &'static str {
        match self {
            RequestRefusal::MemoryBudget => "memory_budget",
            RequestRefusal::Blocked => "blocked",
            RequestRefusal::RequestRate => "request_rate",
            RequestRefusal::InvalidHost => "invalid_host",
            RequestRefusal::MalformedHead => "malformed_head",
        }
    }
}

/// Counters the ingress updates (cheap clones of shared atomics).
#[derive(Clone, Debug, Default)]
pub(crate) struct IngressMetrics {
    connections_refused: Family<Reason, Counter>,
    connections_closed: Family<Reason, Counter>,
    requests_refused: Family<Reason, Counter>,
}

impl IngressMetrics {
    /// Registers the counters, and the gauges read at scrape time from `limits` and `budget`.
    pub(crate) fn register(
        registry: &mut Registry,
        limits: Arc<ConnLimits>,
        budget: Arc<BodyBudget>,
    ) -> IngressMetrics {
        let m = IngressMetrics::default();
        registry.register(
            "client_connections_refused",
            "Client connections refused at accept, by reason",
            m.connections_refused.clone(),
        );
        registry.register(
            "client_connections_closed",
            "Client connections the gateway closed, by reason (timeouts, abuse, eviction)",
            m.connections_closed.clone(),
        );
        registry.register(
            "client_requests_refused",
            "Requests refused at the ingress before any work, by reason",
            m.requests_refused.clone(),
        );
        registry.register_collector(Box::new(Gauges {
            limits,
            budget,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }));
        m
    }

    pub(crate) fn connection_refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&Reason { reason })
            .inc();
    }

    pub(crate) fn connection_closed(&self, reason: &'static str) {
        self.connections_closed
            .get_or_create(&Reason { reason })
            .inc();
    }

    pub(crate) fn request_refused(&self, r: RequestRefusal) {
        self.requests_refused(r).inc();
    }

    /// The counter of one refusal reason (for the connection I/O, which counts on its own).
    pub(crate) fn requests_refused(&self, r: RequestRefusal) -> Counter {
        self.requests_refused
            .get_or_create(&Reason { reason: r.as_str() })
            .clone()
    }
}

/// Gauges read when Prometheus scrapes.
#[derive(Debug)]
struct Gauges {
    limits: Arc<ConnLimits>,
    budget: Arc<BodyBudget>,
    /// The gateway's runtime, for its live task count (a leak shows there first).
    runtime: Option<tokio::runtime::Handle>,
}

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let gauge = |encoder: &mut DescriptorEncoder<'_>, name, help, v: i64| {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(v).encode(m)
        };
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "client_connections",
            "Client connections open",
            as_i64(self.limits.open() as u64),
        )?;
        gauge(
            &mut encoder,
            "client_connections_max",
            "The cap on client connections (server.max_connections)",
            as_i64(self.limits.max() as u64),
        )?;
        gauge(
            &mut encoder,
            "body_budget_used_bytes",
            "Bytes of request and non-streaming response bodies held now",
            as_i64(self.budget.used()),
        )?;
        if let Some(rt) = &self.runtime {
            gauge(
                &mut encoder,
                "runtime_alive_tasks",
                "Tasks alive in the gateway's runtime",
                as_i64(rt.metrics().num_alive_tasks() as u64),
            )?;
        }
        gauge(
            &mut encoder,
            "body_budget_bytes",
            "The memory budget for buffered bodies (server.memory_budget)",
            as_i64(self.budget.limit()),
        )
    }
}
