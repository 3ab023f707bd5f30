//! AWS Signature Version 4 (header signing), as a pure function: a request's method, wire
//! URI, headers and body in; the canonical request, the string to sign, the signature and
//! the headers to add out.
//!
//! The algorithm is AWS's ("Create a signed AWS API request", IAM user guide) with the
//! conventions of every service but S3, which Bedrock follows:
//! - the **canonical URI** is the path *as sent* (already percent-encoded once), encoded once
//!   more, segment by segment: a model id `us.anthropic.claude-v1:0`, sent as
//!   `/model/us.anthropic.claude-v1%3A0/converse`, is signed as
//!   `/model/us.anthropic.claude-v1%253A0/converse` (the service checks the signature on the
//!   path it received, without decoding it first); `.` and `..` segments and empty segments
//!   are removed first ([`SigningSettings::normalize_path`]);
//! - the **canonical query** is each parameter decoded, then encoded with only the unreserved
//!   characters (`A-Z a-z 0-9 - . _ ~`) left as they are, sorted by name then value, `name=`
//!   for a parameter without a value;
//! - **canonical headers** are lower-cased names, sorted, each with its values trimmed, runs
//!   of whitespace inside collapsed to one space, and repeated headers joined by `,`;
//! - the **payload hash** is the hex SHA-256 of the body (or a value given, such as
//!   `UNSIGNED-PAYLOAD`).
//!
//! Tested stage by stage (canonical request, string to sign, signature, `Authorization`)
//! against the AWS SigV4 test suite (`tests/fixtures/sigv4/`, from `awslabs/aws-c-auth`).

use std::fmt::Write as _;

use http::header::{HeaderName, HeaderValue};
use ring::{digest, hmac};

use super::credentials::Credentials;

/// The algorithm's name, first in the string to sign and the `Authorization` header.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The payload hash that tells the service the body is not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// Where the session token of temporary credentials goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionToken {
    /// `x-amz-security-token` is a signed header (what the AWS SDKs do for every service but
    /// a few IoT ones). Default.
    #[default]
    Signed,
    /// `x-amz-security-token` is added after signing, unsigned (the suite's
    /// `post-sts-header-after`; some services want this).
    AddedAfter,
}

/// How to sign: the choices that differ between services. The defaults are right for Bedrock
/// (and every service but S3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigningSettings {
    /// Remove `.`, `..` and empty segments from the path before signing. Default true (S3:
    /// false).
    pub normalize_path: bool,
    /// Percent-encode the (already encoded) path once more. Default true (S3: false).
    pub encode_path: bool,
    /// Where a session token goes. Default [`SessionToken::Signed`].
    pub session_token: SessionToken,
    /// Add (and sign) `x-amz-content-sha256` with the payload hash. Default false (S3 requires
    /// it; Bedrock does not).
    pub content_sha256_header: bool,
}

impl Default for SigningSettings {
    fn default() -> Self {
        SigningSettings {
            normalize_path: true,
            encode_path: true,
            session_token: SessionToken::Signed,
            content_sha256_header: false,
        }
    }
}

/// Who signs, for where, and when.
#[derive(Clone, Copy, Debug)]
pub struct SigningParams<'a> {
    /// The credentials (their secret never leaves this module but as the signature).
    pub credentials: &'a Credentials,
    /// The region (`us-east-1`).
    pub region: &'a str,
    /// The signing name of the service: `bedrock` for both `bedrock` and `bedrock-runtime`
    /// endpoints.
    pub service: &'a str,
    /// Seconds since the Unix epoch: the signature's time (`x-amz-date`). AWS refuses a
    /// signature more than 5 minutes off its clock.
    pub time_unix: u64,
    /// Per-service choices.
    pub settings: SigningSettings,
}

/// The body, or its hash.
#[derive(Clone, Copy, Debug)]
pub enum SignableBody<'a> {
    /// The bytes that will be sent (hashed here).
    Bytes(&'a [u8]),
    /// A hash computed elsewhere (lower-case hex SHA-256), or [`UNSIGNED_PAYLOAD`].
    Precomputed(&'a str),
}

/// The request to sign.
#[derive(Clone, Copy, Debug)]
pub struct SignableRequest<'a> {
    /// `GET`, `POST`, ... (as sent; upper case).
    pub method: &'a str,
    /// The path and query as they appear in the request line (`/model/x%3A0/converse`).
    pub uri: &'a str,
    /// The headers that will be sent and should be signed, `host` among them (with the port
    /// when it is not the scheme's default). Names in any case; repeated names allowed. Leave
    /// out hop-by-hop headers a proxy may change (`connection`, `te`, ...) and
    /// `content-length` when a lower layer may change the framing. `authorization`,
    /// `x-amz-date`, `x-amz-security-token` and `x-amz-content-sha256` given here are
    /// ignored: signing writes them.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body.
    pub body: SignableBody<'a>,
}

/// A signed request's new headers, and the stages that led to them (for tests and debug
/// logs: none holds the secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The headers to add to the request, in this order: `x-amz-date`, then
    /// `x-amz-content-sha256` and `x-amz-security-token` when they apply, then
    /// `authorization`. The token and `authorization` are marked sensitive.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The canonical request.
    pub canonical_request: String,
    /// The string to sign.
    pub string_to_sign: String,
    /// The signature (64 lower-case hex digits).
    pub signature: String,
    /// The `Authorization` header's value.
    pub authorization: String,
}

/// Why a request cannot be signed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    /// SigV4 signs the `host` header; the request has none.
    #[error("the request to sign has no `host` header: add the upstream's host (with its port unless it is the default) before signing")]
    MissingHost,
    /// The time is past what `x-amz-date` can say (year 9999).
    #[error("the signing time {0} (seconds since the epoch) is past the year 9999")]
    TimeOutOfRange(u64),
    /// A value cannot be a header value (a control character), e.g. in the session token or
    /// the access key id. The value is not repeated here: it may be a secret.
    #[error("the `{0}` header cannot hold the value signing made for it (it contains a control character); check the credentials")]
    InvalidHeaderValue(&'static str),
    /// The method is not a token (`GET`, `POST`, ...).
    #[error("the HTTP method {0:?} is not a valid method token")]
    InvalidMethod(String),
}

impl SigningError {
    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SigningError::MissingHost => "missing_host",
            SigningError::TimeOutOfRange(_) => "time_out_of_range",
            SigningError::InvalidHeaderValue(_) => "invalid_header_value",
            SigningError::InvalidMethod(_) => "invalid_method",
        }
    }
}

/// Signs `req`: the headers to add, and each stage of the computation.
///
/// # Errors
/// [`SigningError`]: no `host` header, a time past year 9999, a credential that cannot be a
/// header value, a method that is not a token.
pub fn sign(
    req: &SignableRequest<'_>,
    params: &SigningParams<'_>,
) -> Result<Signature, SigningError> {
    if req.method.is_empty() || !req.method.bytes().all(is_tchar) {
        return Err(SigningError::InvalidMethod(req.method.to_string()));
    }
    let amz_date = amz_date(params.time_unix)?;
    let date = &amz_date[..8];
    let payload_hash = match req.body {
        SignableBody::Bytes(b) => hex(digest::digest(&digest::SHA256, b).as_ref()),
        SignableBody::Precomputed(h) => h.to_string(),
    };
    let token = params.credentials.session_token();

    // The headers signed: the caller's, then what signing adds.
    let mut headers: Vec<(String, &str)> = Vec::with_capacity(req.headers.len() + 3);
    for (name, value) in req.headers {
        let name = name.to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "authorization" | "x-amz-date" | "x-amz-security-token" | "x-amz-content-sha256"
        ) {
            continue;
        }
        headers.push((name, value));
    }
    if !headers.iter().any(|(n, _)| n == "host") {
        return Err(SigningError::MissingHost);
    }
    headers.push(("x-amz-date".to_string(), &amz_date));
    if params.settings.content_sha256_header {
        headers.push(("x-amz-content-sha256".to_string(), &payload_hash));
    }
    if let (Some(t), SessionToken::Signed) = (token, params.settings.session_token) {
        headers.push(("x-amz-security-token".to_string(), t));
    }
    // Stable: repeated headers keep the order they were given in.
    headers.sort_by(|a, b| a.0.cmp(&b.0));

    let (path, query) = match req.uri.split_once('?') {
        Some((p, q)) => (p, q),
        None => (req.uri, ""),
    };
    let mut canonical = String::with_capacity(256 + req.uri.len());
    canonical.push_str(req.method);
    canonical.push('\n');
    canonical_uri(&mut canonical, path, &params.settings);
    canonical.push('\n');
    canonical_query(&mut canonical, query);
    canonical.push('\n');
    let mut signed_headers = String::new();
    let mut i = 0;
    while i < headers.len() {
        let name = &headers[i].0;
        canonical.push_str(name);
        canonical.push(':');
        let mut first = true;
        while i < headers.len() && headers[i].0 == *name {
            if !first {
                canonical.push(',');
            }
            first = false;
            push_header_value(&mut canonical, headers[i].1);
            i += 1;
        }
        canonical.push('\n');
        if !signed_headers.is_empty() {
            signed_headers.push(';');
        }
        signed_headers.push_str(name);
    }
    canonical.push('\n');
    canonical.push_str(&signed_headers);
    canonical.push('\n');
    canonical.push_str(&payload_hash);

    let scope = format!("{date}/{}/{}/aws4_request", params.region, params.service);
    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let key = signing_key(
        params.credentials.secret_access_key(),
        date,
        params.region,
        params.service,
    );
    let signature = hex(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());
    let authorization = format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        params.credentials.access_key_id()
    );

    let mut out = Vec::with_capacity(4);
    let value = |v: &str, name: &'static str, sensitive: bool| {
        let mut v = HeaderValue::try_from(v).map_err(|_| SigningError::InvalidHeaderValue(name))?;
        v.set_sensitive(sensitive);
        Ok::<_, SigningError>(v)
    };
    out.push((
        HeaderName::from_static("x-amz-date"),
        value(&amz_date, "x-amz-date", false)?,
    ));
    if params.settings.content_sha256_header {
        out.push((
            HeaderName::from_static("x-amz-content-sha256"),
            value(&payload_hash, "x-amz-content-sha256", false)?,
        ));
    }
    if let Some(t) = token {
        out.push((
            HeaderName::from_static("x-amz-security-token"),
            value(t, "x-amz-security-token", true)?,
        ));
    }
    out.push((
        http::header::AUTHORIZATION,
        value(&authorization, "authorization", true)?,
    ));
    Ok(Signature {
        headers: out,
        canonical_request: canonical,
        string_to_sign,
        signature,
        authorization,
    })
}

/// The signing key: `HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service),
/// "aws4_request")`, `date` as `YYYYMMDD`. Valid for that day, region and service; a caller
/// signing many requests may keep it for the day (it is as secret as the secret key).
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let mut k = Vec::with_capacity(4 + secret.len());
    k.extend_from_slice(b"AWS4");
    k.extend_from_slice(secret.as_bytes());
    let mut tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &k), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        tag = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, tag.as_ref()),
            part.as_bytes(),
        );
    }
    hmac::Key::new(hmac::HMAC_SHA256, tag.as_ref())
}

/// `x-amz-date` for a time: ISO 8601 basic format in UTC, `YYYYMMDD'T'HHMMSS'Z'`.
///
/// # Errors
/// [`SigningError::TimeOutOfRange`] past the year 9999.
pub fn amz_date(time_unix: u64) -> Result<String, SigningError> {
    let days = time_unix / 86_400;
    let secs = time_unix % 86_400;
    let (y, m, d) = civil_from_days(days);
    if y > 9999 {
        return Err(SigningError::TimeOutOfRange(time_unix));
    }
    Ok(format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    ))
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// RFC 9110 token characters, for the method.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Appends `bytes` percent-encoded: everything but the unreserved characters (and `/` when
/// `keep_slash`), upper-case hex as AWS requires.
fn push_encoded(out: &mut String, bytes: &[u8], keep_slash: bool) {
    for &b in bytes {
        if is_unreserved(b) || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

fn canonical_uri(out: &mut String, path: &str, settings: &SigningSettings) {
    let normalized;
    let path = if settings.normalize_path {
        normalized = normalize_path(path);
        normalized.as_str()
    } else if path.is_empty() {
        "/"
    } else {
        path
    };
    if settings.encode_path {
        push_encoded(out, path.as_bytes(), true);
    } else {
        out.push_str(path);
    }
}

/// The path without empty, `.` and `..` segments, starting with `/` and ending with one when
/// it did (aws-c-auth's `s_append_normalized_path`).
fn normalize_path(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for s in path.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(path.len() + 1);
    out.push('/');
    out.push_str(&segments.join("/"));
    if path.ends_with('/') && !segments.is_empty() {
        out.push('/');
    }
    out
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays as it is.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hi = (b[i + 1] as char).to_digit(16);
            let lo = (b[i + 2] as char).to_digit(16);
            if let (Some(hi), Some(lo)) = (hi, lo) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn canonical_query(out: &mut String, query: &str) {
    if query.is_empty() {
        return;
    }
    let mut params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let mut ek = String::with_capacity(k.len());
            push_encoded(&mut ek, &percent_decode(k), false);
            let mut ev = String::with_capacity(v.len());
            push_encoded(&mut ev, &percent_decode(v), false);
            (ek, ev)
        })
        .collect();
    params.sort();
    for (i, (k, v)) in params.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
}

/// A header value trimmed, with each run of whitespace inside (folded lines included) made
/// one space.
fn push_header_value(out: &mut String, value: &str) {
    let mut first = true;
    for w in value.split([' ', '\t', '\r', '\n']) {
        if w.is_empty() {
            continue;
        }
        if !first {
            out.push(' ');
        }
        first = false;
        out.push_str(w);
    }
}

/// Lower-case hex.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(amz_date(0).unwrap(), "19700101T000000Z");
        // 2015-08-30T12:36:00Z, the test suite's time.
        assert_eq!(amz_date(1_440_938_160).unwrap(), "20150830T123600Z");
        // A leap day, and the last second of a year.
        assert_eq!(amz_date(951_782_400).unwrap(), "20000229T000000Z");
        assert_eq!(amz_date(1_767_225_599).unwrap(), "20251231T235959Z");
        assert_eq!(
            amz_date(u64::MAX),
            Err(SigningError::TimeOutOfRange(u64::MAX))
        );
    }

    #[test]
    fn paths_are_normalized_and_encoded_again() {
        let s = SigningSettings::default();
        let uri = |p: &str| {
            let mut out = String::new();
            canonical_uri(&mut out, p, &s);
            out
        };
        assert_eq!(
            uri("/model/us.anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"),
            "/model/us.anthropic.claude-3-5-sonnet-20240620-v1%253A0/converse"
        );
        assert_eq!(uri(""), "/");
        assert_eq!(uri("/a/./b/../c//"), "/a/c/");
        assert_eq!(uri("/.."), "/");
        let raw = SigningSettings {
            normalize_path: false,
            encode_path: false,
            ..s
        };
        let mut out = String::new();
        canonical_uri(&mut out, "/a%3A/./b", &raw);
        assert_eq!(out, "/a%3A/./b");
    }

    #[test]
    fn percent_decoding_leaves_broken_escapes() {
        assert_eq!(percent_decode("a%20b"), b"a b");
        assert_eq!(percent_decode("%"), b"%");
        assert_eq!(percent_decode("%4"), b"%4");
        assert_eq!(percent_decode("%zz"), b"%zz");
        assert_eq!(percent_decode("%41%"), b"A%");
    }
}
