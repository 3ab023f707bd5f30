"""A small MCP server for Sluice's MCP gateway tests (the official `mcp` SDK).

    python mcp_server.py NAME PORT_FILE [--json]   # Streamable HTTP
    python mcp_server.py NAME --stdio              # stdio, as Sluice starts local servers

Over HTTP it serves on 127.0.0.1 at an ephemeral port, written to PORT_FILE once listening
(`--json`: JSON responses instead of SSE). Tools:
`echo(text)`, `add(a, b)`, `whoami()` (the Authorization header it received, for the
credential-injection test), `slow(steps, delay)` (reports progress after each step; a
cancellation is counted), `cancelled()` (how many `slow` calls were cancelled so far), and
`secret_<NAME>()` (a tool the tests' grants never allow), `getenv(name)` (a variable of the
process's environment) and `crash()` (the process exits, for the restart test). A prompt
`greet` and a resource `NAME://info` exercise the other lists.
"""

import os
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer

NAME = sys.argv[1]
STDIO = "--stdio" in sys.argv[2:]
PORT_FILE = None if STDIO else sys.argv[2]
JSON = "--json" in sys.argv[3:]

server = MCPServer(NAME)
state = {"cancelled": 0, "started": 0}


@server.tool()
def echo(text: str) -> str:
    """Echo the text back, prefixed with the server's name."""
    return f"{NAME}:{text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header this server received (tests check credential injection)."""
    headers = ctx.headers or {}
    return headers.get("authorization", "<none>")


@server.tool()
async def slow(steps: int, delay: float, ctx: Context) -> str:
    """Sleep `steps` times for `delay` seconds, reporting progress after each step."""
    state["started"] += 1
    try:
        for i in range(steps):
            await anyio.sleep(delay)
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    except anyio.get_cancelled_exc_class():
        state["cancelled"] += 1
        raise
    return f"{NAME}:slow done after {steps} steps"


@server.tool()
def cancelled() -> str:
    """How many `slow` calls were started and how many were cancelled: `started/cancelled`."""
    return f"{state['started']}/{state['cancelled']}"


@server.tool()
def getenv(name: str) -> str:
    """A variable of this process's environment, or `<unset>`."""
    return os.environ.get(name, "<unset>")


@server.tool()
def crash() -> str:
    """Exit the process at once (the gateway restarts stdio servers)."""
    os._exit(3)


def secret() -> str:
    return "you should not see this"


server.add_tool(secret, name=f"secret_{NAME}")


@server.prompt()
def greet(who: str) -> str:
    """A greeting prompt."""
    return f"Hello {who} from {NAME}"


@server.resource(f"{NAME}://info")
def info() -> str:
    """Facts about this server."""
    return f"server {NAME}"


async def main() -> None:
    app = server.streamable_http_app(json_response=JSON)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is published: a client may connect at once.
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning")
    srv = uvicorn.Server(config)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(PORT_FILE + ".tmp", PORT_FILE)
    await srv.serve(sockets=[sock])


if __name__ == "__main__":
    if STDIO:
        anyio.run(server.run_stdio_async)
    else:
        anyio.run(main)
