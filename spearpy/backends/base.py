"""The backend seam: one small protocol every upstream dialect implements.

Backends know nothing of wasm; they turn a CompletionRequest into a
CompletionResult and never raise for upstream trouble (errors are values).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from spearpy.chat.protocol import CompletionResult, JSONDict


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str
    messages: list[JSONDict]
    tools: list[JSONDict] | None = None
    params: dict[str, Any] = field(default_factory=dict)  # forwarded upstream as-is
    timeout_s: float | None = None  # per request; None = backend default
    deadline: float | None = None  # time.monotonic() value no wait may pass
    # Set when the guest's run is cancelled: no attempt starts and no backoff
    # wait goes on after it (the attempt in flight is abandoned by the caller).
    cancel: threading.Event | None = None
    # Ask the upstream to stream (SSE); the result is the same assembled body.
    stream: bool = False
    # Receives each text delta of a streamed reply as it arrives (secrets
    # already removed); never called for a reply that was not streamed.
    on_delta: Callable[[str], None] | None = None


class Backend(Protocol):
    name: str
    default_model: str

    def complete(self, request: CompletionRequest) -> CompletionResult: ...

    def close(self) -> None: ...
