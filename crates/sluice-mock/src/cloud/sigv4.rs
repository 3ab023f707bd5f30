//! Verifying a Bedrock request's SigV4 `Authorization` the way AWS does: read the credential
//! scope and signed headers from it, recompute the signature over the request as received
//! (method, path and query as on the request line, the signed headers' values, the body's
//! hash) with `sluice_providers::sign::sigv4::sign`, and compare.
//!
//! So the mock agrees with any correct signer (botocore's included, `tests/python/`), not
//! only with Sluice's own: what it checks is the algorithm over the bytes on the wire.

use http::{HeaderMap, Method, Uri};
use sluice_providers::sign::credentials::Credentials;
use sluice_providers::sign::sigv4::{
    self, SessionToken, SignableBody, SignableRequest, SigningParams, SigningSettings,
};

use super::CloudConfig;

/// Why a request's signature was refused, each with the exception type and message AWS
/// answers (403).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SigV4Error {
    /// No `Authorization` header.
    Missing,
    /// The header is not `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`, or
    /// `x-amz-date` is missing or malformed.
    Incomplete(&'static str),
    /// The access key id (or session token) is not one the mock knows.
    UnknownKey,
    /// The scope's service or region is wrong.
    Scope(String),
    /// `x-amz-date` is too far from now.
    Expired(String),
    /// The recomputed signature differs.
    Mismatch,
}

impl SigV4Error {
    /// `x-amzn-ErrorType`'s type and the body's message.
    pub(crate) fn exception(&self) -> (&'static str, String) {
        match self {
            SigV4Error::Missing => (
                "MissingAuthenticationTokenException",
                "Missing Authentication Token".to_string(),
            ),
            SigV4Error::Incomplete(what) => ("IncompleteSignatureException", (*what).to_string()),
            SigV4Error::UnknownKey => (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.".to_string(),
            ),
            SigV4Error::Scope(m) | SigV4Error::Expired(m) => {
                ("InvalidSignatureException", m.clone())
            }
            SigV4Error::Mismatch => (
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you \
                 provided. Check your AWS Secret Access Key and signing method. Consult the \
                 service documentation for details."
                    .to_string(),
            ),
        }
    }
}

struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_authorization(v: &str) -> Result<Authorization<'_>, SigV4Error> {
    let rest = v
        .strip_prefix(sigv4::ALGORITHM)
        .ok_or(SigV4Error::Incomplete(
            "Authorization header requires the AWS4-HMAC-SHA256 algorithm.",
        ))?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        }
    }
    let credential = credential.ok_or(SigV4Error::Incomplete(
        "Authorization header requires 'Credential' parameter.",
    ))?;
    let signed = signed.ok_or(SigV4Error::Incomplete(
        "Authorization header requires 'SignedHeaders' parameter.",
    ))?;
    let signature = signature.ok_or(SigV4Error::Incomplete(
        "Authorization header requires 'Signature' parameter.",
    ))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key_id, date, region, service, "aws4_request"] = scope.as_slice() else {
        return Err(SigV4Error::Incomplete(
            "Credential should be of the form ACCESS_KEY/DATE/REGION/SERVICE/aws4_request.",
        ));
    };
    Ok(Authorization {
        access_key_id,
        date,
        region,
        service,
        signed_headers: signed.split(';').collect(),
        signature,
    })
}

/// `YYYYMMDDTHHMMSSZ` as seconds since the epoch.
fn parse_amz_date(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hh, mm, ss) = (n(9..11)?, n(11..13)?, n(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

/// Verifies the request's signature against the configured keys, at `now_unix`.
pub(crate) fn verify(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    cfg: &CloudConfig,
    now_unix: u64,
) -> Result<(), SigV4Error> {
    let auth = headers
        .get(http::header::AUTHORIZATION)
        .ok_or(SigV4Error::Missing)?
        .to_str()
        .map_err(|_| SigV4Error::Incomplete("The Authorization header is not ASCII."))?;
    let auth = parse_authorization(auth)?;
    let key = cfg
        .aws_keys
        .iter()
        .find(|k| k.access_key_id == auth.access_key_id)
        .ok_or(SigV4Error::UnknownKey)?;
    let token = headers
        .get("x-amz-security-token")
        .and_then(|v| v.to_str().ok());
    if key.session_token.is_some() && key.session_token.as_deref() != token {
        return Err(SigV4Error::UnknownKey);
    }
    if auth.service != "bedrock" {
        return Err(SigV4Error::Scope(format!(
            "Credential should be scoped to correct service: 'bedrock'. (got '{}')",
            auth.service
        )));
    }
    if let Some(region) = cfg.aws_region.as_deref().filter(|r| *r != auth.region) {
        return Err(SigV4Error::Scope(format!(
            "Credential should be scoped to a valid region, not '{}'. (expected '{region}')",
            auth.region
        )));
    }
    let amz_date = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or(SigV4Error::Incomplete(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
        ))?;
    let time = parse_amz_date(amz_date).ok_or(SigV4Error::Incomplete(
        "The X-Amz-Date header is not YYYYMMDDTHHMMSSZ.",
    ))?;
    if !amz_date.starts_with(auth.date) {
        return Err(SigV4Error::Scope(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{}' != '{}'",
            auth.date,
            &amz_date[..8]
        )));
    }
    let skew = cfg.aws_max_skew.as_secs();
    if time.abs_diff(now_unix) > skew {
        return Err(SigV4Error::Expired(format!(
            "Signature expired: {amz_date} is now earlier or later than the server's clock by \
             more than {} min.",
            skew / 60
        )));
    }

    // The signed headers' values as received; `host` from the authority on HTTP/2.
    let authority = uri.authority().map(|a| a.as_str().to_string());
    let mut pairs: Vec<(&str, String)> = Vec::new();
    for name in &auth.signed_headers {
        if matches!(
            *name,
            "authorization" | "x-amz-date" | "x-amz-security-token"
        ) {
            continue;
        }
        let values: Vec<&str> = headers
            .get_all(*name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        match (values.is_empty(), *name) {
            (true, "host") => match &authority {
                Some(a) => pairs.push((name, a.clone())),
                None => return Err(SigV4Error::Mismatch),
            },
            // A header signed but not sent: the signatures cannot agree.
            (true, _) => return Err(SigV4Error::Mismatch),
            (false, _) => pairs.extend(values.into_iter().map(|v| (*name, v.to_string()))),
        }
    }
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let content_sha = headers
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok());
    let settings = SigningSettings {
        session_token: if auth.signed_headers.contains(&"x-amz-security-token") {
            SessionToken::Signed
        } else {
            SessionToken::AddedAfter
        },
        content_sha256_header: auth.signed_headers.contains(&"x-amz-content-sha256"),
        ..SigningSettings::default()
    };
    let credentials = Credentials::new(
        key.access_key_id.clone(),
        key.secret_access_key.clone(),
        token.map(str::to_string),
    );
    let path_and_query = uri
        .path_and_query()
        .map_or_else(|| uri.path(), |p| p.as_str());
    let ours = sigv4::sign(
        &SignableRequest {
            method: method.as_str(),
            uri: path_and_query,
            headers: &pairs,
            body: match content_sha {
                Some(h) => SignableBody::Precomputed(h),
                None => SignableBody::Bytes(body),
            },
        },
        &SigningParams {
            credentials: &credentials,
            region: auth.region,
            service: auth.service,
            time_unix: time,
            settings,
        },
    )
    .map_err(|_| SigV4Error::Mismatch)?;
    // The recomputed `SignedHeaders` must be the client's list too (ours adds what it signs).
    let ours_signed = ours
        .authorization
        .split("SignedHeaders=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("");
    if ours.signature != auth.signature || ours_signed != auth.signed_headers.join(";") {
        return Err(SigV4Error::Mismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::{AwsKey, TEST_AWS_ACCESS_KEY_ID, TEST_AWS_SECRET_ACCESS_KEY};

    const NOW: u64 = 1_767_225_600;

    fn signed(body: &[u8], key: &AwsKey, host: &str) -> HeaderMap {
        let creds = Credentials::new(
            key.access_key_id.clone(),
            key.secret_access_key.clone(),
            key.session_token.clone(),
        );
        let sig = sigv4::sign(
            &SignableRequest {
                method: "POST",
                uri: "/model/anthropic.claude-v2%3A1/converse",
                headers: &[("host", host), ("content-type", "application/json")],
                body: SignableBody::Bytes(body),
            },
            &SigningParams {
                credentials: &creds,
                region: "us-east-1",
                service: "bedrock",
                time_unix: NOW,
                settings: SigningSettings::default(),
            },
        )
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert("host", host.parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        for (k, v) in sig.headers {
            h.insert(k, v);
        }
        h
    }

    #[test]
    fn amz_dates() {
        assert_eq!(parse_amz_date("20260101T000000Z"), Some(NOW));
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(parse_amz_date("2026-01-01T00:00:00Z"), None);
        assert_eq!(parse_amz_date("20261301T000000Z"), None);
    }

    #[test]
    fn accepts_and_rejects() {
        let cfg = CloudConfig::default();
        let uri: Uri = "/model/anthropic.claude-v2%3A1/converse".parse().unwrap();
        let key = AwsKey::test();
        let body = br#"{"messages":[]}"#;
        let h = signed(body, &key, "127.0.0.1:9");
        let post = Method::POST;
        assert_eq!(verify(&post, &uri, &h, body, &cfg, NOW + 60), Ok(()));
        // A changed body, path, header or time.
        assert_eq!(
            verify(&post, &uri, &h, b"{}", &cfg, NOW),
            Err(SigV4Error::Mismatch)
        );
        let other: Uri = "/model/anthropic.claude-v2%3A2/converse".parse().unwrap();
        assert_eq!(
            verify(&post, &other, &h, body, &cfg, NOW),
            Err(SigV4Error::Mismatch)
        );
        let mut h2 = h.clone();
        h2.insert("host", "evil:9".parse().unwrap());
        assert_eq!(
            verify(&post, &uri, &h2, body, &cfg, NOW),
            Err(SigV4Error::Mismatch)
        );
        assert!(matches!(
            verify(&post, &uri, &h, body, &cfg, NOW + 3600),
            Err(SigV4Error::Expired(_))
        ));
        // Another secret for the same key id.
        let wrong = AwsKey {
            secret_access_key: "nope".into(),
            ..AwsKey::test()
        };
        let h3 = signed(body, &wrong, "127.0.0.1:9");
        let (kind, message) = verify(&post, &uri, &h3, body, &cfg, NOW)
            .unwrap_err()
            .exception();
        assert_eq!(kind, "InvalidSignatureException");
        assert!(message.starts_with("The request signature we calculated does not match"));
        // An unknown key id, no header, a region the mock is not in.
        let stranger = AwsKey {
            access_key_id: "AKIDOTHER".into(),
            ..AwsKey::test()
        };
        let h4 = signed(body, &stranger, "127.0.0.1:9");
        assert_eq!(
            verify(&post, &uri, &h4, body, &cfg, NOW),
            Err(SigV4Error::UnknownKey)
        );
        assert_eq!(
            verify(&post, &uri, &HeaderMap::new(), body, &cfg, NOW),
            Err(SigV4Error::Missing)
        );
        let eu = CloudConfig {
            aws_region: Some("eu-west-1".into()),
            ..CloudConfig::default()
        };
        assert!(matches!(
            verify(&post, &uri, &h, body, &eu, NOW),
            Err(SigV4Error::Scope(_))
        ));
        let _ = (TEST_AWS_ACCESS_KEY_ID, TEST_AWS_SECRET_ACCESS_KEY);
    }

    #[test]
    fn session_tokens() {
        let key = AwsKey {
            session_token: Some("tok".into()),
            ..AwsKey::test()
        };
        let cfg = CloudConfig {
            aws_keys: vec![key.clone()],
            ..CloudConfig::default()
        };
        let uri: Uri = "/model/anthropic.claude-v2%3A1/converse".parse().unwrap();
        let h = signed(b"{}", &key, "h");
        assert_eq!(verify(&Method::POST, &uri, &h, b"{}", &cfg, NOW), Ok(()));
        let mut h2 = h.clone();
        h2.remove("x-amz-security-token");
        assert_eq!(
            verify(&Method::POST, &uri, &h2, b"{}", &cfg, NOW),
            Err(SigV4Error::UnknownKey)
        );
    }
}
