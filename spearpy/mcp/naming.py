"""The names MCP tools are offered under, SPEAR's and the compatibility form.

SPEAR offers tool `t` of server `s` to the model as
`mcp__<base64url-nopad(s)>__<base64url-nopad(t)>`: the encoding keeps any
server id and tool name inside OpenAI's function-name alphabet
(`[A-Za-z0-9_-]`) and makes the pair recoverable from the name alone. Calls
may also name a tool `mcp.<server_id>.<tool>`.

OpenAI also caps a function name at 64 characters, and base64 grows a name by
a third, so a long server id or tool name gives a SPEAR name the upstream
rejects (the whole request fails, not just that tool). `NameTable` offers
such a tool under a short alias instead (a hash plus the readable tool
name) and routes it back.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from spearpy.errors import SpearpyError

PREFIX = "mcp__"
COMPAT_PREFIX = "mcp."
ALIAS_PREFIX = "mcp_h_"
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")
OPENAI_MAX_LEN = 64


class ToolNameError(SpearpyError, ValueError):
    """A name that looks like an MCP tool name but is not a valid one."""


def _encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")


def _decode(token: str) -> str:
    if not token or not re.fullmatch(r"[A-Za-z0-9_-]+", token) or len(token) % 4 == 1:
        raise ToolNameError(f"invalid base64url token {token!r}")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        text = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ToolNameError(f"invalid base64url token {token!r}") from exc
    # Unused trailing bits make several tokens decode alike; accepting only
    # the canonical one keeps one name per tool (the cache and events key on it).
    if _encode(text) != token:
        raise ToolNameError(f"non-canonical base64url token {token!r}")
    return text


def spear_tool_name(server_id: str, tool: str) -> str:
    """SPEAR's name for `tool` of `server_id` (`fs`, `read_file` -> `mcp__ZnM__cmVhZF9maWxl`)."""
    if not server_id or not tool:
        raise ToolNameError("server id and tool name must be non-empty")
    try:
        return f"{PREFIX}{_encode(server_id)}__{_encode(tool)}"
    except UnicodeEncodeError:  # a lone surrogate, which JSON can spell
        raise ToolNameError("server id and tool name must be valid Unicode text") from None


def parse_spear_name(name: str) -> tuple[str, str]:
    """(server_id, tool) of a SPEAR name; ToolNameError if it is not one.

    Splits at the last `__`: the tool token never contains `__` nor starts with
    `_` (that would need a byte >= 0xFC, never in UTF-8), while the server
    token can end with `_` (an id ending in `?`). SPEAR splits at the first
    `__` and so cannot route such a server's tools."""
    if not name.startswith(PREFIX):
        raise ToolNameError(f"{name!r} does not start with {PREFIX!r}")
    server_token, sep, tool_token = name[len(PREFIX):].rpartition("__")
    if not sep or not server_token or not tool_token:
        raise ToolNameError(f"{name!r} is not mcp__<server>__<tool>")
    return _decode(server_token), _decode(tool_token)


def parse_compat_name(name: str, known_servers: Iterable[str] = ()) -> tuple[str, str]:
    """(server_id, tool) of `mcp.<server_id>.<tool>`.

    SPEAR splits at the first dot after the prefix. A server id that itself
    contains dots is found when it is among `known_servers` (the longest
    match wins), so `mcp.a.b.tool` reaches server `a.b` if there is one."""
    if not name.startswith(COMPAT_PREFIX):
        raise ToolNameError(f"{name!r} does not start with {COMPAT_PREFIX!r}")
    rest = name[len(COMPAT_PREFIX):]
    for server_id in sorted(known_servers, key=len, reverse=True):
        if server_id and rest.startswith(server_id + ".") and len(rest) > len(server_id) + 1:
            return server_id, rest[len(server_id) + 1:]
    server_id, sep, tool = rest.partition(".")
    if not sep or not server_id or not tool:
        raise ToolNameError(f"{name!r} is not mcp.<server_id>.<tool>")
    return server_id, tool


def is_mcp_name(name: str) -> bool:
    """Whether `name` is in one of the MCP namespaces (so a guest may not register it)."""
    return name.startswith((PREFIX, COMPAT_PREFIX, ALIAS_PREFIX))


def parse_tool_name(name: str, known_servers: Iterable[str] = ()) -> tuple[str, str]:
    """(server_id, tool) of either form; ToolNameError otherwise. Hashed
    aliases need the `NameTable` that made them."""
    if name.startswith(PREFIX):
        return parse_spear_name(name)
    if name.startswith(COMPAT_PREFIX):
        return parse_compat_name(name, known_servers)
    raise ToolNameError(f"{name!r} is not an MCP tool name")


def fits_openai(name: str) -> bool:
    return bool(OPENAI_NAME.match(name))


def alias_name(server_id: str, tool: str, max_len: int = OPENAI_MAX_LEN) -> str:
    """A short stable alias for a pair whose SPEAR name is too long:
    `mcp_h_<12 hex of sha256>_<the tool name, sanitised and cut>`. The hash
    keeps it unique; the readable tail is what lets the model choose it."""
    digest = hashlib.sha256(f"{server_id}\0{tool}".encode()).hexdigest()[:12]
    head = f"{ALIAS_PREFIX}{digest}"
    tail = re.sub(r"[^A-Za-z0-9_-]", "_", tool)[:max(max_len - len(head) - 1, 0)]
    return f"{head}_{tail}" if tail else head


def offered_name(server_id: str, tool: str, max_len: int = OPENAI_MAX_LEN) -> str:
    """SPEAR's name when it fits `max_len`, the hashed alias otherwise."""
    name = spear_tool_name(server_id, tool)
    return name if len(name) <= max_len else alias_name(server_id, tool, max_len)


@dataclass
class NameTable:
    """The names one request offers, and the routing back from a called name.

    Offers SPEAR's name when it fits `max_len` (OpenAI's 64 by default), a
    hashed alias otherwise. `resolve` accepts the offered names plus both
    SPEAR forms for any offered pair, so a model that rebuilt the
    `mcp.<server>.<tool>` form still reaches the tool, but never a pair that
    was not offered."""

    max_len: int = OPENAI_MAX_LEN
    _by_name: dict[str, tuple[str, str]] = field(default_factory=dict)
    _by_pair: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, server_id: str, tool: str) -> str:
        """The name `tool` is offered under; ToolNameError when it has none (an
        empty name) or its name is already another pair's (a hash alias
        collision a server can search for: routing must never be shared)."""
        pair = (server_id, tool)
        if pair in self._by_pair:
            return self._by_pair[pair]
        name = offered_name(server_id, tool, self.max_len)
        if name in self._by_name:
            raise ToolNameError(f"its offered name {name} is already another tool's")
        self._by_name[name] = pair
        self._by_pair[pair] = name
        return name

    def name_of(self, server_id: str, tool: str) -> str | None:
        return self._by_pair.get((server_id, tool))

    def resolve(self, name: str) -> tuple[str, str] | None:
        """The offered (server_id, tool) `name` refers to, or None."""
        pair = self._by_name.get(name)
        if pair is not None:
            return pair
        try:
            pair = parse_tool_name(name, {s for s, _ in self._by_pair})
        except ToolNameError:
            return None
        return pair if pair in self._by_pair else None

    def __len__(self) -> int:
        return len(self._by_name)
