//! From a request to what the mock answers, independent of the protocol that carried it.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{json, Value};

use crate::cloud::{self, BearerCheck, CloudState, Issuer};
use crate::conn::ServerCfg;
use crate::emit::Framing;
use crate::knobs::{Behavior, ErrorKind, FailWith, KnobError, PrefillMode};
use crate::shapes::errors::{self, ErrorCtx, RetryHint};
use crate::shapes::request::{self, Kind};
use crate::shapes::{
    anthropic, bedrock, error_body, error_headers, gemini, gemini_error, model_of, openai,
    responses, thinking, Api, Completion, CutWith, EventSeq,
};
use crate::stats::{AuthEvent, PrefillRecord, Routing, Stats};

/// The header that carries per-request behaviour.
pub const MOCK_HEADER: &str = "x-mock";
/// The response header that carries the mock's request id.
pub const REQUEST_ID_HEADER: &str = "x-mock-request-id";

/// How a request the mock processed ends without any response byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoReply {
    /// HTTP/2 RST_STREAM(INTERNAL_ERROR); HTTP/1.1 the connection is closed.
    Reset,
    /// The whole connection is closed (no GOAWAY).
    Close,
    /// Nothing at all until the client leaves.
    Silent,
}

// === impl Reply ===

/// The mock's answer to a request.
pub(crate) enum Reply {
    /// A complete JSON body: a completion or a provider error.
    Full {
        status: StatusCode,
        body: Bytes,
        /// Extra headers (`retry-after`, rate-limit headers).
        headers: Vec<(&'static str, String)>,
    },
    /// A stream of events: SSE, or event-stream messages (Bedrock).
    Stream(Box<dyn EventSeq>, Framing),
    /// No response at all (an injected fault).
    Nothing(NoReply),
}

impl Reply {
    fn json(status: StatusCode, v: &Value) -> Reply {
        Reply::Full {
            status,
            body: Bytes::from(v.to_string()),
            headers: Vec::new(),
        }
    }

    fn error(api: Api, status: StatusCode, message: &str, code: Option<&str>) -> Reply {
        Reply::Full {
            status,
            body: error_body(api, status.as_u16(), message, code),
            headers: error_headers(api, status.as_u16()),
        }
    }

    /// The status the response carries (200 for streams, 0 when there is no response).
    pub(crate) fn status(&self) -> u16 {
        match self {
            Reply::Full { status, .. } => status.as_u16(),
            Reply::Stream(..) => 200,
            Reply::Nothing(_) => 0,
        }
    }
}

/// What routing decided and learned, for the protocol servers and the stats.
pub(crate) struct Routed {
    pub(crate) reply: Reply,
    pub(crate) routing: Routing,
}

/// Whether a path belongs to the mock's own control surface (not recorded as a request).
pub(crate) fn is_admin(path: &str) -> bool {
    path.starts_with("/__mock/")
}

/// `GET /__mock/stats` (`?totals` for the counters alone, cheap enough to poll during a load
/// test), `POST /__mock/reset` (records, totals, `fail_first` counters and the clock of
/// `fail_for_ms` / `flap`), `POST /__mock/revoke_tokens` (every issued token: the next request
/// with one gets 401) and `GET /__mock/service_account` (the built-in test service account's
/// key file, its `token_uri` this server's `/token` as the `Host` header names it).
pub(crate) fn admin(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    stats: &Stats,
    cfg: &ServerCfg,
) -> Reply {
    let faults = &cfg.faults;
    match (method, uri.path()) {
        (&Method::POST, "/__mock/revoke_tokens") => {
            cfg.cloud.tokens().revoke_all();
            Reply::json(StatusCode::OK, &json!({ "revoked": true }))
        }
        (&Method::GET, "/__mock/service_account") => {
            let host = headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
                .or_else(|| uri.authority().map(|a| a.to_string()))
                .unwrap_or_else(|| "127.0.0.1".to_string());
            let scheme = uri.scheme_str().unwrap_or("http");
            Reply::Full {
                status: StatusCode::OK,
                body: Bytes::from(cloud::test_service_account_json(&format!(
                    "{scheme}://{host}/token"
                ))),
                headers: Vec::new(),
            }
        }
        (&Method::GET, "/__mock/stats") if uri.query() == Some("totals") => Reply::json(
            StatusCode::OK,
            &serde_json::json!({ "totals": stats.totals() }),
        ),
        (&Method::GET, "/__mock/stats") => Reply::json(StatusCode::OK, &stats.snapshot().to_json()),
        (&Method::POST, "/__mock/reset") => {
            stats.reset();
            faults.reset();
            Reply::json(StatusCode::OK, &serde_json::json!({ "reset": true }))
        }
        _ => Reply::error(
            Api::OpenAi,
            StatusCode::NOT_FOUND,
            "unknown mock control path; use GET /__mock/stats, POST /__mock/reset, POST \
             /__mock/revoke_tokens or GET /__mock/service_account",
            Some("not_found"),
        ),
    }
}

// === impl Endpoint ===

/// How a Gemini stream is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GeminiDelivery {
    Whole,
    Sse,
    Array,
}

/// The API endpoints the mock serves.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Endpoint {
    Models,
    Chat,
    Completions,
    Embeddings,
    Responses,
    Messages,
    CountTokens,
    GeminiModels,
    GeminiModel(String),
    GeminiGenerate(String, GeminiDelivery),
    GeminiCount(String),
    /// Azure OpenAI `/openai/deployments/{deployment}/chat/completions`.
    AzureChat(String),
    /// `/openai/deployments/{deployment}/completions`.
    AzureCompletions(String),
    /// `/openai/deployments/{deployment}/embeddings`.
    AzureEmbeddings(String),
    /// Bedrock `/model/{modelId}/converse` (`true`: `/converse-stream`).
    BedrockConverse(String, bool),
    /// Bedrock `/model/{modelId}/invoke` (`true`: `/invoke-with-response-stream`), Anthropic
    /// bodies.
    BedrockInvoke(String, bool),
    /// Vertex AI `…/publishers/anthropic/models/{model}:rawPredict` (`true`:
    /// `:streamRawPredict`).
    VertexRawPredict(String, bool),
    /// Google's token endpoint, `POST /token`.
    GoogleToken,
    /// Entra ID's, `POST /{tenant}/oauth2/v2.0/token`.
    EntraToken(String),
}

/// The credentials a path requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// None (the mock does not check API keys).
    Open,
    /// A SigV4 signature by a configured AWS key (Bedrock).
    SigV4,
    /// A live bearer token from `POST /token` (Vertex AI).
    Google,
    /// A live bearer token from the Entra endpoint, or an `api-key` (Azure OpenAI).
    Azure,
}

/// Percent-decodes a path segment (model ids arrive encoded: `%3A` for `:`); `None` if it
/// is not valid.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The cloud paths: Bedrock, Vertex AI, Azure OpenAI and the token endpoints.
fn cloud_endpoint(path: &str, query: Option<&str>) -> Option<(Endpoint, Gate)> {
    if path == "/token" {
        return Some((Endpoint::GoogleToken, Gate::Open));
    }
    if let Some(tenant) = path
        .strip_suffix("/oauth2/v2.0/token")
        .and_then(|t| t.strip_prefix('/'))
        .filter(|t| !t.is_empty() && !t.contains('/'))
    {
        return Some((Endpoint::EntraToken(tenant.to_string()), Gate::Open));
    }
    if let Some(rest) = path.strip_prefix("/model/") {
        let (id, op) = rest.rsplit_once('/')?;
        let id = percent_decode(id).filter(|m| !m.is_empty())?;
        let e = match op {
            "converse" => Endpoint::BedrockConverse(id, false),
            "converse-stream" => Endpoint::BedrockConverse(id, true),
            "invoke" => Endpoint::BedrockInvoke(id, false),
            "invoke-with-response-stream" => Endpoint::BedrockInvoke(id, true),
            _ => return None,
        };
        return Some((e, Gate::SigV4));
    }
    if let Some(rest) = path.strip_prefix("/openai/deployments/") {
        let (deployment, op) = rest.split_once('/')?;
        let d = percent_decode(deployment).filter(|d| !d.is_empty())?;
        let e = match op {
            "chat/completions" => Endpoint::AzureChat(d),
            "completions" => Endpoint::AzureCompletions(d),
            "embeddings" => Endpoint::AzureEmbeddings(d),
            _ => return None,
        };
        return Some((e, Gate::Azure));
    }
    let rest = path
        .strip_prefix("/v1/projects/")
        .or_else(|| path.strip_prefix("/v1beta1/projects/"))?;
    let segs: Vec<&str> = rest.split('/').collect();
    let [_project, "locations", _location, "publishers", publisher, "models", last] =
        segs.as_slice()
    else {
        return None;
    };
    let (model, method) = last.rsplit_once(':')?;
    let model = percent_decode(model).filter(|m| !m.is_empty())?;
    let e = match (*publisher, method) {
        ("google", "generateContent") => Endpoint::GeminiGenerate(model, GeminiDelivery::Whole),
        ("google", "streamGenerateContent") => {
            let sse = query.is_some_and(|q| q.split('&').any(|p| p == "alt=sse"));
            let d = if sse {
                GeminiDelivery::Sse
            } else {
                GeminiDelivery::Array
            };
            Endpoint::GeminiGenerate(model, d)
        }
        ("google", "countTokens") => Endpoint::GeminiCount(model),
        ("anthropic", "rawPredict") if model == "count-tokens" => Endpoint::CountTokens,
        ("anthropic", "rawPredict") => Endpoint::VertexRawPredict(model, false),
        ("anthropic", "streamRawPredict") => Endpoint::VertexRawPredict(model, true),
        _ => return None,
    };
    Some((e, Gate::Google))
}

impl Endpoint {
    fn parse(path: &str, query: Option<&str>) -> Option<Endpoint> {
        Some(match path {
            "/v1/models" => Endpoint::Models,
            "/v1/chat/completions" => Endpoint::Chat,
            "/v1/completions" => Endpoint::Completions,
            "/v1/embeddings" => Endpoint::Embeddings,
            "/v1/responses" => Endpoint::Responses,
            "/v1/messages" => Endpoint::Messages,
            "/v1/messages/count_tokens" => Endpoint::CountTokens,
            "/v1beta/models" => Endpoint::GeminiModels,
            _ => {
                // Gemini: /v1beta/models/{model}[:method], also spelled /v1/models/....
                let (beta, rest) = match path.strip_prefix("/v1beta/models/") {
                    Some(rest) => (true, rest),
                    None => (false, path.strip_prefix("/v1/models/")?),
                };
                let (model, method) = match rest.rsplit_once(':') {
                    Some((m, method)) => (m, Some(method)),
                    None => (rest, None),
                };
                if model.is_empty() || model.contains('/') {
                    return None;
                }
                let model = model.to_string();
                match method {
                    None if beta => Endpoint::GeminiModel(model),
                    Some("generateContent") => {
                        Endpoint::GeminiGenerate(model, GeminiDelivery::Whole)
                    }
                    Some("streamGenerateContent") => {
                        let sse = query.is_some_and(|q| q.split('&').any(|p| p == "alt=sse"));
                        let d = if sse {
                            GeminiDelivery::Sse
                        } else {
                            GeminiDelivery::Array
                        };
                        Endpoint::GeminiGenerate(model, d)
                    }
                    Some("countTokens") => Endpoint::GeminiCount(model),
                    _ => return None,
                }
            }
        })
    }

    fn method(&self) -> Method {
        match self {
            Endpoint::Models | Endpoint::GeminiModels | Endpoint::GeminiModel(_) => Method::GET,
            _ => Method::POST,
        }
    }

    fn path_model(&self) -> Option<&str> {
        match self {
            Endpoint::GeminiModel(m)
            | Endpoint::GeminiGenerate(m, _)
            | Endpoint::GeminiCount(m)
            | Endpoint::AzureChat(m)
            | Endpoint::AzureCompletions(m)
            | Endpoint::AzureEmbeddings(m)
            | Endpoint::BedrockConverse(m, _)
            | Endpoint::BedrockInvoke(m, _)
            | Endpoint::VertexRawPredict(m, _) => Some(m),
            _ => None,
        }
    }

    /// How its stream is framed.
    fn framing(&self) -> Framing {
        match self {
            Endpoint::BedrockConverse(..) | Endpoint::BedrockInvoke(..) => Framing::EventStream,
            _ => Framing::Sse,
        }
    }
}

/// The API a path speaks, also for paths the mock does not serve (their 404 speaks it).
pub(crate) fn api_of(path: &str) -> Api {
    let vertex = path.starts_with("/v1/projects/") || path.starts_with("/v1beta1/projects/");
    if path.starts_with("/model/") {
        Api::Bedrock
    } else if vertex && path.contains("/publishers/anthropic/") {
        Api::Anthropic
    } else if vertex
        || path.starts_with("/v1beta/")
        || (path.starts_with("/v1/models/") && path.contains(':'))
    {
        Api::Gemini
    } else if path.starts_with("/v1/messages") {
        Api::Anthropic
    } else {
        Api::OpenAi
    }
}

/// The behaviour a path starts from: the token endpoints' own
/// ([`crate::CloudConfig::token_behavior`]) when configured, else the server's defaults.
pub(crate) fn defaults_for<'a>(path: &str, cfg: &'a ServerCfg) -> &'a Behavior {
    let token_path = path == "/token" || path.ends_with("/oauth2/v2.0/token");
    match &cfg.cloud.cfg.token_behavior {
        Some(b) if token_path => b,
        _ => &cfg.defaults,
    }
}

/// Reads the `x-mock` header over the defaults.
pub(crate) fn behavior(headers: &HeaderMap, defaults: &Behavior) -> Result<Behavior, KnobError> {
    match headers.get(MOCK_HEADER) {
        None => Ok(defaults.clone()),
        Some(v) => defaults.with_spec(v.to_str().map_err(|_| KnobError::NotUtf8)?),
    }
}

/// The 400 for a bad `x-mock` header.
pub(crate) fn knob_error(path: &str, err: &KnobError) -> Reply {
    Reply::error(
        api_of(path),
        StatusCode::BAD_REQUEST,
        &err.to_string(),
        Some("invalid_x_mock"),
    )
}

/// The error code for a missing required header: `x-session-id` → `missing_session_id`.
fn missing_code(header: &str) -> String {
    let name = header.strip_prefix("x-").unwrap_or(header);
    format!("missing_{}", name.replace('-', "_"))
}

fn retry_hint(b: &Behavior) -> RetryHint {
    RetryHint {
        secs: b.retry_after_date.or(b.retry_after).unwrap_or(1),
        date: b.retry_after_date.is_some(),
        explicit: b.retry_after.is_some() || b.retry_after_date.is_some(),
    }
}

/// The `status` knob's error (also `fail_with=STATUS`): the provider's shape for that status;
/// 429 and 503 carry `Retry-After` (1 s unless set), Gemini's 429 also a `RetryInfo`.
fn status_error(api: Api, status: StatusCode, b: &Behavior) -> Reply {
    let hint = retry_hint(b);
    let message = format!("mock status {}", status.as_u16());
    let code = format!("mock_{}", status.as_u16());
    let body = if api == Api::Gemini && status == StatusCode::TOO_MANY_REQUESTS {
        let retry = serde_json::json!({
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{}s", hint.secs),
        });
        Bytes::from(gemini_error(429, &message, vec![retry]).to_string())
    } else {
        error_body(api, status.as_u16(), &message, Some(&code))
    };
    let mut headers = error_headers(api, status.as_u16());
    if (hint.explicit || matches!(status.as_u16(), 429 | 503)) && api != Api::Bedrock {
        headers.push(("retry-after", hint.header()));
    }
    Reply::Full {
        status,
        body,
        headers,
    }
}

// === route ===

/// Everything route needs to know about the request.
pub(crate) struct Request<'a> {
    pub(crate) method: &'a Method,
    pub(crate) uri: &'a Uri,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: &'a [u8],
}

/// Decides the reply for an API request whose body has been read.
pub(crate) fn route(r: &Request<'_>, b: &Behavior, cfg: &ServerCfg) -> Routed {
    let faults = &cfg.faults;
    let path = r.uri.path();
    let api = api_of(path);
    let mut routed = Routed {
        // Every path below replaces it; a 500 (not a fault) if one ever did not.
        reply: Reply::Full {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: Bytes::from_static(b"{}"),
            headers: Vec::new(),
        },
        routing: Routing {
            api,
            model: None,
            stream: false,
            prefill: None,
            fault: None,
            auth: None,
        },
    };
    let parsed_endpoint = cloud_endpoint(path, r.uri.query())
        .or_else(|| Endpoint::parse(path, r.uri.query()).map(|e| (e, Gate::Open)));
    let Some((endpoint, gate)) = parsed_endpoint else {
        routed.reply = Reply::error(
            api,
            StatusCode::NOT_FOUND,
            &format!("unknown path {path}"),
            Some("unknown_url"),
        );
        return routed;
    };
    let expected = endpoint.method();
    if *r.method != expected {
        routed.reply = Reply::error(
            api,
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{path} takes {expected}, not {}", r.method),
            Some("method_not_allowed"),
        );
        return routed;
    }
    let header = r
        .headers
        .get(MOCK_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if matches!(endpoint, Endpoint::GoogleToken | Endpoint::EntraToken(_)) {
        token_endpoint(r, &endpoint, b, faults, header, &cfg.cloud, &mut routed);
        return routed;
    }
    // The path's model is known before the body is read, so a refused request records it.
    routed.routing.model = endpoint.path_model().map(str::to_string);
    // Credentials first, as a real front end checks them before anything else.
    if let Some(reply) = check_gate(gate, r, &cfg.cloud, &mut routed.routing) {
        routed.reply = reply;
        return routed;
    }
    if let Some(name) = &b.require_header {
        if !r.headers.contains_key(name.as_str()) {
            routed.reply = Reply::error(
                api,
                StatusCode::BAD_REQUEST,
                &format!("the required header `{name}` is missing"),
                Some(&missing_code(name)),
            );
            return routed;
        }
    }
    let parsed = serde_json::from_slice::<Value>(r.body);
    let req = parsed.as_ref().ok().filter(|v| v.is_object());
    routed.routing.model = endpoint
        .path_model()
        .or_else(|| req.and_then(model_of))
        .map(str::to_string);
    let body_stream = || {
        req.and_then(|v| v.get("stream"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    routed.routing.stream = match &endpoint {
        Endpoint::GeminiGenerate(_, d) => *d != GeminiDelivery::Whole,
        Endpoint::BedrockConverse(_, s) | Endpoint::BedrockInvoke(_, s) => *s,
        Endpoint::VertexRawPredict(_, s) => *s || body_stream(),
        _ => body_stream(),
    };
    let err_ctx = || ErrorCtx {
        model: routed.routing.model.clone(),
        prompt_tokens: req.map_or((r.body.len() / 4).max(1) as u32, |v| {
            request::prompt_tokens(api, v, r.body.len())
        }),
        retry: retry_hint(b),
    };
    // Bedrock's content filter is a filtered answer in the endpoint's own shape, not an error.
    let filtered = |kind: ErrorKind| {
        api == Api::Bedrock
            && matches!(
                kind,
                ErrorKind::ContentFilter | ErrorKind::ContentFilterAzure
            )
    };
    let mut filter_all = false;
    // Faults first: whatever else the request asks, a failing upstream fails it.
    if let Some(trigger) = faults.trigger(b, header) {
        routed.routing.fault = Some(trigger.to_string());
        let reply = match b.fail_with {
            FailWith::Status(s) => Some(status_error(
                api,
                StatusCode::from_u16(s).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                b,
            )),
            FailWith::Error(kind) if filtered(kind) => None,
            FailWith::Error(kind) => Some(typed_error(api, kind, &endpoint, &err_ctx())),
            FailWith::Reset => Some(Reply::Nothing(NoReply::Reset)),
            FailWith::Silent => Some(Reply::Nothing(NoReply::Silent)),
            FailWith::Close => Some(Reply::Nothing(NoReply::Close)),
        };
        match reply {
            Some(reply) => {
                routed.reply = reply;
                return routed;
            }
            None => filter_all = true,
        }
    }
    if b.reset_before_headers || b.silent {
        let (fault, how) = if b.reset_before_headers {
            ("reset_before_headers", NoReply::Reset)
        } else {
            ("silent", NoReply::Silent)
        };
        routed.routing.fault = Some(fault.to_string());
        routed.reply = Reply::Nothing(how);
        return routed;
    }
    if let Some(kind) = b.error {
        routed.routing.fault = Some(format!("error:{}", kind.name()));
        if filtered(kind) {
            filter_all = true;
        } else {
            routed.reply = typed_error(api, kind, &endpoint, &err_ctx());
            return routed;
        }
    }
    if let Some(status) = b.status.and_then(|s| StatusCode::from_u16(s).ok()) {
        if !status.is_success() {
            routed.routing.fault = Some("status".to_string());
            routed.reply = status_error(api, status, b);
            return routed;
        }
    }
    match &endpoint {
        Endpoint::Models => {
            routed.reply = Reply::json(StatusCode::OK, &openai::models_body());
            return routed;
        }
        Endpoint::GeminiModels => {
            routed.reply = Reply::json(StatusCode::OK, &gemini::models_body());
            return routed;
        }
        Endpoint::GeminiModel(m) => {
            routed.reply = Reply::json(StatusCode::OK, &gemini::model_body(m));
            return routed;
        }
        _ => {}
    }
    let req = match parsed {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            routed.reply = Reply::error(
                api,
                StatusCode::BAD_REQUEST,
                "the request body must be a JSON object",
                Some("invalid_json"),
            );
            return routed;
        }
        Err(e) => {
            routed.reply = Reply::error(
                api,
                StatusCode::BAD_REQUEST,
                &format!("the request body is not valid JSON: {e}"),
                Some("invalid_json"),
            );
            return routed;
        }
    };
    let Some(model) = routed.routing.model.clone() else {
        routed.reply = Reply::error(
            api,
            StatusCode::BAD_REQUEST,
            "the request body has no string `model`",
            Some("missing_model"),
        );
        return routed;
    };
    let ask = Answer {
        endpoint: &endpoint,
        api,
        req: &req,
        model: &model,
        body_len: r.body.len(),
        filter_all,
    };
    routed.reply = answer(&ask, b, &mut routed);
    routed
}

/// The token endpoints: the knobs' failures in OAuth's shape, else the grant itself.
fn token_endpoint(
    r: &Request<'_>,
    endpoint: &Endpoint,
    b: &Behavior,
    faults: &crate::faults::FaultState,
    header: &str,
    cloud: &CloudState,
    routed: &mut Routed,
) {
    let fail = |status: u16| {
        cloud::fault_reply(StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE))
    };
    let kind_status = |kind: ErrorKind| match kind {
        ErrorKind::RateLimit | ErrorKind::Quota => 429,
        ErrorKind::Overloaded => 503,
        ErrorKind::Server => 500,
        ErrorKind::Auth => 401,
        _ => 400,
    };
    let fault = if let Some(trigger) = faults.trigger(b, header) {
        routed.routing.fault = Some(trigger.to_string());
        Some(match b.fail_with {
            FailWith::Status(s) => fail(s),
            FailWith::Error(kind) => fail(kind_status(kind)),
            FailWith::Reset => Reply::Nothing(NoReply::Reset),
            FailWith::Silent => Reply::Nothing(NoReply::Silent),
            FailWith::Close => Reply::Nothing(NoReply::Close),
        })
    } else if b.reset_before_headers || b.silent {
        routed.routing.fault = Some(
            if b.silent {
                "silent"
            } else {
                "reset_before_headers"
            }
            .into(),
        );
        Some(Reply::Nothing(if b.silent {
            NoReply::Silent
        } else {
            NoReply::Reset
        }))
    } else if let Some(kind) = b.error {
        routed.routing.fault = Some(format!("error:{}", kind.name()));
        Some(fail(kind_status(kind)))
    } else if let Some(s) = b.status.filter(|s| !(200..300).contains(s)) {
        routed.routing.fault = Some("status".to_string());
        Some(fail(s))
    } else {
        None
    };
    if let Some(reply) = fault {
        routed.reply = reply;
        routed.routing.auth = Some(AuthEvent::TokenRefused);
        return;
    }
    let (reply, event) = match endpoint {
        Endpoint::EntraToken(tenant) => cloud::entra_token(tenant, r.body, cloud),
        _ => cloud::google_token(r.body, cloud),
    };
    routed.reply = reply;
    routed.routing.auth = Some(event);
}

/// The credentials check of a gated path: `None` to go on, or the refusal.
fn check_gate(
    gate: Gate,
    r: &Request<'_>,
    cloud: &CloudState,
    routing: &mut Routing,
) -> Option<Reply> {
    let bearer = || {
        r.headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
    };
    match gate {
        Gate::Open => None,
        Gate::SigV4 => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            match cloud::verify_sigv4(r.method, r.uri, r.headers, r.body, &cloud.cfg, now) {
                Ok(()) => {
                    routing.auth = Some(AuthEvent::SigV4Accepted);
                    None
                }
                Err(e) => {
                    routing.auth = Some(AuthEvent::SigV4Rejected);
                    let (exception, message) = e.exception();
                    Some(Reply::Full {
                        status: StatusCode::FORBIDDEN,
                        body: Bytes::from(json!({ "message": message }).to_string()),
                        headers: vec![("x-amzn-errortype", bedrock::error_type_header(exception))],
                    })
                }
            }
        }
        Gate::Google => {
            let check = bearer().map(|t| cloud.tokens().check(t, Issuer::Google));
            let (event, reason, message) = match check {
                Some(BearerCheck::Live) => {
                    routing.auth = Some(AuthEvent::BearerAccepted);
                    return None;
                }
                None => (
                    AuthEvent::BearerMissing,
                    "CREDENTIALS_MISSING",
                    "Request is missing required authentication credential. Expected OAuth 2 \
                     access token, login cookie or other valid authentication credential. See \
                     https://developers.google.com/identity/sign-in/web/devconsole-project.",
                ),
                Some(expired_or_unknown) => (
                    if expired_or_unknown == BearerCheck::Expired {
                        AuthEvent::BearerExpired
                    } else {
                        AuthEvent::BearerUnknown
                    },
                    if expired_or_unknown == BearerCheck::Expired {
                        "ACCESS_TOKEN_EXPIRED"
                    } else {
                        "ACCESS_TOKEN_TYPE_UNSUPPORTED"
                    },
                    "Request had invalid authentication credentials. Expected OAuth 2 access \
                     token, login cookie or other valid authentication credential. See \
                     https://developers.google.com/identity/sign-in/web/devconsole-project.",
                ),
            };
            routing.auth = Some(event);
            let detail = json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "googleapis.com",
                "metadata": { "service": "aiplatform.googleapis.com", "method": "google.cloud.aiplatform.v1.PredictionService.RawPredict" },
            });
            Some(Reply::Full {
                status: StatusCode::UNAUTHORIZED,
                body: Bytes::from(gemini_error(401, message, vec![detail]).to_string()),
                headers: vec![(
                    "www-authenticate",
                    "Bearer realm=\"https://accounts.google.com/\", error=\"invalid_token\""
                        .to_string(),
                )],
            })
        }
        Gate::Azure => {
            let (event, message) = match bearer() {
                None if r.headers.contains_key("api-key") => {
                    routing.auth = Some(AuthEvent::ApiKey);
                    return None;
                }
                None => (
                    AuthEvent::BearerMissing,
                    "Access denied due to invalid subscription key or wrong API endpoint. Make \
                     sure to provide a valid key for an active subscription and use a correct \
                     regional API endpoint for your resource.",
                ),
                Some(t) => match cloud.tokens().check(t, Issuer::Entra) {
                    BearerCheck::Live => {
                        routing.auth = Some(AuthEvent::BearerAccepted);
                        return None;
                    }
                    check => (
                        if check == BearerCheck::Expired {
                            AuthEvent::BearerExpired
                        } else {
                            AuthEvent::BearerUnknown
                        },
                        "Unauthorized. Access token is missing, invalid, audience is incorrect \
                         (https://cognitiveservices.azure.com), or have expired.",
                    ),
                },
            };
            routing.auth = Some(event);
            Some(Reply::Full {
                status: StatusCode::UNAUTHORIZED,
                body: Bytes::from(
                    json!({ "error": { "code": "401", "message": message } }).to_string(),
                ),
                headers: Vec::new(),
            })
        }
    }
}

/// The typed error `kind`; Gemini's content filter is a 200 that a stream delivers as its
/// only chunk.
fn typed_error(api: Api, kind: ErrorKind, endpoint: &Endpoint, ctx: &ErrorCtx) -> Reply {
    let e = errors::typed(api, kind, ctx);
    if e.status == StatusCode::OK {
        if let Endpoint::GeminiGenerate(_, d) = endpoint {
            let item = (None, e.body.to_string());
            match d {
                GeminiDelivery::Sse => {
                    return Reply::Stream(Box::new(gemini::OneEvent(item)), Framing::Sse)
                }
                GeminiDelivery::Array => {
                    return Reply::Full {
                        status: e.status,
                        body: Bytes::from(gemini::array_body(&gemini::OneEvent(item))),
                        headers: e.headers,
                    }
                }
                GeminiDelivery::Whole => {}
            }
        }
    }
    Reply::Full {
        status: e.status,
        body: Bytes::from(e.body.to_string()),
        headers: e.headers,
    }
}

/// A well-formed generation request, as [`answer`] reads it.
struct Answer<'a> {
    endpoint: &'a Endpoint,
    api: Api,
    req: &'a Value,
    model: &'a str,
    body_len: usize,
    /// Answer with nothing but a content-filter finish (Bedrock's `error=content_filter`).
    filter_all: bool,
}

/// The answer of a generation endpoint to a well-formed request.
fn answer(a: &Answer<'_>, b: &Behavior, routed: &mut Routed) -> Reply {
    let Answer {
        endpoint,
        api,
        req,
        model,
        body_len,
        filter_all,
    } = *a;
    let stream = routed.routing.stream;
    let bad = |msg: &str| Reply::error(api, StatusCode::BAD_REQUEST, msg, None);
    let kind = match endpoint {
        Endpoint::Embeddings | Endpoint::AzureEmbeddings(_) => {
            return match openai::embeddings_body(model, req) {
                Ok(v) => Reply::json(StatusCode::OK, &v),
                Err(msg) => Reply::error(api, StatusCode::BAD_REQUEST, &msg, Some("invalid_input")),
            }
        }
        Endpoint::CountTokens => {
            if !req.get("messages").is_some_and(Value::is_array) {
                return bad("messages: Field required");
            }
            let n = request::prompt_tokens(api, req, body_len);
            return Reply::json(StatusCode::OK, &anthropic::count_tokens_body(n));
        }
        Endpoint::GeminiCount(_) => {
            // `{"contents":[...]}` or `{"generateContentRequest":{...}}` (the API's two forms).
            let inner = req.get("generateContentRequest").unwrap_or(req);
            let n = request::prompt_tokens(api, inner, body_len);
            return Reply::json(StatusCode::OK, &gemini::count_tokens_body(n));
        }
        Endpoint::GeminiGenerate(..) => {
            if let Err(msg) = gemini::validate(req) {
                return bad(&msg);
            }
            Kind::Gemini
        }
        Endpoint::Chat | Endpoint::AzureChat(_) => Kind::Chat,
        Endpoint::Completions | Endpoint::AzureCompletions(_) => Kind::Completions,
        Endpoint::Responses => Kind::Responses,
        Endpoint::Messages => {
            if req.get("max_tokens").and_then(Value::as_u64).is_none() {
                return bad("max_tokens: Field required");
            }
            Kind::Messages
        }
        Endpoint::VertexRawPredict(..) => {
            if req.get("model").is_some() {
                return bad("model: Extra inputs are not permitted");
            }
            match req.get("anthropic_version").and_then(Value::as_str) {
                Some(v) if v == sluice_providers::vertex::ANTHROPIC_VERSION => {}
                Some(_) => return bad("anthropic_version: Input should be 'vertex-2023-10-16'"),
                None => return bad("anthropic_version: Field required"),
            }
            if req.get("max_tokens").and_then(Value::as_u64).is_none() {
                return bad("max_tokens: Field required");
            }
            Kind::Messages
        }
        Endpoint::BedrockConverse(..) => {
            if let Err(msg) = bedrock::validate_converse(req) {
                return bad(&msg);
            }
            Kind::Converse
        }
        Endpoint::BedrockInvoke(..) => {
            if let Err(msg) = bedrock::validate_invoke(req) {
                return bad(&msg);
            }
            Kind::Messages
        }
        Endpoint::Models
        | Endpoint::GeminiModels
        | Endpoint::GeminiModel(_)
        | Endpoint::GoogleToken
        | Endpoint::EntraToken(_) => {
            // Listings and token grants are answered before this; never reached.
            return Reply::error(
                api,
                StatusCode::INTERNAL_SERVER_ERROR,
                "listing routed as a generation",
                None,
            );
        }
    };
    // Anthropic bodies on Bedrock and Vertex are read as Anthropic's, whatever the path's
    // error shape.
    let body_api = if kind == Kind::Messages {
        Api::Anthropic
    } else {
        api
    };
    let (ask, prefill) = request::ask(kind, body_api, req, model, body_len);
    if let Some(p) = &prefill {
        if b.prefill == PrefillMode::Reject {
            routed.routing.fault = Some("prefill_rejected".to_string());
            routed.routing.prefill = Some(PrefillRecord {
                bytes: p.text.len(),
                continued: false,
            });
            return prefill_rejected(api);
        }
        if body_api == Api::Anthropic && p.text.ends_with(char::is_whitespace) {
            // The real API's rule (anthropics docs on prefill; tailcallhq/forgecode#1872).
            return bad("messages: final assistant content cannot end with trailing whitespace");
        }
    }
    // Reasoning: the request's thinking settings and the signed thinking in its history,
    // checked as the real APIs check them.
    let checked = match kind {
        Kind::Messages => thinking::check_anthropic(req),
        Kind::Gemini => thinking::check_gemini(req, model),
        _ => Ok(()),
    };
    if let Err(msg) = checked {
        routed.routing.fault = Some("thinking_rejected".to_string());
        return bad(&msg);
    }
    let (mut c, continued) = Completion::build(ask, b);
    if thinking::wanted(kind, req) {
        c.think(kind);
    }
    if let (Some(p), Some(continued)) = (&prefill, continued) {
        routed.routing.prefill = Some(PrefillRecord {
            bytes: p.text.len(),
            continued,
        });
    }
    if filter_all {
        c.filter_after(0);
    }
    if let Some(n) = b.filter_after {
        c.filter_after(n);
    }
    let mut cut = None;
    if let (true, Some((n, kind))) = (stream, b.stream_error_after) {
        routed.routing.fault = Some(format!("stream_error:{}", kind.name()));
        match kind {
            // A filter mid-stream is the provider's content-filter finish, not an error event.
            ErrorKind::ContentFilter | ErrorKind::ContentFilterAzure => c.filter_after(n),
            _ => cut = Some((n as usize, kind)),
        }
    }
    let include_usage = req
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let seq: Box<dyn EventSeq> = match (kind, stream, endpoint) {
        (Kind::Chat, false, _) => return Reply::json(StatusCode::OK, &openai::chat_body(&c)),
        (Kind::Completions, false, _) => {
            return Reply::json(StatusCode::OK, &openai::completions_body(&c))
        }
        (Kind::Responses, false, _) => {
            return Reply::json(StatusCode::OK, &responses::response_object(&c, true))
        }
        (Kind::Messages, false, _) => {
            return Reply::json(StatusCode::OK, &anthropic::message_body(&c))
        }
        (Kind::Gemini, false, _) => return Reply::json(StatusCode::OK, &gemini::generate_body(&c)),
        (Kind::Converse, false, _) => {
            return Reply::json(StatusCode::OK, &bedrock::converse_body(&c))
        }
        (Kind::Chat, true, _) => Box::new(openai::ChatStream { c, include_usage }),
        (Kind::Completions, true, _) => Box::new(openai::CompletionsStream { c, include_usage }),
        (Kind::Responses, true, _) => Box::new(responses::ResponseStream { c }),
        (Kind::Messages, true, Endpoint::BedrockInvoke(..)) => {
            Box::new(bedrock::InvokeChunks(Box::new(anthropic::MessageStream {
                c,
            })))
        }
        (Kind::Messages, true, _) => Box::new(anthropic::MessageStream { c }),
        (Kind::Gemini, true, _) => Box::new(gemini::GenerateStream { c }),
        (Kind::Converse, true, _) => Box::new(bedrock::ConverseStream { c }),
    };
    let seq: Box<dyn EventSeq> = match cut {
        Some((n, error)) => {
            let content = seq.content();
            let at = content.start + n.min(content.len());
            let ctx = ErrorCtx {
                model: Some(model.to_string()),
                prompt_tokens: request::prompt_tokens(body_api, req, body_len),
                retry: retry_hint(b),
            };
            let last = errors::in_stream(api, kind == Kind::Responses, error, &ctx, at);
            Box::new(CutWith {
                inner: seq,
                at,
                last,
            })
        }
        None => seq,
    };
    if let Endpoint::GeminiGenerate(_, GeminiDelivery::Array) = endpoint {
        return Reply::Full {
            status: StatusCode::OK,
            body: Bytes::from(gemini::array_body(&*seq)),
            headers: Vec::new(),
        };
    }
    Reply::Stream(seq, endpoint.framing())
}

/// A model without prefill support: Anthropic's real 400 (Claude 4.6+: strands-agents/
/// sdk-python#1694); for OpenAI-compatible APIs, Mistral's documented message-order 400
/// (0xPlaygrounds/rig#708) in OpenAI's shape; Gemini has no prefill to reject.
fn prefill_rejected(api: Api) -> Reply {
    match api {
        Api::Anthropic => Reply::error(
            api,
            StatusCode::BAD_REQUEST,
            "This model does not support assistant message prefill. The conversation must end \
             with a user message.",
            None,
        ),
        _ => Reply::error(
            api,
            StatusCode::BAD_REQUEST,
            "Expected last role User or Tool (or Assistant with prefix True) for serving but got \
             assistant",
            Some("invalid_request_message_order"),
        ),
    }
}

/// Largest request body the mock reads, on either protocol; beyond it, 413.
pub(crate) const MAX_REQUEST_BODY: usize = 64 << 20;

/// The 413 for a request body over the mock's limit.
pub(crate) fn too_large(path: &str) -> Reply {
    Reply::error(
        api_of(path),
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "the request body is larger than the mock accepts ({} MiB)",
            MAX_REQUEST_BODY >> 20
        ),
        Some("request_too_large"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let g = |p, q| Endpoint::parse(p, q);
        assert_eq!(
            g("/v1beta/models/gemini-2.5-flash:generateContent", None),
            Some(Endpoint::GeminiGenerate(
                "gemini-2.5-flash".into(),
                GeminiDelivery::Whole
            ))
        );
        assert_eq!(
            g("/v1/models/g:streamGenerateContent", Some("alt=sse&key=k")),
            Some(Endpoint::GeminiGenerate("g".into(), GeminiDelivery::Sse))
        );
        assert_eq!(
            g("/v1beta/models/g:streamGenerateContent", None),
            Some(Endpoint::GeminiGenerate("g".into(), GeminiDelivery::Array))
        );
        assert_eq!(g("/v1beta/models", None), Some(Endpoint::GeminiModels));
        assert_eq!(
            g("/v1beta/models/g", None),
            Some(Endpoint::GeminiModel("g".into()))
        );
        assert_eq!(
            g("/v1/models/g", None),
            None,
            "OpenAI has no model route here"
        );
        assert_eq!(g("/v1beta/models/g:explode", None), None);
        assert_eq!(api_of("/v1/models/g:generateContent"), Api::Gemini);
        assert_eq!(api_of("/v1/messages/count_tokens"), Api::Anthropic);
        assert_eq!(api_of("/v1/models"), Api::OpenAi);
    }
}
