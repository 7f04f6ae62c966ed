"""SPEAR's three-layer MCP selection rule, as pure functions over plain data.

Platform layer: the registry (which servers exist, and each record's
`allowed_tools`, default deny). Task layer: the run's config (`mcp.enabled`,
`mcp.default_server_ids`, `mcp.allowed_server_ids`, `mcp.tool_allowlist`,
`mcp.tool_denylist`); a guest can never change it. Session layer: what the
guest sets with `cchat_ctl` (`mcp.enabled`, `mcp.server_ids`,
`mcp.tool_allowlist`, `mcp.tool_denylist`); it can only narrow what the task
allows. Nothing here does I/O, so the loop can call it per send.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

EACCES = -13
EINVAL = -22

ENABLED = "mcp.enabled"
SERVER_IDS = "mcp.server_ids"
TOOL_ALLOWLIST = "mcp.tool_allowlist"
TOOL_DENYLIST = "mcp.tool_denylist"
DEFAULT_SERVER_IDS = "mcp.default_server_ids"
ALLOWED_SERVER_IDS = "mcp.allowed_server_ids"
TASK_PREFIX = "mcp.task_"
SESSION_KEYS = (ENABLED, SERVER_IDS, TOOL_ALLOWLIST, TOOL_DENYLIST)
TASK_KEYS = (ENABLED, DEFAULT_SERVER_IDS, ALLOWED_SERVER_IDS, TOOL_ALLOWLIST, TOOL_DENYLIST)

# A guest's lists are bounded so one cchat_ctl cannot make every later send
# match thousands of patterns against every tool.
MAX_LIST_ITEMS = 256
MAX_ITEM_CHARS = 256


def wildcard_match(pattern: str, text: str) -> bool:
    """SPEAR's glob: `*` any run, `?` one character, everything else literal.

    Greedy with one backtrack point, so O(len(pattern) * len(text)) at worst:
    a regex translation would let a guest's `*a*a*a*...` pattern backtrack
    exponentially. `?` matches one character where SPEAR matches one byte;
    they differ only on non-ASCII names."""
    p = t = 0
    star = -1
    mark = 0
    while t < len(text):
        if p < len(pattern) and pattern[p] in ("?", text[t]):
            p += 1
            t += 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark = p, t
            p += 1
        elif star >= 0:
            p = star + 1
            mark += 1
            t = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def match_any(patterns: Iterable[str], text: str) -> bool:
    return any(wildcard_match(p, text) for p in patterns)


def _dedupe(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))


def _as_tuples(policy: object, names: tuple[str, ...]) -> None:
    """A list (or other iterable) where a policy holds a tuple, as an
    embedder's SessionPolicy(server_ids=[...]) gives, becomes the tuple once,
    when the policy is built: every policy is then hashable, keys the cache
    of offers (McpManager.offer) and equals the policy its tuples make."""
    for name in names:
        value = getattr(policy, name)
        # Built at every send (session_from_params): the usual tuple or None
        # passes without an ABC check.
        if value is None or type(value) is tuple:
            continue
        if isinstance(value, Iterable) and not isinstance(value, str):
            object.__setattr__(policy, name, tuple(value))


@dataclass(frozen=True)
class TaskPolicy:
    """The run's MCP policy. `allowed_server_ids` None means SPEAR's default:
    the default ids are the upper bound."""

    enabled: bool = False
    default_server_ids: tuple[str, ...] = ()
    allowed_server_ids: tuple[str, ...] | None = None
    tool_allowlist: tuple[str, ...] = ()
    tool_denylist: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _as_tuples(self, ("default_server_ids", "allowed_server_ids", "tool_allowlist",
                          "tool_denylist"))

    @property
    def allowed(self) -> tuple[str, ...]:
        if self.allowed_server_ids is None:
            return _dedupe(self.default_server_ids)
        return _dedupe(self.allowed_server_ids)

    @property
    def defaults(self) -> tuple[str, ...]:
        """The default servers inside the upper bound (SPEAR drops the others)."""
        allowed = set(self.allowed)
        return tuple(s for s in _dedupe(self.default_server_ids) if s in allowed)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TaskPolicy:
        """From a run's config keys (`mcp.*`; other keys are ignored).

        Values may be JSON-typed (config file, `--task-param KEY=JSON`) or
        SPEAR's task-config strings (`"true"`, `'["a","b"]'`, `"a,b"`). A bad
        value or an unknown `mcp.*` key is a ValueError naming it: the task
        layer is the operator's, and a typo there must not silently widen or
        disable anything."""
        found: dict[str, Any] = {}
        for key, value in params.items():
            if not key.startswith("mcp."):
                continue
            if key not in TASK_KEYS:
                raise ValueError(f"unknown task parameter {key!r} (known: {', '.join(TASK_KEYS)})")
            found[key] = value
        allowed = found.get(ALLOWED_SERVER_IDS)
        return cls(
            enabled=_task_bool(ENABLED, found.get(ENABLED, False)),
            default_server_ids=_task_list(DEFAULT_SERVER_IDS, found.get(DEFAULT_SERVER_IDS)),
            allowed_server_ids=None if allowed is None else _task_list(ALLOWED_SERVER_IDS, allowed),
            tool_allowlist=_task_list(TOOL_ALLOWLIST, found.get(TOOL_ALLOWLIST)),
            tool_denylist=_task_list(TOOL_DENYLIST, found.get(TOOL_DENYLIST)),
        )


def _task_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "1", "yes", "y", "on"):
            return True
        if word in ("false", "0", "no", "n", "off", ""):
            return False
    raise ValueError(f"task parameter {key!r} must be a boolean, got {value!r}")


def _task_list(key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"task parameter {key!r}: invalid JSON list: {exc}") from exc
        else:
            return _dedupe(part.strip() for part in text.split(","))
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return _dedupe(v.strip() for v in value)
    raise ValueError(f"task parameter {key!r} must be a list of strings, got {value!r}")


@dataclass(frozen=True)
class SessionPolicy:
    """What the guest set on one chat session; None = not set (task default)."""

    enabled: bool | None = None
    server_ids: tuple[str, ...] | None = None
    tool_allowlist: tuple[str, ...] = ()
    tool_denylist: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _as_tuples(self, ("server_ids", "tool_allowlist", "tool_denylist"))


def _is_str_list(value: Any) -> bool:
    return (isinstance(value, list) and len(value) <= MAX_LIST_ITEMS
            and all(isinstance(v, str) and len(v) <= MAX_ITEM_CHARS for v in value))


def check_session_param(task: TaskPolicy, key: str, value: Any) -> int:
    """The errno SPEAR's `cchat_ctl` set-param returns for an `mcp.*` key
    (0 = accepted). `value` is the parsed JSON value; None (JSON null)
    unsets the key, as for spearpy's other params.

    Unknown `mcp.*` keys are -EINVAL; SPEAR stores them as ordinary params and
    ignores them, which hides a guest's typo (`mcp.server_id`) behind a
    session that silently gets the task defaults."""
    if key.startswith(TASK_PREFIX):
        return EACCES
    if key not in SESSION_KEYS:
        return EINVAL
    if value is None:
        return 0
    if key == ENABLED:
        if not isinstance(value, bool):
            return EINVAL
        return EACCES if value and not task.enabled else 0
    if not _is_str_list(value):
        return EINVAL
    if key == SERVER_IDS:
        allowed = set(task.allowed)
        # SPEAR skips empty ids rather than refusing them; so do we.
        if any(sid and sid not in allowed for sid in value):
            return EACCES
    return 0


def apply_session_param(task: TaskPolicy, session: SessionPolicy, key: str,
                        value: Any) -> tuple[int, SessionPolicy]:
    """(errno, the session policy after the set): unchanged on a refusal."""
    rc = check_session_param(task, key, value)
    if rc:
        return rc, session
    if key == ENABLED:
        return 0, replace(session, enabled=value)
    if key == SERVER_IDS:
        return 0, replace(session, server_ids=None if value is None else _dedupe(value))
    items = () if value is None else tuple(value)
    if key == TOOL_ALLOWLIST:
        return 0, replace(session, tool_allowlist=items)
    return 0, replace(session, tool_denylist=items)


def session_from_params(task: TaskPolicy,
                        params: Mapping[str, Any]) -> tuple[SessionPolicy, dict[str, int]]:
    """Apply every `mcp.*` key of a params mapping in order: (policy, refused key -> errno)."""
    session = SessionPolicy()
    refused: dict[str, int] = {}
    for key, value in params.items():
        if key.startswith("mcp."):
            rc, session = apply_session_param(task, session, key, value)
            if rc:
                refused[key] = rc
    return session, refused


def effective_servers(available: Iterable[str], task: TaskPolicy,
                      session: SessionPolicy) -> tuple[str, ...]:
    """registry ∩ task-allowed ∩ (session-requested, or the task defaults).

    `available` are the registry's usable server ids (disabled records
    excluded). MCP is off unless the task enables it, and a session that sets
    `mcp.enabled=false` gets nothing."""
    if not task.enabled or session.enabled is False:
        return ()
    allowed = set(task.allowed)
    usable = set(available)
    requested = task.defaults if session.server_ids is None else session.server_ids
    return tuple(s for s in _dedupe(requested) if s in allowed and s in usable)


def tool_denial(tool: str, server_allowed: Sequence[str], task: TaskPolicy,
                session: SessionPolicy) -> str | None:
    """Why `tool` is not exposed, or None when every layer allows it.

    An empty `allowed_tools` exposes nothing (default deny); an empty task or
    session allowlist restricts nothing; a denylist match at any layer vetoes."""
    allowed = [p for p in server_allowed if p]
    if not allowed or not match_any(allowed, tool):
        return "not in the server's allowed_tools"
    if task.tool_allowlist and not match_any(task.tool_allowlist, tool):
        return "not in the task's tool allowlist"
    if match_any(task.tool_denylist, tool):
        return "in the task's tool denylist"
    if session.tool_allowlist and not match_any(session.tool_allowlist, tool):
        return "not in the session's tool allowlist"
    if match_any(session.tool_denylist, tool):
        return "in the session's tool denylist"
    return None


def effective_tools(tools: Iterable[str], server_allowed: Sequence[str], task: TaskPolicy,
                    session: SessionPolicy) -> list[str]:
    """The names among `tools` that every layer allows, in their order."""
    return [t for t in tools if tool_denial(t, server_allowed, task, session) is None]


def call_denial(server_id: str, tool: str, *, available: Iterable[str],
                server_allowed: Sequence[str], task: TaskPolicy,
                session: SessionPolicy) -> str | None:
    """Why a call to (server_id, tool) must be refused, or None. Checked
    again at call time because a model can name a tool it was never offered
    (the compatibility form makes that easy)."""
    if server_id not in effective_servers(available, task, session):
        return f"server {server_id!r} is not enabled for this session"
    reason = tool_denial(tool, server_allowed, task, session)
    return None if reason is None else f"tool {tool!r} of server {server_id!r} is {reason}"


class Approval(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"  # the call goes back to the guest as a pending call


# SPEAR's record values (`never`/`always`/`policy`: is approval required?)
# and spearpy's direct ones. `policy` and an unset value defer to the host.
APPROVAL_VALUES: dict[str, Approval | None] = {
    "never": Approval.ALLOW, "allow": Approval.ALLOW,
    "always": Approval.ASK, "ask": Approval.ASK,
    "deny": Approval.DENY,
    "policy": None, "": None,
}


def parse_approval(value: str) -> Approval | None:
    """The approval a record value stands for (None = the host decides);
    ValueError for an unknown value."""
    key = value.strip().lower()
    if key not in APPROVAL_VALUES:
        raise ValueError(f"unknown approval policy {value!r} (one of: "
                         f"{', '.join(repr(k) for k in APPROVAL_VALUES if k)})")
    return APPROVAL_VALUES[key]


def approval_for(tool: str, default_policy: str = "", per_tool: Mapping[str, str] | None = None,
                 *, host_default: Approval = Approval.ALLOW) -> Approval:
    """What to do with a call to `tool` under a record's `[approval_policy]`.

    `per_tool` keys are tool names or globs: an exact name wins, then the
    longest matching pattern (the most specific), then `default_policy`.
    `policy` or an empty value, wherever it is found, means `host_default`."""
    rules = per_tool or {}
    chosen: str | None = rules.get(tool)
    if chosen is None:
        for pattern in sorted(rules, key=lambda p: (-len(p), p)):
            if wildcard_match(pattern, tool):
                chosen = rules[pattern]
                break
    decided = parse_approval(chosen if chosen is not None else default_policy)
    return host_default if decided is None else decided
