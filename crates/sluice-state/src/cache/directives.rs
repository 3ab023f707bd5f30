//! What a request asks of the cache (`Cache-Control`, `x-sluice-cache-ttl`) and what a
//! response says about it (`x-sluice-cache`, `Age`). Pure header work, kept beside the cache
//! so the gateway's admission and relay read one definition.

use std::time::Duration;

use http::header::CACHE_CONTROL;
use http::{HeaderMap, HeaderName, HeaderValue};

/// The request header that shortens the route's TTL for the answer it stores: whole seconds
/// (`600`) or a number with a unit (`500ms`, `30s`, `10m`, `1h`, `1d`).
pub const CACHE_TTL_HEADER: HeaderName = HeaderName::from_static("x-sluice-cache-ttl");
/// The response header saying what the cache did: [`CacheStatus`].
pub const CACHE_STATUS_HEADER: HeaderName = HeaderName::from_static("x-sluice-cache");

/// What a request lets the cache do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheDirectives {
    /// Look the answer up (false with `Cache-Control: no-cache` or `no-store`).
    pub lookup: bool,
    /// Store the answer (false with `Cache-Control: no-store`, or a TTL of zero).
    pub store: bool,
    /// `x-sluice-cache-ttl`, if given (the route's TTL still caps it:
    /// [`crate::CacheConfig::policy`]).
    pub ttl: Option<Duration>,
}

/// A request header the cache cannot read: the gateway answers 400 with its message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("x-sluice-cache-ttl: expected whole seconds or a number with ms, s, m, h or d")]
pub struct InvalidCacheTtl;

impl InvalidCacheTtl {
    /// `invalid_cache_ttl`: a metric label.
    pub fn metric_label(&self) -> &'static str {
        "invalid_cache_ttl"
    }
}

impl CacheDirectives {
    /// Reads `Cache-Control` (every header of that name; `no-cache` skips the lookup but
    /// stores the answer, `no-store` does neither; other directives are ignored) and
    /// `x-sluice-cache-ttl`.
    ///
    /// Requests that skip the lookup should not join a flight either
    /// ([`crate::ResponseCache::begin`]): they asked for an answer of their own.
    ///
    /// # Errors
    /// An `x-sluice-cache-ttl` that is not a duration.
    pub fn from_headers(headers: &HeaderMap) -> Result<CacheDirectives, InvalidCacheTtl> {
        let mut directives = CacheDirectives {
            lookup: true,
            store: true,
            ttl: None,
        };
        for value in headers.get_all(CACHE_CONTROL) {
            let Ok(value) = value.to_str() else {
                continue;
            };
            for directive in value.split(',') {
                // `no-cache="field"` is still no-cache.
                let name = directive.split('=').next().unwrap_or("").trim();
                if name.eq_ignore_ascii_case("no-store") {
                    directives.lookup = false;
                    directives.store = false;
                } else if name.eq_ignore_ascii_case("no-cache") {
                    directives.lookup = false;
                }
            }
        }
        if let Some(value) = headers.get(CACHE_TTL_HEADER) {
            let ttl = value
                .to_str()
                .ok()
                .and_then(parse_ttl)
                .ok_or(InvalidCacheTtl)?;
            if ttl.is_zero() {
                directives.store = false;
            }
            directives.ttl = Some(ttl);
        }
        Ok(directives)
    }
}

fn parse_ttl(s: &str) -> Option<Duration> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits == 0 || digits > 12 {
        return None;
    }
    let n: u64 = s[..digits].parse().ok()?;
    let unit = match &s[digits..] {
        "" | "s" => 1_000,
        "ms" => 1,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(Duration::from_millis(n.checked_mul(unit)?))
}

/// What the cache did for a response, for `x-sluice-cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// Answered from the cache (or from an identical request's flight), not upstream.
    Hit,
    /// Looked up and not found (or the store did not answer): answered upstream.
    Miss,
    /// Not looked up: the request said `no-cache` or `no-store`.
    Bypass,
}

impl CacheStatus {
    /// `hit`, `miss` or `bypass`: the header's value and a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Bypass => "bypass",
        }
    }

    /// The header's value.
    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(self.as_str())
    }
}

/// `Age` (whole seconds, RFC 9111 §5.1) of a hit.
pub fn age_header_value(age: Duration) -> HeaderValue {
    HeaderValue::from(age.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directives(pairs: &[(&str, &str)]) -> Result<CacheDirectives, InvalidCacheTtl> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        CacheDirectives::from_headers(&headers)
    }

    #[test]
    fn requests_choose_what_the_cache_does() {
        let plain = directives(&[]).unwrap();
        assert!(plain.lookup && plain.store && plain.ttl.is_none());
        let no_cache = directives(&[("cache-control", "max-age=0, No-Cache")]).unwrap();
        assert!(!no_cache.lookup && no_cache.store);
        let no_store =
            directives(&[("cache-control", "private"), ("cache-control", "no-store")]).unwrap();
        assert!(!no_store.lookup && !no_store.store);
        assert!(
            !directives(&[("cache-control", "no-cache=\"x\"")])
                .unwrap()
                .lookup
        );
        for (value, ttl) in [
            ("600", 600_000),
            ("500ms", 500),
            ("30s", 30_000),
            ("10m", 600_000),
            ("1h", 3_600_000),
            ("2d", 172_800_000),
        ] {
            let d = directives(&[("x-sluice-cache-ttl", value)]).unwrap();
            assert_eq!(d.ttl, Some(Duration::from_millis(ttl)), "{value}");
        }
        let zero = directives(&[("x-sluice-cache-ttl", "0")]).unwrap();
        assert!(zero.lookup && !zero.store);
        for bad in ["", "-1", "1.5h", "1w", "h", "9999999999999"] {
            assert_eq!(
                directives(&[("x-sluice-cache-ttl", bad)]),
                Err(InvalidCacheTtl),
                "{bad}"
            );
        }
        assert_eq!(age_header_value(Duration::from_millis(2999)), "2");
        assert_eq!(CacheStatus::Bypass.header_value(), "bypass");
    }
}
