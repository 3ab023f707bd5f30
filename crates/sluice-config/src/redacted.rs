//! The configuration as it may be shown (`GET /admin/config`): every default filled in,
//! secrets redacted; and its fingerprint (to tell which config a gateway runs, e.g. after a
//! reload, and what a reload changed).
//!
//! The gateway's own config types are taken apart by exhaustive destructuring, so a new
//! field (possibly a secret) cannot reach this output without someone deciding how it shows.

use serde_json::{json, Value};

use crate::{
    Config, KeyConfig, Limits, OnClientDisconnect, RateLimit, RouteConfig, ServerConfig,
    StateSettings, TargetConfig, TelemetryConfig, Timeouts, UpstreamAuth, UpstreamConfig,
    UpstreamProtocol,
};

/// What replaces a secret.
const REDACTED: &str = "<redacted>";

impl Config {
    /// The config with every default filled in and every secret redacted, as JSON.
    pub fn redacted(&self) -> Value {
        config_json(self)
    }

    /// `sha256:<hex>` of [`Config::redacted`]'s JSON text: equal configs give equal
    /// fingerprints; secret values are not part of it.
    pub fn fingerprint(&self) -> String {
        fingerprint_of(&self.redacted())
    }

    /// `{ "hash": <fingerprint>, "config": <redacted> }`: what `GET /admin/config` answers.
    pub fn view(&self) -> Value {
        let body = self.redacted();
        json!({ "hash": fingerprint_of(&body), "config": body })
    }
}

impl UpstreamConfig {
    /// This upstream's part of [`Config::redacted`]: two upstreams with equal views have
    /// the same settings.
    pub fn redacted(&self) -> Value {
        upstream_json(self)
    }
}

impl RouteConfig {
    /// This route's part of [`Config::redacted`] (`upstreams` names its targets).
    pub fn redacted(&self, upstreams: &[UpstreamConfig]) -> Value {
        route_json(self, upstreams)
    }
}

impl StateSettings {
    /// `[state]`'s part of [`Config::redacted`] (the Redis URL without its password).
    pub fn redacted(&self) -> Value {
        state_json(self)
    }
}

fn fingerprint_of(redacted: &Value) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, redacted.to_string().as_bytes());
    format!("sha256:{}", hex::encode(d.as_ref()))
}

fn dur(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn config_json(c: &Config) -> Value {
    let Config {
        server,
        upstreams,
        routes,
        telemetry,
        keys,
        prices,
        state,
        mcp,
        ledger,
        teams,
        guardrails,
    } = c;
    let mut out = json!({
        "server": server_json(server),
        "upstream": upstreams.iter().map(upstream_json).collect::<Vec<_>>(),
        "route": routes.iter().map(|r| route_json(r, upstreams)).collect::<Vec<_>>(),
        "telemetry": telemetry_json(telemetry),
        "key": keys.iter().map(|k| key_json(k, routes)).collect::<Vec<_>>(),
        "price": prices.iter().map(|p| json!({
            "models": p.models,
            "input": p.input,
            "output": p.output,
            "cached_input": p.cached_input,
        })).collect::<Vec<_>>(),
        "state": state_json(state),
    });
    // Only when configured: configs without `[mcp]` keep the fingerprints they had.
    if mcp.is_enabled() || !mcp.grants.is_empty() || !mcp.limits.is_empty() {
        out["mcp"] = mcp.redacted();
    }
    // Likewise `[ledger]`, and a price's new fields only when they differ from their defaults.
    if let Some(l) = ledger {
        out["ledger"] = ledger_json(l);
    }
    if !teams.is_empty() {
        out["team"] = teams
            .iter()
            .map(|t| {
                json!({
                    "id": t.id,
                    "limits": limits_json(&t.limits),
                    "budget": t.budget.map(|b| json!({
                        "limit": b.limit_micros as f64 / 1e6,
                        "per": dur(b.per),
                    })),
                })
            })
            .collect();
    }
    // Only when configured: configs without guardrails keep the fingerprints they had.
    if !guardrails.is_empty() {
        out["guardrail"] = guardrails.iter().map(guardrail_json).collect();
        for (r, v) in routes
            .iter()
            .zip(out["route"].as_array_mut().into_iter().flatten())
        {
            if !r.guardrails.is_empty() {
                v["guardrails"] = r
                    .guardrails
                    .iter()
                    .map(|&i| Value::from(guardrails[i].name.clone()))
                    .collect();
            }
        }
        for (k, v) in keys
            .iter()
            .zip(out["key"].as_array_mut().into_iter().flatten())
        {
            if !k.guardrails.is_empty() {
                v["guardrails"] = k
                    .guardrails
                    .iter()
                    .map(|&i| Value::from(guardrails[i].name.clone()))
                    .collect();
            }
        }
    }
    for (p, v) in prices
        .iter()
        .zip(out["price"].as_array_mut().into_iter().flatten())
    {
        let r = &p.rates;
        if r.cache_write_5m != r.input {
            v["cache_write"] = rate(r.cache_write_5m);
        }
        if r.reasoning != r.output {
            v["reasoning"] = rate(r.reasoning);
        }
    }
    out
}

/// A guardrail: its settings, an external checker's header names (their values may be
/// credentials) and never its rules' text.
fn guardrail_json(g: &crate::GuardrailConfig) -> Value {
    let stage = match (g.input, g.output) {
        (true, true) => "both",
        (true, false) => "input",
        _ => "output",
    };
    let mut v = json!({ "name": g.name, "stage": stage });
    match &g.kind {
        crate::GuardrailKind::Rules(r) => {
            v["kind"] = "rules".into();
            v["window"] = r.window.into();
            v["max_prompt_tokens"] = r.max_prompt_tokens.into();
            v["models"] = r.models.clone().into();
        }
        crate::GuardrailKind::Http(h) => {
            v["kind"] = "http".into();
            v["url"] = h.url.to_string().into();
            v["headers"] = h
                .headers
                .iter()
                .map(|(k, _)| Value::from(format!("{k}: {REDACTED}")))
                .collect();
            v["timeout"] = dur(h.timeout).into();
            v["max_in_flight"] = h.max_in_flight.into();
            v["on_error"] = match h.on_error {
                crate::OnError::Allow => "allow",
                crate::OnError::Deny => "deny",
            }
            .into();
        }
    }
    v
}

/// A price as dollars per million tokens (`2.5`).
fn rate(r: Option<sluice_ledger::Rate>) -> Value {
    r.map_or(Value::Null, |r| json!(r.0 as f64 / 1e6))
}

fn ledger_json(l: &sluice_ledger::LedgerConfig) -> Value {
    use sluice_ledger::SinkConfig;
    let sluice_ledger::LedgerConfig {
        sink,
        queue_capacity,
        batch_size,
        flush_interval,
        write_timeout,
        capture,
    } = l;
    let sink = match sink {
        SinkConfig::Sqlite(s) => json!({
            "kind": "sqlite",
            "path": s.path.display().to_string(),
            "retention_days": s.retention_days,
            "max_bytes": s.max_bytes,
        }),
        SinkConfig::Postgres(p) => json!({
            "kind": "postgres",
            "url": REDACTED,
            "pool_size": p.pool_size,
            "connect_timeout": dur(p.connect_timeout),
        }),
        SinkConfig::Otlp => json!({ "kind": "otlp" }),
        SinkConfig::None => json!({ "kind": "none" }),
    };
    json!({
        "sink": sink,
        "queue_capacity": queue_capacity,
        "batch_size": batch_size,
        "flush_interval": dur(*flush_interval),
        "write_timeout": dur(*write_timeout),
        "capture": {
            "enabled": capture.enabled,
            "routes": capture.routes,
            "sample_rate": capture.sample_rate,
            "max_bytes": capture.max_bytes,
        },
    })
}

fn limits_json(l: &Limits) -> Value {
    let rate = |r: &Option<RateLimit>| r.map(|r| json!({ "limit": r.limit, "per": dur(r.per) }));
    json!({
        "requests": rate(&l.requests),
        "tokens": rate(&l.tokens),
        "concurrency": l.concurrency,
    })
}

/// A key without its hash: the hash names the secret, so it stays in the file.
fn key_json(k: &KeyConfig, routes: &[RouteConfig]) -> Value {
    let KeyConfig {
        id,
        hash: _,
        owner,
        team,
        revoked,
        routes: allowed,
        models,
        limits,
        budget,
        model_limits,
        // Shown by `config_json`, which has their names.
        guardrails: _,
    } = k;
    json!({
        "id": id,
        "hash": REDACTED,
        "owner": owner,
        "team": team,
        "revoked": revoked,
        "routes": allowed.as_ref().map(|a| a.iter()
            .filter_map(|i| routes.get(*i).map(|r| r.name.as_str()))
            .collect::<Vec<_>>()),
        "models": models,
        "limits": limits_json(limits),
        "budget": budget.map(|b| json!({
            "limit": b.limit_micros as f64 / 1e6,
            "per": dur(b.per),
        })),
        "model_limits": model_limits.iter().map(|m| json!({
            "models": m.models,
            "limits": limits_json(&m.limits),
        })).collect::<Vec<_>>(),
    })
}

fn state_json(s: &StateSettings) -> Value {
    let store = &s.store;
    let backend = match &store.backend {
        sluice_state::BackendConfig::Memory => json!({ "kind": "memory" }),
        sluice_state::BackendConfig::Redis(r) => json!({
            "kind": "redis",
            "url": r.redacted_url(),
            "prefix": r.prefix,
            "call_timeout": dur(r.call_timeout),
            "connect_timeout": dur(r.connect_timeout),
            "on_failure": r.on_failure.as_str(),
            "trip_after": r.trip_after,
            "probe_interval": dur(r.probe_interval),
            "lease_ttl": dur(r.lease_ttl),
        }),
    };
    let i = &store.idempotency;
    json!({
        "backend": backend,
        "max_entries": store.memory.max_entries,
        "idempotency": {
            "replay_ttl": dur(s.replay_ttl),
            "max_response_bytes": i.max_response_bytes,
            "in_flight_ttl": dur(i.in_flight_ttl),
            "max_records": i.max_records,
        },
        "cache": {
            "max_entries": s.cache.max_entries,
            "max_bytes": s.cache.max_bytes,
            "put_queue": s.cache.put_queue,
            "max_queued_bytes": s.cache.max_queued_bytes,
        },
    })
}

fn server_json(s: &ServerConfig) -> Value {
    let ServerConfig {
        listen,
        tls,
        heartbeat,
        max_request_body,
        max_response_body,
        shutdown_grace,
        max_event_bytes,
        server_timing,
        access_log,
        access_log_queue,
        log_format,
        log_level,
        admin_listen: _,
        admin_token,
        max_connections,
        max_connections_per_ip,
        workers,
        max_header_bytes,
        max_concurrent_streams,
        resumable_streams,
        resumable_log_bytes,
        max_connection_request_rate,
        memory_budget,
        trusted_proxies,
        client_timeouts,
        client_resets,
    } = s;
    json!({
        "listen": listen.to_string(),
        "tls": tls.as_ref().map(|t| json!({
            "cert": t.cert.display().to_string(),
            "key": t.key.display().to_string(),
        })),
        "heartbeat": dur(*heartbeat),
        "max_request_body": max_request_body,
        "max_response_body": max_response_body,
        "shutdown_grace": dur(*shutdown_grace),
        "max_event_bytes": max_event_bytes,
        "server_timing": server_timing,
        "access_log": match access_log {
            crate::AccessLogSink::Stdout => "stdout".to_string(),
            crate::AccessLogSink::Off => "off".to_string(),
            crate::AccessLogSink::File(p) => p.display().to_string(),
        },
        "access_log_queue": access_log_queue,
        "log_format": match log_format {
            crate::LogFormat::Text => "text",
            crate::LogFormat::Json => "json",
        },
        "log_level": log_level,
        "admin_listen": s.admin_addr().to_string(),
        "admin_token": admin_token.as_ref().map(|_| REDACTED),
        "max_connections": max_connections,
        "max_connections_per_ip": max_connections_per_ip,
        "workers": workers,
        "max_header_bytes": max_header_bytes,
        "max_concurrent_streams": max_concurrent_streams,
        "resumable_streams": resumable_streams,
        "resumable_log_bytes": resumable_log_bytes,
        "max_connection_request_rate": max_connection_request_rate,
        "memory_budget": memory_budget,
        "trusted_proxies": trusted_proxies.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "client_timeouts": {
            "header": dur(client_timeouts.header),
            "body_idle": dur(client_timeouts.body_idle),
            "body": dur(client_timeouts.body),
            "keep_alive": dur(client_timeouts.keep_alive),
            "send": dur(client_timeouts.send),
        },
        "client_resets": {
            "per_connection": client_resets.per_connection,
            "per_ip": client_resets.per_ip,
            "window": dur(client_resets.window),
            "block": dur(client_resets.block),
        },
    })
}

/// A cloud's settings without its secrets (the AWS access key id and the service account
/// identify, they do not authenticate).
fn cloud_json(c: &crate::CloudAuth) -> Value {
    use crate::CloudAuth;
    match c {
        CloudAuth::Bedrock(b) => json!({
            "type": "bedrock",
            "region": b.region,
            "access_key_id": b.credentials.as_ref().map(|c| c.access_key_id()),
            "credentials": b.source,
            "invoke_model": b.invoke_model,
        }),
        CloudAuth::Vertex(v) => json!({
            "type": "vertex",
            "project": v.project,
            "location": v.location,
            "credentials_file": v.key_file.display().to_string(),
            "client_email": v.key.as_ref().map(|k| k.client_email()),
        }),
        CloudAuth::Entra(e) => json!({
            "type": "entra",
            "tenant_id": e.credentials.as_ref().map(|c| c.tenant_id()),
            "client_id": e.credentials.as_ref().map(|c| c.client_id()),
            "client_secret": REDACTED,
        }),
    }
}

fn upstream_json(u: &UpstreamConfig) -> Value {
    let UpstreamConfig {
        name,
        base_url,
        protocol,
        auth,
        ca_file,
        session_header_to_body,
        timeouts,
        pool,
        long_max_tokens,
        retry_budget,
        provider,
        cloud,
        prefill,
        health_check,
    } = u;
    let Timeouts {
        connect,
        first_byte,
        first_token,
        idle,
        total,
    } = timeouts;
    let auth = match auth {
        UpstreamAuth::Passthrough => json!({ "type": "passthrough" }),
        UpstreamAuth::Bearer { secret: _ } => json!({ "type": "bearer", "secret": REDACTED }),
        UpstreamAuth::Header { name, secret: _ } => {
            json!({ "type": "header", "header": name.as_str(), "secret": REDACTED })
        }
        UpstreamAuth::ApiKey { secret: _ } => json!({ "type": "api_key", "secret": REDACTED }),
    };
    let lane = |l: &sluice_upstream::LaneConfig| {
        json!({
            "min_connections": l.min_connections,
            "max_connections": l.max_connections,
            "max_streams_per_connection": l.max_streams_per_connection,
            "max_pending": l.max_pending,
            "acquire_timeout": dur(l.acquire_timeout),
        })
    };
    json!({
        "name": name,
        "base_url": base_url.to_string(),
        "protocol": match protocol {
            UpstreamProtocol::Http1 => "http1",
            UpstreamProtocol::H2 => "h2",
            UpstreamProtocol::H2c => "h2c",
            UpstreamProtocol::Auto => "auto",
        },
        "auth": auth,
        "ca_file": ca_file.as_ref().map(|p| p.display().to_string()),
        "session_header_to_body": session_header_to_body.as_ref().map(|s| json!({
            "header": s.header.as_str(),
            "json_pointer": s.json_pointer,
        })),
        "timeouts": {
            "connect": dur(*connect),
            "first_byte": dur(*first_byte),
            "first_token": dur(*first_token),
            "idle": dur(*idle),
            "total": dur(*total),
        },
        "pool": {
            "stream": lane(&pool.stream),
            "short": lane(&pool.short),
            "ping_interval": dur(pool.ping_interval),
            "degraded_rtt_factor": pool.degraded_rtt_factor,
            "degraded_rtt_floor": dur(pool.degraded_rtt_floor),
            "stall_timeout": dur(pool.stall_timeout),
            "max_connection_age": pool.max_connection_age.map(dur),
            "max_requests_per_connection": pool.max_requests_per_connection,
            "idle_timeout": dur(pool.idle_timeout),
            "dns_refresh": dur(pool.dns_refresh),
            "long_max_tokens": long_max_tokens,
        },
        "retry_budget": {
            "ratio": retry_budget.ratio,
            "min_per_second": retry_budget.min_per_second,
        },
        "provider": provider.as_ref().map(|p| p.as_str()),
        "cloud": cloud.as_ref().map(cloud_json),
        "prefill": prefill,
        "health_check": health_check.as_ref().map(|h| json!({
            "path": h.path,
            "interval": dur(h.interval),
            "timeout": dur(h.timeout),
            "healthy_threshold": h.healthy_threshold,
            "unhealthy_threshold": h.unhealthy_threshold,
        })),
    })
}

fn target_json(t: &TargetConfig, ups: &[UpstreamConfig]) -> Value {
    let TargetConfig {
        upstream,
        model,
        weight,
        context_window,
        auth,
    } = t;
    json!({
        "upstream": ups.get(upstream.index()).map(|u| u.name.as_str()),
        "model": model,
        "weight": weight,
        "context_window": context_window,
        "key": auth.as_ref().map(|_| REDACTED),
    })
}

fn route_json(r: &RouteConfig, ups: &[UpstreamConfig]) -> Value {
    let RouteConfig {
        name,
        models,
        targets,
        fallbacks,
        on_client_disconnect,
        lane,
        retry,
        idempotent,
        timeout,
        drop_unsupported_params,
        continuation,
        cache_breakpoints,
        balance,
        outlier,
        keys,
        limits,
        cache,
        reasoning_budgets,
        // Shown by `config_json`, which has their names.
        guardrails: _,
        resumable,
    } = r;
    json!({
        "name": name,
        "models": models,
        "targets": targets.iter().map(|t| target_json(t, ups)).collect::<Vec<_>>(),
        "fallbacks": fallbacks.iter().map(|t| target_json(t, ups)).collect::<Vec<_>>(),
        "on_client_disconnect": match on_client_disconnect {
            OnClientDisconnect::Cancel => "cancel",
            OnClientDisconnect::Drain => "drain",
        },
        "lane": lane.map(|l| l.as_str()),
        "retry": {
            "attempts": retry.attempts,
            "backoff": dur(retry.backoff),
            "max_backoff": dur(retry.max_backoff),
            "max_retry_after": dur(retry.max_retry_after),
        },
        "idempotent": idempotent,
        "timeout": timeout.map(dur),
        "drop_unsupported_params": drop_unsupported_params,
        "continuation": continuation,
        "cache_breakpoints": cache_breakpoints,
        "resumable": resumable.as_ref().map(|r| json!({
            "keep": dur(r.keep),
            "max_bytes": r.max_bytes,
        })),
        "balance": balance.as_str(),
        "keys": keys.as_str(),
        "limits": limits_json(limits),
        "cache": cache.as_ref().map(|c| json!({
            "ttl": dur(c.ttl),
            "shared": c.shared,
            "max_bytes": c.max_bytes,
            "replay": c.replay.as_str(),
            "wait": dur(c.wait),
        })),
        "reasoning_budgets": {
            "minimal": reasoning_budgets.minimal,
            "low": reasoning_budgets.low,
            "medium": reasoning_budgets.medium,
            "high": reasoning_budgets.high,
            "xhigh": reasoning_budgets.xhigh,
        },
        "outlier": {
            "consecutive_failures": outlier.consecutive_failures,
            "success_rate": outlier.success_rate.is_some(),
            "base_ejection_time": dur(outlier.base_ejection_time),
            "max_ejection_time": dur(outlier.max_ejection_time),
            "max_ejection_percent": outlier.max_ejection_percent,
        },
    })
}

fn telemetry_json(t: &TelemetryConfig) -> Value {
    let TelemetryConfig {
        endpoint,
        sampling_ratio,
        service_name,
        headers,
        batch_size,
        batch_interval,
        queue_size,
        export_timeout,
    } = t;
    let headers: serde_json::Map<String, Value> = headers
        .iter()
        .map(|h| (h.name.as_str().to_string(), Value::from(REDACTED)))
        .collect();
    json!({
        "endpoint": endpoint.as_ref().map(ToString::to_string),
        "sampling_ratio": sampling_ratio,
        "service_name": service_name,
        "headers": headers,
        "batch_size": batch_size,
        "batch_interval": dur(*batch_interval),
        "queue_size": queue_size,
        "export_timeout": dur(*export_timeout),
    })
}
