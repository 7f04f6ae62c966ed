"""What a finished send returns: the Done and Failed bodies and the codes a
loop-made error can carry.

The ToolLoop decides how a send ends (chat/loop.py); the bodies here only
write that ending down, from the loop's counters, so they run once per send
and never on a loop iteration. Every body carries `_spear`, the send's
summary (backend, model, iterations, tool calls, usage, elapsed time).
"""

from __future__ import annotations

from typing import Final

from spearpy import abi
from spearpy.chat.normalize import with_session_tool_calls
from spearpy.chat.protocol import JSONDict, SendStats, ToolCall

CACHE_HIT: Final = "cache_hit"
TOOL_DENIED: Final = "tool_denied"
UPSTREAM_BAD_RESPONSE: Final = "upstream_bad_response"
INTERNAL_ERROR: Final = "internal_error"

# Error codes a Failed body produced by the loop itself can carry. Upstream
# errors carry their UpstreamError.code, interrupts the code given to interrupt().
LOOP_ERROR_CODES: Final = frozenset(
    {
        abi.SEND_PENDING_TOOL_CALLS,
        abi.SEND_TOOL_CALL_LIMIT,
        abi.SEND_TOKEN_BUDGET,
        abi.TOOL_UNKNOWN,
        abi.TOOL_INVALID_ARGUMENTS,
        UPSTREAM_BAD_RESPONSE,
        INTERNAL_ERROR,
    }
)


def summary(backend: str, model: str, stats: SendStats, elapsed_s: float) -> JSONDict:
    """The `_spear` member of every body a send returns."""
    return {
        "backend": backend,
        "model": model,
        "iterations": stats.iterations,
        "tool_calls": stats.tool_calls,
        "usage": stats.usage.as_dict(),
        "elapsed_ms": round(max(0.0, elapsed_s) * 1000),
    }


def error_body(code: str, message: str, spear: JSONDict, status: int | None = None,
               details: JSONDict | None = None) -> JSONDict:
    error: JSONDict = {"code": code, "message": message}
    if status is not None:
        error["status"] = status
    if details:
        error.update({k: v for k, v in details.items() if k not in error})
    return {"error": error, "_spear": spear}


def done_body(body: JSONDict, appended: JSONDict, spear: JSONDict) -> JSONDict:
    """The upstream's last body, its message's tool calls as the session holds them."""
    out = with_session_tool_calls(body, appended)
    out["_spear"] = spear
    return out


def held_body(body: JSONDict, appended: JSONDict, spear: JSONDict, call: ToolCall,
              pending: list[str]) -> JSONDict:
    """done_body of a send held at `call` for the guest's approval, with the
    ids it left pending (that call's and the ones after it)."""
    out = with_session_tool_calls(body, appended)
    out["_spear"] = {**spear, "pending_tool_calls": pending,
                     "held": {"tool_call_id": call.id, "name": call.name, "reason": "approval"}}
    return out


def metrics(spear: JSONDict) -> dict[str, int]:
    """GET_METRICS of a send that ran with ENABLE_METRICS."""
    out = dict(spear["usage"])
    out.update(iterations=spear["iterations"], tool_calls=spear["tool_calls"],
               elapsed_ms=spear["elapsed_ms"])
    return out
