//! A cloud upstream's base URL: derived from its region (Bedrock) or location (Vertex AI) when
//! not given, and, when given as the cloud's own host, held to the same region or location, so
//! that requests are never signed for one region and sent to another (AWS refuses them as a
//! bad signature, far from the cause) or sent to a location the paths do not name.

use sluice_providers::vertex;

use super::*;
use crate::cloud::CloudAuth;

/// The base URL of upstream `path`: `base_url` as written, else the cloud's own endpoint.
pub(super) fn base_url(
    path: &str,
    base_url: Option<String>,
    cloud: Option<&CloudAuth>,
) -> Result<http::Uri, ConfigError> {
    let field = format!("{path}.base_url");
    let Some(text) = base_url else {
        let derived =
            match cloud {
                Some(CloudAuth::Bedrock(b)) => bedrock_base_url(&b.region),
                Some(CloudAuth::Vertex(v)) => vertex::base_url(&v.location),
                _ => return Err(ConfigError::new(
                    field,
                    "is required (only `provider = \"bedrock\"` and `\"vertex\"` derive it from \
                     their region or location); write e.g. base_url = \
                     \"http://127.0.0.1:9090/v1\"",
                )),
            };
        // The region and location were checked to be names, so the URL parses.
        return derived.parse().map_err(|e| {
            ConfigError::new(field, format!("the derived `{derived}` is not a URL ({e})"))
        });
    };
    // Only the syntax here: scheme, host, query and their fit with `protocol` are checked once,
    // by the connection layer.
    let base: http::Uri = text.parse().map_err(|e| {
        ConfigError::new(
            &field,
            format!("`{text}` is not a URL ({e}); write e.g. \"http://127.0.0.1:9090/v1\""),
        )
    })?;
    let host = base.host().unwrap_or_default().to_ascii_lowercase();
    match cloud {
        Some(CloudAuth::Bedrock(b)) => {
            if let Some(found) = aws_region_of(&host) {
                if found != b.region {
                    return Err(ConfigError::new(
                        field,
                        format!(
                            "`{text}` is in region {found} but requests are signed for region \
                             {}: set region = \"{found}\", or remove base_url to use {}",
                            b.region,
                            bedrock_base_url(&b.region)
                        ),
                    ));
                }
            }
        }
        Some(CloudAuth::Vertex(v)) => {
            if let Some(found) = vertex_location_of(&host) {
                if found != v.location {
                    return Err(ConfigError::new(
                        field,
                        format!(
                            "`{text}` serves location {found} but location is {}: set \
                             location = \"{found}\", or remove base_url to use {}",
                            v.location,
                            vertex::base_url(&v.location)
                        ),
                    ));
                }
            }
        }
        _ => {}
    }
    Ok(base)
}

/// Bedrock Runtime's regional endpoint.
pub(super) fn bedrock_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// The region an AWS host names (`bedrock-runtime.eu-west-3.amazonaws.com`,
/// `bedrock-runtime-fips.us-east-1.amazonaws.com`, a VPC endpoint's
/// `vpce-1.bedrock-runtime.us-east-1.vpce.amazonaws.com`): the label that has a region's
/// shape. `None` for other hosts (a proxy, the mock), whose region nothing here can know.
fn aws_region_of(host: &str) -> Option<&str> {
    let aws = [".amazonaws.com", ".amazonaws.com.cn"]
        .iter()
        .any(|s| host.ends_with(s));
    if !aws {
        return None;
    }
    host.split('.').find(|l| is_region(l))
}

/// `us-east-1`, `ap-southeast-2`, `us-gov-west-1`, `cn-north-1`: letters, dash-separated,
/// ending in a number.
fn is_region(label: &str) -> bool {
    let parts: Vec<&str> = label.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].bytes().all(|b| b.is_ascii_lowercase())
        && parts[1..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty()
}

/// The location a Vertex AI host serves: `{location}-aiplatform.googleapis.com`, or `global`
/// for `aiplatform.googleapis.com`. `None` for other hosts (Private Service Connect, a proxy,
/// the mock).
fn vertex_location_of(host: &str) -> Option<&str> {
    if host == "aiplatform.googleapis.com" {
        return Some("global");
    }
    host.strip_suffix("-aiplatform.googleapis.com")
        .filter(|l| !l.is_empty() && !l.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_and_locations_are_read_from_the_clouds_hosts_only() {
        for (host, region) in [
            ("bedrock-runtime.eu-west-3.amazonaws.com", Some("eu-west-3")),
            (
                "bedrock-runtime-fips.us-gov-west-1.amazonaws.com",
                Some("us-gov-west-1"),
            ),
            (
                "vpce-0a1.bedrock-runtime.us-east-1.vpce.amazonaws.com",
                Some("us-east-1"),
            ),
            (
                "bedrock-runtime.cn-north-1.amazonaws.com.cn",
                Some("cn-north-1"),
            ),
            ("bedrock.internal.example.com", None),
            ("127.0.0.1", None),
        ] {
            assert_eq!(aws_region_of(host), region, "{host}");
        }
        for (host, location) in [
            ("us-central1-aiplatform.googleapis.com", Some("us-central1")),
            ("aiplatform.googleapis.com", Some("global")),
            (
                "europe-west4-aiplatform.googleapis.com",
                Some("europe-west4"),
            ),
            ("vertex.p.googleapis.com", None),
            ("localhost", None),
        ] {
            assert_eq!(vertex_location_of(host), location, "{host}");
        }
    }
}
