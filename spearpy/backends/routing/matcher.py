"""Content regexes and globs, as cheap as they can be made without changing
what matches.

A route's content rule is searched over every user and tool message of the
history, once per message (the router remembers what it has scanned). Most
text contains none of the words a route looks for, and Python's `re`
spends 2-5 us on a 300-character message for a pattern that starts with
`\\b` or `(?i)`, against ~0.2 us for a substring test. So each pattern
carries the longest literal every match must contain, found by parsing the
pattern; a message without that literal cannot match and the regex is not
run. The test must never say "no" where the regex says "yes" (a private
prompt would go to a hosted model): a case-insensitive literal is only
trusted on ASCII text, where `str.lower` and `re.IGNORECASE` agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

try:  # the parser `re` itself uses; private, so everything works without it
    from re import _parser as _sre_p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a Python without it
    _sre_p = None

SCANNED_ROLES = frozenset({"user", "tool"})
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


@dataclass(frozen=True, slots=True)
class Literal:
    text: str
    ignore_case: bool  # then `text` is ASCII and lower-cased


class ContentPattern:
    """One regex, searched with its literal prefilter."""

    __slots__ = ("literal", "regex")

    def __init__(self, pattern: str) -> None:
        self.regex = re.compile(pattern)
        self.literal = required_literal(pattern)

    def search(self, text: str, lowered: str | None) -> bool:
        """Whether the regex matches somewhere in `text`; `lowered` is
        `text.lower()` when `text` is ASCII, else None."""
        literal = self.literal
        if literal is not None:
            if not literal.ignore_case:
                if literal.text not in text:
                    return False
            elif lowered is not None and literal.text not in lowered:
                return False
        return self.regex.search(text) is not None


class ContentRule:
    """A route's `match.content`: any of its regexes anywhere in the text."""

    __slots__ = ("patterns",)

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(ContentPattern(p) for p in patterns)

    def search(self, text: str, lowered: str | None) -> bool:
        return any(p.search(text, lowered) for p in self.patterns)

    def first_match(self, text: str) -> str | None:
        """The pattern that matches `text` (for explanations), or None."""
        for pattern in self.patterns:
            if pattern.regex.search(text) is not None:
                return pattern.regex.pattern
        return None


class ContentIndex:
    """Every route's content rule, read together: a message costs one or two
    C-level searches when it holds none of the literals the patterns
    require (what almost every message is), whatever the number of routes.

    The gates are alternations of those literals. The case-insensitive ones
    are searched in the lower-cased text when it is ASCII (exact there, and
    several times faster than re.IGNORECASE), else with re.IGNORECASE, which
    is `re`'s own case rules and so exact on any text. Only a message a gate
    lets through, and patterns without a literal, get the per-pattern
    searches."""

    __slots__ = ("_all", "_exact", "_folded", "_folded_any", "_ungated")

    def __init__(self, rules: Sequence[tuple[int, ContentRule]]) -> None:
        self._all = tuple(rules)
        literals = [p.literal for _, r in rules for p in r.patterns if p.literal is not None]
        self._exact = _alternation({lit.text for lit in literals if not lit.ignore_case})
        folded = {lit.text for lit in literals if lit.ignore_case}  # ASCII, lower-cased
        self._folded = _alternation(folded)
        self._folded_any = _alternation(folded, re.IGNORECASE)
        # Routes with a pattern no literal vouches for are searched every time.
        self._ungated = tuple((bit, rule) for bit, rule in rules
                              if any(p.literal is None for p in rule.patterns))

    def hits(self, text: str, hits: int) -> int:
        """`hits` with the bit of every route whose content matches `text` added."""
        lowered = lowered_if_ascii(text)
        gated = self._exact is not None and self._exact.search(text) is not None
        if not gated and self._folded is not None:
            gated = (self._folded.search(lowered) if lowered is not None
                     else self._folded_any.search(text)) is not None  # type: ignore[union-attr]
        rules = self._all if gated else self._ungated
        for bit, rule in rules:
            if not hits & bit and rule.search(text, lowered):
                hits |= bit
        return hits


def _alternation(words: set[str], flags: int = 0) -> re.Pattern[str] | None:
    return re.compile("|".join(map(re.escape, sorted(words))), flags) if words else None


def lowered_if_ascii(text: str) -> str | None:
    return text.lower() if text.isascii() else None


def message_text(message: Any) -> str | None:
    """The text a content rule reads from one message: user and tool
    messages only, a list of parts read as its text parts joined."""
    if not isinstance(message, dict) or message.get("role") not in SCANNED_ROLES:
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return None


def glob_any(globs: Iterable[str], value: str) -> bool:
    return any(fnmatchcase(value, g) for g in globs)


def required_literal(pattern: str) -> Literal | None:
    """The longest run of characters every match of `pattern` contains, or
    None when the parser finds none it can vouch for."""
    if _sre_p is None:
        return None
    try:
        parsed = _sre_p.parse(pattern)
    except Exception:  # re.compile accepted it: only the prefilter is lost
        return None
    ignore_case = bool(parsed.state.flags & re.IGNORECASE)
    found: list[Literal] = []
    _runs(list(parsed), ignore_case, found)
    usable = [lit for lit in found if lit.text and (not lit.ignore_case or lit.text.isascii())]
    if not usable:
        return None
    best = max(usable, key=lambda lit: len(lit.text))
    if best.ignore_case:
        return Literal(best.text.lower(), True)
    return best


def _runs(items: list[Any], ignore_case: bool, found: list[Literal]) -> None:
    """Collect the literal runs of a sequence that every match goes through.
    Anything else (classes, alternatives, optional parts, lookarounds) ends
    a run and is not looked into, except groups and repeats of at least
    one, whose contents are required too."""
    run: list[str] = []

    def close() -> None:
        if run:
            found.append(Literal("".join(run), ignore_case))
            run.clear()

    for op, av in items:
        name = getattr(op, "name", "")
        if name == "LITERAL":
            run.append(chr(av))
            continue
        close()
        if name == "SUBPATTERN":
            _group, add_flags, del_flags, sub = av
            inner = ignore_case
            if add_flags & re.IGNORECASE:
                inner = True
            if del_flags & re.IGNORECASE:
                inner = False
            _runs(list(sub), inner, found)
        elif name == "ATOMIC_GROUP":
            _runs(list(av), ignore_case, found)
        elif name in _REPEATS and av[0] >= 1:
            _runs(list(av[2]), ignore_case, found)
    close()
