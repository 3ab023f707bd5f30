//! The ledger's configuration, as the config crate will embed it (`[ledger]`), and its
//! validation. Every field has a default, so `[ledger]` may be left out: records then go to an
//! embedded SQLite file next to the config.
//!
//! ```toml
//! [ledger]
//! queue_capacity = 65536
//! batch_size = 1000
//! flush_interval = "1s"
//! sink = { kind = "sqlite", path = "sluice-ledger.db", retention_days = 30, max_bytes = "1GiB" }
//! # sink = { kind = "postgres", url = "postgres://sluice@db/sluice", pool_size = 4 }
//! # sink = { kind = "otlp" }      # log records to the collector configured for traces
//! # sink = { kind = "none" }
//! [ledger.capture]
//! enabled = false
//! routes = ["support-bot"]         # empty: every route
//! sample_rate = 0.01
//! max_bytes = "16KiB"
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::{self, Deserializer};
use serde::Deserialize;

/// `[ledger]`: where the request records go, and prompt capture. Every field has a default.
#[derive(Clone, Debug, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(transform = schema::readable_defaults)]
pub struct LedgerConfig {
    /// Where records go. Default: SQLite next to the config.
    pub sink: SinkConfig,
    /// Records waiting for the writer, at most. A full queue drops new records (counted).
    /// Default 65,536 (about 20 MB of records at the most).
    pub queue_capacity: usize,
    /// Records written per batch, at most. Default 1,000.
    pub batch_size: usize,
    /// A partial batch is written after this long. Default 1 s.
    #[serde(deserialize_with = "duration")]
    #[schemars(schema_with = "schema::duration")]
    pub flush_interval: Duration,
    /// A batch the sink has not taken after this long is dropped (counted), so a hung
    /// database cannot stall the writer for ever. Default 10 s.
    #[serde(deserialize_with = "duration")]
    #[schemars(schema_with = "schema::duration")]
    pub write_timeout: Duration,
    /// Prompt and response capture (off by default).
    pub capture: CaptureConfig,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            sink: SinkConfig::default(),
            queue_capacity: 65_536,
            batch_size: 1_000,
            flush_interval: Duration::from_secs(1),
            write_timeout: Duration::from_secs(10),
            capture: CaptureConfig::default(),
        }
    }
}

/// `[ledger] sink`: one of SQLite (default), PostgreSQL, OTLP logs, none.
#[derive(Clone, Debug, Deserialize, PartialEq, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkConfig {
    /// An embedded SQLite file: no setup, one instance.
    Sqlite(SqliteConfig),
    /// A PostgreSQL database, shared by several instances.
    Postgres(PostgresConfig),
    /// OTLP log records to the collector configured for traces. Cannot answer usage queries.
    Otlp,
    /// Records are counted and dropped.
    None,
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig::Sqlite(SqliteConfig::default())
    }
}

/// `sink = { kind = "sqlite", ... }`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SqliteConfig {
    /// The database file; a relative path is taken from the config file's directory. Default
    /// `sluice-ledger.db`.
    pub path: PathBuf,
    /// Records older than this many days are deleted; 0 keeps them. Default 30.
    pub retention_days: u32,
    /// When the records take more than this, the oldest are deleted. Default 1 GiB.
    #[serde(deserialize_with = "size")]
    #[schemars(schema_with = "schema::size")]
    pub max_bytes: u64,
}

impl Default for SqliteConfig {
    fn default() -> Self {
        SqliteConfig {
            path: PathBuf::from("sluice-ledger.db"),
            retention_days: 30,
            max_bytes: 1 << 30,
        }
    }
}

impl SqliteConfig {
    /// The file's path, with a relative `path` taken from `config_dir`.
    pub fn resolve(&self, config_dir: &Path) -> PathBuf {
        if self.path.is_absolute() {
            self.path.clone()
        } else {
            config_dir.join(&self.path)
        }
    }
}

/// `sink = { kind = "postgres", ... }`.
#[derive(Clone, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = schema::readable_defaults)]
pub struct PostgresConfig {
    /// `postgres://user:password@host:port/db` or `host=... user=...`. Holds a secret: never
    /// printed (`Debug` hides it); set it from the environment, `"${SLUICE_LEDGER_URL}"`.
    pub url: String,
    /// Connections, at most (writes and usage queries share them). Default 4.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// Connecting gives up after this long. Default 5 s.
    #[serde(default = "default_connect_timeout", deserialize_with = "duration")]
    #[schemars(schema_with = "schema::duration")]
    pub connect_timeout: Duration,
}

fn default_pool_size() -> usize {
    4
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &"<redacted>")
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// `[ledger.capture]`: prompt and response capture.
#[derive(Clone, Debug, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CaptureConfig {
    /// Off by default.
    pub enabled: bool,
    /// The routes captured; empty means every route.
    pub routes: Vec<String>,
    /// The fraction of those routes' requests captured, 0 to 1. Default 0.01.
    pub sample_rate: f64,
    /// Each of prompt and response is cut to this many bytes. Default 16 KiB, at most 1 MiB.
    #[serde(deserialize_with = "size_usize")]
    #[schemars(schema_with = "schema::size")]
    pub max_bytes: usize,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            enabled: false,
            routes: Vec::new(),
            sample_rate: 0.01,
            max_bytes: 16 * 1024,
        }
    }
}

impl CaptureConfig {
    /// Whether this request's prompt and response are captured: capture is on, the route is
    /// listed (or none are), and the request id is in the sample.
    pub fn should_capture(&self, route: &str, request_id: &str) -> bool {
        self.enabled
            && (self.routes.is_empty() || self.routes.iter().any(|r| r == route))
            && crate::capture::sampled(request_id, self.sample_rate)
    }
}

/// A `[ledger]` setting that cannot be used; names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LedgerConfigError {
    /// A number outside what the ledger accepts.
    #[error("ledger.{field}: {value} is out of range; use {min} to {max}")]
    OutOfRange {
        /// The field, e.g. `queue_capacity`.
        field: &'static str,
        /// What was given.
        value: String,
        /// The least accepted.
        min: String,
        /// The most accepted.
        max: String,
    },
    /// A value of the right type that still cannot be used.
    #[error("ledger.{field}: {reason}")]
    Invalid {
        /// The field, e.g. `sink.url`.
        field: &'static str,
        /// What is wrong and what to write instead.
        reason: String,
    },
}

impl LedgerConfigError {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LedgerConfigError::OutOfRange { .. } => "out_of_range",
            LedgerConfigError::Invalid { .. } => "invalid",
        }
    }
}

fn range<T: PartialOrd + fmt::Display>(
    field: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), LedgerConfigError> {
    if value < min || value > max {
        return Err(LedgerConfigError::OutOfRange {
            field,
            value: value.to_string(),
            min: min.to_string(),
            max: max.to_string(),
        });
    }
    Ok(())
}

fn duration_range(
    field: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), LedgerConfigError> {
    if value < min || value > max {
        return Err(LedgerConfigError::OutOfRange {
            field,
            value: humantime::format_duration(value).to_string(),
            min: humantime::format_duration(min).to_string(),
            max: humantime::format_duration(max).to_string(),
        });
    }
    Ok(())
}

impl LedgerConfig {
    /// Checks every field; the first problem found is returned, naming its field.
    ///
    /// # Errors
    /// [`LedgerConfigError`] naming the field and what would be accepted.
    pub fn validate(&self) -> Result<(), LedgerConfigError> {
        range("queue_capacity", self.queue_capacity, 1, 10_000_000)?;
        range("batch_size", self.batch_size, 1, 100_000)?;
        if self.batch_size > self.queue_capacity {
            return Err(LedgerConfigError::Invalid {
                field: "batch_size",
                reason: format!(
                    "{} is larger than queue_capacity ({}); a batch could never fill",
                    self.batch_size, self.queue_capacity
                ),
            });
        }
        duration_range(
            "flush_interval",
            self.flush_interval,
            Duration::from_millis(1),
            Duration::from_secs(60),
        )?;
        duration_range(
            "write_timeout",
            self.write_timeout,
            Duration::from_millis(10),
            Duration::from_secs(300),
        )?;
        match &self.sink {
            SinkConfig::Sqlite(s) => {
                if s.path.as_os_str().is_empty() {
                    return Err(LedgerConfigError::Invalid {
                        field: "sink.path",
                        reason: "is empty; name the database file, e.g. \"sluice-ledger.db\""
                            .into(),
                    });
                }
                range("sink.retention_days", s.retention_days, 0, 36_500)?;
                range("sink.max_bytes", s.max_bytes, 1 << 20, 1 << 50)?;
            }
            SinkConfig::Postgres(p) => {
                let parsed: tokio_postgres::Config =
                    p.url.parse().map_err(|e: tokio_postgres::Error| {
                        LedgerConfigError::Invalid {
                            field: "sink.url",
                            reason: format!(
                                "is not a PostgreSQL connection string ({e}); write \
                                 postgres://user:password@host:5432/database"
                            ),
                        }
                    })?;
                if parsed.get_hosts().is_empty() {
                    return Err(LedgerConfigError::Invalid {
                        field: "sink.url",
                        reason: "names no host; write postgres://user@host:5432/database".into(),
                    });
                }
                range("sink.pool_size", p.pool_size, 1, 64)?;
                duration_range(
                    "sink.connect_timeout",
                    p.connect_timeout,
                    Duration::from_millis(10),
                    Duration::from_secs(60),
                )?;
            }
            SinkConfig::Otlp | SinkConfig::None => {}
        }
        let c = &self.capture;
        if !(0.0..=1.0).contains(&c.sample_rate) {
            return Err(LedgerConfigError::OutOfRange {
                field: "capture.sample_rate",
                value: c.sample_rate.to_string(),
                min: "0".into(),
                max: "1".into(),
            });
        }
        range("capture.max_bytes", c.max_bytes, 1, 1 << 20)?;
        if c.routes.iter().any(|r| r.is_empty()) {
            return Err(LedgerConfigError::Invalid {
                field: "capture.routes",
                reason: "has an empty route name".into(),
            });
        }
        Ok(())
    }
}

// === the JSON Schema ===

/// `[ledger]`'s part of sluice.toml's JSON Schema (sluice-config builds the whole; its doc
/// comments above are the descriptions).
mod schema {
    use schemars::{json_schema, Schema, SchemaGenerator};
    use serde_json::Value;

    /// A duration: the `Duration` definition of sluice.toml's schema, which sluice-config
    /// gives (its units are the file's, one definition for every duration of the file).
    pub(super) fn duration(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "$ref": "#/definitions/Duration" })
    }

    /// A size: the `Size` definition of sluice.toml's schema, as [`duration`].
    pub(super) fn size(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "$ref": "#/definitions/Size" })
    }

    /// The defaults schemars takes from `Default` show a `Duration` as `{ secs, nanos }`:
    /// written as the file writes it (`"1s"`) instead.
    pub(super) fn readable_defaults(schema: &mut Schema) {
        let Some(Value::Object(props)) = schema.get_mut("properties") else {
            return;
        };
        for prop in props.values_mut() {
            let Some(default) = prop.get_mut("default") else {
                continue;
            };
            if let (Some(secs), Some(nanos)) = (
                default.get("secs").and_then(Value::as_u64),
                default.get("nanos").and_then(Value::as_u64),
            ) {
                let d = std::time::Duration::new(secs, u32::try_from(nanos).unwrap_or(0));
                *default = Value::String(humantime::format_duration(d).to_string());
            }
        }
    }
}

// === impl serde helpers ===

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        de::Error::custom(format!(
            "`{s}` is not a duration ({e}); write e.g. \"500ms\" or \"1s\""
        ))
    })
}

/// A size: a whole number of bytes, or a string with `KiB`, `MiB`, `GiB` (powers of 1024) or
/// `KB`, `MB`, `GB` (powers of 1000).
fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(u64),
        S(String),
    }
    match Raw::deserialize(d)? {
        Raw::N(n) => Ok(n),
        Raw::S(s) => parse_size(&s).map_err(de::Error::custom),
    }
}

fn size_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = size(d)?;
    usize::try_from(n).map_err(|_| de::Error::custom(format!("{n} bytes is too large")))
}

/// Parses `"16MiB"`, `"512 KiB"`, `"1GB"`, `"4096"`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size; write e.g. \"16MiB\" or a number of bytes"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}`; use KiB, MiB, GiB (or KB, MB, GB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<LedgerConfig, String> {
        toml::from_str::<LedgerConfig>(s).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_sqlite_next_to_the_config_and_valid() {
        let c = parse("").unwrap();
        assert_eq!(c, LedgerConfig::default());
        c.validate().unwrap();
        let SinkConfig::Sqlite(s) = &c.sink else {
            panic!("{:?}", c.sink)
        };
        assert_eq!(
            s.resolve(Path::new("/etc/sluice")),
            Path::new("/etc/sluice/sluice-ledger.db")
        );
        assert!(!c.capture.enabled);
    }

    #[test]
    fn each_sink_parses() {
        let c = parse(
            r#"
            batch_size = 500
            flush_interval = "250ms"
            sink = { kind = "sqlite", path = "/var/lib/sluice/l.db", retention_days = 7, max_bytes = "64MiB" }
            "#,
        )
        .unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(250));
        assert_eq!(
            c.sink,
            SinkConfig::Sqlite(SqliteConfig {
                path: "/var/lib/sluice/l.db".into(),
                retention_days: 7,
                max_bytes: 64 << 20
            })
        );
        let c = parse(
            "[sink]\nkind = \"postgres\"\nurl = \"postgres://u:hunter2@db:5432/x\"\npool_size = 8",
        )
        .unwrap();
        c.validate().unwrap();
        // The password never shows.
        assert!(!format!("{c:?}").contains("hunter2"));
        assert_eq!(
            parse("sink = { kind = \"otlp\" }").unwrap().sink,
            SinkConfig::Otlp
        );
        assert_eq!(
            parse("sink = { kind = \"none\" }").unwrap().sink,
            SinkConfig::None
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(parse("queue_capacty = 5")
            .unwrap_err()
            .contains("queue_capacty"));
        assert!(parse("sink = { kind = \"sqlite\", retention = 5 }")
            .unwrap_err()
            .contains("retention"));
        assert!(parse("sink = { kind = \"mysql\" }")
            .unwrap_err()
            .contains("mysql"));
        assert!(parse("[capture]\nenable = true")
            .unwrap_err()
            .contains("enable"));
        assert!(parse("flush_interval = \"5\"")
            .unwrap_err()
            .contains("flush_interval"));
    }

    #[test]
    fn validation_names_the_field() {
        let check = |s: &str| parse(s).unwrap().validate().unwrap_err().to_string();
        assert_eq!(
            check("queue_capacity = 0"),
            "ledger.queue_capacity: 0 is out of range; use 1 to 10000000"
        );
        assert!(check("queue_capacity = 10\nbatch_size = 20")
            .starts_with("ledger.batch_size: 20 is larger"));
        assert!(check("flush_interval = \"2m\"")
            .starts_with("ledger.flush_interval: 2m is out of range"));
        assert!(check("sink = { kind = \"sqlite\", max_bytes = 100 }")
            .starts_with("ledger.sink.max_bytes"));
        assert!(check(
            "sink = { kind = \"postgres\", url = \"postgres://u:pw@h/d\", pool_size = 0 }"
        )
        .starts_with("ledger.sink.pool_size"));
        let e =
            check("sink = { kind = \"postgres\", url = \"postgres://u:secretpw@h:notaport/d\" }");
        assert!(
            e.starts_with("ledger.sink.url: is not a PostgreSQL connection string"),
            "{e}"
        );
        assert!(!e.contains("secretpw"), "{e}");
        assert!(check("[capture]\nsample_rate = 1.5").starts_with("ledger.capture.sample_rate"));
        assert!(check("[capture]\nmax_bytes = \"2MiB\"").starts_with("ledger.capture.max_bytes"));
    }

    #[test]
    fn capture_is_per_route_and_sampled() {
        let mut c = CaptureConfig {
            enabled: true,
            routes: vec!["bot".into()],
            sample_rate: 1.0,
            max_bytes: 100,
        };
        assert!(c.should_capture("bot", "r1"));
        assert!(!c.should_capture("other", "r1"));
        c.sample_rate = 0.0;
        assert!(!c.should_capture("bot", "r1"));
        c.routes.clear();
        c.sample_rate = 1.0;
        assert!(c.should_capture("any", "r1"));
        c.enabled = false;
        assert!(!c.should_capture("any", "r1"));
    }
}
