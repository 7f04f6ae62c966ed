"""Scripts: ordered rules that decide how the scripted model answers a request.

A script is validated completely when it is loaded, so a typo fails the test
that loads it with a message naming the rule, not some later request with a
500. The conditions a rule may test live in one table (`CONDITIONS`); adding a
condition is adding a row.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from spearpy.backends.scripted.reply import (
    DEFAULT_MODEL,
    JSONDict,
    ReplySpec,
    ScriptedReply,
    ScriptError,
    failure,
    last_content,
    messages_of,
    text_of,
)

WhenFn: TypeAlias = Callable[[JSONDict], bool]
ReplyFn: TypeAlias = Callable[[JSONDict], JSONDict]
ScriptSource: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any] | Sequence[Any] | Script"


@dataclass(frozen=True, slots=True)
class RequestView:
    """What conditions look at: the request plus its position in the script's history."""

    request: JSONDict
    index: int

    @property
    def messages(self) -> list[JSONDict]:
        return messages_of(self.request)

    def tool_message_count(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "tool")

    def tool_names(self) -> set[str]:
        names: set[str] = set()
        tools = self.request.get("tools")
        for tool in tools if isinstance(tools, list) else []:
            if not isinstance(tool, dict):
                continue
            fn = tool.get("function")
            name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
            if isinstance(name, str):
                names.add(name)
        return names


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _last_role(view: RequestView, want: Any) -> bool:
    msgs = view.messages
    return bool(msgs) and msgs[-1].get("role") == want


def _has_tools(view: RequestView, want: Any) -> bool:
    tools = view.request.get("tools")
    return (isinstance(tools, list) and len(tools) > 0) is want


# name -> (value check, what the value must be, predicate)
CONDITIONS: dict[str, tuple[Callable[[Any], bool], str, Callable[[RequestView, Any], bool]]] = {
    "tool_messages": (_int, "a non-negative int", lambda v, n: v.tool_message_count() == n),
    "no_tool_message": (_bool, "true or false", lambda v, b: (v.tool_message_count() == 0) is b),
    "last_role": (_str, "a string", _last_role),
    "last_user_contains": (_str, "a string", lambda v, s: s in last_content(v.request, "user")),
    "last_tool_contains": (_str, "a string", lambda v, s: s in last_content(v.request, "tool")),
    "any_contains": (
        _str,
        "a string",
        lambda v, s: any(s in text_of(m.get("content")) for m in v.messages),
    ),
    "has_tools": (_bool, "true or false", _has_tools),
    "tool_names_include": (_str_list, "a list of strings", lambda v, ns: set(ns) <= v.tool_names()),
    "model": (_str, "a string", lambda v, s: v.request.get("model") == s),
    "request_index": (_int, "a non-negative int", lambda v, n: v.index == n),
}


@dataclass(frozen=True, slots=True)
class Rule:
    label: str  # "rule 1 ('ask for sum')": how errors name it
    name: str | None
    conditions: tuple[tuple[str, Any], ...]
    when_fn: WhenFn | None
    reply: ReplySpec | ReplyFn
    times: int | None

    def matches(self, view: RequestView) -> bool:
        if self.when_fn is not None:
            try:
                return bool(self.when_fn(view.request))
            except Exception as exc:
                raise ScriptError(f"{self.label}: when callable raised {exc!r}") from exc
        return all(CONDITIONS[key][2](view, want) for key, want in self.conditions)


def _parse_rule(raw: Any, i: int) -> Rule:
    if not isinstance(raw, Mapping):
        raise ScriptError(f"rule {i}: must be an object, got {type(raw).__name__}")
    name = raw.get("name")
    label = f"rule {i}" + (f" ({name!r})" if name is not None else "")
    if name is not None and not isinstance(name, str):
        raise ScriptError(f"{label}: 'name' must be a string")
    unknown = sorted(set(raw) - {"name", "when", "reply", "times"})
    if unknown:
        raise ScriptError(f"{label}: unknown keys {unknown}; allowed: name, when, reply, times")
    times = raw.get("times")
    if times is not None and not _int(times):
        raise ScriptError(f"{label}: 'times' must be a non-negative int, got {times!r}")
    when = raw.get("when")
    when_fn: WhenFn | None = None
    conditions: list[tuple[str, Any]] = []
    if callable(when):
        when_fn = when
    elif isinstance(when, Mapping):
        for key, want in when.items():
            if key not in CONDITIONS:
                raise ScriptError(
                    f"{label}: unknown condition {key!r}; known: {', '.join(CONDITIONS)}"
                )
            check, what, _ = CONDITIONS[key]
            if not check(want):
                raise ScriptError(f"{label}: when.{key} must be {what}, got {want!r}")
            conditions.append((key, want))
    elif when is not None:
        raise ScriptError(f"{label}: 'when' must be an object or a callable")
    if "reply" not in raw:
        raise ScriptError(f"{label}: missing 'reply'")
    return Rule(label, name, tuple(conditions), when_fn, _parse_reply(raw["reply"], label), times)


def _parse_reply(raw: Any, label: str) -> ReplySpec | ReplyFn:
    if callable(raw):
        return raw  # type: ignore[no-any-return]
    return ReplySpec.parse(dict(raw) if isinstance(raw, Mapping) else raw, label)


def _invalid_request(request: Any) -> str | None:
    """Why a real OpenAI server would refuse this request with a 400, if it would."""
    if not isinstance(request, dict):
        return "the request body must be a JSON object"
    if not isinstance(request.get("model"), str):
        return "you must provide a model parameter (a string)"
    msgs = request.get("messages")
    if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
        return "'messages' must be an array of message objects"
    return None


class Script:
    """A parsed script. `respond` is safe to call from many threads at once."""

    def __init__(
        self,
        rules: Sequence[Rule],
        default: ReplySpec | ReplyFn | None = None,
        models: Sequence[str] = (DEFAULT_MODEL,),
    ) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.default = default
        self.models: tuple[str, ...] = tuple(models)
        self._lock = threading.Lock()
        self._count = 0
        self._uses = [0] * len(self.rules)

    # ---- loading ---------------------------------------------------------------

    @classmethod
    def load(cls, source: ScriptSource) -> Script:
        """From a JSON file path, a dict `{"rules", "default"?, "models"?}`, or a bare rule list."""
        if isinstance(source, Script):
            return source
        if isinstance(source, str | os.PathLike):
            return cls._from_file(Path(source))
        if isinstance(source, Mapping):
            return cls._from_mapping(source)
        if isinstance(source, Sequence):
            return cls._from_mapping({"rules": list(source)})
        raise ScriptError(f"a script must be a path, a dict or a list, got {type(source).__name__}")

    @classmethod
    def _from_file(cls, path: Path) -> Script:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ScriptError(f"{path}: cannot read script: {exc.strerror or exc}") from exc
        except json.JSONDecodeError as exc:
            raise ScriptError(f"{path}: not valid JSON: {exc}") from exc
        if not isinstance(data, list | dict):
            raise ScriptError(f"{path}: the top level must be an object or a list of rules")
        try:
            return cls.load(data)
        except ScriptError as exc:
            raise ScriptError(f"{path}: {exc}") from exc

    @classmethod
    def _from_mapping(cls, data: Mapping[str, Any]) -> Script:
        unknown = sorted(set(data) - {"rules", "default", "models"})
        if unknown:
            raise ScriptError(f"unknown top-level keys {unknown}; allowed: rules, default, models")
        rules_raw = data.get("rules", [])
        if not isinstance(rules_raw, list | tuple):
            raise ScriptError("'rules' must be a list")
        rules = [_parse_rule(r, i) for i, r in enumerate(rules_raw)]
        default_raw = data.get("default")
        default = None if default_raw is None else _parse_reply(default_raw, "default")
        models = data.get("models", [DEFAULT_MODEL])
        if not _str_list(models) or not models:
            raise ScriptError("'models' must be a non-empty list of strings")
        return cls(rules, default, models)

    # ---- answering -------------------------------------------------------------

    @property
    def request_count(self) -> int:
        """How many valid requests the script has answered (the next request_index)."""
        with self._lock:
            return self._count

    @property
    def uses(self) -> tuple[int, ...]:
        """How often each rule has answered, by rule position."""
        with self._lock:
            return tuple(self._uses)

    def reset(self) -> None:
        """Forget all history: request_index restarts at 0 and `times` are restored."""
        with self._lock:
            self._count = 0
            self._uses = [0] * len(self.rules)

    def respond(self, request: Any) -> ScriptedReply:
        """The answer to one request body. Raises ScriptError only for a broken callable."""
        problem = _invalid_request(request)
        if problem is not None:
            return failure(problem, status=400)
        with self._lock:
            index = self._count
            self._count += 1
            view = RequestView(request, index)
            rule = self._choose(view)
        reply = rule.reply if rule is not None else self.default
        label = rule.label if rule is not None else "default"
        if reply is None:
            return failure(self._no_rule_message(view), code="scripted_no_rule")
        if not isinstance(reply, ReplySpec):
            reply = self._call_reply(reply, request, label)
        return reply.render(request, index, label)

    def _choose(self, view: RequestView) -> Rule | None:
        for i, rule in enumerate(self.rules):
            if rule.times is not None and self._uses[i] >= rule.times:
                continue
            if rule.matches(view):
                self._uses[i] += 1
                return rule
        return None

    @staticmethod
    def _call_reply(fn: ReplyFn, request: JSONDict, label: str) -> ReplySpec:
        try:
            produced = fn(request)
        except Exception as exc:
            raise ScriptError(f"{label}: reply callable raised {exc!r}") from exc
        return ReplySpec.parse(produced, f"{label}: reply callable returned an invalid reply")

    def _no_rule_message(self, view: RequestView) -> str:
        msgs = view.messages
        last = msgs[-1].get("role") if msgs else None
        return (
            f"scripted model: no rule matched request {view.index} "
            f"({len(msgs)} messages, last role {last!r}, "
            f"{view.tool_message_count()} tool messages, tools {sorted(view.tool_names())}) "
            f"and the script has no default reply"
        )
