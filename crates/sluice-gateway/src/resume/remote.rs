//! A reconnect served from another instance's log in Redis: the entries after the client's
//! last event, polled until the end marker.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use sluice_state::{LogEntry, StreamLogs, STREAM_LOG_POLL};

/// A heartbeat this often while the log has nothing new (as the relay's own).
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How often a silent log's owner key is checked (gone: expired, the reader ends).
const CHECK_EVERY: u32 = 50;
/// Failed reads in a row (a slow or restarting Redis) before the reader gives up.
const MAX_ERRORS: u32 = 100;

struct State {
    logs: StreamLogs,
    id: String,
    after: u64,
    queue: VecDeque<LogEntry>,
    idle: u32,
    errors: u32,
    done: bool,
}

/// The body of a reconnect to stream `id` after event `after`, read from Redis.
pub(crate) fn remote_body(logs: StreamLogs, id: String, after: u64) -> crate::mount::MountedBody {
    let state = State {
        logs,
        id,
        after,
        queue: VecDeque::new(),
        idle: 0,
        errors: 0,
        done: false,
    };
    let frames = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            match st.queue.pop_front() {
                Some(LogEntry::Event(n, b)) => {
                    st.after = n;
                    st.idle = 0;
                    return Some((Ok::<_, Infallible>(Frame::data(b)), st));
                }
                Some(LogEntry::End(_)) => return None,
                None => {}
            }
            match st.logs.read(&st.id, Some(st.after)).await {
                Ok(entries) if !entries.is_empty() => {
                    st.errors = 0;
                    st.queue.extend(entries);
                }
                Ok(_) => {
                    st.errors = 0;
                    st.idle += 1;
                    if st.idle % CHECK_EVERY == 0 {
                        // Expired (or never ended and gone): nothing more will come.
                        if !matches!(st.logs.owner(&st.id).await, Ok(Some(_))) {
                            st.done = true;
                            continue;
                        }
                    }
                    if STREAM_LOG_POLL * st.idle >= HEARTBEAT {
                        st.idle = 1;
                        return Some((Ok(Frame::data(Bytes::from_static(b": ping\n\n"))), st));
                    }
                    tokio::time::sleep(STREAM_LOG_POLL).await;
                }
                Err(e) => {
                    st.errors += 1;
                    if st.errors >= MAX_ERRORS {
                        tracing::warn!(stream = %st.id, error = %e, "reading a resumable stream from Redis failed; the reconnect ends");
                        st.done = true;
                    } else {
                        tokio::time::sleep(STREAM_LOG_POLL).await;
                    }
                }
            }
        }
    });
    http_body_util::StreamBody::new(frames).boxed_unsync()
}
