//! Gemini Developer API shapes (GPY = `googleapis/python-genai: google/genai/types.py`; wire
//! names are camelCase, as the SDK sends them): the `generateContent` / `countTokens`
//! request the gateway writes, the `GenerateContentResponse` it reads, usage, and the tool
//! call ids the gateway gives clients for Gemini's calls.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::usage::record::Usage;

/// A `models/{model}:generateContent` (or `:streamGenerateContent`) request body.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentRequest {
    /// `models/{model}`: only inside a `countTokens` request's `generateContentRequest`
    /// (the path names it otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The conversation.
    pub contents: Vec<Content>,
    /// The system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_instruction: Option<Content>,
    /// `[{"functionDeclarations":[...]}]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// `{"functionCallingConfig":{...}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfig>,
    /// Sampling and output settings.
    #[serde(skip_serializing_if = "GenerationConfig::is_empty")]
    pub generation_config: GenerationConfig,
}

/// A `models/{model}:countTokens` request body: the whole generate request, so that the
/// system instruction and tools are counted too (<https://ai.google.dev/api/tokens>).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CountTokensRequest {
    /// The request whose prompt is counted (with `model` set).
    pub generate_content_request: GenerateContentRequest,
}

/// A turn (GPY `Content`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Content {
    /// `user` or `model` (absent in `systemInstruction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Its parts.
    #[serde(default)]
    pub parts: Vec<Part>,
}

/// One part: exactly one data field is set (GPY `Part`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Inline bytes (GPY `Blob`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_data: Option<Blob>,
    /// Bytes by URI (GPY `FileData`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_data: Option<FileData>,
    /// A call the model made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall>,
    /// A function's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_response: Option<FunctionResponse>,
    /// The part is a thought summary (not answer text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought: Option<bool>,
    /// Opaque; must be sent back exactly with the `functionCall` part it came on (Gemini 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
}

/// `inlineData`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blob {
    /// `image/png`, `application/pdf`, `audio/wav`, ...
    pub mime_type: String,
    /// Base64.
    pub data: String,
}

/// `fileData`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileData {
    /// The content's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Where it is.
    pub file_uri: String,
}

/// `functionCall` (GPY `FunctionCall`): arrives whole, `args` an object; `id` optional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Gemini's id for the call, when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The function.
    pub name: String,
    /// The arguments.
    #[serde(default)]
    pub args: Value,
}

/// `functionResponse` (GPY `FunctionResponse`): `response` must be an object (`output` or
/// `error` key), `name` is required.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionResponse {
    /// The call's id, when Gemini gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The function.
    pub name: String,
    /// `{"output": ...}` or `{"error": ...}`.
    pub response: Value,
}

/// A tool (GPY `Tool`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// The functions.
    pub function_declarations: Vec<FunctionDeclaration>,
}

/// A function (GPY `FunctionDeclaration`). The schema goes in `parametersJsonSchema`, which
/// takes JSON Schema as is (`parameters` takes an OpenAPI subset that refuses `$schema`,
/// `additionalProperties`, `const`, ...).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionDeclaration {
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters_json_schema: Option<Value>,
}

/// `toolConfig`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfig {
    /// How functions may be called.
    pub function_calling_config: FunctionCallingConfig,
}

/// `functionCallingConfig` (GPY `FunctionCallingConfig`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCallingConfig {
    /// `AUTO`, `ANY`, `NONE`.
    pub mode: &'static str,
    /// With `ANY` only: the functions it may call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_function_names: Vec<String>,
}

/// `generationConfig` (GPY `GenerationConfig`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationConfig {
    /// Output limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<serde_json::Number>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<serde_json::Number>,
    /// Top-k sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// OpenAI's `n`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_count: Option<u64>,
    /// Seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Frequency penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<serde_json::Number>,
    /// Presence penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<serde_json::Number>,
    /// `application/json` for JSON output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_mime_type: Option<&'static str>,
    /// JSON Schema of the output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_json_schema: Option<Value>,
    /// How the model thinks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_config: Option<ThinkingConfig>,
}

/// `thinkingConfig` (GPY `ThinkingConfig`): a budget (Gemini 2.5) or a level (Gemini 3),
/// never both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThinkingConfig {
    /// Thought summaries in the answer, as `thought: true` parts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_thoughts: Option<bool>,
    /// Tokens of thinking: 0 off, -1 the model decides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<i64>,
    /// `minimal`, `low`, `medium`, `high`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<&'static str>,
}

impl GenerationConfig {
    /// Nothing set: the field is left out.
    pub fn is_empty(&self) -> bool {
        *self == GenerationConfig::default()
    }
}

/// A `GenerateContentResponse` (GPY), also each chunk of a stream.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentResponse {
    /// One per `candidateCount`; none when the prompt was blocked.
    #[serde(default)]
    pub candidates: Vec<Candidate>,
    /// Why the prompt was blocked.
    #[serde(default)]
    pub prompt_feedback: Option<PromptFeedback>,
    /// Token usage (cumulative in streams).
    #[serde(default)]
    pub usage_metadata: Option<UsageMetadata>,
    /// The model that answered.
    #[serde(default)]
    pub model_version: Option<String>,
    /// The response's id.
    #[serde(default)]
    pub response_id: Option<String>,
}

/// One candidate (GPY `Candidate`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The answer (absent when filtered).
    #[serde(default)]
    pub content: Option<Content>,
    /// `STOP`, `MAX_TOKENS`, `SAFETY`, ... (see [`crate::finish`]).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Its position.
    #[serde(default)]
    pub index: u32,
}

/// `promptFeedback` (GPY `GenerateContentResponsePromptFeedback`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptFeedback {
    /// `SAFETY`, `OTHER`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `IMAGE_SAFETY`.
    #[serde(default)]
    pub block_reason: Option<String>,
}

/// `usageMetadata` (GPY `GenerateContentResponseUsageMetadata`). Zero counts may be absent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    /// Prompt tokens, cached content included.
    #[serde(default)]
    pub prompt_token_count: u64,
    /// Answer tokens, thoughts excluded.
    #[serde(default)]
    pub candidates_token_count: u64,
    /// Thinking tokens.
    #[serde(default)]
    pub thoughts_token_count: u64,
    /// Tokens of tool-use prompts (server tools).
    #[serde(default)]
    pub tool_use_prompt_token_count: u64,
    /// Prompt tokens from cached content.
    #[serde(default)]
    pub cached_content_token_count: u64,
    /// prompt + candidates + toolUsePrompt + thoughts.
    #[serde(default)]
    pub total_token_count: u64,
}

impl UsageMetadata {
    /// Normalised usage: thoughts count as output (as OpenAI and Anthropic count reasoning),
    /// tool-use prompt tokens as input, so input + output is Gemini's total.
    pub fn to_usage(&self) -> Usage {
        Usage {
            input: self.prompt_token_count + self.tool_use_prompt_token_count,
            output: self.candidates_token_count + self.thoughts_token_count,
            cached_input: self.cached_content_token_count,
            reasoning: self.thoughts_token_count,
            cache_write: 0,
        }
    }
}

/// A `countTokens` response (GPY `CountTokensResponse`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CountTokensResponse {
    /// The prompt's tokens.
    #[serde(default)]
    pub total_tokens: u64,
}

/// Prefix of a client id that carries an id Gemini issued: the rest goes back as `id`.
const ISSUED_PREFIX: &str = "gemini_id_";
/// Prefix of the ids the gateway makes up for calls Gemini gave no id: such ids are never
/// sent back to Gemini (it did not issue them).
const SYNTHETIC_PREFIX: &str = "gemini_call_";
/// Between a call's id and the thought signature the gateway carries in it.
const SIGNATURE_SEPARATOR: &str = "__thought__";

/// The tool-call id a client gets for a Gemini `functionCall`: `gemini_id_{id}` when Gemini
/// gave an id, else `gemini_call_{index}_{response_id}`; with the part's `thoughtSignature`
/// appended (`__thought__` + the signature in the URL-safe base64 alphabet) so that it
/// comes back with the client's next request and can be returned to Gemini exactly
/// (Gemini 3 fails the request without it). The result uses only `[A-Za-z0-9_-]` when
/// Gemini's id does, so it also suits Anthropic clients and upstreams.
///
/// The prefixes let the return trip send Gemini only ids it issued: a call id from another
/// provider (`call_...`, `toolu_...`, after a fallback) or a made-up one goes back without
/// `id`, and Gemini pairs responses with calls by order and name.
///
/// `index` is the call's position among all calls of the response (streams: across chunks),
/// which keeps made-up ids unique within a response.
pub fn client_call_id(
    gemini_id: Option<&str>,
    response_id: Option<&str>,
    index: usize,
    thought_signature: Option<&str>,
) -> String {
    let mut id = match gemini_id.filter(|s| !s.is_empty()) {
        Some(g) => format!("{ISSUED_PREFIX}{g}"),
        None => {
            let mut s = format!("{SYNTHETIC_PREFIX}{index}");
            if let Some(r) = response_id.filter(|s| !s.is_empty()) {
                s.push('_');
                s.extend(r.chars().map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                }));
            }
            s
        }
    };
    if let Some(sig) = thought_signature.filter(|s| !s.is_empty()) {
        id.push_str(SIGNATURE_SEPARATOR);
        id.extend(sig.chars().filter(|&c| c != '=').map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        }));
    }
    id
}

/// What a client's tool-call id (made by [`client_call_id`], or any other provider's id)
/// means to Gemini.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeminiCallId<'a> {
    /// The `id` to send on `functionCall`/`functionResponse`: only one Gemini issued.
    pub id: Option<&'a str>,
    /// The `thoughtSignature` to send on the `functionCall` part.
    pub thought_signature: Option<String>,
}

/// Reads a client's tool-call id back (the inverse of [`client_call_id`]).
pub fn gemini_call_id(client_id: &str) -> GeminiCallId<'_> {
    let (id, signature) = match client_id.split_once(SIGNATURE_SEPARATOR) {
        Some((id, sig)) => (id, Some(sig)),
        None => (client_id, None),
    };
    let thought_signature = signature.filter(|s| !s.is_empty()).map(|sig| {
        let mut s: String = sig
            .chars()
            .map(|c| match c {
                '-' => '+',
                '_' => '/',
                c => c,
            })
            .collect();
        while s.len() % 4 != 0 {
            s.push('=');
        }
        s
    });
    GeminiCallId {
        id: id.strip_prefix(ISSUED_PREFIX).filter(|s| !s.is_empty()),
        thought_signature,
    }
}

/// The media type of an image URL, from its extension (Gemini's `fileData` needs one; OpenAI
/// and Anthropic image URLs carry none). `image/jpeg` when the URL does not say.
pub fn image_mime_from_url(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let ext = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext.to_ascii_lowercase().as_str() {
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        "pdf" => "application/pdf",
        _ => "image/jpeg",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_round_trip() {
        let sig = "CiQB+/a9bcd=";
        let id = client_call_id(None, Some("resp.1"), 2, Some(sig));
        assert!(id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        let back = gemini_call_id(&id);
        assert_eq!(back.id, None);
        assert_eq!(back.thought_signature.as_deref(), Some(sig));

        let id = client_call_id(Some("fc-7"), None, 0, None);
        assert_eq!(id, "gemini_id_fc-7");
        assert_eq!(
            gemini_call_id(&id),
            GeminiCallId {
                id: Some("fc-7"),
                thought_signature: None
            }
        );
        // Gemini sees only ids it issued.
        assert_eq!(gemini_call_id("call_abc").id, None);
        assert_eq!(gemini_call_id("toolu_01A").id, None);
    }

    #[test]
    fn signature_padding_is_restored() {
        for sig in ["QQ==", "QUI=", "QUJD", "a+b/c+d/eQ=="] {
            let id = client_call_id(Some("x"), None, 0, Some(sig));
            assert_eq!(gemini_call_id(&id).thought_signature.as_deref(), Some(sig));
        }
    }

    #[test]
    fn image_types() {
        assert_eq!(image_mime_from_url("https://x/a.PNG?sig=1"), "image/png");
        assert_eq!(image_mime_from_url("https://x/a"), "image/jpeg");
    }
}
