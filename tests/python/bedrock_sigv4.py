"""The official AWS SDK (boto3/botocore) against a running sluice mock's Bedrock paths.

Usage: python bedrock_sigv4.py MOCK_URL

botocore signs every request with its own SigV4 signer and parses the answers with its own
Converse model and event-stream decoder, so this checks both directions: the mock's signature
verification agrees with AWS's signer (a wrong secret is refused as AWS refuses it), and the
mock's Converse bodies, event-stream frames (CRCs included) and exceptions are what the SDK
expects. Run by crates/sluice-mock/tests/sdk.rs. Prints 'N passed, M failed' and exits
non-zero on a failure.
"""

import json
import sys
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError
import checks

MOCK = sys.argv[1].rstrip("/")
# The mock's built-in test key pair (sluice_mock::TEST_AWS_ACCESS_KEY_ID / _SECRET_ACCESS_KEY).
KEY_ID = "AKIDSLUICEMOCKTEST01"
SECRET = "sluice/mock/secret/key/for+tests+only0000"
MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
# An inference-profile ARN: `:` and `/` in the path, encoded once on the wire and once more
# in the canonical request.
ARN = ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
       "us.anthropic.claude-3-5-sonnet-20240620-v1:0")
X_MOCK = {"spec": ""}


def client(secret=SECRET):
    c = boto3.client(
        "bedrock-runtime",
        endpoint_url=MOCK,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=secret,
        # One attempt: the tests look at the first answer, not botocore's retries.
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )

    def add_x_mock(request, **_):
        if X_MOCK["spec"]:
            request.headers["x-mock"] = X_MOCK["spec"]

    c.meta.events.register("before-sign.bedrock-runtime.*", add_x_mock)
    return c


def with_mock(spec):
    X_MOCK["spec"] = spec


def last_request():
    with urllib.request.urlopen(MOCK + "/__mock/stats") as r:
        return json.load(r)["requests"][-1]


MESSAGES = [{"role": "user", "content": [{"text": "hello"}]}]


def test_converse_is_signed_and_parsed():
    with_mock("tokens=5")
    r = client().converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 64})
    assert r["stopReason"] == "end_turn", r
    assert r["output"]["message"]["content"][0]["text"], r
    assert r["usage"]["outputTokens"] == 5, r["usage"]
    rec = last_request()
    assert rec["auth"] == "sigv4_accepted", rec
    assert "x-amz-date" in rec["headers"] and rec["model"] == MODEL, rec


def test_arn_model_ids():
    with_mock("tokens=2")
    r = client().converse(modelId=ARN, messages=MESSAGES)
    assert r["stopReason"] == "end_turn", r
    assert last_request()["model"] == ARN


def test_converse_stream_frames():
    with_mock("tokens=4, interval_ms=1")
    r = client().converse_stream(modelId=MODEL, messages=MESSAGES)
    kinds, text, usage = [], "", None
    for event in r["stream"]:
        (kind, body), = event.items()
        kinds.append(kind)
        if kind == "contentBlockDelta":
            text += body["delta"]["text"]
        if kind == "metadata":
            usage = body["usage"]
    assert kinds[0] == "messageStart" and kinds[-3:] == [
        "contentBlockStop", "messageStop", "metadata"], kinds
    assert kinds.count("contentBlockDelta") == 4, kinds
    assert text and usage["outputTokens"] == 4, (text, usage)


def test_stream_exception():
    with_mock("tokens=6, stream_error_after=2:rate_limit")
    r = client().converse_stream(modelId=MODEL, messages=MESSAGES)
    try:
        for _ in r["stream"]:
            pass
    except EventStreamError as e:
        assert e.response["Error"]["Code"] == "throttlingException", e.response
    else:
        raise AssertionError("no exception in the stream")


def test_invoke_model():
    with_mock("tokens=3")
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 20,
            "messages": [{"role": "user", "content": "hi"}]}
    r = client().invoke_model(modelId=MODEL, body=json.dumps(body))
    msg = json.loads(r["body"].read())
    assert msg["type"] == "message" and msg["stop_reason"] == "end_turn", msg
    r = client().invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(body))
    types = [json.loads(e["chunk"]["bytes"])["type"] for e in r["body"]]
    assert types[0] == "message_start" and types[-1] == "message_stop", types


def test_wrong_secret_is_refused():
    with_mock("")
    try:
        client(secret="not-the-secret").converse(modelId=MODEL, messages=MESSAGES)
    except ClientError as e:
        assert e.response["Error"]["Code"] == "InvalidSignatureException", e.response
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert "signature we calculated does not match" in e.response["Error"]["Message"]
    else:
        raise AssertionError("a wrong secret was accepted")
    assert last_request()["auth"] == "sigv4_rejected"


def test_throttling_is_typed():
    with_mock("status=429")
    c = client()
    try:
        c.converse(modelId=MODEL, messages=MESSAGES)
    except c.exceptions.ThrottlingException as e:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    else:
        raise AssertionError("no ThrottlingException")


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    checks.run(tests)


if __name__ == "__main__":
    main()
