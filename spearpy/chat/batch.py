"""Which calls of a reply run at once: the admission of a CallTools.

The loop admits the call at the head of its queue as ever (chat/loop.py);
with `max_parallel_tools` above 1 the calls after it join it while each
would simply run: a registered tool the policy allows (or the guest
approved), valid arguments, no cache hit, no call of the batch whose result
it would hit, and `max_total_tool_calls` not reached. Admission ends at the
first call that is anything else; that call is decided once the batch is
answered, exactly as if the calls had run one by one, so every limit,
approval, strict rule and cache entry stays per call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from itertools import islice
from typing import TypeAlias

from spearpy.chat.protocol import CallTool, CallTools, LoopLimits, SendStats, ToolCall
from spearpy.chat.registry import ALLOW, DENY, Tool
from spearpy.chat.toolio import cache_key, check_arguments

CacheKey: TypeAlias = tuple[str, str]


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
        if stats.tool_calls >= limits.max_total_tool_calls:
            break
        admitted = _runnable(call, taken, tools, limits, cache, approved)
        if admitted is None:
            break
        stats.tool_calls += 1
        calls.append(CallTool(call, admitted[0], call.arguments))
        keys.append(admitted[1])
        if admitted[1] is not None:
            taken.add(admitted[1])
    if len(calls) == 1:
        return None
    return CallTools(calls), keys


def _runnable(call: ToolCall, taken: set[CacheKey], tools: Mapping[str, Tool],
              limits: LoopLimits, cache: Mapping[CacheKey, str], approved: frozenset[str],
              ) -> tuple[Tool, CacheKey | None] | None:
    """`call`'s tool and cache key when it would run as it is (no skip, no
    hold, no cache hit), else None; changes nothing."""
    tool = tools.get(call.name)
    if tool is None or tool.approval == DENY or \
            (tool.approval != ALLOW and call.id not in approved):
        return None
    parsed, problem = check_arguments(tool, call.arguments, limits.validate_tool_args)
    if problem is not None:
        return None
    key: CacheKey | None = None
    if limits.cache_tool_results:
        key = cache_key(call.name, parsed)
        if key in cache or key in taken:
            return None
    return tool, key
