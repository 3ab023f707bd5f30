//! Local MCP servers Sluice starts and supervises: a child process speaking newline-delimited
//! JSON-RPC on stdin/stdout, initialized once by the gateway and shared by every client
//! session (a stdio server has exactly one session: ours).
//!
//! Sharing means ids and progress tokens are the gateway's: each request gets a fresh numeric
//! id (and its `progressToken` a fresh one), mapped back when the answer comes; a client's
//! `notifications/cancelled` is translated to the gateway id. Notifications that belong to no
//! request (`.../list_changed`) go to every open GET stream.
//!
//! Supervision: one task per server owns the child (`kill_on_drop`), its stdin writer, its
//! stdout reader and its stderr (logged, capped); when the child exits every pending call ends
//! with an error, and the restart policy decides whether, and after what backoff (doubling up
//! to `max_backoff`, reset after a run that lasted longer than that), it starts again. The task
//! is aborted when the gateway is dropped, which kills the child.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use sluice_config::{McpRestartPolicy, McpStdio, McpTimeouts};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::UpstreamError;
use crate::jsonrpc;
use crate::protocol::Version;

/// Messages queued for a child's stdin at most.
const STDIN_QUEUE: usize = 256;
/// Progress notifications buffered per call at most; past it they are dropped (the answer
/// is never dropped: it has its own slot).
const PROGRESS_QUEUE: usize = 64;
/// Notifications buffered per GET stream at most; past it they are dropped for that stream.
const SUBSCRIBER_QUEUE: usize = 64;
/// Most bytes of one stderr line logged.
const STDERR_LINE_CAP: usize = 512;

/// One supervised stdio server.
pub(crate) struct StdioServer {
    shared: Arc<Shared>,
    supervisor: JoinHandle<()>,
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        // Dropping the task drops the child, and `kill_on_drop` kills it.
        self.supervisor.abort();
    }
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    Starting,
    Running { version: Version, init: Value },
    Down(String),
}

struct Shared {
    name: String,
    max_message: usize,
    state: watch::Sender<State>,
    stdin: Mutex<Option<mpsc::Sender<Bytes>>>,
    pending: Mutex<HashMap<u64, Pending>>,
    subscribers: Mutex<Vec<mpsc::Sender<Bytes>>>,
    next_id: AtomicU64,
    restarts: AtomicU64,
    pid: Mutex<Option<u32>>,
    started_at: Mutex<Option<SystemTime>>,
}

struct Pending {
    /// The client's id, put back on the answer.
    client_id: Value,
    /// The client's progress token, put back on progress notifications.
    progress: Option<Value>,
    origin: u64,
    answer: Option<oneshot::Sender<Bytes>>,
    notes: mpsc::Sender<Bytes>,
}

impl StdioServer {
    /// Starts the process and its supervisor on the current runtime.
    pub(crate) fn start(
        name: &str,
        cfg: &McpStdio,
        timeouts: McpTimeouts,
        max_message: usize,
    ) -> StdioServer {
        let (state, _) = watch::channel(State::Starting);
        let shared = Arc::new(Shared {
            name: name.to_string(),
            max_message,
            state,
            stdin: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            subscribers: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            restarts: AtomicU64::new(0),
            pid: Mutex::new(None),
            started_at: Mutex::new(None),
        });
        let supervisor = tokio::spawn(supervise(shared.clone(), cfg.clone(), timeouts));
        StdioServer { shared, supervisor }
    }

    /// Waits (at most `wait`) until the server runs; its version and `initialize` result.
    pub(crate) async fn ready(&self, wait: Duration) -> Result<(Version, Value), UpstreamError> {
        let mut rx = self.shared.state.subscribe();
        let fut = async {
            loop {
                match &*rx.borrow_and_update() {
                    State::Running { version, init } => return Ok((*version, init.clone())),
                    State::Down(_) => return Err(UpstreamError::NotRunning),
                    State::Starting => {}
                }
                if rx.changed().await.is_err() {
                    return Err(UpstreamError::NotRunning);
                }
            }
        };
        tokio::time::timeout(wait, fut)
            .await
            .map_err(|_| UpstreamError::NotRunning)?
    }

    /// Sends a request; its messages come through the returned reply.
    pub(crate) async fn request(
        &self,
        mut msg: Map<String, Value>,
        origin: u64,
        wait: Duration,
    ) -> Result<StdioReply, UpstreamError> {
        self.ready(wait).await?;
        let gid = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let client_id = msg.insert("id".into(), gid.into()).unwrap_or(Value::Null);
        let progress = msg
            .get_mut("params")
            .and_then(|p| p.get_mut("_meta"))
            .and_then(Value::as_object_mut)
            .and_then(|m| {
                let original = m.remove("progressToken")?;
                m.insert("progressToken".into(), format!("sluice-{gid}").into());
                Some(original)
            });
        let (answer_tx, answer_rx) = oneshot::channel();
        let (notes_tx, notes_rx) = mpsc::channel(PROGRESS_QUEUE);
        self.shared.pending.lock().insert(
            gid,
            Pending {
                client_id,
                progress,
                origin,
                answer: Some(answer_tx),
                notes: notes_tx,
            },
        );
        let reply = StdioReply {
            shared: self.shared.clone(),
            gid,
            answer: Some(answer_rx),
            notes: notes_rx,
            done: false,
        };
        let line = Bytes::from(serde_json::to_vec(&msg).unwrap_or_default());
        let sender = self.shared.stdin.lock().clone();
        match sender {
            Some(tx) => tokio::time::timeout(wait, tx.send(line))
                .await
                .map_err(|_| UpstreamError::Timeout(wait))?
                .map_err(|_| UpstreamError::NotRunning)?,
            None => return Err(UpstreamError::NotRunning),
        }
        Ok(reply)
    }

    /// A client's notification: `notifications/cancelled` is translated to the gateway's id of
    /// the call (found by the client's id and `origin`); others go as they are.
    pub(crate) fn client_notification(&self, msg: Map<String, Value>, origin: u64) {
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if method == "notifications/cancelled" {
            let Some(rid) = msg.get("params").and_then(|p| p.get("requestId")) else {
                return;
            };
            let gid = {
                let mut pending = self.shared.pending.lock();
                let gid = pending
                    .iter()
                    .find(|(_, p)| p.origin == origin && &p.client_id == rid)
                    .map(|(g, _)| *g);
                // The call ends without an answer, as the client expects after cancelling.
                if let Some(g) = gid {
                    pending.remove(&g);
                }
                gid
            };
            if let Some(gid) = gid {
                self.shared.cancel(gid);
            }
            return;
        }
        self.shared
            .send_line(Bytes::from(serde_json::to_vec(&msg).unwrap_or_default()));
    }

    /// A stream of the server's notifications that belong to no request.
    pub(crate) fn subscribe(&self) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let mut subs = self.shared.subscribers.lock();
        subs.retain(|s| !s.is_closed());
        subs.push(tx);
        rx
    }

    /// The admin view of the process.
    pub(crate) fn snapshot(&self) -> Value {
        let state = match &*self.shared.state.borrow() {
            State::Starting => json!("starting"),
            State::Running { version, .. } => json!({ "running": version.as_str() }),
            State::Down(why) => json!({ "down": why }),
        };
        json!({
            "transport": "stdio",
            "process": state,
            "pid": *self.shared.pid.lock(),
            "restarts": self.shared.restarts.load(Ordering::Relaxed),
            "started_unix": self.shared.started_at.lock().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(|d| d.as_secs()),
            "in_flight": self.shared.pending.lock().len(),
        })
    }
}

impl Shared {
    fn send_line(&self, line: Bytes) {
        if let Some(tx) = self.stdin.lock().as_ref() {
            // Best effort: a full stdin queue means the process is not reading; the call's
            // own deadline ends it.
            let _ = tx.try_send(line);
        }
    }

    fn cancel(&self, gid: u64) {
        let note = jsonrpc::request_body(
            None,
            "notifications/cancelled",
            Some(json!({ "requestId": gid, "reason": "the client went away" })),
        );
        self.send_line(note);
    }

    /// One line from the child's stdout.
    fn on_message(&self, line: &[u8]) {
        let Ok(Value::Object(mut msg)) = serde_json::from_slice::<Value>(line) else {
            tracing::debug!(server = %self.name, "stdio server wrote a line that is not a JSON-RPC object");
            return;
        };
        let has_method = msg.contains_key("method");
        let gid = msg.get("id").and_then(Value::as_u64);
        match (has_method, gid, msg.contains_key("id")) {
            // A response to one of ours.
            (false, Some(gid), _) => {
                let Some(mut p) = self.pending.lock().remove(&gid) else {
                    return;
                };
                msg.insert("id".into(), p.client_id.clone());
                if let Some(tx) = p.answer.take() {
                    let _ = tx.send(Bytes::from(serde_json::to_vec(&msg).unwrap_or_default()));
                }
            }
            // A request from the server: `ping` is answered; nothing else can be routed.
            (true, _, true) => {
                let id = msg.get("id").cloned().unwrap_or(Value::Null);
                let body = if msg.get("method").and_then(Value::as_str) == Some("ping") {
                    jsonrpc::result_body(&id, json!({}))
                } else {
                    jsonrpc::error_body(
                        Some(&id),
                        &jsonrpc::Rejection::new(
                            jsonrpc::METHOD_NOT_FOUND,
                            "the gateway does not route server-to-client requests",
                        ),
                    )
                };
                self.send_line(body);
            }
            (true, _, false) => self.on_notification(msg),
            _ => {}
        }
    }

    fn on_notification(&self, mut msg: Map<String, Value>) {
        let token = msg
            .get("params")
            .and_then(|p| p.get("progressToken"))
            .and_then(Value::as_str)
            .and_then(|t| t.strip_prefix("sluice-"))
            .and_then(|t| t.parse::<u64>().ok());
        if let Some(gid) = token {
            let pending = self.pending.lock();
            let Some(p) = pending.get(&gid) else {
                return;
            };
            if let (Some(original), Some(params)) = (
                p.progress.clone(),
                msg.get_mut("params").and_then(Value::as_object_mut),
            ) {
                params.insert("progressToken".into(), original);
            }
            let _ = p
                .notes
                .try_send(Bytes::from(serde_json::to_vec(&msg).unwrap_or_default()));
            return;
        }
        let bytes = Bytes::from(serde_json::to_vec(&msg).unwrap_or_default());
        let mut subs = self.subscribers.lock();
        subs.retain(|s| !s.is_closed());
        for s in subs.iter() {
            let _ = s.try_send(bytes.clone());
        }
    }

    /// Ends every pending call: the process is gone.
    fn fail_pending(&self) {
        let drained: Vec<Pending> = self.pending.lock().drain().map(|(_, p)| p).collect();
        for mut p in drained {
            let body = jsonrpc::error_body(
                Some(&p.client_id),
                &jsonrpc::Rejection::new(
                    jsonrpc::CONNECTION_CLOSED,
                    "the MCP server process exited",
                ),
            );
            if let Some(tx) = p.answer.take() {
                let _ = tx.send(body);
            }
        }
    }
}

/// A stdio call's messages: progress first, then the answer.
pub(crate) struct StdioReply {
    shared: Arc<Shared>,
    gid: u64,
    answer: Option<oneshot::Receiver<Bytes>>,
    notes: mpsc::Receiver<Bytes>,
    done: bool,
}

impl StdioReply {
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        if let Poll::Ready(Some(n)) = self.notes.poll_recv(cx) {
            return Poll::Ready(Some(Ok(n)));
        }
        let Some(answer) = self.answer.as_mut() else {
            return Poll::Ready(None);
        };
        match std::pin::Pin::new(answer).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.answer = None;
                self.done = true;
                match r {
                    Ok(body) => Poll::Ready(Some(Ok(body))),
                    // Cancelled by the client: nothing more comes.
                    Err(_) => Poll::Ready(None),
                }
            }
        }
    }
}

use std::future::Future as _;

impl Drop for StdioReply {
    fn drop(&mut self) {
        if !self.done && self.shared.pending.lock().remove(&self.gid).is_some() {
            self.shared.cancel(self.gid);
        }
    }
}

// === supervision ===

async fn supervise(shared: Arc<Shared>, cfg: McpStdio, timeouts: McpTimeouts) {
    let mut backoff = cfg.restart.backoff;
    loop {
        let started = Instant::now();
        let _ = shared.state.send(State::Starting);
        let outcome = run_once(&shared, &cfg, timeouts).await;
        *shared.stdin.lock() = None;
        *shared.pid.lock() = None;
        shared.fail_pending();
        let failed = match &outcome {
            Ok(status) => !status.success(),
            Err(_) => true,
        };
        let why = match &outcome {
            Ok(status) => format!("exited ({status})"),
            Err(e) => e.clone(),
        };
        tracing::warn!(server = %shared.name, reason = %why, "MCP stdio server stopped");
        let again = match cfg.restart.policy {
            McpRestartPolicy::Always => true,
            McpRestartPolicy::OnFailure => failed,
            McpRestartPolicy::Never => false,
        };
        if !again {
            let _ = shared.state.send(State::Down(why));
            return;
        }
        let _ = shared.state.send(State::Down(format!("{why}; restarting")));
        if started.elapsed() > cfg.restart.max_backoff {
            backoff = cfg.restart.backoff;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(cfg.restart.max_backoff);
        shared.restarts.fetch_add(1, Ordering::Relaxed);
    }
}

fn command(cfg: &McpStdio) -> Command {
    let mut cmd = Command::new(&cfg.program);
    cmd.args(&cfg.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for k in &cfg.inherit_env {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    for (k, v) in &cfg.env {
        cmd.env(k, v);
    }
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    cmd
}

/// Runs the process once: start, initialize, serve until it exits or breaks.
async fn run_once(
    shared: &Arc<Shared>,
    cfg: &McpStdio,
    timeouts: McpTimeouts,
) -> Result<std::process::ExitStatus, String> {
    let mut child: Child = command(cfg)
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", cfg.program))?;
    *shared.pid.lock() = child.id();
    *shared.started_at.lock() = Some(SystemTime::now());
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("the process has no pipes".into());
    };
    let (tx, mut rx) = mpsc::channel::<Bytes>(STDIN_QUEUE);
    *shared.stdin.lock() = Some(tx);

    let writer = async move {
        let mut stdin = stdin;
        while let Some(line) = rx.recv().await {
            if stdin.write_all(&line).await.is_err() || stdin.write_all(b"\n").await.is_err() {
                return "its stdin closed".to_string();
            }
            let _ = stdin.flush().await;
        }
        "stopped".to_string()
    };
    let reader = async {
        let mut out = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line_capped(&mut out, &mut line, shared.max_message).await {
                Ok(0) => return "its stdout closed".to_string(),
                Ok(_) => shared.on_message(trim_eol(&line)),
                Err(e) => return format!("reading its stdout: {e}"),
            }
        }
    };
    let name = shared.name.clone();
    let logger = async move {
        let mut err = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line_capped(&mut err, &mut line, STDERR_LINE_CAP).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let text = String::from_utf8_lossy(trim_eol(&line));
                    tracing::debug!(server = %name, stderr = %sluice_telemetry::untrusted::Untrusted::message(&text), "MCP stdio server");
                }
            }
        }
    };
    let init = async {
        match initialize(shared, timeouts.connect.max(timeouts.list)).await {
            Ok((version, result)) => {
                let _ = shared.state.send(State::Running {
                    version,
                    init: result,
                });
                tracing::info!(server = %shared.name, version = version.as_str(), "MCP stdio server running");
                std::future::pending::<String>().await
            }
            Err(e) => format!("initialize failed: {e}"),
        }
    };
    tokio::pin!(writer, reader, logger, init);
    let mut logger_done = false;
    let broke = loop {
        tokio::select! {
            status = child.wait() => return status.map_err(|e| e.to_string()),
            why = &mut writer => break why,
            why = &mut reader => break why,
            why = &mut init => break why,
            () = &mut logger, if !logger_done => logger_done = true,
        }
    };
    // Broken pipes or a failed initialize: the process is of no use; end it (and reap it).
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    Err(broke)
}

async fn initialize(shared: &Arc<Shared>, wait: Duration) -> Result<(Version, Value), String> {
    let gid = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let (answer_tx, answer_rx) = oneshot::channel();
    let (notes_tx, _notes_rx) = mpsc::channel(1);
    shared.pending.lock().insert(
        gid,
        Pending {
            client_id: gid.into(),
            progress: None,
            origin: 0,
            answer: Some(answer_tx),
            notes: notes_tx,
        },
    );
    let msg = jsonrpc::request_body(
        Some(&gid.into()),
        "initialize",
        Some(json!({
            "protocolVersion": Version::V2025_11_25.as_str(),
            "capabilities": {},
            "clientInfo": { "name": "sluice", "version": env!("CARGO_PKG_VERSION") },
        })),
    );
    shared.send_line(msg);
    let body = tokio::time::timeout(wait, answer_rx)
        .await
        .map_err(|_| format!("no answer within {wait:?}"))?
        .map_err(|_| "the process went away".to_string())?;
    let result = match jsonrpc::answer_of(&body, &gid.into()) {
        Some(Ok(r)) => r,
        Some(Err(rej)) => return Err(rej.message),
        None => return Err("not a JSON-RPC response".into()),
    };
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .and_then(Version::parse)
        .filter(|v| !v.is_modern())
        .ok_or("an unknown protocolVersion")?;
    shared.send_line(jsonrpc::request_body(
        None,
        "notifications/initialized",
        None,
    ));
    Ok((version, result))
}

/// Reads one line (through `\n`) into `buf`, keeping at most `cap` bytes of it (the rest of an
/// overlong line is read and dropped, and the line reported as empty, so one bad message does
/// not desynchronise the stream).
async fn read_line_capped<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<usize> {
    let mut total = 0;
    let mut over = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(total);
        }
        let (chunk, found) = match memchr_nl(avail) {
            Some(i) => (&avail[..=i], true),
            None => (avail, false),
        };
        let n = chunk.len();
        if !over && buf.len() + n <= cap + 1 {
            buf.extend_from_slice(chunk);
        } else {
            over = true;
            buf.clear();
        }
        total += n;
        r.consume(n);
        if found {
            return Ok(total);
        }
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_dropped_whole() {
        let data: &[u8] = b"short\nxxxxxxxxxxxxxxxxxxxxxxxx\nnext\n";
        let mut r = BufReader::with_capacity(4, data);
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        loop {
            buf.clear();
            if read_line_capped(&mut r, &mut buf, 8).await.unwrap() == 0 {
                break;
            }
            lines.push(String::from_utf8(trim_eol(&buf).to_vec()).unwrap());
        }
        assert_eq!(lines, ["short", "", "next"]);
    }
}
