"""The official openai and anthropic Python SDKs through a Sluice gateway whose route has a
guardrail (`no-pii`: cards and API keys redacted, private keys denied), with the sluice mock
behind it, told what to answer with its `say` knob, 3 bytes an event.

Usage: python guardrails_sdk.py GATEWAY_URL

A secret split across stream events reaches the SDK redacted (OpenAI chunks, Anthropic
events); a denied prompt is the SDK's BadRequestError with code content_blocked; a deny
mid-stream is the SDK's APIError. Run by crates/sluice-gateway/tests/guardrails.rs. Prints
'N passed, M failed'.
"""

import sys

import anthropic
import openai
import checks

BASE = sys.argv[1].rstrip("/")
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-mock", max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key="sk-ant-mock", max_retries=0)

SAID = "the key is sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234 and card 4111111111111111 ok"
WANT = "the key is [REDACTED:api_key] and card [REDACTED:card] ok"
MOCK = {"x-mock": f"say={SAID}, token_bytes=3"}


def test_openai_stream_is_redacted_across_chunks():
    raw = oai.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
        extra_headers=MOCK)
    # The input check's verdict, then the output guardrail watching the stream.
    assert raw.headers.get("x-sluice-guardrails") == "no-pii(allow),no-pii(watch)", raw.headers
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == WANT, text
    assert len(chunks) > 10, "the answer came in many chunks"


def test_openai_whole_answer_is_redacted():
    r = oai.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], extra_headers=MOCK)
    assert r.choices[0].message.content == WANT, r.choices[0].message.content


def test_anthropic_stream_is_redacted_across_events():
    with ant.messages.stream(model="claude-sonnet-4", max_tokens=200,
                             messages=[{"role": "user", "content": "hi"}],
                             extra_headers=MOCK) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == WANT, text
    assert final.content[0].text == WANT, final


def test_openai_responses_stream_and_its_final_text_are_redacted():
    stream = oai.responses.create(model="gpt-4o", input="hi", stream=True, extra_headers=MOCK)
    deltas, final = "", None
    for ev in stream:
        if ev.type == "response.output_text.delta":
            deltas += ev.delta
        elif ev.type == "response.completed":
            final = ev.response.output_text
    assert deltas == WANT, deltas
    assert final == WANT, final


def test_openai_denied_prompt_is_bad_request_content_blocked():
    try:
        oai.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "-----BEGIN PRIVATE KEY-----\nMII"}])
    except openai.BadRequestError as e:
        assert e.code == "content_blocked", e.body
        assert "no-pii" in str(e), e
    else:
        raise AssertionError("the prompt was not refused")


def test_openai_deny_mid_stream_is_an_api_error():
    said = "fine words " * 20 + "-----BEGIN PRIVATE KEY----- then more"
    stream = oai.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
        extra_headers={"x-mock": f"say={said}, token_bytes=5"})
    text = ""
    try:
        for c in stream:
            if c.choices:
                text += c.choices[0].delta.content or ""
    except openai.APIError as e:
        assert "content_blocked" in str(e) or "guardrail" in str(e), e
    else:
        raise AssertionError("the stream was not stopped: " + text)
    assert "PRIVATE" not in text, text


if __name__ == "__main__":
    checks.run([(n, f) for n, f in list(globals().items())
                if n.startswith("test_") and callable(f)])
