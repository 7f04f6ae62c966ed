"""spearpy._json: nesting is bounded before the parser recurses."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spearpy import _json


@pytest.mark.parametrize("raw", [
    "[" * 3000 + "]" * 3000,
    b"[" * 3000 + b"]" * 3000,
    '{"key":"x","value":' + "[" * 3000,  # truncated too: refused for depth first
    "[" * (_json.MAX_JSON_DEPTH + 1) + "]" * (_json.MAX_JSON_DEPTH + 1),
    '{"a":' * 100 + "1" + "}" * 100,
])
def test_too_deep_is_a_decode_error_not_a_recursion_error(raw: str | bytes) -> None:
    with pytest.raises(json.JSONDecodeError, match="nested deeper than 64 levels"):
        _json.loads(raw)


def test_exact_limit_and_brackets_inside_strings_are_fine() -> None:
    depth = _json.MAX_JSON_DEPTH
    assert _json.loads("[" * depth + "]" * depth) is not None
    text = json.dumps({"s": "[{" * 500, "t": 'quote \\" [[[[ ' * 50, "n": [[1]]})
    assert _json.loads(text) == json.loads(text)
    assert _json.loads(text.encode()) == json.loads(text)
    # Multi-byte UTF-8 beside many brackets keeps its meaning.
    text = json.dumps({"é": ["ü"] * 100, "k": [["€"]] * 40}, ensure_ascii=False)
    assert _json.loads(text.encode()) == json.loads(text)


def test_allow_nan_false_refuses_constants() -> None:
    assert math.isnan(_json.loads("[NaN]")[0])  # the default follows json.loads
    with pytest.raises(ValueError, match="Infinity is not valid JSON"):
        _json.loads('{"a": Infinity}', allow_nan=False)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="[]{}\\\"ab é"),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=4),
    max_leaves=200,
)


@given(JSON_VALUES)
def test_agrees_with_json_loads_on_ordinary_documents(value: object) -> None:
    text = json.dumps(value)
    assert _json.loads(text) == json.loads(text)
    assert _json.loads(text.encode()) == json.loads(text)


@given(st.integers(0, 100), st.integers(0, 100), st.text(alphabet='[]{}"\\ab', max_size=20))
def test_refuses_exactly_what_is_too_deep(outer: int, inner: int, noise: str) -> None:
    """Brackets inside strings never count; the deepest branch decides."""
    def nest(depth: int, leaf: object) -> object:
        for level in range(depth):
            leaf = [leaf] if level % 2 else {"k": leaf, "s": noise}
        return leaf

    value = [nest(outer, noise), nest(inner, 1)]
    text = json.dumps(value)
    deepest = 1 + max(outer, inner)
    for raw in (text, text.encode()):
        if deepest > _json.MAX_JSON_DEPTH:
            with pytest.raises(json.JSONDecodeError, match="nested deeper"):
                _json.loads(raw)
        else:
            assert _json.loads(raw) == json.loads(text)


@pytest.mark.parametrize("kind", [bytes, str])
def test_too_many_containers_is_refused_before_parsing(kind: type) -> None:
    bomb = "[" + "{}," * _json.MAX_JSON_CONTAINERS + "{}]"
    with pytest.raises(json.JSONDecodeError, match="more than 250000 arrays and objects"):
        _json.loads(bomb.encode() if kind is bytes else bomb)
    # At the limit it parses, and brackets inside strings do not count.
    assert len(_json.loads("[" + "{}," * (_json.MAX_JSON_CONTAINERS - 2) + "{}]")) == \
        _json.MAX_JSON_CONTAINERS - 1
    assert _json.loads(json.dumps(["{[" * _json.MAX_JSON_CONTAINERS])) == \
        ["{[" * _json.MAX_JSON_CONTAINERS]
