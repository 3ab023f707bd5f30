//! The request ledger: one record per request that reached admission (DESIGN.md invariant
//! 13), written off the request path through a bounded queue to a sink; the usage queries over
//! it; the price catalog that costs each record.
//!
//! Modules, in the order a request meets them:
//! - [`record`]: [`RequestRecord`], [`Tokens`] (the normalised usage convention), [`Cost`]
//!   (integer micro-dollars), [`Pricing`] (priced by an entry, unpriced, or no usage).
//! - [`capture`]: opt-in prompt/response capture, sampled, size-capped and redacted.
//! - [`mod@price`]: the [`Catalog`] (shipped `prices.toml` + config `[[price]]`) and [`fn@price`],
//!   exact to the micro-dollar.
//! - [`queue`]: [`Ledger`] / [`LedgerHandle`]: `record()` never waits; a background writer
//!   batches; drops are counted ([`StatsSnapshot`]); `shutdown(grace)` flushes.
//! - [`sink`]: where batches go: embedded SQLite (default), PostgreSQL, OTLP logs, none.
//! - [`query`]: `/admin/usage` and `sluice usage`: [`UsageQuery`] → rows, as JSON, CSV or a
//!   table.
//! - [`config`]: [`LedgerConfig`] (`[ledger]`) and its validation.
//!
//! The crate depends on none of Sluice's other crates: the gateway builds records from what
//! it knows and hands them in; the config crate embeds [`LedgerConfig`] and [`PriceOverride`].

#![forbid(unsafe_code)]

pub mod capture;
pub mod config;
pub mod price;
pub mod query;
pub mod queue;
pub mod record;
pub mod sink;

pub use capture::{redact, Capture};
pub use config::{
    CaptureConfig, LedgerConfig, LedgerConfigError, PostgresConfig, SinkConfig, SqliteConfig,
};
pub use price::{price, render_prices, Catalog, PriceEntry, PriceError, PriceOverride, Rate};
pub use query::{Bucket, Format, GroupBy, QueryError, UsageQuery, UsageRow};
pub use queue::{Ledger, LedgerHandle, LedgerStats, ShutdownReport, StatsSnapshot};
pub use record::{now_us, Cost, Latency, Pricing, RequestRecord, Tokens};
pub use sink::{Sink, SinkError};
