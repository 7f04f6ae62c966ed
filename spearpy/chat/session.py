"""One chat session (one cchat fd): the transcript, params and tools.

The session owns the transcript invariant every upstream enforces: each
tool_call_id of an assistant message is answered by exactly one tool message,
and those answers come before any other message. Pending calls are tracked
here so both the guest (cchat_write_msg "tool") and the ToolLoop answer them
through the same door.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spearpy import _json, abi
from spearpy.chat.history import History
from spearpy.chat.normalize import compact_json, normalize_assistant
from spearpy.chat.params import canonical_key, check_param
from spearpy.chat.protocol import JSONDict, ToolCall
from spearpy.chat.registry import ToolRegistry

NOT_RUN = "not_run"
_ABANDONED_MESSAGE = "the guest continued the conversation without answering this call"


def tool_error_content(code: str, message: str) -> str:
    """The content of a tool message reporting a failure to the model."""
    return compact_json({"error": {"code": code, "message": message}})


class ChatSession:
    def __init__(self, fd: int, *, id_factory: Callable[[], str] | None = None) -> None:
        self.fd = fd
        # Append-only, and no message dict is changed once appended: requests
        # join each message's encoding kept from the first time it was sent.
        self.messages = History()
        # Characters of content, tool-call names and arguments appended to
        # `messages` so far: a send counts its growth against the run's
        # host-memory budget after every step from this, not by reading back
        # what it appended.
        self.appended_chars = 0
        self.params: dict[str, Any] = {}
        self.registry = ToolRegistry()
        # GET_METRICS of the last send: {} unless it ran with ENABLE_METRICS.
        self.last_metrics: dict[str, int] = {}
        self._pending: dict[str, ToolCall] = {}  # insertion-ordered = call order
        self._used_ids: set[str] = set()
        self._id_counter = 0
        # None: _next_call_id, bound when a reply needs it. Kept bound here it
        # made every session a reference cycle: a closed session and its whole
        # transcript waited for the cyclic GC instead of going at once.
        self._id_factory = id_factory

    # ---- guest-facing operations (return 0 or a negative errno) ----------

    def write_message(self, role: str, content: str) -> int:
        if role not in abi.ROLES or not isinstance(content, str):
            return abi.EINVAL
        if role == "tool":
            return self._write_tool_answer(content)
        self.abandon_pending()
        self.messages.append({"role": role, "content": content})
        self.appended_chars += len(content)
        return 0

    def set_param(self, key: str, value: object) -> int:
        rc = check_param(key, value)
        if rc != 0:
            return rc
        key = canonical_key(key)
        if value is None:
            self.params.pop(key, None)
        else:
            self.params[key] = value
        return 0

    def store_param(self, key: str, value: object) -> None:
        """Keep a param a host policy has already checked (the MCP keys, which
        only the run's task layer can judge); None unsets it. Never sent upstream."""
        if value is None:
            self.params.pop(key, None)
        else:
            self.params[key] = value

    # ---- tool-call bookkeeping ------------------------------------------

    def pending_calls(self) -> list[ToolCall]:
        """Calls of the last assistant message not yet answered, in call order."""
        return list(self._pending.values())

    def append_reply(self, message: object) -> tuple[JSONDict, list[ToolCall]]:
        """Normalise and append an upstream assistant message; its calls become pending."""
        if self._pending:  # tested here: every reply of an auto send passes by
            self.abandon_pending()
        normalized, calls = normalize_assistant(
            message, self._id_factory or self._next_call_id, self._used_ids)
        self.messages.append(normalized)
        content = normalized["content"]
        size = len(content) if isinstance(content, str) else 0
        for call in calls:
            self._used_ids.add(call.id)
            self._pending[call.id] = call
            size += len(call.arguments) + len(call.name)
        self.appended_chars += size
        return normalized, calls

    def answer(self, call_id: str, content: str) -> None:
        """Append the one tool message answering `call_id` (KeyError if not pending)."""
        del self._pending[call_id]
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        self.appended_chars += len(content)

    def answer_pending(self, code: str, message: str) -> list[ToolCall]:
        """Answer every pending call with the same error; returns those calls."""
        if not self._pending:
            return []  # the common case, on every message write: no JSON work
        calls = self.pending_calls()
        content = tool_error_content(code, message)
        for call in calls:
            self.answer(call.id, content)
        return calls

    def abandon_pending(self) -> list[ToolCall]:
        """Close calls the guest walked past, so the transcript stays valid upstream."""
        return self.answer_pending(NOT_RUN, _ABANDONED_MESSAGE)

    # ---- internals -------------------------------------------------------

    def _write_tool_answer(self, content: str) -> int:
        try:
            payload = _json.loads(content, allow_nan=False)
        except ValueError:
            return abi.EINVAL
        if not isinstance(payload, dict) or "content" not in payload:
            return abi.EINVAL
        call_id = payload.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in self._pending:
            return abi.EINVAL
        answer = payload["content"]
        self.answer(call_id, answer if isinstance(answer, str) else compact_json(answer))
        return 0

    def _next_call_id(self) -> str:
        # 9 alphanumerics: the strictest id format in use (Mistral) accepts it,
        # and so does every server that takes arbitrary strings.
        self._id_counter += 1
        return f"sp{self._id_counter:07d}"

