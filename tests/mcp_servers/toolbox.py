"""An MCP server for spearpy's tests, written with the official SDK (MCPServer).

    python tests/mcp_servers/toolbox.py                 # stdio
    python tests/mcp_servers/toolbox.py --http PORT [--json-response]  # streamable HTTP
    python tests/mcp_servers/toolbox.py --exit-at-start 7
    python tests/mcp_servers/toolbox.py --slow-start 30

Its tools misbehave on request: fail, hang, crash, flood stdout or stderr,
answer with huge results, and show their environment and working directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("toolbox", log_level="WARNING")
CALLS = {"count": 0}
# The SDK moves the protocol stream off fd 1 (and points fd 1 at stderr) while
# it serves stdio; remember what fd 1 was so the misbehaving tools can find
# the real wire again and write garbage on it.
_WIRE = os.fstat(1)


def wire_fd() -> int:
    for fd in range(3, 1024):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (_WIRE.st_dev, _WIRE.st_ino):
            return fd
    return 1


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    CALLS["count"] += 1
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Report a tool error with the given message."""
    raise ToolError(message)


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def crash(code: int = 3) -> str:
    """Exit the server process at once."""
    sys.stderr.write("toolbox: crashing on request\n")
    sys.stderr.flush()
    os._exit(code)


@server.tool()
def flood(lines: int, width: int = 80) -> str:
    """Write garbage lines to stdout (the protocol stream), then answer."""
    junk = (b"#" * width + b"\n") * 1000
    fd = wire_fd()
    left = lines
    while left > 0:
        chunk = min(left, 1000)
        os.write(fd, junk[: chunk * (width + 1)])
        left -= chunk
    return "flooded"


@server.tool()
def stderr_flood(kib: int) -> str:
    """Write `kib` KiB of log lines to stderr, then answer."""
    line = "toolbox stderr noise " + "." * 100 + "\n"
    for _ in range(kib * 1024 // len(line) + 1):
        sys.stderr.write(line)
    sys.stderr.flush()
    return "noisy"


@server.tool()
def huge(size: int, char: str = "x") -> str:
    """Answer with a text of `size` characters."""
    return char * size


@server.tool()
def huge_raw(megabytes: int, ctx: Context) -> str:
    """Write a reply of `megabytes` MB for this request straight to stdout,
    without building it in memory (the SDK's own reply that follows is late)."""
    request_id = json.dumps(ctx.request_context.request_id)
    head = (b'{"jsonrpc":"2.0","id":' + request_id.encode()
            + b',"result":{"content":[{"type":"text","text":"')
    fd = wire_fd()
    os.write(fd, head)
    block = b"y" * (1024 * 1024)
    for _ in range(megabytes):
        os.write(fd, block)
    os.write(fd, b'"}]}}\n')
    time.sleep(0.2)
    return "done"


@server.tool()
def env() -> dict[str, str]:
    """The server's whole environment."""
    return dict(os.environ)


@server.tool()
def headers(ctx: Context) -> dict[str, str]:
    """The HTTP request headers of this call (empty over stdio)."""
    return dict(ctx.headers or {})


@server.tool()
def cwd() -> str:
    """The server's working directory."""
    return os.getcwd()


@server.tool()
def picture() -> Image:
    """A tiny PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + b"\0" * 56, format="png")


@server.tool()
def calls() -> int:
    """How many times echo ran in this process (a restart resets it)."""
    return CALLS["count"]


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named `late` and tell the client the tool list changed."""

    def late() -> str:
        """Added at run time."""
        return "late"

    server.add_tool(late, name="late")
    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--exit-at-start", type=int)
    parser.add_argument("--slow-start", type=float)
    args = parser.parse_args()
    if args.exit_at_start is not None:
        sys.stderr.write("toolbox: refusing to start\n")
        sys.exit(args.exit_at_start)
    if args.slow_start:
        time.sleep(args.slow_start)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http,
                   json_response=args.json_response)
    else:
        server.run()


if __name__ == "__main__":
    main()
