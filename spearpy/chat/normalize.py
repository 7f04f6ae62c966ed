"""Turn an untrusted upstream assistant message into one any server replays.

Providers and local servers disagree on the details of tool calls: arguments
as a string or an object, missing ids or types, the legacy `function_call`,
ids repeated within a turn or across turns. The session must hold a message a
strict OpenAI-compatible server accepts on the next request, and every call in
it must carry an id that can be answered exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection

from spearpy import _json
from spearpy._term import one_line
from spearpy.chat.protocol import JSONDict, ToolCall

# id_factory may keep returning taken ids (a model can echo our own format);
# past this many attempts the factory is broken, not unlucky.
_MAX_ID_ATTEMPTS = 10_000

# A tool call's name and id are chosen by the model and copied everywhere:
# the transcript replayed upstream on every completion, events, log lines,
# the live view, transcripts on disk. Registered names are at most 64
# characters (registry.TOOL_NAME) and ids a few dozen; a 20 MB name over 8
# iterations took 1.2 GB of RAM and 1 GB of disk. Past these caps a name is
# kept shortened (it can match no tool: it is an unknown_tool answer for the
# model) and an id is replaced by a fresh one, as a missing id is.
MAX_TOOL_CALL_NAME_BYTES = 256
MAX_TOOL_CALL_ID_BYTES = 256
_NAME_SHOWN_CHARS = 48
# A name or id of at most this many characters is within its byte cap
# whatever the characters (UTF-8 takes at most 4 bytes for one).
_SURELY_WITHIN_NAME = MAX_TOOL_CALL_NAME_BYTES // 4
_SURELY_WITHIN_ID = MAX_TOOL_CALL_ID_BYTES // 4


compact_json = _json.compact  # every body and tool message (C guests strstr it)


def normalize_assistant(
    message: object,
    id_factory: Callable[[], str],
    used_ids: Collection[str] = (),
) -> tuple[JSONDict, list[ToolCall]]:
    """Normalise `choices[0].message`.

    Returns the assistant message to append to the session and its tool
    calls, in order. `used_ids` are tool_call ids already present in the
    session; a reused one is replaced by a fresh id from `id_factory`.
    Whether the turn has tool calls is read from the returned list, never
    from finish_reason (servers set it inconsistently).
    """
    raw: JSONDict = message if isinstance(message, dict) else {}
    calls: list[ToolCall] = []
    calls_json: list[JSONDict] = []  # each call's wire form, built in the same pass
    raw_calls = raw.get("tool_calls")
    if raw_calls:
        if not isinstance(raw_calls, list):  # one call given bare, or junk
            raw_calls = [raw_calls] if isinstance(raw_calls, dict) else None
        if raw_calls is not None:
            # One pass over the entries (a reply per loop iteration comes
            # through here). The session's ids are only read: a copy of them
            # would cost every reply time in proportion to the whole conversation.
            fresh: set[str] = set()
            for entry in raw_calls:
                # Junk entries have no name to run and no shape to replay: drop
                # them rather than put something unanswerable into the transcript.
                if not isinstance(entry, dict):
                    continue
                fn = entry.get("function")
                if not isinstance(fn, dict):
                    fn = entry  # some servers flatten name/arguments into the entry
                name = fn.get("name")
                if not isinstance(name, str) or name == "":
                    continue
                # The usual shapes (a short name, a short id, string arguments)
                # are decided here; the helpers handle everything else.
                if len(name) > _SURELY_WITHIN_NAME:
                    name = bounded_name(name)
                call_id = entry.get("id")
                if not (isinstance(call_id, str) and len(call_id) <= _SURELY_WITHIN_ID
                        and call_id.strip()):
                    call_id = _given_id(call_id)
                if call_id is None or call_id in fresh or call_id in used_ids:
                    call_id = _fresh_id(id_factory, fresh, used_ids)
                fresh.add(call_id)
                arguments = fn.get("arguments")
                if not (isinstance(arguments, str) and arguments.strip()):
                    arguments = _arguments(arguments)
                calls.append(ToolCall(call_id, name, arguments))
                calls_json.append({"id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": arguments}})
    if not calls:
        legacy = raw.get("function_call")
        if isinstance(legacy, dict):
            name = legacy.get("name")
            if isinstance(name, str) and name != "":
                call_id = _fresh_id(id_factory, set(), used_ids)
                name, arguments = bounded_name(name), _arguments(legacy.get("arguments"))
                calls.append(ToolCall(call_id, name, arguments))
                calls_json.append({"id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": arguments}})

    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        content = _content(content)
    if content is None and not calls:
        content = ""  # without tool_calls, strict servers require content
    normalized: JSONDict = {"role": "assistant", "content": content}
    if calls:
        normalized["tool_calls"] = calls_json
    return normalized, calls


def bounded_name(name: str) -> str:
    """`name`, or when it is longer than MAX_TOOL_CALL_NAME_BYTES its first
    characters and its length: `xxxx...(20971520 characters)`, which no tool
    can be registered under (`.`, `(` and spaces are not allowed in names)."""
    if len(name) * 4 <= MAX_TOOL_CALL_NAME_BYTES:
        return name  # the common case, decided without encoding
    # More characters than the cap means more bytes too, without encoding
    # what may be megabytes.
    if len(name) <= MAX_TOOL_CALL_NAME_BYTES and \
            len(name.encode("utf-8", "surrogatepass")) <= MAX_TOOL_CALL_NAME_BYTES:
        return name
    return f"{name[:_NAME_SHOWN_CHARS]}...({len(name)} characters)"


def _given_id(value: object) -> str | None:
    if not isinstance(value, str) or value.strip() == "":
        return None
    if len(value) * 4 > MAX_TOOL_CALL_ID_BYTES and (
            len(value) > MAX_TOOL_CALL_ID_BYTES or
            len(value.encode("utf-8", "surrogatepass")) > MAX_TOOL_CALL_ID_BYTES):
        return None  # replaced like a missing id: never copied around
    return value


def _arguments(value: object) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        # Several servers send "" for a call without parameters.
        return value if value.strip() != "" else "{}"
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        # Non-finite floats: keep them visible so the call fails validation
        # as invalid_arguments instead of being silently altered.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _content(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        # Content-part arrays: keep the text, which is all a string field can hold.
        texts = [_part_text(part) for part in value]
        return "".join(text for text in texts if text is not None)
    return compact_json(value)


def _part_text(part: object) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        text = part.get("text")
        if isinstance(text, str):
            return text
    return None


def _fresh_id(id_factory: Callable[[], str], taken: set[str], used: Collection[str]) -> str:
    for _ in range(_MAX_ID_ATTEMPTS):
        candidate = id_factory()
        if candidate not in taken and candidate not in used:
            return candidate
    raise RuntimeError("id_factory keeps returning tool_call ids already in use")


# ---- reading and patching upstream bodies ----------------------------------


def first_message(body: object) -> JSONDict | None:
    """`choices[0].message` when the body has a usable one (only choice 0: the host forbids n)."""
    # Parsed JSON that is anything else fails one of the subscripts.
    try:
        message = body["choices"][0]["message"]  # type: ignore[index]
    except (LookupError, TypeError):
        return None
    return message if isinstance(message, dict) else None


# An upstream's own error message, as a bad response's reason carries it on
# (to the guest, the run's message, logs and terminals): cut to this many
# characters, its control characters escaped.
UPSTREAM_MESSAGE_MAX_CHARS = 2000


def bad_response_reason(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            said = one_line(error["message"], UPSTREAM_MESSAGE_MAX_CHARS)
            return f"upstream returned no choices[0].message: {said}"
    return "upstream response has no usable choices[0].message"


def with_session_tool_calls(body: JSONDict, appended: JSONDict) -> JSONDict:
    """A copy of `body` whose choices[0].message.tool_calls are the session's.

    Ids may have been generated or replaced and junk entries dropped; the
    guest needs the session's ids to answer calls a plain send left pending.
    Everything else of the upstream body is kept as it came. `body` must have
    passed first_message().
    """
    out = dict(body)
    choices = list(body["choices"])
    choice = dict(choices[0])
    message = dict(choice["message"])
    message.pop("tool_calls", None)
    if "tool_calls" in appended:
        message["tool_calls"] = appended["tool_calls"]
    choice["message"] = message
    choices[0] = choice
    out["choices"] = choices
    return out
