"""The official MCP Python SDK (`mcp` on PyPI) as a client of Sluice's MCP gateway.

Usage:
    python mcp_client.py session URL_A URL_B KEY   # handshake era (2025-11-25), A then B
    python mcp_client.py stateless URL_A URL_B KEY # 2026-07-28, no session, A and B in turn
    python mcp_client.py nogrant URL KEY           # a key without the grant

Run by crates/sluice-mcp/tests/python.rs against two servers `alpha` and `beta`
(tests/python/mcp_server.py) behind the gateway. `session` opens its session on instance A,
and every request after `initialize` goes to instance B (a second gateway with the same
secret), as a load balancer without affinity would send them; `stateless` sends its requests
to A and B in turn. Prints one line per check and
'N passed, M failed'; exits non-zero on a failure.
"""

import sys
import time
import traceback

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

RESULTS = []


def check(name, cond, detail=""):
    RESULTS.append((name, bool(cond)))
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f": {detail}"), flush=True)


class Switch(httpx2.AsyncBaseTransport):
    """Sends `initialize` to A and everything after it to B; counts where requests went."""

    def __init__(self, a, b):
        self.inner = httpx2.AsyncHTTPTransport()
        self.a = httpx2.URL(a)
        self.b = httpx2.URL(b)
        self.switched = False
        self.hits = {"a": 0, "b": 0}

    async def handle_async_request(self, request):
        if self.switched:
            request.url = request.url.copy_with(host=self.b.host, port=self.b.port)
            self.hits["b"] += 1
        else:
            self.hits["a"] += 1
        response = await self.inner.handle_async_request(request)
        if not self.switched and response.headers.get("mcp-session-id"):
            self.switched = True
        return response

    async def aclose(self):
        await self.inner.aclose()


class RoundRobin(httpx2.AsyncBaseTransport):
    """Sends requests to A and B in turn."""

    def __init__(self, a, b):
        self.inner = httpx2.AsyncHTTPTransport()
        self.targets = [httpx2.URL(a), httpx2.URL(b)]
        self.hits = [0, 0]

    async def handle_async_request(self, request):
        i = (self.hits[0] + self.hits[1]) % 2
        self.hits[i] += 1
        t = self.targets[i]
        request.url = request.url.copy_with(host=t.host, port=t.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "text", None) is not None)


def http_client(key, transport=None):
    return httpx2.AsyncClient(
        headers={"authorization": f"Bearer {key}"},
        transport=transport,
        timeout=httpx2.Timeout(30, read=60),
    )


async def federated_checks(client, era):
    tools = await client.list_tools()
    names = sorted(t.name for t in tools.tools)
    print(f"     tools: {names}", flush=True)
    check(f"{era}: tools of both servers, prefixed",
          {"alpha__echo", "alpha__add", "alpha__slow", "beta__echo", "beta__add"} <= set(names), names)
    check(f"{era}: tools outside the key's grant are not listed",
          not any(n.startswith(("alpha__secret", "beta__secret")) for n in names), names)

    r = await client.call_tool("alpha__echo", {"text": "hi"})
    check(f"{era}: a call reaches alpha", text_of(r) == "alpha:hi" and not r.is_error, r)
    r = await client.call_tool("beta__add", {"a": 2, "b": 3})
    check(f"{era}: a call reaches beta", text_of(r) == "5", r)

    progress = []

    async def on_progress(p, total, message):
        progress.append((p, total, message))

    r = await client.call_tool("alpha__slow", {"steps": 3, "delay": 0.05}, progress_callback=on_progress)
    check(f"{era}: progress notifications stream through",
          [p for p, _, _ in progress] == [1, 2, 3] and "slow done" in text_of(r), (progress, r))

    try:
        await client.call_tool("alpha__secret_alpha", {})
        check(f"{era}: a tool outside the grant cannot be called", False, "the call succeeded")
    except MCPError as e:
        check(f"{era}: a tool outside the grant cannot be called", "Unknown tool" in str(e), e)

    # Cancel a long call; the server must see the cancellation.
    before = text_of(await client.call_tool("alpha__cancelled", {}))
    with anyio.move_on_after(0.8):
        await client.call_tool("alpha__slow", {"steps": 100, "delay": 0.1})
    seen = False
    after = before
    for _ in range(50):
        after = text_of(await client.call_tool("alpha__cancelled", {}))
        started, cancelled = map(int, after.split("/"))
        b_started, b_cancelled = map(int, before.split("/"))
        if started > b_started and cancelled > b_cancelled:
            seen = True
            break
        await anyio.sleep(0.1)
    check(f"{era}: a cancelled call is cancelled on the server", seen, (before, after))

    prompts = await client.list_prompts()
    pnames = sorted(p.name for p in prompts.prompts)
    check(f"{era}: prompts of both servers, prefixed", {"alpha__greet", "beta__greet"} <= set(pnames), pnames)
    g = await client.get_prompt("beta__greet", {"who": "sam"})
    check(f"{era}: a prompt is routed by its prefix",
          "Hello sam from beta" in str(g.messages[0].content), g)
    res = await client.list_resources()
    uris = sorted(str(r.uri) for r in res.resources)
    check(f"{era}: resources of both servers", {"alpha://info", "beta://info"} <= set(uris), uris)
    rr = await client.read_resource("beta://info")
    check(f"{era}: a resource is read from its server", rr.contents[0].text == "server beta", rr)


async def session(url_a, url_b, key):
    switch = Switch(url_a, url_b)
    async with http_client(key, switch) as http:
        async with Client(streamable_http_client(url_a, http_client=http), mode="legacy") as client:
            await federated_checks(client, "session")
    check("session: the session went on on the second instance",
          switch.hits["a"] == 1 and switch.hits["b"] > 5, switch.hits)


async def stateless(url_a, url_b, key):
    rr = RoundRobin(url_a, url_b)
    async with http_client(key, rr) as http:
        async with Client(streamable_http_client(url_a, http_client=http), mode="2026-07-28") as client:
            await federated_checks(client, "stateless")
    check("stateless: both instances served", min(rr.hits) > 5, rr.hits)
    url = url_a
    # The auto mode probes server/discover and adopts the stateless revision.
    async with http_client(key) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto") as client:
            tools = await client.list_tools()
            check("auto: server/discover adopts 2026-07-28",
                  client.session.discover_result is not None and any(t.name == "beta__echo" for t in tools.tools),
                  client.session.discover_result)


async def nogrant(url, key):
    for mode in ("legacy", "2026-07-28"):
        async with http_client(key) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                tools = await client.list_tools()
                names = [t.name for t in tools.tools]
                check(f"nogrant {mode}: alpha's tools are not listed",
                      not any(n.startswith("alpha__") for n in names), names)
                try:
                    await client.call_tool("alpha__echo", {"text": "x"})
                    check(f"nogrant {mode}: alpha's tools cannot be called", False, "the call succeeded")
                except MCPError as e:
                    check(f"nogrant {mode}: alpha's tools cannot be called", "Unknown tool" in str(e), e)
                r = await client.call_tool("beta__echo", {"text": "y"})
                check(f"nogrant {mode}: the granted server still works", text_of(r) == "beta:y", r)


def main():
    scenario, args = sys.argv[1], sys.argv[2:]
    fn = {"session": session, "stateless": stateless, "nogrant": nogrant}[scenario]
    started = time.monotonic()
    try:
        anyio.run(fn, *args)
    except Exception:
        traceback.print_exc()
        RESULTS.append(("ran to the end", False))
    failed = sum(1 for _, ok in RESULTS if not ok)
    print(f"{len(RESULTS) - failed} passed, {failed} failed ({time.monotonic() - started:.1f}s)", flush=True)
    sys.exit(1 if failed or not RESULTS else 0)


if __name__ == "__main__":
    main()
