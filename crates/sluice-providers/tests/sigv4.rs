//! SigV4 against the AWS signing test suite (`tests/fixtures/sigv4/`, see its README): for each
//! case, the canonical request, the string to sign, the signature and the `Authorization`
//! header of the signed request, each compared on its own so a failure names the stage.

use std::path::{Path, PathBuf};

use sluice_providers::sign::credentials::Credentials;
use sluice_providers::sign::sigv4::{
    sign, SessionToken, SignableBody, SignableRequest, SigningError, SigningParams, SigningSettings,
};

/// SHA-256 of the empty string: the suite's payload hash when the body is not signed.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Case {
    name: String,
    method: String,
    uri: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    credentials: Credentials,
    region: String,
    service: String,
    time_unix: u64,
    settings: SigningSettings,
    sign_body: bool,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sigv4")
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2015-08-30T12:36:00Z`.
fn parse_time(s: &str) -> u64 {
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().unwrap();
    let days = days_from_civil(n(0..4), n(5..7), n(8..10));
    (days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)) as u64
}

fn load(name: &str) -> Case {
    let d = dir().join(name);
    let ctx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("context.json")).unwrap()).unwrap();
    let raw = std::fs::read(d.join("request.txt")).unwrap();
    // Headers end at the first blank line; the body is everything after it.
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = match text.split_once("\n\n") {
        Some((h, b)) => (h.to_string(), b.as_bytes().to_vec()),
        None => (text.trim_end_matches('\n').to_string(), Vec::new()),
    };
    let mut lines = head.lines();
    let first = lines.next().unwrap();
    let (method, rest) = first.split_once(' ').unwrap();
    let uri = rest.strip_suffix(" HTTP/1.1").unwrap();
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            // A folded line continues the previous header's value.
            let last = headers.last_mut().unwrap();
            last.1.push('\n');
            last.1.push_str(line);
        } else {
            let (n, v) = line.split_once(':').unwrap();
            headers.push((n.to_string(), v.to_string()));
        }
    }
    let c = &ctx["credentials"];
    let s = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    Case {
        name: name.to_string(),
        method: method.to_string(),
        uri: uri.to_string(),
        headers,
        body,
        credentials: Credentials::new(
            s(&c["access_key_id"]),
            s(&c["secret_access_key"]),
            c.get("token").map(s),
        ),
        region: s(&ctx["region"]),
        service: s(&ctx["service"]),
        time_unix: parse_time(ctx["timestamp"].as_str().unwrap()),
        settings: SigningSettings {
            normalize_path: ctx["normalize"].as_bool().unwrap(),
            encode_path: true,
            session_token: if ctx["omit_session_token"].as_bool() == Some(true) {
                SessionToken::AddedAfter
            } else {
                SessionToken::Signed
            },
            content_sha256_header: ctx["sign_body"].as_bool().unwrap(),
        },
        sign_body: ctx["sign_body"].as_bool().unwrap(),
    }
}

fn expected(name: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(dir().join(name).join(file)).ok()
}

fn cases() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            e.file_type()
                .unwrap()
                .is_dir()
                .then(|| e.file_name().into_string().unwrap())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn the_aws_signing_test_suite() {
    let names = cases();
    assert!(names.len() >= 30, "the suite is there: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let case = load(name);
        let headers: Vec<(&str, &str)> = case
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let req = SignableRequest {
            method: &case.method,
            uri: &case.uri,
            headers: &headers,
            body: if case.sign_body {
                SignableBody::Bytes(&case.body)
            } else {
                SignableBody::Precomputed(EMPTY_SHA256)
            },
        };
        let params = SigningParams {
            credentials: &case.credentials,
            region: &case.region,
            service: &case.service,
            time_unix: case.time_unix,
            settings: case.settings,
        };
        let sig = sign(&req, &params).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let stages = [
            ("header-canonical-request.txt", &sig.canonical_request),
            ("header-string-to-sign.txt", &sig.string_to_sign),
            ("header-signature.txt", &sig.signature),
        ];
        for (file, got) in stages {
            let want = expected(name, file).unwrap_or_else(|| panic!("{name}/{file}"));
            if want.trim_end() != got.as_str() {
                failures.push(format!(
                    "{name} {file}:\n--- want\n{want}\n--- got\n{got}\n"
                ));
            }
        }
        let signed = expected(name, "header-signed-request.txt").unwrap();
        let want_auth = signed
            .lines()
            .find_map(|l| l.strip_prefix("Authorization:"))
            .unwrap();
        if want_auth != sig.authorization {
            failures.push(format!(
                "{name} authorization: {want_auth} != {}",
                sig.authorization
            ));
        }
        // The headers to add carry exactly the signed request's new headers.
        let auth = sig
            .headers
            .iter()
            .find(|(n, _)| n == http::header::AUTHORIZATION)
            .unwrap();
        assert!(auth.1.is_sensitive());
        assert_eq!(auth.1.to_str().unwrap(), sig.authorization);
        let token = sig
            .headers
            .iter()
            .find(|(n, _)| n.as_str() == "x-amz-security-token");
        assert_eq!(
            token.map(|t| t.1.to_str().unwrap()),
            case.credentials.session_token(),
            "{name}"
        );
        assert!(token.is_none_or(|t| t.1.is_sensitive()));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bedrock_paths_are_signed_double_encoded() {
    let creds = Credentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
    );
    let headers = [
        ("Host", "bedrock-runtime.us-east-1.amazonaws.com"),
        ("Content-Type", "application/json"),
    ];
    let sig = sign(
        &SignableRequest {
            method: "POST",
            uri: "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse",
            headers: &headers,
            body: SignableBody::Bytes(b"{}"),
        },
        &SigningParams {
            credentials: &creds,
            region: "us-east-1",
            service: "bedrock",
            time_unix: 1_767_225_600,
            settings: SigningSettings::default(),
        },
    )
    .unwrap();
    let uri_line = sig.canonical_request.lines().nth(1).unwrap();
    assert_eq!(
        uri_line,
        "/model/arn%253Aaws%253Abedrock%253Aus-east-1%253A123456789012%253Ainference-profile%252Fus.anthropic.claude-3-5-sonnet-20240620-v1%253A0/converse"
    );
    assert!(sig
        .authorization
        .starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature="));
    // The stages never hold the secret.
    for s in [
        &sig.canonical_request,
        &sig.string_to_sign,
        &sig.authorization,
    ] {
        assert!(!s.contains("wJalrXUtnFEMI"));
    }
}

#[test]
fn refusals() {
    let creds = Credentials::new("AKID", "secret", Some("bad\ntoken".into()));
    let params = SigningParams {
        credentials: &creds,
        region: "us-east-1",
        service: "bedrock",
        time_unix: 0,
        settings: SigningSettings::default(),
    };
    let req =
        |headers: &'static [(&'static str, &'static str)], method: &'static str| SignableRequest {
            method,
            uri: "/",
            headers,
            body: SignableBody::Bytes(b""),
        };
    assert_eq!(
        sign(&req(&[], "GET"), &params).unwrap_err(),
        SigningError::MissingHost
    );
    assert!(matches!(
        sign(&req(&[("host", "h")], "GE T"), &params).unwrap_err(),
        SigningError::InvalidMethod(_)
    ));
    let e = sign(&req(&[("host", "h")], "GET"), &params).unwrap_err();
    assert_eq!(e, SigningError::InvalidHeaderValue("x-amz-security-token"));
    assert!(
        !e.to_string().contains("bad"),
        "no secret in the message: {e}"
    );
}
