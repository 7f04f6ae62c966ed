"""What becomes of a reply's tool call, and which calls run at once.

`admission` is the one statement of the rules a call passes before it runs
(a registered tool the policy allows or the guest approved, valid
arguments, no cache hit, `max_total_tool_calls` not reached): the loop
(chat/loop.py) acts on its verdict for the call at the head of its queue,
and `admit_batch` asks it of the calls after that one.

With `max_parallel_tools` above 1 the calls after the head join it in one
CallTools while each would simply run and no call of the batch would
produce its result (the same cache key). Admission ends at the first call
that is anything else; that call is decided once the batch is answered,
exactly as if the calls had run one by one, so every limit, approval,
strict rule and cache entry stays per call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from itertools import islice
from typing import TypeAlias

from spearpy import abi
from spearpy.chat.bodies import TOOL_DENIED
from spearpy.chat.protocol import CallTool, CallTools, LoopLimits, SendStats, ToolCall
from spearpy.chat.registry import ALLOW, DENY, Tool
from spearpy.chat.toolio import cache_key, check_arguments, unknown_tool

CacheKey: TypeAlias = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Skip:
    """The call is answered with this error for the model, not run."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Cached:
    """The call is answered with an earlier identical call's result."""

    content: str


class Stop(Enum):
    HOLD = "hold"  # the policy asks the guest: the send ends with the call pending
    LIMIT = "limit"  # max_total_tool_calls reached: the send ends


# A call that runs is its tool and cache key, a plain tuple: the verdict of
# almost every call, made without a class's __init__.
Verdict: TypeAlias = "tuple[Tool, CacheKey | None] | Skip | Cached | Stop"


def admission(call: ToolCall, tools: Mapping[str, Tool], limits: LoopLimits, stats: SendStats,
              cache: Mapping[CacheKey, str], approved: frozenset[str]) -> Verdict:
    """What becomes of `call` now; changes nothing (the caller counts a call
    that runs in `stats`)."""
    tool = tools.get(call.name)
    if tool is None:
        return Skip(abi.TOOL_UNKNOWN, unknown_tool(call.name))
    if tool.approval != ALLOW:
        if tool.approval == DENY:
            return Skip(TOOL_DENIED, f"the host's policy denies calls of {tool.name!r}")
        if call.id not in approved:
            return Stop.HOLD
    parsed, problem = check_arguments(tool, call.arguments, limits.validate_tool_args)
    if problem is not None:
        return Skip(abi.TOOL_INVALID_ARGUMENTS, problem)
    key: CacheKey | None = None
    if limits.cache_tool_results:
        key = cache_key(call.name, parsed)
        cached = cache.get(key)
        if cached is not None:
            return Cached(cached)
    if stats.tool_calls >= limits.max_total_tool_calls:
        return Stop.LIMIT
    return tool, key


def admit_batch(first: CallTool, key: CacheKey | None, queue: deque[ToolCall], *,
                tools: Mapping[str, Tool], limits: LoopLimits, stats: SendStats,
                cache: Mapping[CacheKey, str], approved: frozenset[str],
                ) -> tuple[CallTools, list[CacheKey | None]] | None:
    """`first` (queue[0], admitted and counted) and the calls after it that
    simply run, counted in `stats`, with each call's cache key; None when no
    other call joins it."""
    calls, keys = [first], [key]
    # The batch's keys as a set: a reply of thousands of calls (a model may
    # ask for up to max_total_tool_calls) is admitted in linear time.
    taken = {key} if key is not None else set()
    for call in islice(queue, 1, None):  # after `first`
        verdict = admission(call, tools, limits, stats, cache, approved)
        if not isinstance(verdict, tuple):
            break
        tool, call_key = verdict
        if call_key is not None:
            if call_key in taken:  # a call of the batch would answer it from the cache
                break
            taken.add(call_key)
        stats.tool_calls += 1
        calls.append(CallTool(call, tool, call.arguments))
        keys.append(call_key)
    if len(calls) == 1:
        return None
    return CallTools(calls), keys
