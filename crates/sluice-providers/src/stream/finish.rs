//! Why an answer ended, across families (provider-formats.md §5).
//!
//! NOTE: written in parallel with the non-streaming translation's map (`crate::finish`); one of
//! the two should go when they meet.

/// Why the model stopped, in one vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// A natural end (OpenAI `stop`, Anthropic `end_turn`, Gemini `STOP`); also every reason
    /// we do not know.
    Stop,
    /// A stop sequence matched (OpenAI cannot tell it from `stop`).
    StopSequence,
    /// The output limit.
    Length,
    /// The model called tools.
    ToolUse,
    /// The output was filtered or refused.
    Filtered,
    /// Anthropic `pause_turn`: a server tool paused the turn.
    PauseTurn,
    /// Anthropic `model_context_window_exceeded`.
    ContextFull,
}

impl Finish {
    /// An OpenAI `finish_reason`.
    pub(crate) fn from_openai(s: &str) -> Finish {
        match s {
            "length" => Finish::Length,
            "tool_calls" | "function_call" => Finish::ToolUse,
            "content_filter" => Finish::Filtered,
            _ => Finish::Stop,
        }
    }

    /// An Anthropic `stop_reason`.
    pub(crate) fn from_anthropic(s: &str) -> Finish {
        match s {
            "stop_sequence" => Finish::StopSequence,
            "max_tokens" => Finish::Length,
            "tool_use" => Finish::ToolUse,
            "refusal" => Finish::Filtered,
            "pause_turn" => Finish::PauseTurn,
            "model_context_window_exceeded" => Finish::ContextFull,
            _ => Finish::Stop,
        }
    }

    /// A Gemini `finishReason`. `None` for `FINISH_REASON_UNSPECIFIED` (not a finish).
    pub(crate) fn from_gemini(s: &str) -> Option<Finish> {
        Some(match s {
            "FINISH_REASON_UNSPECIFIED" => return None,
            "MAX_TOKENS" => Finish::Length,
            "SAFETY"
            | "PROHIBITED_CONTENT"
            | "BLOCKLIST"
            | "SPII"
            | "RECITATION"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION" => Finish::Filtered,
            // STOP, the bad-tool-call reasons (MALFORMED_FUNCTION_CALL, ...), LANGUAGE, OTHER.
            _ => Finish::Stop,
        })
    }

    /// A natural end after tool calls is a tool-call stop: Gemini says `STOP` after
    /// `functionCall` parts, and some OpenAI-compatible servers say `stop` after tool calls;
    /// agents that wait for `tool_calls`/`tool_use` would otherwise stop (pitfalls 3 and 4).
    pub(crate) fn after_tools(self, tools_seen: bool) -> Finish {
        match self {
            Finish::Stop if tools_seen => Finish::ToolUse,
            other => other,
        }
    }

    /// As an OpenAI `finish_reason`.
    pub(crate) fn openai(self) -> &'static str {
        match self {
            Finish::Stop | Finish::StopSequence | Finish::PauseTurn => "stop",
            Finish::Length | Finish::ContextFull => "length",
            Finish::ToolUse => "tool_calls",
            Finish::Filtered => "content_filter",
        }
    }

    /// As an Anthropic `stop_reason`.
    pub(crate) fn anthropic(self) -> &'static str {
        match self {
            Finish::Stop => "end_turn",
            Finish::StopSequence => "stop_sequence",
            Finish::Length => "max_tokens",
            Finish::ToolUse => "tool_use",
            Finish::Filtered => "refusal",
            Finish::PauseTurn => "pause_turn",
            Finish::ContextFull => "model_context_window_exceeded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps() {
        assert_eq!(Finish::from_anthropic("tool_use").openai(), "tool_calls");
        assert_eq!(Finish::from_anthropic("max_tokens").openai(), "length");
        assert_eq!(Finish::from_anthropic("refusal").openai(), "content_filter");
        assert_eq!(Finish::from_openai("tool_calls").anthropic(), "tool_use");
        assert_eq!(Finish::from_openai("length").anthropic(), "max_tokens");
        assert_eq!(Finish::from_openai("whatever").anthropic(), "end_turn");
        assert_eq!(
            Finish::from_gemini("STOP")
                .unwrap()
                .after_tools(true)
                .openai(),
            "tool_calls"
        );
        assert_eq!(
            Finish::from_gemini("SAFETY").unwrap().anthropic(),
            "refusal"
        );
        assert_eq!(Finish::from_gemini("FINISH_REASON_UNSPECIFIED"), None);
        assert_eq!(
            Finish::from_gemini("MAX_TOKENS").unwrap().after_tools(true),
            Finish::Length
        );
    }
}
