"""The official openai and anthropic Python SDKs against a running sluice mock.

Usage: python sdk_shapes.py BASE_URL [MOCK_URL]

BASE_URL is where the SDKs send requests: the mock itself (its fidelity check, run by
crates/sluice-mock/tests/sdk.rs) or a Sluice gateway in front of it (run by
crates/sluice-gateway/tests/sdk.rs). MOCK_URL is the mock, for its /__mock/stats evidence; it
defaults to BASE_URL. Prints 'N passed, M failed' and exits non-zero on a failure.
"""

import json
import sys
import time
import urllib.request

import anthropic
import openai
import checks

BASE = sys.argv[1].rstrip("/")
MOCK = (sys.argv[2] if len(sys.argv) > 2 else BASE).rstrip("/")
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-mock", max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key="sk-ant-mock", max_retries=0)
MSG = [{"role": "user", "content": "hello"}]


def mock(spec):
    return {"x-mock": spec}


def stats():
    with urllib.request.urlopen(MOCK + "/__mock/stats") as r:
        return json.load(r)


def test_chat_non_streaming():
    r = oai.chat.completions.create(model="gpt-4o", messages=MSG, extra_headers=mock("tokens=5"))
    assert r.object == "chat.completion"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 5
    assert r.choices[0].message.content


def test_chat_stream_with_usage():
    s = oai.chat.completions.create(
        model="gpt-4o", messages=MSG, stream=True,
        stream_options={"include_usage": True}, extra_headers=mock("tokens=6"))
    text, usage, finish = "", None, None
    for chunk in s:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert usage.completion_tokens == 6, usage
    assert finish == "stop"
    full = oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_headers=mock("tokens=6"))
    assert "".join(c.choices[0].delta.content or "" for c in full if c.choices) == text


def test_chat_stream_helper_and_tools():
    with oai.chat.completions.stream(model="gpt-4o", messages=MSG,
                                     extra_headers=mock("tools=1, tokens=4")) as s:
        final = s.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "search"
    assert "query" in json.loads(call.function.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_tools_non_streaming():
    r = oai.chat.completions.create(model="m", messages=MSG, extra_headers=mock("tools=1"))
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments)["query"]


def test_line_endings_heartbeats_and_split_writes():
    for spec in ["line_ending=crlf", "line_ending=cr", "heartbeat_ms=20, interval_ms=50",
                 "split=5", "split=1, line_ending=cr"]:
        chunks = list(oai.chat.completions.create(
            model="m", messages=MSG, stream=True, extra_headers=mock("tokens=3, " + spec)))
        assert len(chunks) == 5, (spec, len(chunks))


def test_big_event():
    # One megabyte of content: under the gateway's default 1 MiB event limit with its framing.
    chunks = list(oai.chat.completions.create(
        model="m", messages=MSG, stream=True, extra_headers=mock("tokens=3, big_event=1000000")))
    assert max(len(c.choices[0].delta.content or "") for c in chunks) == 1000000


def test_gateway_error_events_reach_the_sdk():
    if BASE == MOCK:
        return
    # Over the gateway's 1 MiB event limit: the stream ends with an error event, which the
    # official SDKs raise as an API error, after the events before it were delivered.
    got = []
    try:
        for c in oai.chat.completions.create(model="m", messages=MSG, stream=True,
                                             extra_headers=mock("tokens=4, big_event=2000000")):
            got.append(c)
        raise AssertionError("no error")
    except openai.APIError as e:
        assert "exceeded" in str(e), e
    assert len(got) >= 2
    try:
        with ant.messages.stream(model="claude", max_tokens=100, messages=MSG,
                                 extra_headers=mock("tokens=4, big_event=2000000")) as s:
            for _ in s.text_stream:
                pass
        raise AssertionError("no error")
    except anthropic.APIStatusError as e:
        assert "exceeded" in str(e), e
    except anthropic.APIError as e:
        assert "exceeded" in str(e), e


def test_completions():
    r = oai.completions.create(model="m", prompt="hi", extra_headers=mock("tokens=3"))
    assert r.choices[0].text and r.usage.completion_tokens == 3
    chunks = list(oai.completions.create(model="m", prompt="hi", stream=True,
                                         extra_headers=mock("tokens=3")))
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text


def test_embeddings_default_base64_and_float():
    r = oai.embeddings.create(model="e", input=["a", "b"], dimensions=8)
    assert len(r.data) == 2 and len(r.data[0].embedding) == 8
    f = oai.embeddings.create(model="e", input=["a", "b"], dimensions=8, encoding_format="float")
    assert all(abs(x - y) < 1e-6 for x, y in zip(r.data[1].embedding, f.data[1].embedding))


def test_models():
    ids = [m.id for m in oai.models.list()]
    assert "mock-gpt-4o" in ids


def test_responses():
    r = oai.responses.create(model="m", input="hi", extra_headers=mock("tokens=4"))
    assert r.status == "completed" and r.output_text
    events = list(oai.responses.create(model="m", input="hi", stream=True,
                                       extra_headers=mock("tokens=4")))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == r.output_text
    with oai.responses.stream(model="m", input="hi", extra_headers=mock("tokens=4")) as s:
        assert s.get_final_response().output_text == r.output_text


def test_responses_tools():
    events = list(oai.responses.create(model="m", input="hi", stream=True,
                                       extra_headers=mock("tools=1, tokens=2")))
    done = [e for e in events if e.type == "response.function_call_arguments.done"][0]
    assert json.loads(done.arguments)["query"]


def test_anthropic_messages():
    m = ant.messages.create(model="claude", max_tokens=100, messages=MSG,
                            extra_headers=mock("tokens=5"))
    assert m.stop_reason == "end_turn" and m.content[0].text
    with ant.messages.stream(model="claude", max_tokens=100, messages=MSG,
                             extra_headers=mock("tokens=5")) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == m.content[0].text
    assert final.usage.output_tokens == 5


def test_anthropic_tools():
    with ant.messages.stream(model="claude", max_tokens=100, messages=MSG,
                             extra_headers=mock("tools=1, tokens=3")) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use" and final.content[0].input["query"]


def test_errors_map_to_sdk_exceptions():
    try:
        oai.chat.completions.create(model="m", messages=MSG, extra_headers=mock("status=429"))
        raise AssertionError("no error")
    except openai.RateLimitError as e:
        assert e.status_code == 429
    try:
        ant.messages.create(model="c", max_tokens=5, messages=MSG, extra_headers=mock("status=529"))
        raise AssertionError("no error")
    except anthropic.APIStatusError as e:
        assert e.status_code == 529
    try:
        oai.chat.completions.create(model="m", messages=MSG,
                                    extra_headers={"x-mock": "require_header=x-session-id"})
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.code == "missing_session_id"


def test_closing_a_stream_early_is_recorded_as_cancel():
    s = oai.chat.completions.create(model="m", messages=MSG, stream=True,
                                    extra_headers=mock("tokens=1000, interval_ms=20"))
    for i, _ in enumerate(s):
        if i == 2:
            break
    rid = int(s.response.headers["x-mock-request-id"])
    if BASE != MOCK:
        assert s.response.headers.get("x-request-id"), "the gateway returns x-request-id"
    s.close()
    for _ in range(100):
        rec = [r for r in stats()["requests"] if r["id"] == rid][0]
        if rec["outcome"]["kind"] == "cancelled":
            return
        time.sleep(0.01)
    raise AssertionError("close was not seen as a cancel: %r" % rec["outcome"])


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
