"""What a run needs of the values in a journal's records.

The journal stores any JSON as a completion's or a tool's answer, and a
start record's flags as a mapping; a run builds its results from those
answers, and a resume starts its run from those flags. A journal is input
from disk (edited by hand, copied, crafted), so what a run takes from it
must be of the shape the run wrote: else JournalCorrupt says what is not,
and the replay stops at that step (durable/run_journal.py) rather than
a host bug, or a value read as another.
"""

from __future__ import annotations

from typing import Any

from spearpy.journal.errors import JournalCorrupt, shown
from spearpy.journal.hostcall_answers import is_ms

_Types = dict[str, tuple[type | None, ...]]
_NUMBER = (int, float)
_COMPLETION: _Types = {"backend": (str,), "model": (str,), "body": (dict, None),
                       "error": (dict, None), "latency_ms": _NUMBER, "t": _NUMBER}
_UPSTREAM_ERROR: _Types = {"code": (str,), "message": (str,), "status": (int, None),
                           "details": (dict, None)}
_TOOL_OUTCOME: _Types = {"ok": (bool,), "output": (str,), "error_code": (str, None),
                         "error_message": (str, None), "rc": (int, None),
                         "duration_ms": _NUMBER, "t": _NUMBER}
_SERVED = {"chat.completion": (_COMPLETION, ("backend", "model")),
           "tool.outcome": (_TOOL_OUTCOME, ("ok",))}
_RUN_FLAGS: _Types = {"inherit_env": (bool,), "dirs": (list,), "invoke": (str, None)}


def served_answer(kind: str, answer: Any) -> Any:
    """`answer`, when a run can serve it as a `kind` step's answer (a
    CompletionResult's fields, a ToolOutcome's, each with its `t`)."""
    shape = _SERVED.get(kind)
    if shape is not None:
        _check_fields(answer, *shape, "answer")
        error = answer.get("error") if kind == "chat.completion" else None
        if error is not None:
            _check_fields(error, _UPSTREAM_ERROR, ("code", "message"), "answer's error")
    return answer


def start_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """The flags, when a resume can start their run again from them: what
    there is of durable/spec.run_flags' shape (a resume compares the whole
    with its own at step 0)."""
    if not isinstance(flags.get("host", {}), dict):
        raise JournalCorrupt("the start record's flags.host is not an object")
    if not isinstance(flags.get("module"), str | None):
        raise JournalCorrupt("the start record's flags.module is not a path or null")
    run = flags.get("run", {})
    _check_fields(run, _RUN_FLAGS, (), "flags.run")
    if not all(isinstance(d, list) and len(d) == 2 and all(isinstance(p, str) for p in d)
               for d in run.get("dirs", [])):
        raise JournalCorrupt("the start record's flags.run.dirs is not [[host path, guest "
                             "path], ...]")
    return flags


def _check_fields(value: Any, types: _Types, required: tuple[str, ...], what: str) -> None:
    if not isinstance(value, dict):
        raise JournalCorrupt(f"its {what} is not an object")
    for key in required:
        if key not in value:
            raise JournalCorrupt(f"its {what} has no {key!r}")
    for key, item in value.items():
        allowed = types.get(key)
        if allowed is None:
            raise JournalCorrupt(f"its {what} has an unexpected field {shown(key)}")
        # bool is an int to Python, never to the journal; a time or a
        # duration is a finite number of ms, not negative
        if not any(item is None if t is None else type(item) is t for t in allowed) or (
                allowed is _NUMBER and not is_ms(item)):
            named = "a number of ms" if allowed is _NUMBER else \
                " or ".join(_TYPE_NAMES[t] for t in allowed)
            raise JournalCorrupt(f"its {what}'s {key!r} is not {named}: {shown(item)}")


_TYPE_NAMES: dict[type | None, str] = {
    str: "a string", dict: "an object", list: "a list", None: "null", int: "an int",
    bool: "a boolean"}
