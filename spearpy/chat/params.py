"""Session parameters: checking SET_PARAM values, splitting host-owned keys
from forwarded ones, and turning them into the limits of one send.

The table is spear-abi.md section 3. Every limit has a host default and a host
cap; the host configuration may lower caps and move defaults, never lift a cap
past the ABI maximum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from spearpy import abi
from spearpy.chat.protocol import LoopLimits

# ABI maxima: a host may lower these caps, not raise them.
MAX_ITERATIONS_LIMIT: Final = 128
MAX_TOTAL_TOOL_CALLS_LIMIT: Final = 10_000
MAX_TOOL_OUTPUT_BYTES_LIMIT: Final = 1 << 20

_U32_MAX: Final = 0xFFFF_FFFF


@dataclass(frozen=True)
class LimitPolicy:
    """Host-side defaults and caps for the per-send limits."""

    # SPEAR's tool-calling design uses 8 completions per send; 128 stops a
    # model that never converges well before it burns a real budget.
    default_max_iterations: int = 8
    max_iterations_cap: int = MAX_ITERATIONS_LIMIT
    # SPEAR's default of 32 executions per send, accumulated across rounds.
    default_max_total_tool_calls: int = 32
    max_total_tool_calls_cap: int = MAX_TOTAL_TOOL_CALLS_LIMIT
    # SPEAR's default 64 KiB (also one wasm page, so a default-sized output
    # buffer never needs more than one memory.grow); 1 MiB keeps a single tool
    # result from dominating the context window and host memory.
    default_max_tool_output_bytes: int = 65536
    max_tool_output_bytes_cap: int = MAX_TOOL_OUTPUT_BYTES_LIMIT
    default_max_total_tokens: int | None = None
    default_strict_tools: bool = False
    default_cache_tool_results: bool = False
    default_validate_tool_args: bool = True

    def __post_init__(self) -> None:
        for cap_name, default_name, limit in _CAPPED:
            cap = getattr(self, cap_name)
            default = getattr(self, default_name)
            if not _is_int(cap) or not 0 <= cap <= limit:
                raise ValueError(f"{cap_name} must be an int in 0..{limit}, got {cap!r}")
            if not _is_int(default) or default < 0:
                raise ValueError(f"{default_name} must be a non-negative int, got {default!r}")
            if default > cap:
                # frozen dataclass: clamping is part of construction.
                object.__setattr__(self, default_name, cap)
        tokens = self.default_max_total_tokens
        if tokens is not None and (not _is_int(tokens) or tokens < 0):
            raise ValueError(f"default_max_total_tokens must be None or >= 0, got {tokens!r}")


_CAPPED: Final = (
    ("max_iterations_cap", "default_max_iterations", MAX_ITERATIONS_LIMIT),
    ("max_total_tool_calls_cap", "default_max_total_tool_calls", MAX_TOTAL_TOOL_CALLS_LIMIT),
    ("max_tool_output_bytes_cap", "default_max_tool_output_bytes", MAX_TOOL_OUTPUT_BYTES_LIMIT),
)

# Keys the host consumes itself; they never go upstream.
HOST_KEYS: Final = frozenset(
    {
        "model",
        "backend",
        "timeout_ms",
        "max_iterations",
        "max_total_tool_calls",
        "max_tool_calls",
        "max_tool_output_bytes",
        "tool_arena_ptr",
        "tool_arena_len",
        "strict_tools",
        "max_total_tokens",
        "cache_tool_results",
        "validate_tool_args",
        "max_parallel_tools",
        # SPEAR passes a guest's `stream: true` upstream; here the host streams
        # (token events) and the guest still gets the assembled body.
        "stream",
    }
)

# The host builds these itself: letting a guest set them would break the
# request (messages/tools) or choices[0] (n).
FORBIDDEN_KEYS: Final = frozenset({"messages", "tools", "n"})

ALIASES: Final = {"max_tool_calls": "max_total_tool_calls"}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_negative_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _u32(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U32_MAX


def _finite_number(value: object) -> bool:
    if _is_int(value):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _bool(value: object) -> bool:
    return isinstance(value, bool)


def _non_empty_str(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _stop(value: object) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _str_or_object(value: object) -> bool:
    return isinstance(value, str | dict)


def _object(value: object) -> bool:
    return isinstance(value, dict)


_CHECKS: Final[Mapping[str, Callable[[object], bool]]] = {
    "model": _non_empty_str,
    "backend": _non_empty_str,
    "timeout_ms": _non_negative_int,
    "max_iterations": _non_negative_int,
    "max_total_tool_calls": _non_negative_int,
    "max_tool_calls": _non_negative_int,
    "max_tool_output_bytes": _non_negative_int,
    "tool_arena_ptr": _u32,
    "tool_arena_len": _u32,
    "strict_tools": _bool,
    "max_total_tokens": _non_negative_int,
    "cache_tool_results": _bool,
    "validate_tool_args": _bool,
    "max_parallel_tools": _positive_int,
    "stream": _bool,
    "temperature": _finite_number,
    "top_p": _finite_number,
    "max_tokens": _non_negative_int,
    "max_completion_tokens": _non_negative_int,
    "seed": _is_int,
    "stop": _stop,
    "tool_choice": _str_or_object,
    "parallel_tool_calls": _bool,
    "response_format": _object,
}


def check_param(key: str, value: object) -> int:
    """0 if `key` may be set to `value`, else abi.EINVAL or abi.EACCES.

    None means "unset" and is accepted for every settable key.
    """
    if not isinstance(key, str) or key == "":
        return abi.EINVAL
    if key.startswith("mcp."):
        return abi.EACCES  # MCP servers are host policy, not guest-selectable
    if key in FORBIDDEN_KEYS:
        return abi.EINVAL
    if value is None:
        return 0
    check = _CHECKS.get(key)
    if check is not None:
        return 0 if check(value) else abi.EINVAL
    # Unknown keys go upstream verbatim; NaN/Infinity would make that JSON invalid.
    return 0 if _json_safe(value) else abi.EINVAL


def _json_safe(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return False
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif not (item is None or isinstance(item, str | int | float)):
            return False
    return True


def canonical_key(key: str) -> str:
    """The key a value is stored under (aliases collapse, so the last set wins)."""
    return ALIASES.get(key, key)


def forwarded_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of session params sent upstream unchanged."""
    return {
        key: value
        for key, value in params.items()
        if key not in HOST_KEYS
        and key not in FORBIDDEN_KEYS
        and not key.startswith("mcp.")
        and value is not None
    }


def _int_param(params: Mapping[str, Any], key: str, default: int, cap: int) -> int:
    value = params.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return min(value, cap)
    return min(default, cap)


def resolve_limits(params: Mapping[str, Any], policy: LimitPolicy,
                   max_parallel_tools: int = 1) -> LoopLimits:
    """The effective limits of one send: session params over host defaults,
    capped. `max_parallel_tools` is the run's (HostConfig, a run's limits):
    a session may lower it, never raise it."""
    tool_calls_key = "max_total_tool_calls"
    if params.get(tool_calls_key) is None and params.get("max_tool_calls") is not None:
        tool_calls_key = "max_tool_calls"

    tokens = params.get("max_total_tokens")
    max_total_tokens = tokens if _non_negative_int(tokens) else policy.default_max_total_tokens

    def flag(key: str, default: bool) -> bool:
        value = params.get(key)
        return value if isinstance(value, bool) else default

    return LoopLimits(
        max_iterations=_int_param(
            params, "max_iterations", policy.default_max_iterations, policy.max_iterations_cap
        ),
        max_total_tool_calls=_int_param(
            params,
            tool_calls_key,
            policy.default_max_total_tool_calls,
            policy.max_total_tool_calls_cap,
        ),
        max_tool_output_bytes=_int_param(
            params,
            "max_tool_output_bytes",
            policy.default_max_tool_output_bytes,
            policy.max_tool_output_bytes_cap,
        ),
        max_total_tokens=max_total_tokens,
        strict_tools=flag("strict_tools", policy.default_strict_tools),
        cache_tool_results=flag("cache_tool_results", policy.default_cache_tool_results),
        validate_tool_args=flag("validate_tool_args", policy.default_validate_tool_args),
        max_parallel_tools=_parallel(params.get("max_parallel_tools"), max_parallel_tools),
    )


def _parallel(value: object, host: int) -> int:
    host = max(host, 1)
    return min(value, host) if _positive_int(value) else host


__all__ = [
    "ALIASES",
    "FORBIDDEN_KEYS",
    "HOST_KEYS",
    "LimitPolicy",
    "canonical_key",
    "check_param",
    "forwarded_params",
    "resolve_limits",
]
