"""A worker process that runs a guest per HTTP request (docs/embedding.md).

    python examples/agent_service.py agent.wasm --base-url URL --model NAME [--port 8080]

POST /run with {"argv": [...], "stdin": "...", "env": {...}} runs the agent
once and answers {"outcome", "exit_code", "stdout", "usage"}. One Host serves
every request: one Engine, one compiled module, one HTTP connection pool;
each request gets its own Store, fds and sessions.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spearpy import Host, HostConfig, LoadedModule


def make_handler(host: Host, module: LoadedModule, run_timeout: float) -> type:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != "/run":
                self.send_error(404)
                return
            job: dict[str, Any] = json.loads(self.rfile.read(
                int(self.headers.get("Content-Length", 0))) or b"{}")
            handle = host.start(module, job.get("argv", []), stdin=job.get("stdin"),
                                env=job.get("env"))
            try:
                result = handle.result(timeout=run_timeout)
            except TimeoutError:
                handle.cancel()  # outcome "cancelled", exit code 130
                result = handle.result()
            body = json.dumps({
                "outcome": result.outcome, "exit_code": result.exit_code,
                "stdout": (result.stdout or b"").decode("utf-8", "replace"),
                "usage": result.usage,
            }).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("module")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--run-timeout", type=float, default=60.0)
    args = parser.parse_args()

    host = Host(HostConfig(base_url=args.base_url, model=args.model))
    module = host.load(args.module)  # compiled once; later processes hit the disk cache
    server = ThreadingHTTPServer(("127.0.0.1", args.port),
                                 make_handler(host, module, args.run_timeout))
    server.daemon_threads = False  # server_close() waits for requests in flight
    # SIGTERM from a process manager: stop accepting, finish, release the Host.
    signal.signal(signal.SIGTERM,
                  lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
    server.server_close()
    host.close()


if __name__ == "__main__":
    main()
