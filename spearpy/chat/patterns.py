"""Regular expressions of a tool schema run on the model's text: JSON Schema
`pattern` and `patternProperties`, on the `regex` engine, with the GIL
released and a time budget per validation.

The schema comes from a guest or an MCP server and the text from the model:
neither is trusted. jsonschema runs patterns with Python's `re`, which
backtracks without bound and holds the GIL while it does: `^(a|aa)+$` on 60
characters and a `!` would stop every run of the host, and the service with
them, for longer than anyone waits. The validators built for tools
(registry.py) replace the three keywords through which jsonschema reaches
`re`; a schema that would reach it a fourth way (`unevaluatedProperties`
beside `patternProperties`) is refused when the tool is registered.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import regex
from jsonschema.exceptions import ValidationError

from spearpy.errors import SpearpyError

# The whole validation of one call's arguments: ample for any pattern that
# does not backtrack catastrophically (those take microseconds).
PATTERN_BUDGET_S = 0.25
# Longer patterns are refused at registration: compiling one of 64 KiB takes
# the engine ~0.6 s; one of 4 KiB (several times any real one), ~30 ms.
MAX_PATTERN_CHARS = 4096


class PatternTimeout(SpearpyError):
    """The arguments' patterns took longer than the validation's budget."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


class _Budget(threading.local):
    deadline: float | None = None


_budget = _Budget()


@contextlib.contextmanager
def pattern_budget(seconds: float = PATTERN_BUDGET_S) -> Iterator[None]:
    """Every pattern search inside shares `seconds` (this thread's)."""
    outer = _budget.deadline
    _budget.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _budget.deadline = outer


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern)


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` is found in `text`; PatternTimeout past the budget,
    regex.error for a pattern the engine refuses."""
    deadline = _budget.deadline
    timeout = PATTERN_BUDGET_S if deadline is None else deadline - time.monotonic()
    if timeout <= 0:
        raise PatternTimeout(pattern)
    try:
        # concurrent: the GIL is released while it matches (str is immutable).
        return _compiled(pattern).search(text, timeout=timeout, concurrent=True) is not None
    except TimeoutError:
        raise PatternTimeout(pattern) from None


def _bad_pattern(pattern: str, exc: Exception) -> ValidationError:
    return ValidationError(f"the schema's pattern {pattern!r} is not a regular expression "
                           f"this host can run: {exc}")


# ---- jsonschema keywords (validator, keyword value, instance, schema) -------

def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = search(patrn, instance)
    except regex.error as exc:
        yield _bad_pattern(patrn, exc)
        return
    if not found:
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                       schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            try:
                found = search(patrn, key)
            except regex.error as exc:
                yield _bad_pattern(patrn, exc)
                return
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def additional_properties(base: Any) -> Any:
    """jsonschema's additionalProperties, with patternProperties matched here."""

    def keyword(validator: Any, additional: Any, instance: Any,
                schema: Any) -> Iterator[ValidationError]:
        patterns = schema.get("patternProperties")
        if not patterns or not validator.is_type(instance, "object"):
            yield from base(validator, additional, instance, schema)
            return
        known = schema.get("properties", {})
        extras = []
        for key in instance:
            if key in known:
                continue
            for patrn in patterns:
                try:
                    if search(patrn, key):
                        break
                except regex.error as exc:
                    yield _bad_pattern(patrn, exc)
                    return
            else:
                extras.append(key)
        if validator.is_type(additional, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], additional, path=extra)
        elif not additional and extras:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")

    return keyword


def pattern_problem(schema: Any) -> str | None:
    """Why this schema's patterns cannot run within their bounds (None if
    they can): `unevaluatedProperties` would make jsonschema match
    `patternProperties` with `re` itself, and a very long pattern takes the
    engine's parser (Python, holding the GIL) most of a second to compile."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.update(key for key in ("patternProperties", "unevaluatedProperties")
                         if key in node)
            texts = list(node["patternProperties"]) if isinstance(
                node.get("patternProperties"), dict) else []
            if isinstance(node.get("pattern"), str):
                texts.append(node["pattern"])
            for text in texts:
                if len(text) > MAX_PATTERN_CHARS:
                    return (f"has a pattern of {len(text)} characters (at most "
                            f"{MAX_PATTERN_CHARS})")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    if found == {"patternProperties", "unevaluatedProperties"}:
        return ("uses patternProperties together with unevaluatedProperties, which this "
                "host does not evaluate (their regular expressions would run unbounded)")
    return None
