//! How a request ended: the one vocabulary of outcomes that metrics, logs, traces and the
//! dashboard share.

/// Declares [`EndReason`] with [`EndReason::ALL`] and [`EndReason::as_str`] from one list, so
/// that what the dashboard and the metrics iterate cannot leave a variant out (a hand-kept
/// list once missed six of them).
macro_rules! end_reasons {
    ($($(#[$doc:meta])* $name:ident => $label:literal,)+) => {
        /// How a request ended. Low cardinality: used as a metric label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum EndReason {
            $($(#[$doc])* $name,)+
        }

        impl EndReason {
            /// Every end reason, in declaration order: `ALL[r as usize] == r`.
            pub const ALL: [EndReason; [$(EndReason::$name),+].len()] = [$(EndReason::$name),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EndReason::$name => $label,)+
                }
            }
        }
    };
}

end_reasons! {
    /// The whole response reached the client.
    Completed => "completed",
    /// The client went away first.
    ClientGone => "client_gone",
    /// The upstream reset the stream or closed the connection mid-response.
    UpstreamReset => "upstream_reset",
    /// The upstream ended in the middle of an SSE event.
    UpstreamEofMidEvent => "upstream_eof_mid_event",
    /// No response headers within `first_byte`.
    FirstByteTimeout => "first_byte_timeout",
    /// A stream's first content did not come within `first_token`.
    FirstTokenTimeout => "first_token_timeout",
    /// No event within `idle`.
    IdleTimeout => "idle_timeout",
    /// The exchange exceeded `total`.
    TotalTimeout => "total_timeout",
    /// The request body was over `max_request_body`.
    BodyTooLarge => "body_too_large",
    /// A non-streaming response was over `max_response_body`.
    ResponseTooLarge => "response_too_large",
    /// One SSE event was over `max_event_bytes`.
    EventTooLarge => "event_too_large",
    /// The request was malformed or not routable (4xx from the gateway itself).
    BadRequest => "bad_request",
    /// The upstream could not be reached or failed before answering.
    UpstreamError => "upstream_error",
    /// Ended by a graceful shutdown's deadline.
    Shutdown => "shutdown",
    /// The client did not send its request body in time.
    ClientTimeout => "client_timeout",
    /// The gateway's memory budget for buffered bodies was spent.
    OverBudget => "memory_budget",
    /// Refused for its key: missing, unknown, revoked (401), or not allowed the route or
    /// model (403).
    Unauthorized => "unauthorized",
    /// Refused by a rate, token, concurrency or budget limit (429).
    Limited => "limited",
    /// The state store of limits failed (`fail_closed`) or was full (503).
    StateUnavailable => "state_unavailable",
    /// A stream outgrew its key's token limit (`cut_streams`) and was cut.
    TokenCap => "token_cap",
    /// Refused by a guardrail: a request before any upstream attempt (400), or an answer
    /// ended mid-stream.
    ContentBlocked => "content_blocked",
}
