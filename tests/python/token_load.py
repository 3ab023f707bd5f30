"""Steady load through Sluice to a Vertex AI upstream whose tokens live 2 seconds (the mock's
token endpoint): THREADS clients send requests back to back for SECONDS. Every request must
succeed, none may stall (a request that waited for a token at an expiry would), and the
caller checks the mock's token count.

Usage: python token_load.py GATEWAY_URL SECONDS THREADS
Prints `requests N`, latency figures, and 'N passed, M failed'.
"""

import sys
import threading
import time

import openai

GATEWAY = sys.argv[1].rstrip("/")
SECONDS = float(sys.argv[2])
THREADS = int(sys.argv[3])

lock = threading.Lock()
latencies, failures = [], []


def worker(stop_at):
    client = openai.OpenAI(base_url=GATEWAY + "/v1", api_key="k", max_retries=0)
    while time.monotonic() < stop_at:
        t = time.monotonic()
        try:
            r = client.chat.completions.create(
                model="vertex-gemini", max_tokens=8,
                messages=[{"role": "user", "content": "hi"}])
            assert r.choices[0].message.content
            ok = None
        except Exception as e:  # noqa: BLE001 - every failure counts
            ok = repr(e)
        with lock:
            if ok is None:
                latencies.append(time.monotonic() - t)
            else:
                failures.append(ok)


def main():
    stop_at = time.monotonic() + SECONDS
    threads = [threading.Thread(target=worker, args=(stop_at,)) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = sorted(latencies)
    print(f"requests {len(lat) + len(failures)}")
    if lat:
        print(f"p50_ms {lat[len(lat) // 2] * 1000:.1f}  p99_ms {lat[int(len(lat) * 0.99)] * 1000:.1f}"
              f"  max_ms {lat[-1] * 1000:.1f}")
    checks = [
        ("no request failed", not failures, failures[:3]),
        ("some load", len(lat) >= 100, len(lat)),
        # A request that waited for a token exchange at an expiry would stand out; two
        # seconds is far above any request's time here, even on a busy machine.
        ("no request stalled", bool(lat) and lat[-1] < 2.0, lat[-1] if lat else None),
    ]
    failed = 0
    for name, ok, detail in checks:
        print(("ok    " if ok else "FAIL  ") + name + ("" if ok else f": {detail}"))
        failed += not ok
    print(f"{len(checks) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
