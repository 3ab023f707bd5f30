"""The official google-genai Python SDK against a running sluice mock (Gemini Developer API).

Usage: python gemini_shapes.py BASE_URL [MOCK_URL]

BASE_URL is where the SDK sends requests: the mock itself (its fidelity check, run by
crates/sluice-mock/tests/sdk.rs) or a Sluice gateway in front of it. MOCK_URL is the mock, for
its /__mock/stats evidence; it defaults to BASE_URL. Prints 'N passed, M failed' and exits
non-zero on a failure.
"""

import json
import sys
import urllib.request

from google import genai
from google.genai import errors, types
import checks

BASE = sys.argv[1].rstrip("/")
MOCK = (sys.argv[2] if len(sys.argv) > 2 else BASE).rstrip("/")
MODEL = "gemini-2.5-flash"
client = genai.Client(
    api_key="mock-gemini-key",
    http_options=types.HttpOptions(base_url=BASE, api_version="v1beta"),
)


def cfg(spec, **kw):
    """A GenerateContentConfig whose request carries `x-mock: spec`."""
    return types.GenerateContentConfig(
        http_options=types.HttpOptions(headers={"x-mock": spec}), **kw)


def stats():
    with urllib.request.urlopen(MOCK + "/__mock/stats") as r:
        return json.load(r)


def test_generate():
    r = client.models.generate_content(model=MODEL, contents="hello", config=cfg("tokens=5"))
    assert r.text, r
    c = r.candidates[0]
    assert c.finish_reason == types.FinishReason.STOP, c.finish_reason
    assert c.content.role == "model"
    u = r.usage_metadata
    assert u.candidates_token_count == 5, u
    assert u.total_token_count == u.prompt_token_count + 5, u
    assert r.model_version == MODEL and r.response_id
    rec = stats()["requests"][-1]
    assert rec["api"] == "gemini" and rec["model"] == MODEL, rec
    assert rec["headers"].get("x-goog-api-key") == "mock-gemini-key", rec["headers"]


def test_stream_equals_generate_and_usage_is_cumulative():
    whole = client.models.generate_content(model=MODEL, contents="hello", config=cfg("tokens=6"))
    chunks = list(client.models.generate_content_stream(
        model=MODEL, contents="hello", config=cfg("tokens=6")))
    assert len(chunks) == 7, len(chunks)
    assert "".join(c.text or "" for c in chunks) == whole.text
    counts = [c.usage_metadata.candidates_token_count for c in chunks]
    assert counts == [1, 2, 3, 4, 5, 6, 6], counts
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


def test_system_instruction_and_generation_config():
    r = client.models.generate_content(
        model=MODEL, contents="hello",
        config=cfg("tokens=50", system_instruction="be brief", max_output_tokens=4,
                   temperature=0.2, stop_sequences=["zzz"]))
    assert r.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert r.usage_metadata.candidates_token_count == 4
    body = json.loads(stats()["requests"][-1]["body"])
    assert body["systemInstruction"]["parts"][0]["text"] == "be brief", body
    assert body["generationConfig"]["maxOutputTokens"] == 4, body


def test_thoughts_token_count():
    r = client.models.generate_content(
        model=MODEL, contents="hello", config=cfg("tokens=3, reasoning_tokens=7"))
    u = r.usage_metadata
    assert u.thoughts_token_count == 7, u
    assert u.total_token_count == u.prompt_token_count + 3 + 7, u


WEATHER = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="Weather in a city",
    parameters_json_schema={"type": "object", "properties": {"query": {"type": "string"}}})])


def test_function_call_round_trip():
    ask = [types.Content(role="user", parts=[types.Part.from_text(text="weather in Paris?")])]
    for stream in [False, True]:
        config = cfg("tools, tokens=3", tools=[WEATHER],
                     automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
        if stream:
            chunks = list(client.models.generate_content_stream(
                model=MODEL, contents=ask, config=config))
            calls = [fc for c in chunks for fc in (c.function_calls or [])]
            finish = chunks[-1].candidates[0].finish_reason
            model_turn = chunks[0].candidates[0].content
        else:
            r = client.models.generate_content(model=MODEL, contents=ask, config=config)
            calls = r.function_calls
            finish = r.candidates[0].finish_reason
            model_turn = r.candidates[0].content
        assert len(calls) == 1, calls
        assert calls[0].name == "get_weather"
        assert isinstance(calls[0].args, dict) and calls[0].args["query"], calls[0].args
        assert finish == types.FinishReason.STOP, "a function call finishes with STOP"
    history = ask + [model_turn, types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_weather", response={"output": "18C"})])]
    r = client.models.generate_content(model=MODEL, contents=history, config=cfg("tokens=4"))
    assert r.text and r.usage_metadata.candidates_token_count == 4
    body = json.loads(stats()["requests"][-1]["body"])
    assert body["contents"][2]["parts"][0]["functionResponse"]["name"] == "get_weather", body


def test_errors_raise_api_errors():
    try:
        client.models.generate_content(model=MODEL, contents="hi",
                                       config=cfg("error=rate_limit, retry_after=9"))
        raise AssertionError("no error")
    except errors.ClientError as e:
        assert e.code == 429 and e.status == "RESOURCE_EXHAUSTED", e
        retry = [d for d in e.details["error"]["details"] if d["@type"].endswith("RetryInfo")]
        assert retry[0]["retryDelay"] == "9s", e.details
    try:
        client.models.generate_content(model=MODEL, contents="hi", config=cfg("error=overloaded"))
        raise AssertionError("no error")
    except errors.ServerError as e:
        assert e.code == 503 and e.status == "UNAVAILABLE", e
    try:
        client.models.generate_content(model=MODEL, contents="hi", config=cfg("error=auth"))
        raise AssertionError("no error")
    except errors.ClientError as e:
        assert e.code == 400 and "API key not valid" in e.message, e


def test_error_inside_a_stream():
    got = []
    try:
        for c in client.models.generate_content_stream(
                model=MODEL, contents="hi", config=cfg("tokens=5, stream_error_after=2")):
            got.append(c.text)
        raise AssertionError("no error")
    except errors.APIError as e:
        assert e.code == 503 and e.status == "UNAVAILABLE", e
    assert len(got) == 2, got


def test_blocked_prompt():
    r = client.models.generate_content(model=MODEL, contents="hi", config=cfg("error=content_filter"))
    assert r.prompt_feedback.block_reason == types.BlockedReason.SAFETY, r
    assert not r.candidates and r.text is None


def test_count_tokens_and_models():
    r = client.models.generate_content(model=MODEL, contents="count me", config=cfg("tokens=1"))
    n = client.models.count_tokens(model=MODEL, contents="count me")
    assert n.total_tokens == r.usage_metadata.prompt_token_count, (n, r.usage_metadata)
    names = [m.name for m in client.models.list()]
    assert "models/mock-gemini-2.5-flash" in names, names


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
