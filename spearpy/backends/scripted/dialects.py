"""Make the scripted server behave like a particular real server.

`ScriptedServer(script, dialect="vllm")` still answers from the same script,
but the request is checked the way that server checks it and the answer is
shaped the way that server shapes it, so a backend's quirk profile can be
tested against the behaviour it exists for:

- openai: the plain scripted server.
- ollama: tool_choice is accepted and ignored (ollama/ollama#8421); tool-call
  arguments come back as JSON objects, ids as `call_xxxxxxxx`.
- llamacpp: replayed tool calls need `type` and string arguments (400
  otherwise); a reply carries one tool call unless the request set
  parallel_tool_calls to true (llama-server's default is false).
- vllm: ids come back as `chatcmpl-tool-<32 hex>`; `auto_tool_choice=False`
  (a server started without --enable-auto-tool-choice) refuses requests with
  tools; `mistral_ids=True` (a Mistral model, the default) refuses history
  whose ids are not 9 alphanumerics, as vLLM's Mistral tokenizer does.
- mistral: ids come back as 9 alphanumerics; history ids must be too.
- anthropic: POST /v1/messages, see anthropic_dialect.py.

Error texts are the servers' own where they are well known (vLLM's auto
tool choice message, Mistral's id message). Ids are derived from the script's
ids by hashing, so answers stay deterministic.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from spearpy import _json
from spearpy.backends.scripted.reply import JSONDict, ScriptedReply, dumps

CHAT_PATH = "/v1/chat/completions"
Respond = Callable[[JSONDict], ScriptedReply]

_NINE = re.compile(r"^[A-Za-z0-9]{9}\Z")
_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
VLLM_AUTO_TOOL_ERROR = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


def derived_id(seed: str, length: int, alphabet: str = _ALNUM) -> str:
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big")
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(alphabet))
        chars.append(alphabet[digit])
    return "".join(chars)


def plain_error(status: int, body: JSONDict) -> ScriptedReply:
    return ScriptedReply(status=status, body=body)


class Dialect:
    """The plain OpenAI behaviour; subclasses override the hooks they need."""

    name = "openai"

    def unauthorized(self, headers: Mapping[str, str], api_key: str) -> ScriptedReply | None:
        """An error reply when the request lacks the key; None when it is fine.
        Header names are lower-cased."""
        if headers.get("authorization", "") == f"Bearer {api_key}":
            return None
        return plain_error(401, {"error": {"message": "Incorrect API key provided.",
                                           "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})

    def answer(self, method: str, path: str, headers: Mapping[str, str],
               body: JSONDict | None, respond: Respond) -> ScriptedReply | None:
        """The reply, or None to let the plain server handle the request."""
        if path != CHAT_PATH or method != "POST" or not isinstance(body, dict):
            return None
        refused = self.check(body)
        if refused is not None:
            return refused
        reply = respond(body)
        if reply.status != 200 or reply.body is None or "choices" not in reply.body:
            return reply
        return replace(reply, body=self.shape(body, reply.body))

    def check(self, request: JSONDict) -> ScriptedReply | None:
        return None

    def shape(self, request: JSONDict, body: JSONDict) -> JSONDict:
        return body


def _map_calls(body: JSONDict, fn: Callable[[JSONDict], JSONDict | None]) -> JSONDict:
    """`body` with every tool call of choices[0] passed through fn (None drops it)."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return body
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return body
    mapped = [fn(dict(c)) for c in calls if isinstance(c, dict)]
    kept = [c for c in mapped if c is not None]
    choice = {**body["choices"][0], "message": {**message, "tool_calls": kept}}
    return {**body, "choices": [choice, *body["choices"][1:]]}


def _history_ids(request: JSONDict) -> list[str]:
    ids: list[str] = []
    for msg in request.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        for call in msg.get("tool_calls") or []:
            if isinstance(call, dict):
                ids.append(str(call.get("id")))
        if msg.get("role") == "tool":
            ids.append(str(msg.get("tool_call_id")))
    return ids


class OllamaDialect(Dialect):
    name = "ollama"

    def shape(self, request: JSONDict, body: JSONDict) -> JSONDict:
        def objectify(call: JSONDict) -> JSONDict:
            fn = dict(call.get("function") or {})
            # Malformed on purpose (a test of bad arguments): leave it as written.
            with contextlib.suppress(TypeError, ValueError):
                fn["arguments"] = _json.loads(fn.get("arguments", "{}"))
            call["function"] = fn
            call["id"] = "call_" + derived_id(str(call.get("id")), 8, _ALNUM[:36])
            return call

        return _map_calls(body, objectify)


class LlamaCppDialect(Dialect):
    name = "llamacpp"

    def check(self, request: JSONDict) -> ScriptedReply | None:
        for i, msg in enumerate(request.get("messages") or []):
            for call in (msg.get("tool_calls") or []) if isinstance(msg, dict) else []:
                problem = None
                if not isinstance(call, dict) or call.get("type") != "function":
                    problem = "Missing tool call type"
                elif not isinstance((call.get("function") or {}).get("arguments"), str):
                    problem = "[json.exception.type_error.302] type must be string, but is object"
                if problem is not None:
                    return plain_error(400, {"error": {
                        "code": 400, "message": f"messages[{i}]: {problem}",
                        "type": "invalid_request_error"}})
        return None

    def shape(self, request: JSONDict, body: JSONDict) -> JSONDict:
        if request.get("parallel_tool_calls") is True:
            return body
        seen: list[int] = []

        def first_only(call: JSONDict) -> JSONDict | None:
            seen.append(1)
            return call if len(seen) == 1 else None

        return _map_calls(body, first_only)


def _nine_char_check(request: JSONDict, error: Callable[[str], JSONDict]) -> ScriptedReply | None:
    for call_id in _history_ids(request):
        if not _NINE.match(call_id):
            message = (f"Tool call id was {call_id} but must be a-z, A-Z, 0-9, "
                       "with a length of 9.")
            return plain_error(400, error(message))
    return None


class VLLMDialect(Dialect):
    name = "vllm"

    def __init__(self, *, auto_tool_choice: bool = True, mistral_ids: bool = True) -> None:
        self.auto_tool_choice = auto_tool_choice
        self.mistral_ids = mistral_ids

    def check(self, request: JSONDict) -> ScriptedReply | None:
        # vLLM treats tools without tool_choice as "auto".
        choice = request.get("tool_choice", "auto" if request.get("tools") else "none")
        if choice == "auto" and not self.auto_tool_choice:
            return plain_error(400, {"object": "error", "message": VLLM_AUTO_TOOL_ERROR,
                                     "type": "BadRequestError", "param": None, "code": 400})
        if self.mistral_ids:
            return _nine_char_check(request, lambda m: {
                "object": "error", "message": m, "type": "BadRequestError", "param": None,
                "code": 400})
        return None

    def shape(self, request: JSONDict, body: JSONDict) -> JSONDict:
        def vllm_id(call: JSONDict) -> JSONDict:
            call["id"] = "chatcmpl-tool-" + derived_id(str(call.get("id")), 32, "0123456789abcdef")
            return call

        return _map_calls(body, vllm_id)


class MistralDialect(Dialect):
    name = "mistral"

    def check(self, request: JSONDict) -> ScriptedReply | None:
        return _nine_char_check(request, lambda m: {
            "object": "error", "message": m, "type": "invalid_request_error", "param": None,
            "code": None})

    def shape(self, request: JSONDict, body: JSONDict) -> JSONDict:
        def nine(call: JSONDict) -> JSONDict:
            call["id"] = derived_id(str(call.get("id")), 9)
            return call

        return _map_calls(body, nine)


__all__ = ["CHAT_PATH", "Dialect", "LlamaCppDialect", "MistralDialect", "OllamaDialect",
           "VLLMDialect", "derived_id", "dumps"]
