"""`python -m spearpy.testing SCRIPT.json [--port N]`: a standalone offline model."""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from spearpy.backends.scripted.reply import ScriptError
from spearpy.backends.scripted.server import serve_script_forever


def _exit_on_term(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into the same orderly shutdown as Ctrl-C.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spearpy.testing",
        description="Serve a scripted OpenAI-compatible model; prints its base URL.",
    )
    parser.add_argument("script", help="script JSON file (see docs/scripted-model.md)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        serve_script_forever(args.script, host=args.host, port=args.port, api_key=args.api_key)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot serve: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
