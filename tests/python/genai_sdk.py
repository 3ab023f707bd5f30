"""Gemini-native clients through Sluice to other providers, with the official google-genai
SDK: `generate_content` and `generate_content_stream` against an Anthropic-speaking and an
OpenAI-speaking upstream, a two-turn function call with thinking on whose signed thinking
goes back to Anthropic in the thought part's `thoughtSignature` (the mock checks the
signature it issued), usage, errors as the SDK's own exceptions, and the key as
`x-goog-api-key` (the SDK's) or `?key=` (the REST API's other spelling).

Usage: python genai_sdk.py GATEWAY_URL

The gateway (crates/sluice-gateway/tests/sdk.rs, official_genai_sdk_to_any_provider) has one
virtual key, sk-gemini-client, and routes:
  via-anthropic  -> provider "anthropic"
  via-openai     -> provider "openai"
Prints 'N passed, M failed' and exits non-zero on a failure.
"""

import json
import sys
import urllib.error
import urllib.request

from google import genai
from google.genai import errors, types
import checks

BASE = sys.argv[1].rstrip("/")
KEY = "sk-gemini-client"


def client(spec, key=KEY):
    return genai.Client(api_key=key, http_options=types.HttpOptions(
        base_url=BASE, api_version="v1beta", headers={"x-mock": spec}))


SEARCH = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="search", description="search the web",
    parameters_json_schema={"type": "object", "properties": {"query": {"type": "string"}}},
)])


def test_text_whole_and_streamed():
    for model in ("via-anthropic", "via-openai"):
        c = client("tokens=5")
        r = c.models.generate_content(
            model=model, contents="hello",
            config=types.GenerateContentConfig(system_instruction="be brief",
                                               max_output_tokens=100),
        )
        assert len(r.text.split(" ")) == 5, (model, r.text)
        assert r.candidates[0].finish_reason == types.FinishReason.STOP, (model, r)
        u = r.usage_metadata
        assert u.prompt_token_count > 0 and u.candidates_token_count >= 5, (model, u)
        assert u.total_token_count == u.prompt_token_count + u.candidates_token_count + (
            u.thoughts_token_count or 0), (model, u)
        chunks = list(c.models.generate_content_stream(model=model, contents="hello"))
        text = "".join(ch.text or "" for ch in chunks)
        assert len(text.split(" ")) == 5, (model, text)
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP, chunks[-1]
        assert chunks[-1].usage_metadata.candidates_token_count >= 5, chunks[-1]


def turn_one(stream):
    c = client("tools, tokens=3")
    config = types.GenerateContentConfig(
        tools=[SEARCH], max_output_tokens=4000,
        thinking_config=types.ThinkingConfig(thinking_budget=2048, include_thoughts=True),
    )
    contents = [types.Content(role="user", parts=[types.Part(text="find the weather")])]
    if stream:
        parts = []
        for ch in c.models.generate_content_stream(
                model="via-anthropic", contents=contents, config=config):
            for p in ch.candidates[0].content.parts or []:
                if p.text or p.function_call or p.thought_signature:
                    parts.append(p)
        content = types.Content(role="model", parts=parts)
    else:
        r = c.models.generate_content(model="via-anthropic", contents=contents, config=config)
        content = r.candidates[0].content
        assert r.usage_metadata.thoughts_token_count > 0, (r.usage_metadata, content)
    thoughts = [p for p in content.parts if p.thought]
    assert thoughts and any(p.thought_signature for p in thoughts), content
    assert "".join(p.text or "" for p in thoughts).startswith("Thinking:"), thoughts
    calls = [p.function_call for p in content.parts if p.function_call]
    assert calls and calls[0].name == "search", content
    return contents, content, calls


def turn_two(contents, content, calls):
    c = client("tokens=4")
    config = types.GenerateContentConfig(
        tools=[SEARCH], max_output_tokens=4000,
        thinking_config=types.ThinkingConfig(thinking_budget=2048),
    )
    answers = types.Content(role="user", parts=[
        types.Part.from_function_response(name=call.name, response={"output": "sunny, 18C"})
        for call in calls
    ])
    return c.models.generate_content(
        model="via-anthropic", contents=contents + [content, answers], config=config)


def test_two_turns_on_anthropic_with_signed_thinking():
    for stream in (False, True):
        contents, content, calls = turn_one(stream)
        r = turn_two(contents, content, calls)
        assert len(r.text.split(" ")) == 4, r.text
        # Without the signed thought part, Anthropic refuses the turn.
        bare = types.Content(role="model", parts=[p for p in content.parts if not p.thought])
        try:
            turn_two(contents, bare, calls)
        except errors.ClientError as e:
            assert e.code == 400, e
            assert "Expected `thinking` or `redacted_thinking`" in str(e), e
        else:
            raise AssertionError("expected a 400")


def test_errors_are_the_sdks_own():
    # (The client is kept in a name: google-genai closes its connection when it is dropped.)
    c = client("status=429")
    try:
        c.models.generate_content(model="via-anthropic", contents="hi")
    except errors.ClientError as e:
        assert e.code == 429 and e.status == "RESOURCE_EXHAUSTED", (e.code, e.status)
    else:
        raise AssertionError("expected a 429")
    c = client("tokens=1", key="sk-not-a-key")
    try:
        c.models.generate_content(model="via-anthropic", contents="hi")
    except errors.ClientError as e:
        assert e.code == 401, e
    else:
        raise AssertionError("expected a 401")


def post(path, body):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json",
                                          "x-mock": "tokens=2"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_key_as_a_query_parameter():
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    status, text = post(f"/v1beta/models/via-openai:generateContent?key={KEY}", body)
    assert status == 200, (status, text)
    assert json.loads(text)["candidates"][0]["content"]["parts"][0]["text"], text
    status, text = post(f"/v1beta/models/via-openai:streamGenerateContent?alt=sse&key={KEY}", body)
    assert status == 200 and text.startswith("data: "), (status, text)
    status, text = post("/v1beta/models/via-openai:generateContent?key=wrong", body)
    assert status == 401, (status, text)
    assert json.loads(text)["error"]["status"] == "UNAUTHENTICATED", text


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
