"""`python -m spearpy.testing.asr [PHRASE ...]`: a standalone scripted realtime
transcription server on 127.0.0.1 (spearpy.testing.ScriptedAsrServer), until
Ctrl-C; prints the URL to give `spearpy run --rtasr-url`."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from types import FrameType

from spearpy.testing.asr_server import ScriptedAsrServer


def _exit_on_term(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the same orderly shutdown as Ctrl-C


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spearpy.testing.asr",
                                     description="Serve a scripted realtime transcription "
                                                 "server on 127.0.0.1; prints its URL.")
    parser.add_argument("phrases", nargs="*", default=["hello from the scripted server"])
    parser.add_argument("--ms-per-phrase", type=int, default=500,
                        help="audio (pcm16, 24 kHz mono) per transcribed phrase [500]")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_term)
    with ScriptedAsrServer(args.phrases, ms_per_phrase=args.ms_per_phrase,
                           api_key=args.api_key) as server:
        print(server.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
