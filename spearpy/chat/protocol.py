"""Plain value types exchanged between the ToolLoop and its driver.

The loop is sans-IO: the driver (spearpy/driver/send.py) performs every action the
loop asks for and feeds the results back. Nothing here imports wasmtime or
httpx.

Values are never changed after construction. The ones built on every loop
iteration (ToolCall, Complete, CallTool, CompletionResult, ToolOutcome) are
plain slotted dataclasses rather than frozen ones only because a frozen
dataclass's __init__ costs three times as much (~0.9 vs ~0.3 us measured).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from spearpy.chat.registry import Tool

JSONDict: TypeAlias = dict[str, Any]

@dataclass(slots=True)
class ToolCall:
    """One normalised call from an assistant message."""

    id: str
    name: str
    arguments: str  # JSON text, exactly as replayed upstream


@dataclass(frozen=True, slots=True)
class UpstreamError:
    """Why a completion produced no usable body."""

    code: str  # e.g. "upstream_http_error", "upstream_unreachable", "upstream_bad_json"
    message: str
    status: int | None = None
    # More fields of the error body (no_candidate_backend's available_models).
    details: JSONDict | None = None


@dataclass(slots=True)
class CompletionResult:
    """What the backend returned for one Complete action."""

    backend: str
    model: str
    body: JSONDict | None = None  # the upstream chat-completion JSON
    error: UpstreamError | None = None
    latency_ms: float = 0.0
    # `body` as the upstream sent it (scrubbed), when `body` is exactly its
    # JSON: a run's journal stores these bytes rather than encode `body` again.
    raw: bytes | None = None


@dataclass(slots=True)
class ToolOutcome:
    """What calling one tool produced, whatever its source."""

    ok: bool
    output: str = ""  # tool output text when ok
    error_code: str | None = None  # tool_exec_failed / output_too_large / ...
    error_message: str | None = None
    rc: int | None = None
    duration_ms: float = 0.0


# ---- actions the loop asks its driver to perform ---------------------------


@dataclass(slots=True)
class Complete:
    messages: list[JSONDict]
    tools: list[JSONDict] | None
    iteration: int  # 1-based number of this completion within the send


@dataclass(slots=True)
class CallTool:
    call: ToolCall
    tool: Tool  # the registered tool: its source runs the call
    arguments: str  # validated JSON text handed to the source


@dataclass(slots=True)
class CallTools:
    """Calls of one reply the driver may run at once (at most
    `LoopLimits.max_parallel_tools` of the non-guest ones at a time; the
    guest's in this order on its own thread). Every call was admitted as a
    lone CallTool would be; `on_tool_results` takes their outcomes in this
    order."""

    calls: list[CallTool]


@dataclass(frozen=True, slots=True)
class Done:
    body: JSONDict


@dataclass(frozen=True, slots=True)
class Failed:
    body: JSONDict  # {"error": {"code", "message"}, "_spear": {...}}


Action: TypeAlias = Complete | CallTool | CallTools | Done | Failed


# ---- where tools come from -----------------------------------------------------


@dataclass(slots=True)
class CallBudget:
    """What one call may use: everything a source must honour besides the
    arguments. The driver builds it; every source gets the same one."""

    max_output_bytes: int
    deadline: float | None = None  # time.monotonic() the whole send must end by
    cancel: threading.Event | None = None
    # The session's params, read-only: a source takes what concerns it (a
    # guest source its tool arena), the others ignore them.
    params: Mapping[str, Any] = field(default_factory=dict)


class ToolSource(Protocol):
    """A provider of tools: the guest's funcref table, an MCP server, Python
    callables. Limits, approvals, the result cache, redaction and events stay
    above the sources (loop and driver), so every call is checked alike."""

    kind: str  # "guest" | "mcp" | "python": events and metrics label calls with it

    def call(self, ref: Any, arguments: str, budget: CallBudget) -> ToolOutcome:
        """Run the tool registered with `ref`; failures are outcomes, never raised."""
        ...


# ---- notes the loop leaves for observers (drained by the driver) -----------


@dataclass(frozen=True, slots=True)
class LimitHit:
    limit: str  # max_iterations / max_total_tool_calls / max_total_tokens
    value: int


@dataclass(frozen=True, slots=True)
class ToolSkipped:
    """A call answered without running the guest (error or cache hit)."""

    call: ToolCall
    code: str  # unknown_tool / invalid_arguments / cache_hit / not_run
    message: str = ""


LoopNote: TypeAlias = LimitHit | ToolSkipped


def _count(value: object) -> int:
    """A usage count as reported, or 0 for anything that is not an int >= 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, raw: object) -> None:
        # Three plain int counts >= 0 are added at once ((p | c | t) >= 0
        # when all three are), 2.3 % of P5; anything else (missing, negative,
        # bool, float) goes field by field, where only a count >= 0 is added.
        if type(raw) is dict:
            try:
                prompt, completion, total = \
                    raw["prompt_tokens"], raw["completion_tokens"], raw["total_tokens"]
            except KeyError:
                pass
            else:
                if type(prompt) is int and type(completion) is int and type(total) is int \
                        and prompt | completion | total >= 0:
                    self.prompt_tokens += prompt
                    self.completion_tokens += completion
                    self.total_tokens += total
                    return
        if not isinstance(raw, dict):
            return
        prompt = raw.get("prompt_tokens")
        completion = raw.get("completion_tokens")
        total = raw.get("total_tokens")
        self.prompt_tokens += _count(prompt)
        self.completion_tokens += _count(completion)
        self.total_tokens += _count(total)

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class LoopLimits:
    """Effective limits of one send (session params already merged with host caps)."""

    max_iterations: int = 8
    max_total_tool_calls: int = 32
    max_tool_output_bytes: int = 65536
    max_total_tokens: int | None = None
    strict_tools: bool = False
    cache_tool_results: bool = False
    validate_tool_args: bool = True
    # Calls of one reply run at once (1: one after another, as a loop built
    # without it always does; the driver's default comes from the host).
    max_parallel_tools: int = 1


@dataclass(slots=True)
class SendStats:
    iterations: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
