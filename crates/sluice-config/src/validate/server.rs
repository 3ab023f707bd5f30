//! `[server]`: listeners, TLS, body and event limits, client timeouts.

/// The ceiling of `max_event_bytes`: the SSE decoder's own limit.
const MAX_EVENT_BYTES_CEILING: u64 = sluice_sse::MAX_EVENT_BYTES_CEILING as u64;

use super::*;

/// Most `server.workers`: past a few per CPU, threads only add switching.
const MAX_WORKERS: usize = 1024;

pub(super) fn server_config(
    raw: RawServer,
    ctx: &mut Ctx<'_>,
) -> Result<ServerConfig, ConfigError> {
    let RawServer {
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
        admin_listen,
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
            let files = TlsFiles { cert, key };
            server_tls(&files, ctx)?;
            Some(files)
        }
    };
    let max_event_bytes = size("server.max_event_bytes", max_event_bytes, 1 << 20)?;
    if max_event_bytes > MAX_EVENT_BYTES_CEILING {
        return Err(ConfigError::new(
            "server.max_event_bytes",
            "must be at most 64MiB",
        ));
    }
    let admin_listen = admin_listen
        .map(|a| {
            a.parse().map_err(|_| {
                ConfigError::new(
                    "server.admin_listen",
                    "must be IP:PORT, e.g. \"127.0.0.1:9901\"",
                )
            })
        })
        .transpose()?;
    let admin_token = admin_token
        .map(|t| {
            let token = crate::AdminToken::new(&t).ok_or_else(|| {
                ConfigError::new(
                    "server.admin_token",
                    "must be non-empty printable ASCII without spaces; set it from the \
                     environment, e.g. admin_token = \"${SLUICE_ADMIN_TOKEN}\"",
                )
            })?;
            if t.len() < crate::admin::MIN_TOKEN_LEN && ctx.unresolved_at("server.admin_token").is_none() {
                ctx.warn(
                    "server.admin_token",
                    format!(
                        "shorter than {} characters: easy to guess; use e.g. `openssl rand -hex 32`",
                        crate::admin::MIN_TOKEN_LEN
                    ),
                );
            }
            Ok(token)
        })
        .transpose()?;
    let max_request_body = size("server.max_request_body", max_request_body, 16 << 20)?;
    let max_response_body = size("server.max_response_body", max_response_body, 8 << 20)?;
    let memory_budget = size("server.memory_budget", memory_budget, 512 << 20)?;
    if memory_budget < max_request_body.max(max_response_body) {
        return Err(ConfigError::new(
            "server.memory_budget",
            format!(
                "{memory_budget} bytes is less than one request or response body may be \
                 (max_request_body {max_request_body}, max_response_body {max_response_body}); \
                 raise it or lower those"
            ),
        ));
    }
    let max_header_bytes = size("server.max_header_bytes", max_header_bytes, 32 << 10)?;
    if !(8 << 10..=1 << 20).contains(&max_header_bytes) {
        return Err(ConfigError::new(
            "server.max_header_bytes",
            "must be from 8KiB to 1MiB",
        ));
    }
    let positive = |path: &str, v: Option<usize>| match v {
        Some(0) => Err(ConfigError::new(path, "must be at least 1")),
        v => Ok(v),
    };
    let trusted_proxies = trusted_proxies
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            IpNet::parse(p).map_err(|e| ConfigError::new(format!("server.trusted_proxies[{i}]"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let server = ServerConfig {
        admin_listen,
        admin_token,
        listen,
        tls,
        heartbeat: duration("server.heartbeat", heartbeat, Duration::from_secs(15))?,
        max_request_body,
        max_response_body,
        shutdown_grace: duration(
            "server.shutdown_grace",
            shutdown_grace,
            Duration::from_secs(30),
        )?,
        max_event_bytes: usize::try_from(max_event_bytes).unwrap_or(usize::MAX),
        server_timing: server_timing.unwrap_or(false),
        access_log: match access_log.as_deref() {
            None | Some("stdout") => crate::AccessLogSink::Stdout,
            Some("off") => crate::AccessLogSink::Off,
            Some("") => {
                return Err(ConfigError::new(
                    "server.access_log",
                    "write \"stdout\", \"off\" or a file path",
                ))
            }
            Some(path) => crate::AccessLogSink::File(path.into()),
        },
        access_log_queue: match access_log_queue {
            Some(0) => {
                return Err(ConfigError::new(
                    "server.access_log_queue",
                    "must be at least 1",
                ))
            }
            v => v.unwrap_or(crate::DEFAULT_QUEUE),
        },
        log_format: match log_format {
            None | Some(LogFormatName::Text) => crate::LogFormat::Text,
            Some(LogFormatName::Json) => crate::LogFormat::Json,
        },
        log_level: log_level.unwrap_or_else(|| "info".into()),
        max_connections: positive("server.max_connections", max_connections)?,
        max_connections_per_ip: positive("server.max_connections_per_ip", max_connections_per_ip)?,
        workers: match workers.unwrap_or(0) {
            n if n > MAX_WORKERS => {
                return Err(ConfigError::new(
                    "server.workers",
                    format!(
                        "{n} threads is more than {MAX_WORKERS} (about one per CPU given to \
                         the gateway; 0, the default, for one shared runtime)"
                    ),
                ))
            }
            n => n,
        },
        max_header_bytes: u32::try_from(max_header_bytes).unwrap_or(u32::MAX),
        max_concurrent_streams: positive(
            "server.max_concurrent_streams",
            max_concurrent_streams.map(|n| n as usize),
        )?
        .map_or(200, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        resumable_streams: positive(
            "server.resumable_streams",
            resumable_streams.map(|n| n as usize),
        )?
        .unwrap_or(10_000),
        resumable_log_bytes: size("server.resumable_log_bytes", resumable_log_bytes, 1 << 30)?,
        max_connection_request_rate: positive(
            "server.max_connection_request_rate",
            max_connection_request_rate.map(|n| n as usize),
        )?
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        memory_budget,
        trusted_proxies,
        client_timeouts: client_timeouts_config(client_timeouts.unwrap_or_default())?,
        client_resets: client_resets_config(client_resets.unwrap_or_default())?,
    };
    let admin = server.admin_addr();
    if admin.port() != 0 && admin == server.listen {
        return Err(ConfigError::new(
            "server.admin_listen",
            format!("{admin} is also server.listen; the admin plane needs its own port, e.g. 127.0.0.1:9901"),
        ));
    }
    server.check_admin_exposure()?;
    Ok(server)
}

fn client_timeouts_config(raw: RawClientTimeouts) -> Result<ClientTimeouts, ConfigError> {
    let RawClientTimeouts {
        header,
        body_idle,
        body,
        keep_alive,
        send,
    } = raw;
    let d = ClientTimeouts::default();
    let p = |f: &str| format!("server.client_timeouts.{f}");
    Ok(ClientTimeouts {
        header: duration(&p("header"), header, d.header)?,
        body_idle: duration(&p("body_idle"), body_idle, d.body_idle)?,
        body: duration(&p("body"), body, d.body)?,
        keep_alive: duration(&p("keep_alive"), keep_alive, d.keep_alive)?,
        send: duration(&p("send"), send, d.send)?,
    })
}

fn client_resets_config(raw: RawClientResets) -> Result<ClientResets, ConfigError> {
    let RawClientResets {
        per_connection,
        per_ip,
        window,
        block,
    } = raw;
    let d = ClientResets::default();
    let p = |f: &str| format!("server.client_resets.{f}");
    let count = |f: &str, v: Option<u32>, def: u32| match v {
        Some(0) => Err(ConfigError::new(p(f), "must be at least 1")),
        v => Ok(v.unwrap_or(def)),
    };
    Ok(ClientResets {
        per_connection: count("per_connection", per_connection, d.per_connection)?,
        per_ip: count("per_ip", per_ip, d.per_ip)?,
        window: duration(&p("window"), window, d.window)?,
        block: duration(&p("block"), block, d.block)?,
    })
}

/// Loads the listener's certificate and key exactly as startup does, and warns of expiry.
fn server_tls(files: &TlsFiles, ctx: &mut Ctx<'_>) -> Result<(), ConfigError> {
    if let Some(u) = ctx.unresolved_at("server.tls") {
        let (path, var) = (u.path.clone(), u.var.clone());
        ctx.warn(
            path,
            format!("not checked: the file's path needs `{var}`, which is not set (--skip-env)"),
        );
        return Ok(());
    }
    crate::tls::server_config(files).map_err(|e| {
        let path = match e.field() {
            Some(f) => format!("server.tls.{f}"),
            None => "server.tls".to_string(),
        };
        ConfigError::new(path, e.to_string())
    })?;
    // Loading just succeeded, so reading the chain again succeeds too.
    if let Ok(certs) = crate::tls::read_certs(&files.cert) {
        for w in crate::tls::expiry_warnings(&files.cert, &certs, ctx.now) {
            ctx.warn("server.tls.cert", w);
        }
    }
    Ok(())
}
