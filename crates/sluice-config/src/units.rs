//! Human units in config: durations like `"1m30s"`, sizes like `"16MiB"`.
//!
//! Durations are parsed by `humantime` (the crate `systemd`-style durations come from); sizes by
//! the small parser below, because no crate reads them the way an operator expects: `bytesize`
//! takes `16m` as 16×10^6 where nginx takes it as 16×2^20, and saturates on overflow instead of
//! saying so. Here a unit says its base or is refused.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// Parses a duration: one or more `<number><unit>` spans, e.g. `"500ms"`, `"30s"`, `"1m30s"`,
/// `"1.5s"`, `"2h 30min"`. Units: `ms`, `s`/`sec`, `m`/`min`, `h`, `d`, and the other
/// `humantime` spellings. A number needs its unit (`"30"` is refused: seconds or milliseconds?).
///
/// # Errors
/// A message saying what is wrong and what form is expected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    use humantime::DurationError as E;
    humantime::parse_duration(s).map_err(|e| match e {
        E::UnknownUnit { unit, value, .. } if unit.is_empty() => format!(
            "`{s}` has no unit: write \"{value}s\" for seconds or \"{value}ms\" for milliseconds"
        ),
        E::UnknownUnit { unit, .. } => {
            format!("`{s}`: unknown unit `{unit}`; use ms, s, m, h or d, combined like \"1m30s\"")
        }
        E::Empty => "is empty; write a duration such as \"30s\"".to_string(),
        E::NumberOverflow => format!("`{s}` is too long"),
        E::InvalidCharacter(_) | E::NumberExpected(_) => format!(
            "`{s}` is not a duration; write a number and a unit such as \"500ms\", \"30s\" or \
             \"1m30s\""
        ),
    })
}

/// The size units, each with its base said plainly: `KB`, `MB`, `GB` are powers of 1000 (as
/// on a disk label), `KiB`, `MiB`, `GiB` powers of 1024. Units are read without regard to case
/// (`16mib` = `16MiB`); the bare letters `k`, `m`, `g` are refused because tools disagree on
/// them.
const SIZE_UNITS: [(&str, u64); 8] = [
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
];

/// Parses a size: a whole number of bytes (`"512"`), or a whole number and a unit, with or
/// without a space: `"512KiB"`, `"16 MiB"`, `"16MB"` (= 16,000,000), `"1GiB"`. See
/// [`SIZE_UNITS`] for the units.
///
/// # Errors
/// A message saying what is wrong and what form is expected.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        if num.is_empty() {
            format!("`{s}` is not a size; write e.g. \"16MiB\", \"512KiB\" or a number of bytes")
        } else {
            format!("`{s}` is too large")
        }
    })?;
    let unit = unit.trim_start();
    if unit.is_empty() {
        return Ok(n);
    }
    let lower = unit.to_ascii_lowercase();
    let Some((_, mult)) = SIZE_UNITS.iter().find(|(u, _)| *u == lower) else {
        return Err(match lower.as_str() {
            "k" | "m" | "g" | "t" => format!(
                "`{s}`: `{unit}` is ambiguous; write {n}{up}iB (powers of 1024) or {n}{up}B \
                 (powers of 1000)",
                up = unit.to_ascii_uppercase()
            ),
            _ if unit.starts_with('.') => {
                format!("`{s}`: sizes are whole numbers; write e.g. \"1536KiB\" for 1.5 MiB")
            }
            _ => format!(
                "`{s}`: unknown unit `{unit}`; use B, KiB, MiB, GiB (powers of 1024) or KB, MB, \
                 GB (powers of 1000)"
            ),
        });
    };
    n.checked_mul(*mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// A duration as written in the file: a string such as `"30s"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DurationValue(pub(super) Duration);

/// A size as written in the file: a number of bytes or a string such as `"16MiB"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SizeValue(pub(super) u64);

/// The form of a duration, for the JSON Schema: `<number><unit>` spans as `humantime` reads
/// them (the units of [`parse_duration`], case-sensitive: `M` is a month, `m` a minute).
pub(super) const DURATION_PATTERN: &str = "^\\s*([0-9]+(\\.[0-9]+)?\\s*(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\\s*)+$";

/// The form of a size written as a string, for the JSON Schema: a whole number and one of
/// [`SIZE_UNITS`] (any case), or no unit.
pub(super) const SIZE_PATTERN: &str = "^\\s*[0-9]+\\s*([bB]|[kKmMgG][bB]|[kKmMgGtT][iI][bB])?\\s*$";

impl schemars::JsonSchema for DurationValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A duration: a number and a unit, e.g. \"500ms\", \"30s\", \"1m30s\", \"1.5h\" (ms, s, m, h, d, ...). A bare number is refused: seconds or milliseconds?",
            "type": "string",
            "anyOf": [
                { "pattern": DURATION_PATTERN },
                super::schema::interpolated(),
            ]
        })
    }
}

impl schemars::JsonSchema for SizeValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A size: a whole number of bytes, or a string with a unit: \"512KiB\", \"16MiB\", \"1GiB\" (powers of 1024) or \"16MB\" (powers of 1000).",
            "anyOf": [
                { "type": "integer", "minimum": 0 },
                { "type": "string", "pattern": SIZE_PATTERN },
                super::schema::interpolated(),
            ]
        })
    }
}

const DURATION_EXPECTED: &str = "a duration string such as \"30s\"";
const SIZE_EXPECTED: &str = "a size such as \"16MiB\" or a whole number of bytes";

impl<'de> serde::Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(DURATION_EXPECTED)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<DurationValue, E> {
                parse_duration(s).map(DurationValue).map_err(E::custom)
            }
            // A bare number is the most common slip; say which string would do.
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<DurationValue, E> {
                Err(E::custom(format!(
                    "expected {DURATION_EXPECTED}, found the number {n}: write \"{n}s\" for \
                     seconds or \"{n}ms\" for milliseconds"
                )))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<DurationValue, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(i64::MAX))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<DurationValue, E> {
                Err(E::custom(format!(
                    "expected {DURATION_EXPECTED}, found the number {n}: write \"{n}s\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> serde::Deserialize<'de> for SizeValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SizeValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(SIZE_EXPECTED)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SizeValue, E> {
                parse_size(s).map(SizeValue).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<SizeValue, E> {
                Ok(SizeValue(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<SizeValue, E> {
                u64::try_from(n).map(SizeValue).map_err(|_| {
                    E::custom(format!("expected {SIZE_EXPECTED}, found the number {n}"))
                })
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<SizeValue, E> {
                Err(E::custom(format!(
                    "expected {SIZE_EXPECTED}, found the number {n}: sizes are whole numbers"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = [
            ("500ms", Duration::from_millis(500)),
            ("30s", Duration::from_secs(30)),
            ("10m", Duration::from_secs(600)),
            ("1m30s", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
            ("2h 30min", Duration::from_secs(9000)),
            ("1.5s", Duration::from_millis(1500)),
            ("1d", Duration::from_secs(86_400)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        let bad = [
            (
                "30",
                "`30` has no unit: write \"30s\" for seconds or \"30ms\" for milliseconds",
            ),
            (
                "3x",
                "`3x`: unknown unit `x`; use ms, s, m, h or d, combined like \"1m30s\"",
            ),
            ("", "is empty; write a duration such as \"30s\""),
            (
                "soon",
                "`soon` is not a duration; write a number and a unit such as \"500ms\", \"30s\" \
                 or \"1m30s\"",
            ),
        ];
        for (text, want) in bad {
            assert_eq!(parse_duration(text).unwrap_err(), want, "{text}");
        }
    }

    #[test]
    fn sizes() {
        let ok = [
            ("512", 512),
            ("512B", 512),
            ("512KiB", 512 << 10),
            ("16MiB", 16 << 20),
            ("16 MiB", 16 << 20),
            ("16mib", 16 << 20),
            ("16MB", 16_000_000),
            ("16mb", 16_000_000),
            ("1GiB", 1 << 30),
            ("1GB", 1_000_000_000),
            ("2KB", 2_000),
        ];
        for (text, want) in ok {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        let bad = [
            (
                "16M",
                "`16M`: `M` is ambiguous; write 16MiB (powers of 1024) or 16MB (powers of 1000)",
            ),
            (
                "16m",
                "`16m`: `m` is ambiguous; write 16MiB (powers of 1024) or 16MB (powers of 1000)",
            ),
            (
                "16 parsecs",
                "`16 parsecs`: unknown unit `parsecs`; use B, KiB, MiB, GiB (powers of 1024) or \
                 KB, MB, GB (powers of 1000)",
            ),
            (
                "1.5MiB",
                "`1.5MiB`: sizes are whole numbers; write e.g. \"1536KiB\" for 1.5 MiB",
            ),
            (
                "lots",
                "`lots` is not a size; write e.g. \"16MiB\", \"512KiB\" or a number of bytes",
            ),
            ("99999999999GiB", "`99999999999GiB` is too large"),
        ];
        for (text, want) in bad {
            assert_eq!(parse_size(text).unwrap_err(), want, "{text}");
        }
    }
}
