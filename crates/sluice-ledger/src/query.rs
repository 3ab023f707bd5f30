//! Usage queries: `GET /admin/usage?from=…&to=…&group_by=…&bucket=…[&format=csv]` and
//! `sluice usage`, answered by the sink's SQL and rendered as JSON, CSV or a text table.
//!
//! One SQL text serves SQLite and PostgreSQL (only the parameter markers differ): buckets are
//! integer division of the microsecond timestamp, sums are cast to `BIGINT` (PostgreSQL's
//! `SUM(bigint)` is `numeric`), and rows are sorted here rather than by `ORDER BY`, because the
//! two databases collate text differently.

use std::fmt::Write as _;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::record::format_micros;

/// What the rows are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// Virtual key id.
    Key,
    /// The key's team.
    Team,
    /// The served model (else the requested one).
    Model,
    /// Route name.
    Route,
    /// Upstream name.
    Upstream,
}

impl GroupBy {
    /// The query-string spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Key => "key",
            GroupBy::Team => "team",
            GroupBy::Model => "model",
            GroupBy::Route => "route",
            GroupBy::Upstream => "upstream",
        }
    }

    /// From the query-string spelling.
    pub fn parse(s: &str) -> Option<GroupBy> {
        Some(match s {
            "key" => GroupBy::Key,
            "team" => GroupBy::Team,
            "model" => GroupBy::Model,
            "route" => GroupBy::Route,
            "upstream" => GroupBy::Upstream,
            _ => return None,
        })
    }

    /// The SQL expression: a fixed column, never text from the request. A missing value
    /// groups as the empty string.
    fn sql(self) -> &'static str {
        match self {
            GroupBy::Key => "COALESCE(key_id, '')",
            GroupBy::Team => "COALESCE(team, '')",
            GroupBy::Model => "COALESCE(served_model, requested_model, '')",
            GroupBy::Route => "route",
            GroupBy::Upstream => "COALESCE(upstream, '')",
        }
    }
}

/// The time buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bucket {
    /// One row per group per UTC hour.
    Hour,
    /// One row per group per UTC day.
    Day,
    /// One row per group for the whole range (its bucket starts at `from`).
    None,
}

impl Bucket {
    /// The query-string spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Hour => "hour",
            Bucket::Day => "day",
            Bucket::None => "none",
        }
    }

    /// From the query-string spelling.
    pub fn parse(s: &str) -> Option<Bucket> {
        Some(match s {
            "hour" => Bucket::Hour,
            "day" => Bucket::Day,
            "none" => Bucket::None,
            _ => return None,
        })
    }
}

/// The answer's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/json`.
    Json,
    /// `text/csv`.
    Csv,
    /// A plain-text table (what `sluice usage` prints on a terminal).
    Table,
}

/// A usage query: records with `from_us <= ts_us < to_us`, summed per bucket and group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageQuery {
    /// Start (inclusive), µs since the epoch.
    pub from_us: i64,
    /// End (exclusive), µs since the epoch.
    pub to_us: i64,
    /// Grouping.
    pub group_by: GroupBy,
    /// Bucketing.
    pub bucket: Bucket,
}

/// One row of the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    /// The bucket's start, µs since the epoch.
    pub bucket_start_us: i64,
    /// The group's value (`""` for records without one, e.g. keyless requests by key).
    pub group: String,
    /// Records.
    pub requests: i64,
    /// Prompt tokens, cached ones included.
    pub input: i64,
    /// Generated tokens, reasoning included.
    pub output: i64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read: i64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: i64,
    /// Reasoning tokens.
    pub reasoning: i64,
    /// Cost of the priced records, micro-dollars.
    pub cost_micros: i64,
    /// Records that used tokens no price applied to (their cost is not in `cost_micros`).
    pub unpriced: i64,
    /// Records answered from the response cache. Counted in `requests`; their tokens and
    /// cost are not in the sums above (nothing was spent upstream) but in `saved_micros`.
    pub cache_hits: i64,
    /// What the cache hits would have cost, micro-dollars.
    pub saved_micros: i64,
}

/// A query string that cannot be answered; names the parameter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("usage query: `{param}` {reason}")]
pub struct QueryError {
    /// The parameter, e.g. `from`.
    pub param: &'static str,
    /// What is wrong and what to write.
    pub reason: String,
}

impl QueryError {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        "usage_query"
    }
}

const HOUR_US: i64 = 3_600_000_000;
const DAY_US: i64 = 86_400_000_000;

impl UsageQuery {
    /// Parses `/admin/usage`'s query string (`from`, `to`, `group_by`, `bucket`, `format`).
    ///
    /// `from` and `to` are RFC 3339 times (`2026-12-01T00:00:00Z`), dates (`2026-12-01`,
    /// midnight UTC) or Unix seconds. Defaults: `to` = now, `from` = 24 hours before `to`,
    /// `group_by = model`, `bucket = none`, `format = json`.
    ///
    /// # Errors
    /// A parameter that is unknown, repeated or malformed, or `from` not before `to`.
    pub fn from_query_string(qs: &str, now_us: i64) -> Result<(UsageQuery, Format), QueryError> {
        let mut from = None;
        let mut to = None;
        let mut group_by = None;
        let mut bucket = None;
        let mut format = None;
        for pair in qs.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v);
            let bad = |param: &'static str, reason: String| QueryError { param, reason };
            let set = |slot: &mut Option<String>, param: &'static str| {
                if slot.replace(v.clone()).is_some() {
                    return Err(bad(param, "is given twice".into()));
                }
                Ok(())
            };
            match k {
                "from" => set(&mut from, "from")?,
                "to" => set(&mut to, "to")?,
                "group_by" => set(&mut group_by, "group_by")?,
                "bucket" => set(&mut bucket, "bucket")?,
                "format" => set(&mut format, "format")?,
                _ => {
                    return Err(QueryError {
                        param: "query",
                        reason: format!(
                            "has an unknown parameter `{}`; use from, to, group_by, bucket, format",
                            percent_decode(k)
                        ),
                    })
                }
            }
        }
        let to_us = match &to {
            Some(s) => parse_time(s).map_err(|reason| QueryError {
                param: "to",
                reason,
            })?,
            None => now_us,
        };
        let from_us = match &from {
            Some(s) => parse_time(s).map_err(|reason| QueryError {
                param: "from",
                reason,
            })?,
            None => to_us - DAY_US,
        };
        if from_us >= to_us {
            return Err(QueryError {
                param: "from",
                reason: "must be before `to`".into(),
            });
        }
        let group_by = match group_by.as_deref() {
            None => GroupBy::Model,
            Some(s) => GroupBy::parse(s).ok_or_else(|| QueryError {
                param: "group_by",
                reason: format!("`{s}` is not one of key, team, model, route, upstream"),
            })?,
        };
        let bucket = match bucket.as_deref() {
            None => Bucket::None,
            Some(s) => Bucket::parse(s).ok_or_else(|| QueryError {
                param: "bucket",
                reason: format!("`{s}` is not one of hour, day, none"),
            })?,
        };
        let format = match format.as_deref() {
            None | Some("json") => Format::Json,
            Some("csv") => Format::Csv,
            Some("table" | "text") => Format::Table,
            Some(s) => {
                return Err(QueryError {
                    param: "format",
                    reason: format!("`{s}` is not one of json, csv, table"),
                })
            }
        };
        Ok((
            UsageQuery {
                from_us,
                to_us,
                group_by,
                bucket,
            },
            format,
        ))
    }

    /// The SQL, with `p_from` and `p_to` as the markers of the two parameters (`?1`/`?2` for
    /// SQLite, `$1`/`$2` for PostgreSQL), reading the records' columns from `source` (a table,
    /// a view or a subquery with the columns of `sluice_requests`). Everything else in it is
    /// fixed text or an integer from this struct, never text from the request.
    pub(crate) fn sql(&self, p_from: &str, p_to: &str, source: &str) -> String {
        let bucket = match self.bucket {
            Bucket::Hour => format!("(ts_us / {HOUR_US}) * {HOUR_US}"),
            Bucket::Day => format!("(ts_us / {DAY_US}) * {DAY_US}"),
            Bucket::None => format!("CAST({} AS BIGINT)", self.from_us),
        };
        let sum = |col: &str| format!("CAST(COALESCE(SUM({col}), 0) AS BIGINT)");
        // A cache hit's record carries what it saved: not spend.
        let spent = |col: &str| sum(&format!("CASE WHEN cache_hit THEN 0 ELSE {col} END"));
        format!(
            "SELECT {bucket} AS bucket, {group} AS grp, COUNT(*), {input}, {output}, {cr}, {cw}, \
             {rs}, {cost}, {unpriced}, {hits}, {saved} FROM {source} \
             WHERE ts_us >= {p_from} AND ts_us < {p_to} GROUP BY 1, 2",
            group = self.group_by.sql(),
            input = spent("input_tokens"),
            output = spent("output_tokens"),
            cr = spent("cache_read_tokens"),
            cw = spent("cache_write_tokens"),
            rs = spent("reasoning_tokens"),
            cost = spent("cost_micros"),
            unpriced = spent("CASE WHEN pricing = 1 THEN 1 ELSE 0 END"),
            hits = sum("CASE WHEN cache_hit THEN 1 ELSE 0 END"),
            saved = sum("CASE WHEN cache_hit THEN cost_micros ELSE 0 END"),
        )
    }
}

/// Rows in a stable order: by bucket, then group (bytewise).
pub(crate) fn sort_rows(rows: &mut [UsageRow]) {
    rows.sort_by(|a, b| {
        a.bucket_start_us
            .cmp(&b.bucket_start_us)
            .then_with(|| a.group.as_bytes().cmp(b.group.as_bytes()))
    });
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            // `+` is a space in a query string; a time's `+01:00` arrives as ` 01:00` and is
            // mended in `parse_time`.
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An RFC 3339 time, a date (midnight UTC) or Unix seconds, in µs since the epoch.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim().replace(' ', "+");
    if let Ok(secs) = s.parse::<i64>() {
        return secs
            .checked_mul(1_000_000)
            .ok_or_else(|| format!("`{s}` is out of range"));
    }
    let t = if s.len() == 10 {
        OffsetDateTime::parse(&format!("{s}T00:00:00Z"), &Rfc3339)
    } else {
        OffsetDateTime::parse(&s, &Rfc3339)
    }
    .map_err(|_| {
        format!("`{s}` is not a time; write 2026-12-01T00:00:00Z, 2026-12-01 or Unix seconds")
    })?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000).map_err(|_| format!("`{s}` is out of range"))
}

/// µs since the epoch as RFC 3339 UTC (`2026-12-01T00:00:00Z`).
pub fn format_time(us: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| us.to_string())
}

/// The sums over all rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageTotals {
    /// Records.
    pub requests: i64,
    /// Prompt tokens.
    pub input: i64,
    /// Generated tokens.
    pub output: i64,
    /// Cache reads.
    pub cache_read: i64,
    /// Cache writes.
    pub cache_write: i64,
    /// Reasoning tokens.
    pub reasoning: i64,
    /// Micro-dollars.
    pub cost_micros: i64,
    /// Unpriced records.
    pub unpriced: i64,
    /// Cache hits.
    pub cache_hits: i64,
    /// What the cache hits saved, micro-dollars.
    pub saved_micros: i64,
}

/// Adds up `rows`.
pub fn totals(rows: &[UsageRow]) -> UsageTotals {
    let mut t = UsageTotals::default();
    for r in rows {
        t.requests += r.requests;
        t.input += r.input;
        t.output += r.output;
        t.cache_read += r.cache_read;
        t.cache_write += r.cache_write;
        t.reasoning += r.reasoning;
        t.cost_micros += r.cost_micros;
        t.unpriced += r.unpriced;
        t.cache_hits += r.cache_hits;
        t.saved_micros += r.saved_micros;
    }
    t
}

fn usd(micros: i64) -> String {
    let mut s = String::new();
    let _ = format_micros(micros, &mut s);
    s.trim_start_matches('$').replace("-$", "-")
}

/// The JSON answer: the query, the rows and their totals. Costs are given both as exact
/// micro-dollars and as a decimal string of dollars (never a float).
pub fn render_json(query: &UsageQuery, rows: &[UsageRow]) -> String {
    let row = |r: &UsageRow| {
        serde_json::json!({
            "bucket_start": format_time(r.bucket_start_us),
            "group": r.group,
            "requests": r.requests,
            "input_tokens": r.input,
            "output_tokens": r.output,
            "cache_read_tokens": r.cache_read,
            "cache_write_tokens": r.cache_write,
            "reasoning_tokens": r.reasoning,
            "cost_micros": r.cost_micros,
            "cost_usd": usd(r.cost_micros),
            "unpriced": r.unpriced,
            "cache_hits": r.cache_hits,
            "saved_micros": r.saved_micros,
            "saved_usd": usd(r.saved_micros),
        })
    };
    let t = totals(rows);
    serde_json::json!({
        "from": format_time(query.from_us),
        "to": format_time(query.to_us),
        "group_by": query.group_by.as_str(),
        "bucket": query.bucket.as_str(),
        "rows": rows.iter().map(row).collect::<Vec<_>>(),
        "totals": {
            "requests": t.requests,
            "input_tokens": t.input,
            "output_tokens": t.output,
            "cache_read_tokens": t.cache_read,
            "cache_write_tokens": t.cache_write,
            "reasoning_tokens": t.reasoning,
            "cost_micros": t.cost_micros,
            "cost_usd": usd(t.cost_micros),
            "unpriced": t.unpriced,
            "cache_hits": t.cache_hits,
            "saved_micros": t.saved_micros,
            "saved_usd": usd(t.saved_micros),
        },
    })
    .to_string()
}

/// A CSV cell: quoted when it holds a separator, quote or line break; a leading `=`, `+`, `-`
/// or `@` is prefixed with `'` so a spreadsheet does not take a group name for a formula.
fn csv_cell(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The CSV answer: a header line, then one line per row.
pub fn render_csv(rows: &[UsageRow]) -> String {
    let mut out = String::from(
        "bucket_start,group,requests,input_tokens,output_tokens,cache_read_tokens,\
         cache_write_tokens,reasoning_tokens,cost_usd,cost_micros,unpriced,cache_hits,\
         saved_usd,saved_micros\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            format_time(r.bucket_start_us),
            csv_cell(&r.group),
            r.requests,
            r.input,
            r.output,
            r.cache_read,
            r.cache_write,
            r.reasoning,
            usd(r.cost_micros),
            r.cost_micros,
            r.unpriced,
            r.cache_hits,
            usd(r.saved_micros),
            r.saved_micros
        );
    }
    out
}

/// The text table `sluice usage` prints, with a totals line.
pub fn render_table(query: &UsageQuery, rows: &[UsageRow]) -> String {
    let header = [
        "BUCKET",
        query.group_by.as_str(),
        "REQUESTS",
        "INPUT",
        "OUTPUT",
        "CACHE_READ",
        "CACHE_WRITE",
        "REASONING",
        "COST_USD",
        "UNPRICED",
    ]
    .map(|h| h.to_ascii_uppercase());
    let line = |bucket: String, group: String, n: [i64; 6], cost: i64, unpriced: i64| {
        let mut cells = vec![bucket, group];
        cells.extend(n.iter().map(i64::to_string));
        cells.push(usd(cost));
        cells.push(unpriced.to_string());
        cells
    };
    let mut table: Vec<Vec<String>> = vec![header.to_vec()];
    for r in rows {
        let group = if r.group.is_empty() {
            "-".to_string()
        } else {
            r.group.clone()
        };
        table.push(line(
            format_time(r.bucket_start_us),
            group,
            [
                r.requests,
                r.input,
                r.output,
                r.cache_read,
                r.cache_write,
                r.reasoning,
            ],
            r.cost_micros,
            r.unpriced,
        ));
    }
    let t = totals(rows);
    table.push(line(
        "TOTAL".into(),
        String::new(),
        [
            t.requests,
            t.input,
            t.output,
            t.cache_read,
            t.cache_write,
            t.reasoning,
        ],
        t.cost_micros,
        t.unpriced,
    ));
    let mut widths = vec![0usize; header.len()];
    for row in &table {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in &table {
        let mut l = String::new();
        for (i, (c, w)) in row.iter().zip(&widths).enumerate() {
            // Text left, numbers right.
            if i < 2 {
                let _ = write!(l, "{c:<w$}  ");
            } else {
                let _ = write!(l, "{c:>w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    }
    out
}

/// Renders rows in `format`.
pub fn render(format: Format, query: &UsageQuery, rows: &[UsageRow]) -> String {
    match format {
        Format::Json => render_json(query, rows),
        Format::Csv => render_csv(rows),
        Format::Table => render_table(query, rows),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_633_600_000_000; // 2025-12-02T00:00:00Z

    #[test]
    fn query_strings_parse_with_defaults() {
        let (q, f) = UsageQuery::from_query_string("", NOW).unwrap();
        assert_eq!(
            q,
            UsageQuery {
                from_us: NOW - DAY_US,
                to_us: NOW,
                group_by: GroupBy::Model,
                bucket: Bucket::None
            }
        );
        assert_eq!(f, Format::Json);
        let (q, f) = UsageQuery::from_query_string(
            "from=2025-12-01T00%3A00%3A00%2B01%3A00&to=2025-12-02&group_by=team&bucket=hour&format=csv",
            NOW,
        )
        .unwrap();
        assert_eq!(q.from_us, NOW - DAY_US - HOUR_US);
        assert_eq!(q.to_us, NOW);
        assert_eq!(
            (q.group_by, q.bucket, f),
            (GroupBy::Team, Bucket::Hour, Format::Csv)
        );
        // An unencoded `+` in an offset arrives as a space and is mended.
        let (q, _) =
            UsageQuery::from_query_string("from=2025-12-01T00:00:00+01:00&to=1764633600", NOW)
                .unwrap();
        assert_eq!(q.from_us, NOW - DAY_US - HOUR_US);
    }

    #[test]
    fn bad_query_strings_name_the_parameter() {
        let err = |qs: &str| UsageQuery::from_query_string(qs, NOW).unwrap_err();
        assert_eq!(err("group_by=colour").param, "group_by");
        assert_eq!(err("bucket=week").param, "bucket");
        assert_eq!(err("from=yesterday").param, "from");
        assert_eq!(err("from=2025-12-02&to=2025-12-01").param, "from");
        assert_eq!(err("format=xml").param, "format");
        assert_eq!(err("to=1&to=2").param, "to");
        assert!(err("key=secret")
            .to_string()
            .contains("unknown parameter `key`"));
    }

    #[test]
    fn the_sql_uses_only_fixed_text_and_integers() {
        let q = UsageQuery {
            from_us: 5,
            to_us: 10,
            group_by: GroupBy::Upstream,
            bucket: Bucket::Day,
        };
        let sql = q.sql("$1", "$2", "sluice_requests");
        assert!(sql.contains("(ts_us / 86400000000) * 86400000000"), "{sql}");
        assert!(sql.contains("COALESCE(upstream, '')"), "{sql}");
        assert!(sql.contains("ts_us >= $1 AND ts_us < $2"), "{sql}");
    }

    fn rows() -> Vec<UsageRow> {
        vec![
            UsageRow {
                bucket_start_us: NOW,
                group: "gpt-4o".into(),
                requests: 3,
                input: 300,
                output: 30,
                cache_read: 100,
                cache_write: 0,
                reasoning: 0,
                cost_micros: 1_234_567,
                unpriced: 0,
                cache_hits: 2,
                saved_micros: 2_000_000,
            },
            UsageRow {
                bucket_start_us: NOW,
                group: "=cmd,\"x\"".into(),
                requests: 1,
                input: 10,
                output: 1,
                cache_read: 0,
                cache_write: 0,
                reasoning: 0,
                cost_micros: 0,
                unpriced: 1,
                cache_hits: 0,
                saved_micros: 0,
            },
        ]
    }

    #[test]
    fn renderings_carry_the_same_numbers() {
        let q = UsageQuery {
            from_us: NOW,
            to_us: NOW + DAY_US,
            group_by: GroupBy::Model,
            bucket: Bucket::Day,
        };
        let rows = rows();
        let json: serde_json::Value = serde_json::from_str(&render_json(&q, &rows)).unwrap();
        assert_eq!(json["rows"][0]["cost_usd"], "1.234567");
        assert_eq!(json["rows"][0]["bucket_start"], "2025-12-02T00:00:00Z");
        assert_eq!(json["totals"]["requests"], 4);
        assert_eq!(json["totals"]["unpriced"], 1);
        assert_eq!(json["totals"]["cache_hits"], 2);
        assert_eq!(json["totals"]["saved_usd"], "2.000000");
        let csv = render_csv(&rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[1],
            "2025-12-02T00:00:00Z,gpt-4o,3,300,30,100,0,0,1.234567,1234567,0,2,2.000000,2000000"
        );
        assert_eq!(
            lines[2],
            "2025-12-02T00:00:00Z,\"'=cmd,\"\"x\"\"\",1,10,1,0,0,0,0.000000,0,1,0,0.000000,0"
        );
        let table = render_table(&q, &rows);
        let last = table.lines().last().unwrap();
        assert!(last.starts_with("TOTAL"), "{table}");
        assert!(last.contains("1.234567"), "{table}");
        assert!(table.lines().next().unwrap().contains("MODEL"), "{table}");
    }
}
