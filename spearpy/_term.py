"""Text from elsewhere (an MCP server, an upstream, a tool) made safe to print on a terminal.

A terminal obeys the control characters in what it is given: an ANSI escape
can recolour, retitle or clear it, move the cursor over earlier lines, or
(with OSC 8/52) forge links and write the clipboard; a bidi override makes a
line read differently from its bytes. Whatever spearpy did not write itself
goes through one of these before a terminal sees it: every character that
is not printable becomes a visible escape (`\\x1b`, `\\u202e`), the rest is
kept as it is, non-ASCII letters included.
"""

from __future__ import annotations

_SIMPLE = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    simple = _SIMPLE.get(char)
    if simple is not None:
        return simple
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def one_line(text: str, limit: int | None = None) -> str:
    """`text` on one line with nothing a terminal acts on (newlines escaped too),
    cut to about `limit` characters with `...`."""
    if limit is not None and len(text) > limit:
        text = text[:max(limit - 3, 0)] + "..."
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def block(text: str) -> str:
    """`text` with its lines and tabs kept and every other control character escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else _escaped(c) for c in text)
