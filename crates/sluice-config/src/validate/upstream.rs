//! `[[upstream]]`: auth, provider, timeouts, pool, health checks and retry budget.

use super::*;

pub(super) fn upstream_config(
    path: &str,
    raw: RawUpstream,
    ctx: &mut Ctx<'_>,
) -> Result<UpstreamConfig, ConfigError> {
    let RawUpstream {
        name,
        base_url,
        protocol,
        auth,
        ca_file,
        session_header_to_body,
        timeouts,
        pool,
        retry_budget,
        provider,
        api_version,
        anthropic_version,
        prefill,
        health_check,
        region,
        aws_profile,
        project,
        location,
        credentials_file,
        invoke_model,
    } = raw;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(ConfigError::new(
            format!("{path}.name"),
            "must be non-empty and use only letters, digits, `-`, `_` and `.`",
        ));
    }
    let entra = matches!(auth, Some(RawAuth::Entra {}));
    let other_auth = !matches!(
        auth,
        None | Some(RawAuth::Passthrough {}) | Some(RawAuth::Entra {})
    );
    let cloud = super::cloud::cloud_auth(
        path,
        super::cloud::RawCloud {
            provider,
            entra,
            other_auth,
            region,
            aws_profile,
            project,
            location,
            credentials_file,
            invoke_model,
        },
        ctx,
    )?;
    let base = super::cloud_url::base_url(path, base_url, cloud.as_ref())?;
    if cloud.is_some() && health_check.is_some() {
        return Err(ConfigError::new(
            format!("{path}.health_check"),
            "active health checks are sent without a signature or token, so a cloud upstream              would refuse them: remove it (passive outlier ejection still applies)",
        ));
    }
    let auth = match auth {
        None | Some(RawAuth::Passthrough {}) | Some(RawAuth::Entra {}) => UpstreamAuth::Passthrough,
        Some(RawAuth::Bearer { env }) => UpstreamAuth::Bearer {
            secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
        },
        Some(RawAuth::Header { header, env }) => UpstreamAuth::Header {
            name: header_name(&format!("{path}.auth.header"), &header)?,
            secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
        },
        Some(RawAuth::ApiKey { env }) => UpstreamAuth::ApiKey {
            secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
        },
    };
    let provider = provider_kind(path, provider, api_version, anthropic_version)?;
    if let (Some(p), UpstreamAuth::ApiKey { secret }) = (&provider, &auth) {
        if p.auth_headers(secret).is_err() {
            return Err(ConfigError::new(
                format!("{path}.auth.env"),
                "the key holds a character a header cannot carry (a newline or control \
                 character)",
            ));
        }
    }
    let session_header_to_body = match session_header_to_body {
        None => None,
        Some(RawSessionHeader {
            header,
            json_pointer,
        }) => {
            let header = header_name(&format!("{path}.session_header_to_body.header"), &header)?;
            if !json_pointer.starts_with('/') || json_pointer.len() < 2 {
                return Err(ConfigError::new(
                    format!("{path}.session_header_to_body.json_pointer"),
                    "must be a JSON pointer into the body, e.g. \"/session_id\"",
                ));
            }
            Some(SessionHeaderToBody {
                header,
                json_pointer,
            })
        }
    };
    let timeouts = timeouts_config(path, timeouts.unwrap_or_default())?;
    let (pool, long_max_tokens) = pool_config(path, pool.unwrap_or_default())?;
    let retry_budget = budget_config(
        &format!("{path}.retry_budget"),
        retry_budget.unwrap_or_default(),
    )?;
    let config = UpstreamConfig {
        name,
        base_url: base,
        protocol: protocol.unwrap_or(UpstreamProtocol::Auto),
        auth,
        ca_file,
        session_header_to_body,
        timeouts,
        pool,
        long_max_tokens,
        retry_budget,
        prefill: prefill.unwrap_or(matches!(
            provider,
            Some(sluice_providers::ProviderKind::Anthropic { .. })
        )),
        provider,
        cloud,
        health_check: health_check
            .map(|h| health_check_config(&format!("{path}.health_check"), h))
            .transpose()?,
    };
    // The connection layer checks its own settings (scheme and protocol, pool sizes, windows,
    // ca_file); building it opens nothing, so check-config and startup reject exactly the same
    // things.
    let mut settings = config.upstream_settings();
    let ca_path = format!("{path}.ca_file");
    if let Some(u) = ctx.unresolved_at(&ca_path) {
        let var = u.var.clone();
        ctx.warn(
            &ca_path,
            format!("not checked: the file's path needs `{var}`, which is not set (--skip-env)"),
        );
        settings.ca_file = None;
    }
    if let Err(e) = sluice_upstream::Upstream::new(settings.clone()) {
        return Err(upstream_error(path, e));
    }
    if let Some(ca) = &settings.ca_file {
        if let Ok(certs) = crate::tls::read_certs(ca) {
            for w in crate::tls::expiry_warnings(ca, &certs, ctx.now) {
                ctx.warn(&ca_path, w);
            }
        }
    }
    Ok(config)
}

/// The connection layer's verdict, at the field it concerns.
fn upstream_error(path: &str, e: sluice_upstream::UpstreamConfigError) -> ConfigError {
    use sluice_upstream::UpstreamConfigError as E;
    let at = |field: &str| format!("{path}.{field}");
    match e {
        E::BaseUrl { url, reason, .. } if reason.starts_with("protocol") => ConfigError::new(
            at("protocol"),
            format!("{} (base_url is `{url}`)", reason.to_lowercase()),
        ),
        E::BaseUrl { url, reason, .. } => ConfigError::new(
            at("base_url"),
            format!("`{url}`: {reason}; write e.g. \"http://127.0.0.1:9090/v1\""),
        ),
        E::Field { field, reason, .. } => {
            let field = match field {
                "connect_timeout" => "timeouts.connect",
                other => other,
            };
            ConfigError::new(at(field), reason)
        }
        E::Pool { field, reason, .. } => ConfigError::new(at(&field), reason),
        E::CaFile {
            path: file, reason, ..
        } => ConfigError::new(at("ca_file"), format!("{file}: {reason}")),
    }
}

/// `provider` with its per-provider settings: `api_version` for Azure (required),
/// `anthropic_version` for Anthropic (default `2023-06-01`).
fn provider_kind(
    path: &str,
    provider: Option<ProviderName>,
    api_version: Option<String>,
    anthropic_version: Option<String>,
) -> Result<Option<sluice_providers::ProviderKind>, ConfigError> {
    use sluice_providers::ProviderKind as K;
    let stray = |field: &str, for_: &str| {
        ConfigError::new(
            format!("{path}.{field}"),
            format!("only applies to `provider = \"{for_}\"`; remove it"),
        )
    };
    if api_version.is_some() && provider != Some(ProviderName::Azure) {
        return Err(stray("api_version", "azure"));
    }
    if anthropic_version.is_some() && provider != Some(ProviderName::Anthropic) {
        return Err(stray("anthropic_version", "anthropic"));
    }
    Ok(match provider {
        // Not a wire format of their own: see `UpstreamConfig::cloud`.
        None | Some(ProviderName::Bedrock | ProviderName::Vertex) => None,
        Some(ProviderName::Openai) => Some(K::OpenAi),
        Some(ProviderName::Gemini) => Some(K::Gemini),
        Some(ProviderName::Azure) => {
            let api_version = api_version.filter(|v| !v.is_empty()).ok_or_else(|| {
                ConfigError::new(
                    format!("{path}.api_version"),
                    "Azure OpenAI needs the api-version query, e.g. api_version = \"2024-10-21\"",
                )
            })?;
            Some(K::Azure { api_version })
        }
        Some(ProviderName::Anthropic) => {
            let version = anthropic_version
                .unwrap_or_else(|| sluice_providers::provider::DEFAULT_ANTHROPIC_VERSION.into());
            if http::HeaderValue::from_str(&version).is_err() {
                return Err(ConfigError::new(
                    format!("{path}.anthropic_version"),
                    "is not a valid header value",
                ));
            }
            Some(K::Anthropic { version })
        }
    })
}

fn header_name(path: &str, h: &str) -> Result<http::HeaderName, ConfigError> {
    http::HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes())
        .map_err(|_| ConfigError::new(path, format!("`{h}` is not a header name")))
}

fn timeouts_config(path: &str, raw: RawTimeouts) -> Result<Timeouts, ConfigError> {
    let RawTimeouts {
        connect,
        first_byte,
        first_token,
        idle,
        total,
    } = raw;
    let t = |field: &str, v, d| duration(&format!("{path}.timeouts.{field}"), v, d);
    let first_byte = t("first_byte", first_byte, Duration::from_secs(60))?;
    let timeouts = Timeouts {
        connect: t("connect", connect, Duration::from_secs(5))?,
        first_byte,
        first_token: t("first_token", first_token, first_byte)?,
        // Reasoning models are silent for minutes mid-stream (see the README's "Limits and
        // timeouts"); a dead HTTP/2 upstream is caught sooner by the pool's PING.
        idle: t("idle", idle, Duration::from_secs(300))?,
        total: t("total", total, Duration::from_secs(600))?,
    };
    for (field, d) in [
        ("connect", timeouts.connect),
        ("first_byte", timeouts.first_byte),
        ("first_token", timeouts.first_token),
        ("idle", timeouts.idle),
    ] {
        if d > timeouts.total {
            return Err(ConfigError::new(
                format!("{path}.timeouts.{field}"),
                format!(
                    "{} is longer than total ({}); it could never fire",
                    humantime::format_duration(d),
                    humantime::format_duration(timeouts.total)
                ),
            ));
        }
    }
    Ok(timeouts)
}

fn pool_config(
    path: &str,
    raw: RawPool,
) -> Result<(sluice_upstream::PoolConfig, u64), ConfigError> {
    use sluice_upstream::{Lane, LaneConfig, PoolConfig};
    let RawPool {
        stream,
        short,
        ping_interval,
        degraded_rtt_factor,
        degraded_rtt_floor,
        stall_timeout,
        max_connection_age,
        max_requests_per_connection,
        idle_timeout,
        long_max_tokens,
        dns_refresh,
    } = raw;
    let d = PoolConfig::default();
    let lane = |name: &str, kind: Lane, raw: Option<RawLane>| -> Result<LaneConfig, ConfigError> {
        let def = LaneConfig::default_for(kind);
        let RawLane {
            min_connections,
            max_connections,
            max_streams_per_connection,
            max_pending,
            acquire_timeout,
        } = raw.unwrap_or_default();
        Ok(LaneConfig {
            min_connections: min_connections.unwrap_or(def.min_connections),
            max_connections: max_connections.or(def.max_connections),
            max_streams_per_connection: max_streams_per_connection
                .unwrap_or(def.max_streams_per_connection),
            max_pending: max_pending.unwrap_or(def.max_pending),
            acquire_timeout: duration(
                &format!("{path}.pool.{name}.acquire_timeout"),
                acquire_timeout,
                def.acquire_timeout,
            )?,
        })
    };
    let p = |field: &str| format!("{path}.pool.{field}");
    let pool = PoolConfig {
        stream: lane("stream", Lane::Stream, stream)?,
        short: lane("short", Lane::Short, short)?,
        ping_interval: duration(&p("ping_interval"), ping_interval, d.ping_interval)?,
        degraded_rtt_factor: degraded_rtt_factor.unwrap_or(d.degraded_rtt_factor),
        degraded_rtt_floor: duration(
            &p("degraded_rtt_floor"),
            degraded_rtt_floor,
            d.degraded_rtt_floor,
        )?,
        stall_timeout: duration(&p("stall_timeout"), stall_timeout, d.stall_timeout)?,
        max_connection_age: match max_connection_age {
            None => None,
            v => Some(duration(&p("max_connection_age"), v, Duration::ZERO)?),
        },
        max_requests_per_connection,
        idle_timeout: duration(&p("idle_timeout"), idle_timeout, d.idle_timeout)?,
        dns_refresh: duration(&p("dns_refresh"), dns_refresh, d.dns_refresh)?,
    };
    Ok((pool, long_max_tokens.unwrap_or(4096)))
}

fn health_check_config(
    path: &str,
    raw: RawHealthCheck,
) -> Result<sluice_upstream::HealthCheckConfig, ConfigError> {
    let RawHealthCheck {
        path: check_path,
        interval,
        timeout,
        healthy_threshold,
        unhealthy_threshold,
    } = raw;
    let d = sluice_upstream::HealthCheckConfig::default();
    let check_path = check_path.unwrap_or(d.path.clone());
    if !check_path.starts_with('/') {
        return Err(ConfigError::new(
            format!("{path}.path"),
            "must start with `/` (it is below the base_url, e.g. \"/models\")",
        ));
    }
    for (field, v) in [
        ("healthy_threshold", healthy_threshold),
        ("unhealthy_threshold", unhealthy_threshold),
    ] {
        if v == Some(0) {
            return Err(ConfigError::new(
                format!("{path}.{field}"),
                "must be at least 1",
            ));
        }
    }
    Ok(sluice_upstream::HealthCheckConfig {
        interval: duration(&format!("{path}.interval"), interval, d.interval)?,
        timeout: duration(&format!("{path}.timeout"), timeout, d.timeout)?,
        path: check_path,
        healthy_threshold: healthy_threshold.unwrap_or(d.healthy_threshold),
        unhealthy_threshold: unhealthy_threshold.unwrap_or(d.unhealthy_threshold),
        ..d
    })
}

fn budget_config(path: &str, raw: RawBudget) -> Result<crate::BudgetConfig, ConfigError> {
    let RawBudget {
        ratio,
        min_per_second,
    } = raw;
    let d = crate::BudgetConfig::default();
    let ratio = ratio.unwrap_or(d.ratio);
    if !(ratio.is_finite() && (0.0..=10.0).contains(&ratio)) {
        return Err(ConfigError::new(
            format!("{path}.ratio"),
            "must be a number from 0 to 10 (retries per request over 10 s)",
        ));
    }
    Ok(crate::BudgetConfig {
        ratio,
        min_per_second: min_per_second.unwrap_or(d.min_per_second),
    })
}
