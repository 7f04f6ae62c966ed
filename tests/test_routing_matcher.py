"""The matcher: the literal prefilter never changes what a regex matches, an
incremental scan finds what a full one finds, and the table's precedence."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy.backends.routing.matcher import (
    ContentPattern,
    ContentRule,
    Literal,
    lowered_if_ascii,
    message_text,
    required_literal,
)
from spearpy.backends.routing.spec import AliasSpec, MatchSpec, RouteSpec, RoutingSpec
from spearpy.backends.routing.table import (
    ALIAS,
    DEFAULT,
    LOCKED,
    PARAM,
    ROUTE,
    RouteTable,
    SessionScan,
)

# Characters where str.lower() and re.IGNORECASE disagree (the long s and
# the Kelvin sign match s and k; dotted and dotless i; final sigma), and
# ordinary ones the pieces below are made of.
ALPHABET = "abkKsSiIpP sw-_1\u017f\u212a\u0130\u0131\u03a3\u03c3\u03c2\u00df"
PIECES = st.sampled_from([
    "a", "b", "k", "s", "ss", "pass", "SSN", "\u017f", "\u03a3", r"\b", r"\d", "[ab]", "(?:a|k)",
    ".", "x?", "s+", "(a)", "(?i:sk)", "(?-i:s)", "k{2}", "s*", r"\w", "(?=s)", "(?!k)",
])


# Texts are made of chunks that the pieces match, and their look-alikes.
CHUNKS = st.sampled_from([
    "a", "b", "k", "s", "S", "K", "pass", "PASS", "ssn", "SSN", "\u017f\u017fn", "\u212a",
    "\u0130", "\u0131", "\u03a3", "\u03c2", "\u00df", " ", "-", "1", "x",
])


@st.composite
def patterns(draw: Any) -> str:
    body = "".join(draw(st.lists(PIECES, min_size=1, max_size=3)))
    flags = draw(st.sampled_from(["", "(?i)", "(?i)", "(?s)", "(?x)"]))
    return flags + body


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns(), text=st.one_of(st.text(alphabet=ALPHABET, max_size=20),
                                          st.lists(CHUNKS, max_size=6).map("".join)))
def test_the_prefilter_never_changes_the_answer(pattern: str, text: str) -> None:
    try:
        expected = re.search(pattern, text) is not None
    except re.error:
        return  # e.g. a flag the pieces put in a bad place: config refuses those
    assert ContentPattern(pattern).search(text, lowered_if_ascii(text)) is expected


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(st.lists(patterns(), min_size=1, max_size=3), max_size=5),
       texts=st.lists(st.one_of(st.text(alphabet=ALPHABET, max_size=12),
                                st.lists(CHUNKS, max_size=5).map("".join)), max_size=10),
       cut=st.integers(min_value=0, max_value=10))
def test_the_table_scan_finds_what_re_finds_in_one_go_or_bit_by_bit(
        rules: list[list[str]], texts: list[str], cut: int) -> None:
    compiled: list[list[re.Pattern[str]]] = []
    for rule in rules:
        try:
            compiled.append([re.compile(p) for p in rule])
        except re.error:
            return  # the config refuses it at start
    routes = tuple(RouteSpec(name=f"r{i}", match=MatchSpec(content=rule), to=["a"])
                   for i, rule in enumerate(rules))
    table = RouteTable(RoutingSpec(routes=routes), "a", lambda _name: None)
    roles = ["user", "assistant", "tool", "system"]
    messages = [{"role": roles[i % 4], "content": t} for i, t in enumerate(texts)]
    state = SessionScan()
    table.scan(messages[:cut], state)
    incremental = table.scan(messages, state)
    expected = 0
    for index, regexes in enumerate(compiled):
        if any(r.search(m["content"]) for r in regexes for m in messages
               if m["role"] in ("user", "tool")):
            expected |= 1 << index
    assert incremental == expected == table.scan(messages, SessionScan())


def test_required_literals() -> None:
    assert required_literal(r"(?i)\bssn\b") == Literal("ssn", True)
    assert required_literal("secret[-_ ]?key") == Literal("secret", False)
    assert required_literal("(?i)CREDIT\\s*card") == Literal("credit", True)
    assert required_literal("a|b") is None
    assert required_literal("(?i)stra\u00dfe") is None  # not ASCII: no case-folded prefilter
    assert required_literal("stra\u00dfe") == Literal("stra\u00dfe", False)
    assert required_literal("(?:abc)?x+yz") == Literal("yz", False)


def test_message_text_reads_user_and_tool_messages_only() -> None:
    assert message_text({"role": "user", "content": "hi"}) == "hi"
    assert message_text({"role": "tool", "content": "out"}) == "out"
    assert message_text({"role": "assistant", "content": "password"}) is None
    assert message_text({"role": "system", "content": "password"}) is None
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    assert message_text({"role": "user", "content": parts}) == "a\nb"
    assert ContentRule(["x", "b$"]).first_match("a\nb") == "b$"


def table(*routes: RouteSpec, aliases: dict[str, AliasSpec] | None = None) -> RouteTable:
    models = {"local": "qwen", "hosted": "gpt-4o-mini"}
    return RouteTable(RoutingSpec(aliases=aliases or {}, routes=routes), "hosted", models.get)


PRIVATE = RouteSpec(name="private", match=MatchSpec(content=["password"]), to=["local"],
                    lock=True)
GPT = RouteSpec(name="gpt", match=MatchSpec(model=["gpt-*"]), to=["down", "hosted"])
TOOLS = RouteSpec(name="tools", match=MatchSpec(tools=True, backend=["", "hosted"]),
                  to=["local"])


@pytest.mark.parametrize(("requested", "asked", "tools", "private", "reason", "targets"), [
    ("", "gpt-4.1", False, True, LOCKED, ("local",)),  # a locked route beats everything
    ("hosted", "gpt-4.1", False, True, LOCKED, ("local",)),
    ("hosted", "gpt-4.1", False, False, PARAM, ("hosted",)),  # the param beats other routes
    ("", "gpt-4o-mini", False, False, ALIAS, ("local",)),  # an alias beats unlocked routes
    ("", "gpt-4.1", False, False, ROUTE, ("down", "hosted")),
    ("", "claude", True, False, ROUTE, ("local",)),  # tools = true, backend param unset
    ("", "claude", False, False, DEFAULT, ("hosted",)),
    ("", None, False, False, ROUTE, ("down", "hosted")),  # no model: the default's, gpt-4o-mini
])
def test_precedence(requested: str, asked: str | None, tools: bool, private: bool,
                    reason: str, targets: tuple[str, ...]) -> None:
    t = table(PRIVATE, GPT, TOOLS, aliases={"gpt-4o-mini": AliasSpec(backend="local")})
    messages = [{"role": "user", "content": "my password" if private else "hello"}]
    hits = t.scan(messages, SessionScan())
    match = t.decide(requested, asked, "gpt-4o-mini", tools, hits)
    assert (match.reason, match.targets) == (reason, targets)


def test_models_per_target() -> None:
    t = table(GPT, RouteSpec(name="pinned", match=MatchSpec(model=["claude*"]), to=["local"],
                             model="qwen-big"),
              aliases={"gpt-4o": AliasSpec(backend="local", model="qwen2.5:7b"),
                       "gpt-4o-mini": AliasSpec(backend="local")})
    aliased = t.decide("", "gpt-4o", None, False, 0)
    assert aliased.model == "qwen2.5:7b" and aliased.model_for("local", "gpt-4o") == "qwen2.5:7b"
    bare = t.decide("", "gpt-4o-mini", None, False, 0)
    assert bare.model == "qwen" and bare.model_for("local", "gpt-4o-mini") is None  # local's own
    routed = t.decide("", "gpt-4.1", None, False, 0)
    assert routed.model_for("down", "gpt-4.1") == "gpt-4.1"
    pinned = t.decide("", "claude-3", None, False, 0)
    assert pinned.model_for("local", "claude-3") == "qwen-big"
