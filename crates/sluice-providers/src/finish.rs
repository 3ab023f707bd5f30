//! Why a generation ended, in each family's words (provider-formats.md §5).
//!
//! Every provider's reason is read into one [`Finish`] and written back out in the client's
//! family, by whole responses and streams alike. Two rules matter more than the table: a
//! Gemini candidate with `functionCall` parts finished *because of* the calls even though
//! Gemini says `STOP` (pitfall 4), and an Anthropic turn with `tool_use` blocks is `tool_use`
//! whatever came before (pitfall 3).

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Finish {
    /// A natural end (OpenAI `stop`, Anthropic `end_turn`, Gemini `STOP`).
    Stop,
    /// A stop sequence was hit (Anthropic `stop_sequence`; OpenAI and Gemini say `stop`).
    StopSequence,
    /// The output limit (`length`, `max_tokens`, `MAX_TOKENS`).
    Length,
    /// The context window is full (Anthropic `model_context_window_exceeded`); `length` and
    /// `MAX_TOKENS` for the families that have no word for it.
    ContextWindow,
    /// The model called tools (`tool_calls`, `tool_use`, Gemini `STOP` + `functionCall`).
    ToolCalls,
    /// The output was filtered or refused (`content_filter`, `refusal`, Gemini `SAFETY`,
    /// `RECITATION`, `PROHIBITED_CONTENT`, ...).
    ContentFilter,
    /// Anthropic `pause_turn` (a server tool paused; send the turn back to continue).
    Pause,
}

impl Finish {
    /// An OpenAI `finish_reason`. Unknown values read as [`Finish::Stop`].
    pub fn from_openai(reason: &str) -> Finish {
        match reason {
            "length" => Finish::Length,
            "tool_calls" | "function_call" => Finish::ToolCalls,
            "content_filter" => Finish::ContentFilter,
            _ => Finish::Stop,
        }
    }

    /// An Anthropic `stop_reason`. Unknown values read as [`Finish::Stop`].
    pub fn from_anthropic(reason: &str) -> Finish {
        match reason {
            "stop_sequence" => Finish::StopSequence,
            "max_tokens" => Finish::Length,
            "model_context_window_exceeded" => Finish::ContextWindow,
            "tool_use" => Finish::ToolCalls,
            "refusal" => Finish::ContentFilter,
            "pause_turn" => Finish::Pause,
            _ => Finish::Stop,
        }
    }

    /// A Bedrock Converse `stopReason` (botocore `bedrock-runtime` `StopReason`). A guardrail
    /// or content filter that stopped the answer is a filtered answer; a malformed output or
    /// tool call ends the answer without a usable call, as Gemini's `MALFORMED_FUNCTION_CALL`
    /// does. Unknown values read as [`Finish::Stop`].
    pub fn from_bedrock(reason: &str) -> Finish {
        match reason {
            "tool_use" => Finish::ToolCalls,
            "max_tokens" => Finish::Length,
            "stop_sequence" => Finish::StopSequence,
            "guardrail_intervened" | "content_filtered" => Finish::ContentFilter,
            "model_context_window_exceeded" => Finish::ContextWindow,
            // end_turn, malformed_model_output, malformed_tool_use and anything newer.
            _ => Finish::Stop,
        }
    }

    /// A Gemini `finishReason`; `has_function_calls` when the candidate's parts include a
    /// `functionCall` (Gemini says `STOP` for those).
    pub fn from_gemini(reason: &str, has_function_calls: bool) -> Finish {
        // The one reading of Gemini's reasons, for bodies and streams alike (the table in
        // provider-formats.md §5, LiteLLM's): an answer cut for any reason but its own end or
        // its limit is a filtered one, so that a client never takes a withheld answer for a
        // complete `stop`. `LANGUAGE` (an unsupported language), `OTHER`, `NO_IMAGE` and
        // `IMAGE_OTHER` end the answer without the model finishing it.
        let finish = match reason {
            "MAX_TOKENS" => Finish::Length,
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION"
            | "LANGUAGE"
            | "OTHER"
            | "NO_IMAGE"
            | "IMAGE_OTHER" => Finish::ContentFilter,
            // STOP, FINISH_REASON_UNSPECIFIED, MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL,
            // TOO_MANY_TOOL_CALLS (no usable call came back) and anything newer.
            _ => Finish::Stop,
        };
        finish.after_tools(has_function_calls)
    }

    /// A `finishReason` on a Gemini stream chunk: `None` for `FINISH_REASON_UNSPECIFIED`
    /// (the chunk finished nothing), else exactly what [`Finish::from_gemini`] reads for a
    /// whole response, so a stream and a body that end the same way end the same way for the
    /// client. Whether the answer called functions is not known from one chunk (the calls may
    /// come in an earlier one): the stream applies [`Finish::after_tools`] when it writes the
    /// reason, the rule [`Finish::from_gemini`] applies with `has_function_calls`.
    pub(crate) fn from_gemini_chunk(reason: &str) -> Option<Finish> {
        match reason {
            "FINISH_REASON_UNSPECIFIED" => None,
            other => Some(Finish::from_gemini(other, false)),
        }
    }

    /// A natural end (or a stop sequence) after tool calls is a tool-call stop: Gemini says
    /// `STOP` after `functionCall` parts, and some OpenAI-compatible servers say `stop` after
    /// tool calls; agents that wait for `tool_calls`/`tool_use` would otherwise stop with the
    /// calls unanswered (pitfalls 3 and 4). Whole responses and streams both end by this rule.
    pub fn after_tools(self, tools_seen: bool) -> Finish {
        match self {
            Finish::Stop | Finish::StopSequence if tools_seen => Finish::ToolCalls,
            other => other,
        }
    }

    /// The OpenAI `finish_reason`.
    pub fn as_openai(self) -> &'static str {
        match self {
            Finish::Stop | Finish::StopSequence | Finish::Pause => "stop",
            Finish::Length | Finish::ContextWindow => "length",
            Finish::ToolCalls => "tool_calls",
            Finish::ContentFilter => "content_filter",
        }
    }

    /// The Anthropic `stop_reason`.
    pub fn as_anthropic(self) -> &'static str {
        match self {
            Finish::Stop => "end_turn",
            Finish::StopSequence => "stop_sequence",
            Finish::Length => "max_tokens",
            Finish::ContextWindow => "model_context_window_exceeded",
            Finish::ToolCalls => "tool_use",
            Finish::ContentFilter => "refusal",
            Finish::Pause => "pause_turn",
        }
    }

    /// The Gemini `finishReason` (tool calls are `STOP`, as Gemini says them).
    pub fn as_gemini(self) -> &'static str {
        match self {
            Finish::Stop | Finish::StopSequence | Finish::ToolCalls | Finish::Pause => "STOP",
            Finish::Length | Finish::ContextWindow => "MAX_TOKENS",
            Finish::ContentFilter => "SAFETY",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_five_table() {
        let rows = [
            ("stop", "end_turn", "STOP", Finish::Stop),
            ("length", "max_tokens", "MAX_TOKENS", Finish::Length),
            ("content_filter", "refusal", "SAFETY", Finish::ContentFilter),
        ];
        for (o, a, g, f) in rows {
            assert_eq!(Finish::from_openai(o), f);
            assert_eq!(Finish::from_anthropic(a), f);
            assert_eq!(Finish::from_gemini(g, false), f);
            assert_eq!((f.as_openai(), f.as_anthropic(), f.as_gemini()), (o, a, g));
        }
        assert_eq!(Finish::from_gemini("STOP", true), Finish::ToolCalls);
        assert_eq!(Finish::from_gemini("MAX_TOKENS", true), Finish::Length);
        assert_eq!(Finish::from_anthropic("stop_sequence").as_openai(), "stop");
        assert_eq!(Finish::from_openai("tool_calls").as_anthropic(), "tool_use");
        assert_eq!(
            Finish::from_gemini("RECITATION", false).as_openai(),
            "content_filter"
        );
        let full = Finish::from_anthropic("model_context_window_exceeded");
        assert_eq!(
            (full.as_openai(), full.as_anthropic(), full.as_gemini()),
            ("length", "model_context_window_exceeded", "MAX_TOKENS")
        );
        assert_eq!(Finish::from_anthropic("pause_turn").as_openai(), "stop");
        assert_eq!(Finish::from_openai("whatever"), Finish::Stop);
    }

    #[test]
    fn bedrock_stop_reasons() {
        for (reason, openai, anthropic) in [
            ("end_turn", "stop", "end_turn"),
            ("tool_use", "tool_calls", "tool_use"),
            ("max_tokens", "length", "max_tokens"),
            ("stop_sequence", "stop", "stop_sequence"),
            ("guardrail_intervened", "content_filter", "refusal"),
            ("content_filtered", "content_filter", "refusal"),
            (
                "model_context_window_exceeded",
                "length",
                "model_context_window_exceeded",
            ),
            ("malformed_tool_use", "stop", "end_turn"),
        ] {
            let f = Finish::from_bedrock(reason);
            assert_eq!(
                (f.as_openai(), f.as_anthropic()),
                (openai, anthropic),
                "{reason}"
            );
        }
    }

    #[test]
    fn after_tools() {
        assert_eq!(Finish::Stop.after_tools(true), Finish::ToolCalls);
        assert_eq!(Finish::Stop.after_tools(false), Finish::Stop);
        assert_eq!(Finish::StopSequence.after_tools(true), Finish::ToolCalls);
        assert_eq!(
            Finish::StopSequence.after_tools(false),
            Finish::StopSequence
        );
        assert_eq!(
            Finish::ContentFilter.after_tools(true),
            Finish::ContentFilter
        );
        assert_eq!(Finish::Length.after_tools(true), Finish::Length);
    }

    #[test]
    fn gemini_stream_chunks() {
        assert_eq!(Finish::from_gemini_chunk("FINISH_REASON_UNSPECIFIED"), None);
        assert_eq!(
            Finish::from_gemini_chunk("STOP").map(|f| f.after_tools(true).as_openai()),
            Some("tool_calls")
        );
        assert_eq!(
            Finish::from_gemini_chunk("SAFETY").map(Finish::as_anthropic),
            Some("refusal")
        );
        assert_eq!(
            Finish::from_gemini_chunk("MAX_TOKENS").map(|f| f.after_tools(true)),
            Some(Finish::Length)
        );
        // Once read apart (streams said `stop`), now one reading.
        for r in [
            "LANGUAGE",
            "OTHER",
            "NO_IMAGE",
            "IMAGE_OTHER",
            "SAFETY",
            "SPII",
        ] {
            assert_eq!(Finish::from_gemini_chunk(r), Some(Finish::ContentFilter));
            assert_eq!(Finish::from_gemini(r, false), Finish::ContentFilter);
        }
    }
}
