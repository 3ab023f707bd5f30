"""The official `openai` and `anthropic` SDKs through Sluice to cloud upstreams served by the
sluice mock: Bedrock (Converse / ConverseStream, SigV4-signed by the gateway and verified by
the mock), Vertex AI (Gemini's generateContent and Claude's rawPredict, with the bearer token
the gateway got from the mock's token endpoint) and Azure OpenAI with an Entra ID token.

Usage: python cloud_sdk.py GATEWAY_URL MOCK_URL [ERROR_GATEWAY_URL]

The gateway routes `bedrock-claude`, `vertex-gemini`, `vertex-claude` and `azure-gpt` (see
crates/sluice-gateway/tests/cloud.rs). ERROR_GATEWAY_URL routes `bedrock-claude` to a mock
whose every answer is a 429 ThrottlingException. Prints 'N passed, M failed'; exits non-zero
on a failure.
"""

import json
import sys
import urllib.request

import anthropic
import openai
import checks

GATEWAY = sys.argv[1].rstrip("/")
MOCK = sys.argv[2].rstrip("/")
ERRORS = sys.argv[3].rstrip("/") if len(sys.argv) > 3 else None

# Which mock auth event each route's requests must show.
ROUTES = {
    "bedrock-claude": "sigv4_accepted",
    # Anthropic clients' own bodies to InvokeModel; OpenAI clients still to Converse.
    "bedrock-invoke": "sigv4_accepted",
    "vertex-gemini": "bearer_accepted",
    "vertex-claude": "bearer_accepted",
    "azure-gpt": "bearer_accepted",
}


def oa(base=GATEWAY):
    return openai.OpenAI(base_url=base + "/v1", api_key="client-key", max_retries=0)


def an(base=GATEWAY):
    return anthropic.Anthropic(base_url=base, api_key="client-key", max_retries=0)


def last_request():
    with urllib.request.urlopen(MOCK + "/__mock/stats") as r:
        return json.load(r)["requests"][-1]


def check_upstream_auth(model):
    rec = last_request()
    assert rec["auth"] == ROUTES[model], (model, rec["auth"], rec["path"])
    # The client's key never reaches a cloud.
    headers = {k.lower(): v for k, v in rec["headers"].items()}
    assert "client-key" not in json.dumps(headers), headers
    return rec


def openai_whole(model):
    r = oa().chat.completions.create(
        model=model, max_tokens=64, messages=[{"role": "user", "content": "hello"}])
    assert r.choices[0].message.content, r
    assert r.choices[0].finish_reason == "stop", r
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0, r.usage
    return check_upstream_auth(model)


def openai_stream(model):
    s = oa().chat.completions.create(
        model=model, max_tokens=64, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "hello"}])
    text, finish, usage = "", None, None
    for chunk in s:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text and finish == "stop", (text, finish)
    assert usage and usage.completion_tokens > 0, usage
    rec = check_upstream_auth(model)
    assert rec["stream"], rec


def anthropic_whole(model):
    r = an().messages.create(
        model=model, max_tokens=64, messages=[{"role": "user", "content": "hello"}])
    assert r.content[0].type == "text" and r.content[0].text, r
    assert r.stop_reason == "end_turn", r
    assert r.usage.output_tokens > 0, r.usage
    check_upstream_auth(model)


def anthropic_stream(model):
    with an().messages.stream(
            model=model, max_tokens=64,
            messages=[{"role": "user", "content": "hello"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text and final.stop_reason == "end_turn", (text, final)
    assert final.usage.output_tokens > 0, final.usage
    rec = check_upstream_auth(model)
    assert rec["stream"], rec


def responses_whole(model):
    r = oa().responses.create(model=model, max_output_tokens=64, input="hello")
    assert r.status == "completed", r
    assert r.output_text, r
    assert r.usage.output_tokens > 0 and r.usage.input_tokens > 0, r.usage
    check_upstream_auth(model)


def responses_stream(model):
    with oa().responses.stream(model=model, max_output_tokens=64, input="hello") as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert text and final.output_text == text, (text, final)
    assert final.status == "completed" and final.usage.output_tokens > 0, final
    rec = check_upstream_auth(model)
    assert rec["stream"], rec


def make_tests():
    tests = []
    for model in ROUTES:
        kinds = [("openai_whole", openai_whole), ("openai_stream", openai_stream),
                 ("anthropic_whole", anthropic_whole), ("anthropic_stream", anthropic_stream)]
        if model != "azure-gpt":
            # The Responses API translated for each cloud (Azure's passes it through).
            kinds += [("responses_whole", responses_whole),
                      ("responses_stream", responses_stream)]
        for kind, f in kinds:
            tests.append((f"{kind}[{model}]", lambda f=f, m=model: f(m)))
    return tests


def test_vertex_claude_body():
    anthropic_whole("vertex-claude")
    rec = last_request()
    body = json.loads(rec["body"])
    assert rec["path"].endswith(":rawPredict"), rec["path"]
    assert "/publishers/anthropic/models/" in rec["path"], rec["path"]
    assert "model" not in body and body["anthropic_version"] == "vertex-2023-10-16", body


def test_bedrock_invoke_model_takes_the_anthropic_body():
    anthropic_whole("bedrock-invoke")
    rec = last_request()
    assert rec["path"].endswith("/invoke"), rec["path"]
    body = json.loads(rec["body"])
    assert body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in body, body
    anthropic_stream("bedrock-invoke")
    assert last_request()["path"].endswith("/invoke-with-response-stream")
    openai_whole("bedrock-invoke")
    assert last_request()["path"].endswith("/converse")


def test_vertex_count_tokens():
    for model, method in (("vertex-claude", "count-tokens:rawPredict"),
                          ("vertex-gemini", ":countTokens")):
        r = an().messages.count_tokens(
            model=model, messages=[{"role": "user", "content": "hello there"}])
        assert r.input_tokens > 0, (model, r)
        rec = check_upstream_auth(model)
        assert rec["path"].endswith(method), (model, rec["path"])


def test_bedrock_path_and_signature():
    openai_whole("bedrock-claude")
    rec = last_request()
    assert rec["path"].startswith("/model/") and rec["path"].endswith("/converse"), rec["path"]
    headers = {k.lower(): v for k, v in rec["headers"].items()}
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDSLUICEMOCKTEST01/"), headers
    assert "x-amz-date" in headers, headers


def test_throttling_is_a_rate_limit_error():
    if not ERRORS:
        return
    for model in ("bedrock-claude", "vertex-gemini", "vertex-claude"):
        try:
            oa(ERRORS).chat.completions.create(
                model=model, max_tokens=8, messages=[{"role": "user", "content": "x"}])
        except openai.RateLimitError as e:
            assert e.status_code == 429, (model, e)
            assert e.response.headers.get("x-sluice-attempts") == "2", (model, e.response.headers)
        else:
            raise AssertionError(f"no RateLimitError from {model}")
        try:
            an(ERRORS).messages.create(
                model=model, max_tokens=8, messages=[{"role": "user", "content": "x"}])
        except anthropic.RateLimitError as e:
            assert e.status_code == 429, (model, e)
            assert e.body["type"] == "error", (model, e.body)
        else:
            raise AssertionError(f"no anthropic RateLimitError from {model}")


def main():
    tests = make_tests() + [
        (n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
