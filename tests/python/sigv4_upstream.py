"""A Bedrock stand-in that checks SigV4 with botocore's own signer: for every request it
takes the credential scope and signed headers from `Authorization`, rebuilds the request
from what it received (the path as on the wire, the signed headers' values, the body) and
recomputes the signature with `botocore.auth.SigV4Auth` at the request's `x-amz-date`.
A match gets a Converse answer (or a ConverseStream in AWS event-stream framing, CRCs
included); a mismatch gets AWS's 403 `InvalidSignatureException`. `GET /__verified` reports
what it saw.

Usage: python sigv4_upstream.py ACCESS_KEY_ID SECRET_ACCESS_KEY
Prints `listening http://127.0.0.1:PORT` once it accepts connections. Run by
crates/sluice-gateway/tests/cloud.rs.
"""

import json
import re
import struct
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

KEY_ID, SECRET = sys.argv[1], sys.argv[2]
LOCK = threading.Lock()
SEEN = {"verified": 0, "failed": [], "requests": []}
AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")


def verify(method, path, headers, body):
    """(ok, detail): botocore's signature over the request as received vs the one sent."""
    m = AUTH.match(headers.get("authorization", ""))
    if not m:
        return False, "no SigV4 Authorization header"
    key_id, date, region, service, signed, given = m.groups()
    if key_id != KEY_ID:
        return False, f"unknown access key {key_id}"
    names = signed.split(";")
    missing = [n for n in names if n not in headers]
    if missing:
        return False, f"signed headers not received: {missing}"
    req = AWSRequest(method=method, url="http://" + headers["host"] + path, data=body,
                     headers={n: headers[n] for n in names})
    amz_date = headers.get("x-amz-date", "")
    if amz_date[:8] != date:
        return False, f"x-amz-date {amz_date} outside the scope's date {date}"
    req.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(KEY_ID, SECRET, headers.get("x-amz-security-token")),
                       service, region)
    canonical = signer.canonical_request(req)
    expected = signer.signature(signer.string_to_sign(req, canonical), req)
    if expected != given:
        return False, f"signature mismatch; botocore's canonical request:\n{canonical}"
    return True, {"region": region, "service": service, "signed": names, "path": path}


def frame(event_type, payload):
    """One AWS event-stream message: prelude, its CRC, string headers, payload, CRC."""
    hdrs = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        n, v = name.encode(), value.encode()
        hdrs += bytes([len(n)]) + n + bytes([7]) + struct.pack(">H", len(v)) + v
    data = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(hdrs) + len(data) + 4, len(hdrs))
    msg = prelude + struct.pack(">I", zlib.crc32(prelude)) + hdrs + data
    return msg + struct.pack(">I", zlib.crc32(msg))


TEXT = "Hello from botocore's side"
USAGE = {"inputTokens": 3, "outputTokens": 5, "totalTokens": 8}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def reply(self, status, ctype, body, extra=()):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            body = json.dumps(SEEN).encode()
        self.reply(200, "application/json", body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        ok, detail = verify("POST", self.path, headers, body)
        with LOCK:
            if ok:
                SEEN["verified"] += 1
                SEEN["requests"].append(detail)
            else:
                SEEN["failed"].append({"path": self.path, "why": detail})
        if not ok:
            msg = json.dumps({"message": "The request signature we calculated does not match "
                              "the signature you provided. " + str(detail)[:200]}).encode()
            return self.reply(403, "application/json", msg,
                              [("x-amzn-ErrorType", "InvalidSignatureException")])
        if self.path.endswith("/converse-stream"):
            frames = b"".join([
                frame("messageStart", {"role": "assistant"}),
                frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": TEXT}}),
                frame("contentBlockStop", {"contentBlockIndex": 0}),
                frame("messageStop", {"stopReason": "end_turn"}),
                frame("metadata", {"usage": USAGE, "metrics": {"latencyMs": 1}}),
            ])
            return self.reply(200, "application/vnd.amazon.eventstream", frames)
        answer = {
            "output": {"message": {"role": "assistant", "content": [{"text": TEXT}]}},
            "stopReason": "end_turn", "usage": USAGE, "metrics": {"latencyMs": 1},
        }
        self.reply(200, "application/json", json.dumps(answer).encode())


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
