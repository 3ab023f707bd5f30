//! An external checker over HTTP: one POST per check of
//! `{"guardrail", "stage", "model", "texts": [...]}`, answered
//! `{"verdict": "allow" | "deny" | "modify", "reason": "...", "texts": [...]}`.
//!
//! Bounded both ways: at most `max_in_flight` checks at once (one more fails at once, and
//! `on_error` decides), each within `timeout` and never past the request's deadline, its answer
//! read up to [`MAX_ANSWER`] bytes. A slow, down or nonsensical checker is a `Failed` answer.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use sluice_config::{HttpCheck, OnError};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The most of a checker's answer read.
const MAX_ANSWER: usize = 1 << 20;

/// What a checker said.
pub(crate) enum Answer {
    Allow,
    /// Refused, with the checker's reason (shown to the client).
    Deny(String),
    /// The texts to send instead, in order.
    Modify(Vec<String>),
    /// No usable answer: slow, down, busy or nonsense (why, for the log).
    Failed(String),
}

/// A checker's settings and its bound on checks in flight.
#[derive(Debug)]
pub(crate) struct Checker {
    /// The guardrail's name, sent with each check: one policy service may serve several.
    name: String,
    config: HttpCheck,
    in_flight: Arc<Semaphore>,
}

impl Checker {
    pub(crate) fn new(name: &str, config: HttpCheck) -> Checker {
        Checker {
            name: name.to_string(),
            in_flight: Arc::new(Semaphore::new(config.max_in_flight)),
            config,
        }
    }

    pub(crate) fn on_error(&self) -> OnError {
        self.config.on_error
    }

    /// The size of the pieces of a stream it is sent.
    pub(crate) fn window(&self) -> usize {
        self.config.window
    }

    /// One check, within the checker's timeout and the request's `deadline`.
    pub(crate) async fn check(
        &self,
        stage: &str,
        model: &str,
        texts: Vec<String>,
        deadline: Instant,
    ) -> Answer {
        let Ok(_permit) = self.in_flight.clone().try_acquire_owned() else {
            return Answer::Failed(format!(
                "{} checks already in flight (max_in_flight)",
                self.config.max_in_flight
            ));
        };
        let by = deadline.min(Instant::now() + self.config.timeout);
        let limit = by.saturating_duration_since(Instant::now());
        let body = serde_json::json!({
            "guardrail": self.name,
            "stage": stage,
            "model": model,
            "texts": texts,
        });
        match tokio::time::timeout_at(by, self.post(body.to_string())).await {
            Err(_) => Answer::Failed(format!("no answer within {limit:?}")),
            Ok(Err(why)) => Answer::Failed(why),
            Ok(Ok(answer)) => answer,
        }
    }

    async fn post(&self, body: String) -> Result<Answer, String> {
        let uri = &self.config.url;
        let host = uri.host().unwrap_or("127.0.0.1");
        let port = uri.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        // Owned by this check: dropped with it at its deadline.
        let conn = async move {
            let _ = conn.await;
        };
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        for (k, v) in &self.config.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let exchange = async {
            let resp = send
                .send_request(req)
                .await
                .map_err(|e| format!("request: {e}"))?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("answer: {e}"))?
                .to_bytes();
            if !status.is_success() {
                return Err(format!("answered {status}"));
            }
            parse(&bytes)
        };
        tokio::pin!(exchange);
        tokio::select! {
            r = &mut exchange => r,
            // The connection ended first: the exchange fails at once.
            _ = conn => exchange.await,
        }
    }
}

/// A checker's answer, or why it is nonsense.
fn parse(bytes: &[u8]) -> Result<Answer, String> {
    #[derive(serde::Deserialize)]
    struct Raw {
        verdict: String,
        reason: Option<String>,
        texts: Option<Vec<String>>,
    }
    let raw: Raw = serde_json::from_slice(bytes)
        .map_err(|e| format!("its answer is not the expected JSON: {e}"))?;
    match raw.verdict.as_str() {
        "allow" => Ok(Answer::Allow),
        "deny" => Ok(Answer::Deny(
            raw.reason
                .map(|r| sluice_telemetry::untrusted::prefix(&r, 512).to_string())
                .unwrap_or_else(|| "refused by the policy service".into()),
        )),
        "modify" => raw
            .texts
            .map(Answer::Modify)
            .ok_or_else(|| "`modify` without `texts`".to_string()),
        other => Err(format!(
            "verdict {} is not allow, deny or modify",
            sluice_telemetry::untrusted::echo(other)
        )),
    }
}
