//! The upstream pools, seen from outside: Prometheus metrics read at scrape time, and the
//! `GET /admin/pools` JSON snapshot of every connection.

use std::sync::Arc;

use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde_json::{json, Value};
use sluice_upstream::{PoolSnapshot, ShardState, Upstream};

/// Reads every upstream's pool when Prometheus scrapes; nothing is counted twice or cached.
/// Registered once; a clone shares the list, which a reload replaces with the new
/// generation's upstreams (a draining pool leaves the metrics: its successor may have the same
/// name, and one series per name is all Prometheus takes).
#[derive(Clone, Debug)]
pub struct PoolCollector {
    upstreams: Arc<RwLock<Vec<(String, Upstream)>>>,
}

impl PoolCollector {
    pub fn new(upstreams: Vec<(String, Upstream)>) -> Self {
        PoolCollector {
            upstreams: Arc::new(RwLock::new(upstreams)),
        }
    }

    /// Replaces the upstreams read at scrape time.
    pub fn set(&self, upstreams: Vec<(String, Upstream)>) {
        *self.upstreams.write() = upstreams;
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpLabels {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    upstream: String,
    lane: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    upstream: String,
    lane: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    upstream: String,
    reason: &'static str,
}

fn family<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: &[(L, M)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in rows {
        metric.encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let snaps: Vec<(String, PoolSnapshot)> = self
            .upstreams
            .read()
            .iter()
            .map(|(n, u)| (n.clone(), u.pool_snapshot()))
            .collect();
        let lane_rows = |f: &dyn Fn(&sluice_upstream::LaneSnapshot) -> i64| {
            snaps
                .iter()
                .flat_map(|(n, s)| {
                    s.lanes.iter().map(move |l| {
                        (
                            LaneLabels {
                                upstream: n.clone(),
                                lane: l.lane.as_str(),
                            },
                            ConstGauge::new(f(l)),
                        )
                    })
                })
                .collect::<Vec<_>>()
        };
        let mut states = Vec::new();
        for (n, s) in &snaps {
            for l in &s.lanes {
                for (state, v) in [
                    ("connecting", l.connecting),
                    ("ready", l.ready),
                    ("degraded", l.degraded),
                    ("draining", l.draining),
                ] {
                    states.push((
                        StateLabels {
                            upstream: n.clone(),
                            lane: l.lane.as_str(),
                            state,
                        },
                        ConstGauge::new(v as i64),
                    ));
                }
            }
        }
        family(
            &mut encoder,
            "pool_connections",
            "Upstream HTTP/2 connections by lane and state",
            MetricType::Gauge,
            &states,
        )?;
        family(
            &mut encoder,
            "pool_in_flight",
            "Streams in flight on the lane's connections",
            MetricType::Gauge,
            &lane_rows(&|l| l.in_flight as i64),
        )?;
        family(
            &mut encoder,
            "pool_pending",
            "Requests waiting for a connection or stream slot",
            MetricType::Gauge,
            &lane_rows(&|l| l.pending as i64),
        )?;
        let rtt: Vec<_> = snaps
            .iter()
            .flat_map(|(n, s)| {
                s.lanes.iter().filter_map(move |l| {
                    let best = l
                        .connections
                        .iter()
                        .filter(|c| c.state == ShardState::Ready)
                        .filter_map(|c| c.rtt)
                        .min()?;
                    Some((
                        LaneLabels {
                            upstream: n.clone(),
                            lane: l.lane.as_str(),
                        },
                        ConstGauge::new(best.as_secs_f64()),
                    ))
                })
            })
            .collect();
        family(
            &mut encoder,
            "pool_best_ping_rtt_seconds",
            "Lowest PING RTT (EWMA) among the lane's ready connections",
            MetricType::Gauge,
            &rtt,
        )?;
        let counter = |f: &dyn Fn(&sluice_upstream::PoolCounters) -> u64| {
            snaps
                .iter()
                .map(|(n, s)| {
                    (
                        UpLabels {
                            upstream: n.clone(),
                        },
                        ConstCounter::new(f(&s.counters)),
                    )
                })
                .collect::<Vec<_>>()
        };
        for (name, help, f) in [
            (
                "pool_connects",
                "Upstream connections established",
                (|c: &sluice_upstream::PoolCounters| c.connects) as fn(&_) -> u64,
            ),
            (
                "pool_connect_failures",
                "Failed connects and handshakes",
                |c| c.connect_failures,
            ),
            ("pool_goaways", "GOAWAY frames received", |c| c.goaways),
            (
                "pool_refused_streams",
                "REFUSED_STREAM resets received",
                |c| c.refused_streams,
            ),
            (
                "pool_transparent_retries",
                "Unprocessed streams retried on another connection",
                |c| c.transparent_retries,
            ),
            (
                "pool_stale_retries",
                "HTTP/1.1 requests re-sent after a reused connection closed before answering",
                |c| c.stale_retries,
            ),
            ("pool_degradations", "Connections marked degraded", |c| {
                c.degradations
            }),
            (
                "pool_ping_timeouts",
                "Connections closed for an unanswered PING",
                |c| c.ping_timeouts,
            ),
            (
                "pool_acquire_timeouts",
                "Requests that found no slot within acquire_timeout",
                |c| c.pool_acquire_timeouts,
            ),
            (
                "pool_full",
                "Requests rejected because the wait queue was full",
                |c| c.pool_full,
            ),
        ] {
            family(&mut encoder, name, help, MetricType::Counter, &counter(&f))?;
        }
        let drains: Vec<_> = snaps
            .iter()
            .flat_map(|(n, s)| {
                [
                    ("goaway", s.counters.drains_goaway),
                    ("max_age", s.counters.drains_max_age),
                    ("max_requests", s.counters.drains_max_requests),
                ]
                .into_iter()
                .map(move |(reason, v)| {
                    (
                        ReasonLabels {
                            upstream: n.clone(),
                            reason,
                        },
                        ConstCounter::new(v),
                    )
                })
            })
            .collect();
        family(
            &mut encoder,
            "pool_drains",
            "Connections drained, by reason",
            MetricType::Counter,
            &drains,
        )
    }
}

/// `GET /admin/pools`: every upstream, lane and connection.
pub fn snapshot_json(upstreams: &[(String, Upstream)]) -> Value {
    let ups: Vec<Value> = upstreams
        .iter()
        .map(|(name, u)| {
            let s = u.pool_snapshot();
            let stats = u.stats();
            let lanes: Vec<Value> = s
                .lanes
                .iter()
                .map(|l| {
                    let conns: Vec<Value> = l
                        .connections
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "protocol": format!("{:?}", c.protocol).to_lowercase(),
                                "lane": c.lane.as_str(),
                                "state": c.state.as_str(),
                                "in_flight": c.in_flight,
                                "cap": c.cap,
                                "server_max_streams": c.server_max_streams,
                                "rtt_ms": c.rtt.map(|d| d.as_secs_f64() * 1000.0),
                                "age_ms": c.age.as_secs_f64() * 1000.0,
                                "requests_served": c.requests_served,
                                "bytes_in": c.bytes_in,
                                "bytes_out": c.bytes_out,
                            })
                        })
                        .collect();
                    json!({
                        "lane": l.lane.as_str(),
                        "connecting": l.connecting,
                        "ready": l.ready,
                        "degraded": l.degraded,
                        "draining": l.draining,
                        "in_flight": l.in_flight,
                        "pending": l.pending,
                        "connections": conns,
                    })
                })
                .collect();
            let c = &s.counters;
            json!({
                "name": name,
                "protocol": format!("{:?}", stats.protocol).to_lowercase(),
                "open_connections": stats.open_connections,
                "in_flight": stats.in_flight,
                "lanes": lanes,
                "counters": {
                    "connects": c.connects,
                    "connect_failures": c.connect_failures,
                    "goaways": c.goaways,
                    "refused_streams": c.refused_streams,
                    "transparent_retries": c.transparent_retries,
                    "stale_retries": c.stale_retries,
                    "drains_goaway": c.drains_goaway,
                    "drains_max_age": c.drains_max_age,
                    "drains_max_requests": c.drains_max_requests,
                    "degradations": c.degradations,
                    "ping_timeouts": c.ping_timeouts,
                    "pool_acquire_timeouts": c.pool_acquire_timeouts,
                    "pool_full": c.pool_full,
                },
            })
        })
        .collect();
    json!({ "upstreams": ups })
}
