//! The file as written, and its validation into [`Config`].
//!
//! Every raw struct is taken apart by exhaustive destructuring, so adding a field to the file
//! format without validating it is a compile error, not a silently ignored setting.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::units::{parse_duration, parse_size};
use super::{
    Config, ConfigError, OnClientDisconnect, RouteConfig, ServerConfig, SessionHeaderToBody,
    Timeouts, TlsFiles, UpstreamAuth, UpstreamConfig, UpstreamProtocol,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default, rename = "upstream")]
    upstreams: Vec<RawUpstream>,
    #[serde(default, rename = "route")]
    routes: Vec<RawRoute>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    tls: Option<RawTls>,
    heartbeat: Option<String>,
    max_request_body: Option<Size>,
    max_response_body: Option<Size>,
    shutdown_grace: Option<String>,
    max_event_bytes: Option<Size>,
    server_timing: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: PathBuf,
    key: PathBuf,
}

/// A size as a number of bytes or a string with a unit.
#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    name: String,
    base_url: String,
    protocol: Option<String>,
    auth: Option<RawAuth>,
    ca_file: Option<PathBuf>,
    session_header_to_body: Option<RawSessionHeader>,
    timeouts: Option<RawTimeouts>,
    pool: Option<RawPool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPool {
    stream: Option<RawLane>,
    short: Option<RawLane>,
    ping_interval: Option<String>,
    degraded_rtt_factor: Option<f64>,
    degraded_rtt_floor: Option<String>,
    stall_timeout: Option<String>,
    max_connection_age: Option<String>,
    max_requests_per_connection: Option<u64>,
    idle_timeout: Option<String>,
    long_max_tokens: Option<u64>,
    dns_refresh: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLane {
    min_connections: Option<usize>,
    max_connections: Option<usize>,
    max_streams_per_connection: Option<u32>,
    max_pending: Option<usize>,
    acquire_timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(rename = "type")]
    kind: String,
    env: Option<String>,
    header: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSessionHeader {
    header: String,
    json_pointer: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    connect: Option<String>,
    first_byte: Option<String>,
    idle: Option<String>,
    total: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    models: Vec<String>,
    upstream: String,
    on_client_disconnect: Option<String>,
    lane: Option<String>,
}

/// The ceiling of `max_event_bytes`: the SSE decoder's own limit.
const MAX_EVENT_BYTES_CEILING: u64 = sluice_sse::MAX_EVENT_BYTES_CEILING as u64;

pub(super) fn parse(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        let path = e
            .span()
            .map(|s| {
                format!(
                    "line {}",
                    text[..s.start.min(text.len())].lines().count().max(1)
                )
            })
            .unwrap_or_else(|| "config".into());
        ConfigError::new(path, e.message().to_string())
    })?;
    let RawConfig {
        server,
        upstreams,
        routes,
    } = raw;
    let server = server_config(server)?;
    let mut ups: Vec<UpstreamConfig> = Vec::with_capacity(upstreams.len());
    for (i, u) in upstreams.into_iter().enumerate() {
        let u = upstream_config(&format!("upstream[{i}]"), u, env)?;
        // The connection layer checks its own settings (pool sizes, windows); building it
        // opens nothing, so check-config and startup reject exactly the same things.
        if let Err(e) = sluice_upstream::Upstream::new(u.upstream_settings()) {
            let path = match &e {
                sluice_upstream::UpstreamConfigError::Pool { field, .. } => {
                    format!("upstream[{i}].{field}")
                }
                _ => format!("upstream[{i}]"),
            };
            return Err(ConfigError::new(path, e.to_string()));
        }
        if ups.iter().any(|o| o.name == u.name) {
            return Err(ConfigError::new(
                format!("upstream[{i}].name"),
                format!("`{}` is already the name of another upstream", u.name),
            ));
        }
        ups.push(u);
    }
    if routes.is_empty() {
        return Err(ConfigError::new(
            "route",
            "no [[route]]: every request would be rejected; add one with `models` and `upstream`",
        ));
    }
    let mut out_routes = Vec::with_capacity(routes.len());
    for (i, r) in routes.into_iter().enumerate() {
        let RawRoute {
            models,
            upstream,
            on_client_disconnect,
            lane,
        } = r;
        let path = format!("route[{i}]");
        if models.is_empty() || models.iter().any(|m| m.is_empty()) {
            return Err(ConfigError::new(
                format!("{path}.models"),
                "needs at least one non-empty model glob, e.g. [\"gpt-4o*\"]",
            ));
        }
        let idx = ups.iter().position(|u| u.name == upstream).ok_or_else(|| {
            let known: Vec<_> = ups.iter().map(|u| u.name.as_str()).collect();
            ConfigError::new(
                format!("{path}.upstream"),
                format!("no upstream named `{upstream}` (defined: {known:?})"),
            )
        })?;
        let on_client_disconnect = match on_client_disconnect.as_deref() {
            None | Some("cancel") => OnClientDisconnect::Cancel,
            Some("drain") => OnClientDisconnect::Drain,
            Some(other) => {
                return Err(ConfigError::new(
                    format!("{path}.on_client_disconnect"),
                    format!("`{other}` is not `cancel` or `drain`"),
                ))
            }
        };
        let lane = match lane.as_deref() {
            None => None,
            Some("stream") => Some(sluice_upstream::Lane::Stream),
            Some("short") => Some(sluice_upstream::Lane::Short),
            Some(other) => {
                return Err(ConfigError::new(
                    format!("{path}.lane"),
                    format!("`{other}` is not `stream` or `short`"),
                ))
            }
        };
        out_routes.push(RouteConfig {
            models,
            upstream: idx,
            on_client_disconnect,
            lane,
        });
    }
    Ok(Config {
        server,
        upstreams: ups,
        routes: out_routes,
    })
}

fn duration(path: &str, v: Option<String>, default: Duration) -> Result<Duration, ConfigError> {
    let d = match v {
        None => return Ok(default),
        Some(s) => parse_duration(&s).map_err(|r| ConfigError::new(path, r))?,
    };
    if d.is_zero() {
        return Err(ConfigError::new(path, "must be greater than zero"));
    }
    Ok(d)
}

fn size(path: &str, v: Option<Size>, default: u64) -> Result<u64, ConfigError> {
    let n = match v {
        None => return Ok(default),
        Some(Size::Bytes(n)) => n,
        Some(Size::Text(s)) => parse_size(&s).map_err(|r| ConfigError::new(path, r))?,
    };
    if n == 0 {
        return Err(ConfigError::new(path, "must be greater than zero"));
    }
    Ok(n)
}

fn readable(path: &str, file: &std::path::Path) -> Result<(), ConfigError> {
    std::fs::metadata(file)
        .map(|_| ())
        .map_err(|e| ConfigError::new(path, format!("cannot read {}: {e}", file.display())))
}

fn server_config(raw: RawServer) -> Result<ServerConfig, ConfigError> {
    let RawServer {
        listen,
        tls,
        heartbeat,
        max_request_body,
        max_response_body,
        shutdown_grace,
        max_event_bytes,
        server_timing,
    } = raw;
    let listen = listen
        .as_deref()
        .unwrap_or("127.0.0.1:8080")
        .parse()
        .map_err(|_| {
            ConfigError::new(
                "server.listen",
                "must be IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::]:8443\"",
            )
        })?;
    let tls = match tls {
        None => None,
        Some(RawTls { cert, key }) => {
            readable("server.tls.cert", &cert)?;
            readable("server.tls.key", &key)?;
            Some(TlsFiles { cert, key })
        }
    };
    let max_event_bytes = size("server.max_event_bytes", max_event_bytes, 1 << 20)?;
    if max_event_bytes > MAX_EVENT_BYTES_CEILING {
        return Err(ConfigError::new(
            "server.max_event_bytes",
            "must be at most 64MiB",
        ));
    }
    Ok(ServerConfig {
        listen,
        tls,
        heartbeat: duration("server.heartbeat", heartbeat, Duration::from_secs(15))?,
        max_request_body: size("server.max_request_body", max_request_body, 16 << 20)?,
        max_response_body: size("server.max_response_body", max_response_body, 8 << 20)?,
        shutdown_grace: duration(
            "server.shutdown_grace",
            shutdown_grace,
            Duration::from_secs(30),
        )?,
        max_event_bytes: max_event_bytes as usize,
        server_timing: server_timing.unwrap_or(false),
    })
}

fn upstream_config(
    path: &str,
    raw: RawUpstream,
    env: &dyn Fn(&str) -> Option<String>,
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
    let base: http::Uri = base_url.parse().map_err(|e| {
        ConfigError::new(
            format!("{path}.base_url"),
            format!("`{base_url}` is not a URL: {e}"),
        )
    })?;
    let https = match base.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => {
            return Err(ConfigError::new(
                format!("{path}.base_url"),
                "must start with http:// or https://",
            ))
        }
    };
    if base.authority().is_none() || base.query().is_some() {
        return Err(ConfigError::new(
            format!("{path}.base_url"),
            "must be scheme://host:port/prefix, without a query",
        ));
    }
    let protocol = match protocol.as_deref() {
        None | Some("auto") => UpstreamProtocol::Auto,
        Some("http1") => UpstreamProtocol::Http1,
        Some("h2") if https => UpstreamProtocol::H2,
        Some("h2c") if !https => UpstreamProtocol::H2c,
        Some("h2") => {
            return Err(ConfigError::new(
                format!("{path}.protocol"),
                "`h2` needs an https:// base_url (use `h2c` for HTTP/2 over plain TCP)",
            ))
        }
        Some("h2c") => {
            return Err(ConfigError::new(
                format!("{path}.protocol"),
                "`h2c` needs an http:// base_url (use `h2` over TLS)",
            ))
        }
        Some(other) => {
            return Err(ConfigError::new(
                format!("{path}.protocol"),
                format!("`{other}` is not one of http1, h2, h2c, auto"),
            ))
        }
    };
    let auth = match auth {
        None => UpstreamAuth::Passthrough,
        Some(RawAuth {
            kind,
            env: var,
            header,
        }) => {
            let secret = |var: Option<String>| -> Result<String, ConfigError> {
                let var = var.ok_or_else(|| {
                    ConfigError::new(
                        format!("{path}.auth.env"),
                        format!("`{kind}` auth needs `env`, the variable that holds the key"),
                    )
                })?;
                env(&var).filter(|s| !s.is_empty()).ok_or_else(|| {
                    ConfigError::new(
                        format!("{path}.auth.env"),
                        format!("the environment variable `{var}` is not set or empty"),
                    )
                })
            };
            match (kind.as_str(), header) {
                ("passthrough", None) if var.is_none() => UpstreamAuth::Passthrough,
                ("passthrough", _) => {
                    return Err(ConfigError::new(
                        format!("{path}.auth"),
                        "`passthrough` takes no `env` or `header`",
                    ))
                }
                ("bearer", None) => UpstreamAuth::Bearer {
                    secret: secret(var)?,
                },
                ("bearer", Some(_)) => return Err(ConfigError::new(
                    format!("{path}.auth.header"),
                    "`bearer` always uses Authorization; use type = \"header\" for another header",
                )),
                ("header", Some(h)) => UpstreamAuth::Header {
                    name: http::HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).map_err(
                        |_| {
                            ConfigError::new(
                                format!("{path}.auth.header"),
                                format!("`{h}` is not a header name"),
                            )
                        },
                    )?,
                    secret: secret(var)?,
                },
                ("header", None) => {
                    return Err(ConfigError::new(
                        format!("{path}.auth.header"),
                        "`header` auth needs `header`, e.g. \"x-api-key\"",
                    ))
                }
                (other, _) => {
                    return Err(ConfigError::new(
                        format!("{path}.auth.type"),
                        format!("`{other}` is not one of passthrough, bearer, header"),
                    ))
                }
            }
        }
    };
    if let Some(ca) = &ca_file {
        readable(&format!("{path}.ca_file"), ca)?;
    }
    let session_header_to_body = match session_header_to_body {
        None => None,
        Some(RawSessionHeader {
            header,
            json_pointer,
        }) => {
            let header = http::HeaderName::from_bytes(header.to_ascii_lowercase().as_bytes())
                .map_err(|_| {
                    ConfigError::new(
                        format!("{path}.session_header_to_body.header"),
                        format!("`{header}` is not a header name"),
                    )
                })?;
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
    let RawTimeouts {
        connect,
        first_byte,
        idle,
        total,
    } = timeouts.unwrap_or_default();
    let t = |field: &str, v, d| duration(&format!("{path}.timeouts.{field}"), v, d);
    let timeouts = Timeouts {
        connect: t("connect", connect, Duration::from_secs(5))?,
        first_byte: t("first_byte", first_byte, Duration::from_secs(60))?,
        idle: t("idle", idle, Duration::from_secs(30))?,
        total: t("total", total, Duration::from_secs(600))?,
    };
    for (field, d) in [
        ("connect", timeouts.connect),
        ("first_byte", timeouts.first_byte),
        ("idle", timeouts.idle),
    ] {
        if d > timeouts.total {
            return Err(ConfigError::new(
                format!("{path}.timeouts.{field}"),
                format!(
                    "{d:?} is longer than total ({:?}); it could never fire",
                    timeouts.total
                ),
            ));
        }
    }
    let (pool, long_max_tokens) = pool_config(path, pool.unwrap_or_default())?;
    Ok(UpstreamConfig {
        name,
        base_url: base,
        protocol,
        auth,
        ca_file,
        session_header_to_body,
        timeouts,
        pool,
        long_max_tokens,
    })
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
            // `None`: the default of the protocol the lane ends up speaking.
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
    let pool = PoolConfig {
        stream: lane("stream", Lane::Stream, stream)?,
        short: lane("short", Lane::Short, short)?,
        ping_interval: duration(
            &format!("{path}.pool.ping_interval"),
            ping_interval,
            d.ping_interval,
        )?,
        degraded_rtt_factor: degraded_rtt_factor.unwrap_or(d.degraded_rtt_factor),
        degraded_rtt_floor: duration(
            &format!("{path}.pool.degraded_rtt_floor"),
            degraded_rtt_floor,
            d.degraded_rtt_floor,
        )?,
        stall_timeout: duration(
            &format!("{path}.pool.stall_timeout"),
            stall_timeout,
            d.stall_timeout,
        )?,
        max_connection_age: match max_connection_age {
            None => None,
            v => Some(duration(
                &format!("{path}.pool.max_connection_age"),
                v,
                Duration::ZERO,
            )?),
        },
        max_requests_per_connection,
        idle_timeout: duration(
            &format!("{path}.pool.idle_timeout"),
            idle_timeout,
            d.idle_timeout,
        )?,
        // Not configurable from TOML yet: the upstream crate's default.
        dns_refresh: duration(
            &format!("{path}.pool.dns_refresh"),
            dns_refresh,
            d.dns_refresh,
        )?,
    };
    Ok((pool, long_max_tokens.unwrap_or(4096)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        (k == "LOCAL_KEY").then(|| "sk-local".to_string())
    }

    const MIN: &str = r#"
[[upstream]]
name = "local"
base_url = "http://127.0.0.1:9090/v1"

[[route]]
models = ["*"]
upstream = "local"
"#;

    fn err(text: &str) -> ConfigError {
        Config::from_toml(text, &env).unwrap_err()
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = Config::from_toml(MIN, &env).unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.server.heartbeat, Duration::from_secs(15));
        assert_eq!(c.server.max_request_body, 16 << 20);
        assert_eq!(c.upstreams[0].protocol, UpstreamProtocol::Auto);
        assert_eq!(c.upstreams[0].auth, UpstreamAuth::Passthrough);
        assert_eq!(c.upstreams[0].timeouts.total, Duration::from_secs(600));
        assert_eq!(c.routes[0].on_client_disconnect, OnClientDisconnect::Cancel);
        assert_eq!(c.upstreams[0].pool, sluice_upstream::PoolConfig::default());
        assert_eq!(c.upstreams[0].long_max_tokens, 4096);
        assert_eq!(c.routes[0].lane, None);
    }

    #[test]
    fn unknown_fields_are_errors() {
        let e = err(&MIN.replace("name = \"local\"", "name = \"local\"\nbase_ulr = \"x\""));
        assert!(e.reason.contains("unknown field `base_ulr`"), "{e}");
        assert!(e.path.starts_with("line "), "{e}");
    }

    #[test]
    fn field_paths_name_the_problem() {
        let cases = [
            (
                MIN.replace("http://127", "ftp://127"),
                "upstream[0].base_url",
            ),
            (
                MIN.replace("name = \"local\"", "name = \"local\"\nprotocol = \"h2\""),
                "upstream[0].protocol",
            ),
            (
                MIN.replace(
                    "name = \"local\"",
                    "name = \"local\"\ntimeouts = { idle = \"3x\" }",
                ),
                "upstream[0].timeouts.idle",
            ),
            (
                MIN.replace(
                    "name = \"local\"",
                    "name = \"local\"\ntimeouts = { idle = \"20m\", total = \"10m\" }",
                ),
                "upstream[0].timeouts.idle",
            ),
            (
                MIN.replace("upstream = \"local\"", "upstream = \"remote\""),
                "route[0].upstream",
            ),
            (MIN.replace("[\"*\"]", "[]"), "route[0].models"),
            (
                format!("[server]\nlisten = \"localhost\"\n{MIN}"),
                "server.listen",
            ),
            (
                format!("[server]\nmax_request_body = \"16mb\"\n{MIN}"),
                "server.max_request_body",
            ),
            (
                MIN.replace(
                    "name = \"local\"",
                    "name = \"local\"\nauth = { type = \"bearer\", env = \"MISSING\" }",
                ),
                "upstream[0].auth.env",
            ),
            (
                MIN.replace(
                    "upstream = \"local\"\n",
                    "upstream = \"local\"\non_client_disconnect = \"ignore\"\n",
                ),
                "route[0].on_client_disconnect",
            ),
            (
                MIN.replace(
                    "upstream = \"local\"\n",
                    "upstream = \"local\"\nlane = \"fast\"\n",
                ),
                "route[0].lane",
            ),
            (
                MIN.replace(
                    "name = \"local\"",
                    "name = \"local\"\npool = { stream = { max_connections = 0 } }",
                ),
                "upstream[0].pool.stream.max_connections",
            ),
            (
                MIN.replace(
                    "name = \"local\"",
                    "name = \"local\"\npool = { short = { acquire_timeout = \"soon\" } }",
                ),
                "upstream[0].pool.short.acquire_timeout",
            ),
            (
                format!("{MIN}\n[[upstream]]\nname = \"local\"\nbase_url = \"http://x/v1\"\n"),
                "upstream[1].name",
            ),
        ];
        for (text, path) in cases {
            let e = err(&text);
            assert_eq!(e.path, path, "{e}");
        }
    }

    #[test]
    fn auth_reads_the_environment_and_never_prints_the_secret() {
        let c = Config::from_toml(
            &MIN.replace(
                "name = \"local\"",
                "name = \"local\"\nauth = { type = \"bearer\", env = \"LOCAL_KEY\" }",
            ),
            &env,
        )
        .unwrap();
        assert_eq!(
            c.upstreams[0].auth,
            UpstreamAuth::Bearer {
                secret: "sk-local".into()
            }
        );
        assert!(!format!("{c:?}").contains("sk-local"));
    }

    #[test]
    fn routing_takes_the_first_match() {
        let text =
            format!("{MIN}\n[[upstream]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:1/v1\"\n")
                .replace("models = [\"*\"]", "models = [\"gpt-4o*\", \"o1\"]")
                + "\n[[route]]\nmodels = [\"*\"]\nupstream = \"b\"\n";
        let c = Config::from_toml(&text, &env).unwrap();
        assert_eq!(c.route_for("gpt-4o-mini").unwrap().upstream, 0);
        assert_eq!(c.route_for("o1").unwrap().upstream, 0);
        assert_eq!(c.route_for("claude").unwrap().upstream, 1);
    }
}
