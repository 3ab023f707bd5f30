//! `on_client_disconnect = "drain"`: after the client left, read the upstream to its end
//! without forwarding, and log the last usage it reported (for billing by tokens).

use sluice_sse::{Decoder, Item};
use sluice_upstream::ResponseBody;
use tokio::time::Instant;

/// Reads `upstream` to its end (bounded by `deadline`) and logs what it reported. A Bedrock
/// stream's frames go through its translator (`bedrock`) into the decoder first.
pub(super) async fn drain(
    upstream: ResponseBody,
    mut decoder: Decoder,
    mut bedrock: Option<Box<super::aws::AwsFeed>>,
    deadline: Instant,
    request_id: String,
) {
    use http_body_util::BodyExt;
    let mut usage: Option<serde_json::Value> = None;
    let mut events = 0u64;
    let mut body = upstream;
    let outcome = tokio::time::timeout_at(deadline, async {
        loop {
            let end = match body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        match bedrock.as_mut() {
                            Some(b) => b.feed(&d, false, &mut |e| decoder.feed(e)),
                            None => decoder.feed(d),
                        }
                    }
                    false
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => {
                    if let Some(b) = bedrock.as_mut() {
                        b.feed(&[], true, &mut |e| decoder.feed(e));
                    }
                    decoder.finish();
                    true
                }
            };
            while let Some(Ok(item)) = decoder.next_item() {
                if let Item::Event(ev) = item {
                    events += 1;
                    if let Some(u) = usage_of(ev.data()) {
                        usage = Some(u);
                    }
                }
            }
            if end {
                return Ok(());
            }
        }
    })
    .await;
    let outcome = match outcome {
        Ok(Ok(())) => "drained".to_string(),
        Ok(Err(e)) => format!("upstream error: {e}"),
        Err(_) => "total timeout".to_string(),
    };
    tracing::info!(
        target: "sluice::drain",
        request_id = %request_id,
        events,
        usage = %usage.map(|u| u.to_string()).unwrap_or_default(),
        outcome = %outcome,
        "drained after client disconnect"
    );
}

/// The token usage an event reports: OpenAI's `usage` (final chunk), Anthropic's
/// `message_delta.usage` or `message_start.message.usage`, Responses' `response.usage`.
fn usage_of(data: &[u8]) -> Option<serde_json::Value> {
    // Cheap filter first: most events carry no usage.
    if !data.windows(7).any(|w| w == b"\"usage\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(data).ok()?;
    let found = [
        v.get("usage"),
        v.pointer("/message/usage"),
        v.pointer("/response/usage"),
    ]
    .into_iter()
    .flatten()
    .find(|u| u.is_object())
    .cloned();
    found
}

#[cfg(test)]
mod tests {
    use super::usage_of;

    #[test]
    fn usage_from_each_format() {
        assert_eq!(
            usage_of(br#"{"choices":[],"usage":{"completion_tokens":3}}"#).unwrap()
                ["completion_tokens"],
            3
        );
        assert_eq!(
            usage_of(br#"{"type":"message_delta","usage":{"output_tokens":5}}"#).unwrap()
                ["output_tokens"],
            5
        );
        assert!(usage_of(br#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#).is_none());
        assert!(usage_of(b"[DONE]").is_none());
    }
}
