"""The official `openai` and `anthropic` SDKs through Sluice to a Bedrock stand-in that checks
every signature with botocore (sigv4_upstream.py): plain and streamed Converse, an ARN model
id, non-ASCII text, a session token; then asks the stand-in what it verified.

Usage: python sigv4_verify.py GATEWAY_URL UPSTREAM_URL
Run by crates/sluice-gateway/tests/cloud.rs. Prints 'N passed, M failed'.
"""

import json
import sys
import urllib.request

import anthropic
import openai
import checks

GATEWAY = sys.argv[1].rstrip("/")
UPSTREAM = sys.argv[2].rstrip("/")
TEXT = "Hello from botocore's side"
MESSAGES = [{"role": "user", "content": "héllo ☃, \"quoted\" & spaced  out"}]


def seen():
    with urllib.request.urlopen(UPSTREAM + "/__verified") as r:
        return json.load(r)


def oa():
    return openai.OpenAI(base_url=GATEWAY + "/v1", api_key="k", max_retries=0)


def an():
    return anthropic.Anthropic(base_url=GATEWAY, api_key="k", max_retries=0)


def checked(before):
    after = seen()
    assert not after["failed"], after["failed"]
    assert after["verified"] == before["verified"] + 1, after
    req = after["requests"][-1]
    assert req["region"] == "eu-west-3" and req["service"] == "bedrock", req
    # Host, the body's type and the session token are covered by the signature.
    for h in ("host", "content-type", "x-amz-date", "x-amz-security-token"):
        assert h in req["signed"], req
    return req


def test_openai_whole():
    for model in ("claude", "arn"):
        before = seen()
        r = oa().chat.completions.create(model=model, max_tokens=20, messages=MESSAGES)
        assert r.choices[0].message.content == TEXT, r
        req = checked(before)
        assert req["path"].endswith("/converse"), req
        if model == "arn":
            assert "%3A" in req["path"] and "%2F" in req["path"], req


def test_openai_stream():
    before = seen()
    s = oa().chat.completions.create(model="arn", max_tokens=20, messages=MESSAGES,
                                     stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
    assert text == TEXT, text
    assert checked(before)["path"].endswith("/converse-stream")


def test_anthropic_whole_and_stream():
    before = seen()
    r = an().messages.create(model="claude", max_tokens=20, messages=MESSAGES,
                             system="Be brief.")
    assert r.content[0].text == TEXT and r.usage.output_tokens == 5, r
    checked(before)
    before = seen()
    with an().messages.stream(model="claude", max_tokens=20, messages=MESSAGES) as s:
        text = "".join(s.text_stream)
    assert text == TEXT, text
    checked(before)


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
