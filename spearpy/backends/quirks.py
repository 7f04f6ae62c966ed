"""Quirk profiles: what one OpenAI-compatible server needs that OpenAI does not.

A profile has a request side (`prepare`: the wire body about to be sent), a
response side (`adapt`: a 2xx chat completion) and an error side (`explain`:
an upstream error message, made actionable). All three are pure functions of
plain JSON, so each is tested on data and, in tests/test_backends_quirks.py,
against the loopback server behaving like that server.

`prepare` receives the body whose `messages` list IS the session's list: it
must copy what it changes, never edit in place.

- none (OpenAI): nothing to adjust.
- ollama (Ollama /v1): tool_choice is ignored by the server, so it is
  emulated with the tool list ("none": no tools; a named function: only that
  tool) and not sent; tool-call arguments that come back as objects become
  JSON strings.
- llamacpp (llama.cpp llama-server): parallel_tool_calls=true unless the
  guest set it (the server defaults it to false); replayed history always has
  string arguments and `type`, which the server validates strictly.
- vllm (vLLM): tool call ids rewritten to 9 alphanumerics (Mistral models
  behind vLLM reject the server's own `chatcmpl-tool-...` ids); the error for
  a server started without --enable-auto-tool-choice says how to fix it.
- mistral (Mistral API): tool call ids rewritten to 9 alphanumerics.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spearpy import _json
from spearpy.chat.protocol import JSONDict
from spearpy.errors import ConfigError

_MISTRAL_ID = re.compile(r"^[A-Za-z0-9]{9}\Z")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _same(body: JSONDict) -> JSONDict:
    return body


def _plain(_status: int, message: str) -> str:
    return message


@dataclass(frozen=True, slots=True)
class QuirkProfile:
    name: str
    server: str
    prepare: Callable[[JSONDict], JSONDict] = _same
    adapt: Callable[[JSONDict], JSONDict] = _same
    explain: Callable[[int, str], str] = _plain


# ---- shared helpers ---------------------------------------------------------


_compact = _json.compact


def _map_messages(body: JSONDict, fn: Callable[[JSONDict], JSONDict]) -> JSONDict:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    out = dict(body)
    out["messages"] = [fn(m) if isinstance(m, dict) else m for m in messages]
    return out


def _calls_of(body: JSONDict) -> list[Any] | None:
    """choices[0].message.tool_calls of a completion, when present."""
    try:
        calls = body["choices"][0]["message"]["tool_calls"]
    except (KeyError, IndexError, TypeError):
        return None
    return calls if isinstance(calls, list) else None


# ---- ids: Mistral's tokenizer accepts exactly 9 alphanumerics -----------------


def nine_char_id(original: str, salt: int = 0) -> str:
    """A stable 9-alphanumeric stand-in for a tool call id (the same id always
    maps to the same stand-in, so the call and its answer still pair up)."""
    if salt == 0 and _MISTRAL_ID.match(original):
        return original
    number = int.from_bytes(hashlib.sha256(f"{salt}:{original}".encode()).digest()[:8], "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, 62)
        chars.append(_BASE62[digit])
    return "".join(chars)


def rewrite_ids_nine(body: JSONDict) -> JSONDict:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    mapping: dict[str, str] = {}
    taken: set[str] = set()

    def new_id(old: Any) -> Any:
        if not isinstance(old, str):
            return old
        if old not in mapping:
            salt = 0
            candidate = nine_char_id(old)
            while candidate in taken:  # two ids hashing alike: vanishingly rare, still handled
                salt += 1
                candidate = nine_char_id(old, salt)
            mapping[old] = candidate
            taken.add(candidate)
        return mapping[old]

    def fix(message: JSONDict) -> JSONDict:
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message = dict(message)
            message["tool_calls"] = [
                {**c, "id": new_id(c.get("id"))} if isinstance(c, dict) else c for c in calls
            ]
        if message.get("role") == "tool" and "tool_call_id" in message:
            message = {**message, "tool_call_id": new_id(message["tool_call_id"])}
        return message

    return _map_messages(body, fix)


# ---- Ollama -------------------------------------------------------------------


def _ollama_prepare(body: JSONDict) -> JSONDict:
    # Ollama's /v1 accepts tool_choice and ignores it (ollama/ollama#8421), so
    # the two choices that can be expressed with the tool list are.
    if "tool_choice" not in body:
        return body
    out = dict(body)
    choice = out.pop("tool_choice")
    tools = out.get("tools")
    if choice == "none":
        out.pop("tools", None)
        out.pop("parallel_tool_calls", None)
    elif isinstance(choice, dict) and isinstance(tools, list):
        fn = choice.get("function")
        wanted = fn.get("name") if isinstance(fn, dict) else None
        kept = [t for t in tools if isinstance(t, dict)
                and isinstance(t.get("function"), dict) and t["function"].get("name") == wanted]
        if kept:
            out["tools"] = kept
    return out


def _ollama_adapt(body: JSONDict) -> JSONDict:
    calls = _calls_of(body)
    if not calls or all(
        not isinstance(c, dict) or not isinstance(c.get("function"), dict)
        or isinstance(c["function"].get("arguments"), str) for c in calls
    ):
        return body
    fixed = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and not isinstance(fn.get("arguments"), str):
            args = fn.get("arguments")
            call = {**call, "function": {**fn, "arguments": _compact({} if args is None
                                                                       else args)}}
        fixed.append(call)
    out = dict(body)
    choice = dict(body["choices"][0])
    choice["message"] = {**choice["message"], "tool_calls": fixed}
    out["choices"] = [choice, *body["choices"][1:]]
    return out


# ---- llama.cpp ------------------------------------------------------------------


def _llamacpp_prepare(body: JSONDict) -> JSONDict:
    # llama-server validates replayed history strictly: every tool call needs
    # "type" and string arguments, or the request is a 400.
    def fix(message: JSONDict) -> JSONDict:
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            return message
        fixed = []
        for call in calls:
            if isinstance(call, dict):
                call = {**call, "type": call.get("type") or "function"}
                fn = call.get("function")
                if isinstance(fn, dict) and not isinstance(fn.get("arguments"), str):
                    args = fn.get("arguments")
                    call["function"] = {**fn, "arguments": _compact({} if args is None
                                                                      else args)}
            fixed.append(call)
        return {**message, "tool_calls": fixed}

    out = _map_messages(body, fix)
    # llama-server defaults parallel_tool_calls to false: a model that wants two
    # tools gets one per turn, so the same agent takes a different path.
    if out.get("tools") and "parallel_tool_calls" not in out:
        out = {**out, "parallel_tool_calls": True}
    return out


# ---- vLLM -------------------------------------------------------------------------


def _vllm_explain(status: int, message: str) -> str:
    if "--enable-auto-tool-choice" in message:
        return (
            f"{message} (spearpy: this vLLM server cannot pick tools on its own; restart it "
            "with `--enable-auto-tool-choice --tool-call-parser <parser>` (hermes, mistral, "
            "llama3_json, ... matching the model), or send without tools)"
        )
    return message


PROFILES: dict[str, QuirkProfile] = {
    "none": QuirkProfile("none", "OpenAI"),
    "ollama": QuirkProfile("ollama", "Ollama /v1", prepare=_ollama_prepare, adapt=_ollama_adapt),
    "llamacpp": QuirkProfile("llamacpp", "llama.cpp llama-server", prepare=_llamacpp_prepare),
    "vllm": QuirkProfile("vllm", "vLLM", prepare=rewrite_ids_nine, explain=_vllm_explain),
    "mistral": QuirkProfile("mistral", "Mistral API", prepare=rewrite_ids_nine),
}
_ALIASES = {"openai": "none", "llama.cpp": "llamacpp", "llama-cpp": "llamacpp"}


def quirk_profile(name: str | None) -> QuirkProfile:
    key = _ALIASES.get(name or "none", name or "none")
    profile = PROFILES.get(key)
    if profile is None:
        raise ConfigError(f"unknown quirk profile {name!r}; known: {', '.join(PROFILES)}")
    return profile
