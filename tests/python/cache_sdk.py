"""The official openai and anthropic Python SDKs against a Sluice gateway whose route caches
answers (`cache = { ttl = "1h" }`), with the sluice mock behind it.

Usage: python cache_sdk.py GATEWAY_URL MOCK_URL

A repeated streaming request is answered from the cache: the same events and text as the
first, `x-sluice-cache: hit`, and no upstream request (the mock's /__mock/stats counters).
Run by crates/sluice-gateway/tests/sdk.rs. Prints 'N passed, M failed'.
"""

import json
import sys
import urllib.request
import uuid

import anthropic
import openai
import checks

BASE = sys.argv[1].rstrip("/")
MOCK = sys.argv[2].rstrip("/")
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-mock", max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key="sk-ant-mock", max_retries=0)


def upstream_requests():
    with urllib.request.urlopen(MOCK + "/__mock/stats") as r:
        return json.load(r)["totals"]["requests"]


def question():
    # A question of its own per test, so no other test's answer is in the cache.
    return [{"role": "user", "content": "what is a sluice? " + uuid.uuid4().hex}]


def openai_stream(messages):
    raw = oai.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, stream=True,
        stream_options={"include_usage": True}, extra_headers={"x-mock": "tokens=9"})
    chunks = [c.model_dump() for c in raw.parse()]
    text = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in chunks if c["choices"])
    return raw.headers.get("x-sluice-cache"), chunks, text


def test_openai_stream_replayed_from_the_cache():
    messages = question()
    before = upstream_requests()
    status, chunks, text = openai_stream(messages)
    assert status == "miss", status
    assert text and chunks[-1]["usage"]["completion_tokens"] == 9, chunks[-1]
    assert upstream_requests() == before + 1
    status2, chunks2, text2 = openai_stream(messages)
    assert status2 == "hit", status2
    assert chunks2 == chunks, "the same chunks, ids and usage included"
    assert text2 == text
    assert upstream_requests() == before + 1, "the hit made no upstream request"


def test_openai_whole_answer_replayed_from_the_cache():
    messages = question()
    before = upstream_requests()
    first = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
    again = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
    assert (first.headers["x-sluice-cache"], again.headers["x-sluice-cache"]) == ("miss", "hit")
    assert again.parse().model_dump() == first.parse().model_dump()
    assert int(again.headers["age"]) >= 0
    assert upstream_requests() == before + 1


def test_openai_whole_request_gets_the_stored_stream_as_one_body():
    messages = question()
    before = upstream_requests()
    raw = oai.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, stream=True, extra_headers={"x-mock": "tokens=9"})
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    whole = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
    assert whole.headers["x-sluice-cache"] == "hit"
    r = whole.parse()
    assert r.object == "chat.completion"
    assert r.choices[0].message.content == text and text
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 9, r.usage
    assert upstream_requests() == before + 1


def test_anthropic_stream_request_gets_the_stored_message_as_events():
    messages = question()
    before = upstream_requests()
    first = ant.messages.create(model="claude-sonnet-4", max_tokens=64, messages=messages,
                                extra_headers={"x-mock": "tokens=7"})
    status, events, text = anthropic_stream(messages)
    assert status == "hit", status
    assert text == first.content[0].text and text
    assert events[-1]["type"] == "message_stop"
    with ant.messages.stream(model="claude-sonnet-4", max_tokens=64, messages=messages) as s:
        final = s.get_final_message()
    assert final.content[0].text == text
    assert final.stop_reason == first.stop_reason
    assert upstream_requests() == before + 1


def anthropic_stream(messages):
    raw = ant.messages.with_raw_response.create(
        model="claude-sonnet-4", max_tokens=64, messages=messages, stream=True,
        extra_headers={"x-mock": "tokens=7"})
    events = [e.model_dump() for e in raw.parse()]
    text = "".join(e["delta"].get("text") or "" for e in events
                   if e["type"] == "content_block_delta")
    return raw.headers.get("x-sluice-cache"), events, text


def test_anthropic_stream_replayed_from_the_cache():
    messages = question()
    before = upstream_requests()
    status, events, text = anthropic_stream(messages)
    assert status == "miss", status
    assert text and events[-1]["type"] == "message_stop", events[-1]
    status2, events2, text2 = anthropic_stream(messages)
    assert status2 == "hit", status2
    assert events2 == events
    assert text2 == text
    assert upstream_requests() == before + 1, "the hit made no upstream request"


def test_openai_responses_stream_request_gets_the_stored_response_as_events():
    text_in = question()[0]["content"]
    before = upstream_requests()
    first = oai.responses.with_raw_response.create(model="gpt-4o", input=text_in)
    assert first.headers["x-sluice-cache"] == "miss"
    first = first.parse()
    assert first.output_text
    raw = oai.responses.with_raw_response.create(model="gpt-4o", input=text_in, stream=True)
    assert raw.headers["x-sluice-cache"] == "hit"
    events = list(raw.parse())
    assert events[0].type == "response.created", events[0]
    assert events[-1].type == "response.completed", events[-1]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == first.output_text
    assert events[-1].response.model_dump() == first.model_dump()
    with oai.responses.stream(model="gpt-4o", input=text_in) as s:
        final = s.get_final_response()
    assert final.output_text == first.output_text
    assert final.id == first.id
    assert upstream_requests() == before + 1


def test_no_cache_asks_upstream_again():
    messages = question()
    before = upstream_requests()
    oai.chat.completions.create(model="gpt-4o", messages=messages)
    raw = oai.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, extra_headers={"cache-control": "no-cache"})
    assert raw.headers["x-sluice-cache"] == "bypass"
    assert upstream_requests() == before + 2


if __name__ == "__main__":
    checks.run([(n, f) for n, f in list(globals().items())
                if n.startswith("test_") and callable(f)])
