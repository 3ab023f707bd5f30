//! The keys' metrics: per team and owner (labels the config bounds, never a key id or a
//! client-chosen string), refusals by reason, idempotency outcomes, and the state store's own
//! counters read at scrape time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sluice_state::{StatsSnapshot, Store, StoreMode};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    team: String,
    owner: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyTokenLabels {
    team: String,
    owner: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// One key's counters, resolved at startup so a request touches no label map.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyCounters {
    pub(crate) requests: Counter,
    pub(crate) input_tokens: Counter,
    pub(crate) output_tokens: Counter,
    pub(crate) spend_micros: Counter,
}

/// The metric families of keys, limits and idempotency. A clone shares the families (what a
/// reload keeps).
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyMetrics {
    requests: Family<KeyLabels, Counter>,
    tokens: Family<KeyTokenLabels, Counter>,
    spend: Family<KeyLabels, Counter>,
    refusals: Family<ReasonLabel, Counter>,
    idempotency: Family<OutcomeLabel, Counter>,
}

impl KeyMetrics {
    /// Registers the families and the store's collector.
    pub(crate) fn register(&self, registry: &mut Registry, store: Store) {
        registry.register(
            "key_requests",
            "Admitted requests by the virtual key's team and owner",
            self.requests.clone(),
        );
        registry.register(
            "key_tokens",
            "Tokens used by requests with a virtual key, by team, owner and kind (input, output)",
            self.tokens.clone(),
        );
        registry.register(
            "key_spend_micros",
            "Spend of requests with a virtual key by team and owner, in micro-units of the price \
             table's currency",
            self.spend.clone(),
        );
        registry.register(
            "key_refusals",
            "Requests refused by keys, limits, budgets or the state store, by reason",
            self.refusals.clone(),
        );
        registry.register(
            "idempotency",
            "Requests with an Idempotency-Key by outcome (fresh, replayed, waited, in_flight, \
             mismatch)",
            self.idempotency.clone(),
        );
        registry.register_collector(Box::new(StateCollector { store }));
    }

    /// The counters of a key with these labels (absent labels are empty strings).
    pub(crate) fn key_counters(&self, team: Option<&str>, owner: Option<&str>) -> KeyCounters {
        let labels = KeyLabels {
            team: team.unwrap_or_default().to_string(),
            owner: owner.unwrap_or_default().to_string(),
        };
        let tokens = |kind| {
            self.tokens
                .get_or_create(&KeyTokenLabels {
                    team: labels.team.clone(),
                    owner: labels.owner.clone(),
                    kind,
                })
                .clone()
        };
        KeyCounters {
            requests: self.requests.get_or_create(&labels).clone(),
            input_tokens: tokens("input"),
            output_tokens: tokens("output"),
            spend_micros: self.spend.get_or_create(&labels).clone(),
        }
    }

    pub(crate) fn refused(&self, reason: &'static str) {
        self.refusals.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub(crate) fn idempotency(&self, outcome: &'static str) {
        self.idempotency
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }
}

/// `sluice_state_*`: the store's counters and mode, read when Prometheus scrapes.
#[derive(Debug)]
struct StateCollector {
    store: Store,
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s: StatsSnapshot = self.store.stats();
        {
            let mut m = encoder.encode_descriptor(
                "state_mode",
                "Where limits and idempotency records are kept now (1 for the current mode): \
                 memory, shared (Redis), fallback (Redis down, local memory) or unavailable \
                 (Redis down, refusing)",
                None,
                MetricType::Gauge,
            )?;
            for mode in [
                StoreMode::Memory,
                StoreMode::Shared,
                StoreMode::Fallback,
                StoreMode::Unavailable,
            ] {
                let labels = [("mode", mode.as_str())];
                ConstGauge::new(i64::from(s.mode == mode)).encode(m.encode_family(&labels)?)?;
            }
        }
        let counters: [(&str, &str, u64); 11] = [
            (
                "state_round_trips",
                "Calls to Redis that answered in time",
                s.round_trips,
            ),
            (
                "state_timeouts",
                "Calls to Redis that hit the call deadline",
                s.timeouts,
            ),
            (
                "state_errors",
                "Calls to Redis that failed (connection errors, error replies)",
                s.errors,
            ),
            (
                "state_fallbacks",
                "Operations answered from local memory because Redis failed or was down \
                 (fail_open)",
                s.fallbacks,
            ),
            (
                "state_refused_unavailable",
                "Operations refused because Redis failed or was down (fail_closed)",
                s.refused_unavailable,
            ),
            (
                "state_detached_dropped",
                "Background settles and releases dropped because their queue was full",
                s.detached_dropped,
            ),
            (
                "state_leases_renewed",
                "Concurrency leases renewed in Redis",
                s.leases_renewed,
            ),
            (
                "state_leases_lost",
                "Concurrency leases found expired at renewal",
                s.leases_lost,
            ),
            ("state_trips", "Times Redis was marked down", s.trips),
            ("state_recoveries", "Times Redis came back", s.recoveries),
            (
                "state_spend_dropped",
                "Budget spends that could not reach Redis and found the owed-spend table full",
                s.spend_dropped,
            ),
        ];
        for (name, help, value) in counters {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(m)?;
        }
        Ok(())
    }
}
