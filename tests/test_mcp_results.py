"""Turning MCP tool results and failures into role=tool content (plain data)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from spearpy.mcp.results import (
    MCP_TOOL_FAILED,
    cut_utf8,
    error_content,
    render_content,
    render_result,
    truncate,
)


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def test_text_blocks_are_joined() -> None:
    out = render_result({"content": [text("a"), text("b")]}, 1000)
    assert (out.content, out.is_error, out.code, out.truncated) == ("a\nb", False, None, False)


def test_structured_content() -> None:
    value = {"timezone": "UTC", "n": [1, 2]}
    # Alone: compact JSON.
    assert render_content([], value) == '{"timezone":"UTC","n":[1,2]}'
    # With a text block that is the same value serialised: the compact form.
    assert render_content([text(json.dumps(value, indent=2))], value) == \
        '{"timezone":"UTC","n":[1,2]}'
    # With different text: the text the server wrote for the model.
    assert render_content([text("3")], {"result": 3}) == "3"
    assert render_content([], "plain") == '"plain"'


def test_is_error_becomes_spears_shape() -> None:
    out = render_result({"content": [text("disk full")], "isError": True}, 1000)
    assert out.is_error and out.code == MCP_TOOL_FAILED
    assert json.loads(out.content) == {"error": {"code": "mcp_tool_failed",
                                                 "message": "disk full"}}
    empty = render_result({"content": [], "isError": True}, 1000)
    assert json.loads(empty.content)["error"]["message"] == "the tool reported an error"


def test_non_text_content_is_summarised_never_dropped() -> None:
    blocks = [
        text("see:"),
        {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
        {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
        {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt",
         "mimeType": "text/plain", "size": 12},
        {"type": "resource", "resource": {"uri": "file:///b.txt", "mimeType": "text/plain",
                                          "text": "hello"}},
        {"type": "resource", "resource": {"uri": "file:///c.bin", "blob": "AAAA"}},
        {"type": "hologram"},
    ]
    assert render_content(blocks).split("\n") == [
        "see:",
        "[image: image/png, 8 bytes]",
        "[audio: audio/wav, 4 bytes]",
        "[resource link: file:///a.txt (a.txt, text/plain, 12 bytes)]",
        "[resource: file:///b.txt, text/plain, 5 bytes]",
        "hello",
        "[resource: file:///c.bin, unknown type, 3 bytes]",
        "[hologram content]",
    ]
    # Structured content does not hide the image either.
    assert render_content([{"type": "image", "mimeType": "image/gif", "data": ""}], {"a": 1}) == \
        '{"a":1}\n[image: image/gif, 0 bytes]'


def test_truncation_is_visible_and_within_the_limit() -> None:
    out = render_result({"content": [text("é" * 5000)]}, 4096)
    assert out.truncated
    raw = out.content.encode()
    assert len(raw) <= 4096
    assert out.content.endswith("of 10000 bytes shown]")
    assert out.content.startswith("é" * 100)


@given(st.text(max_size=300), st.integers(min_value=0, max_value=400))
def test_truncate_cuts_on_character_boundaries(value: str, limit: int) -> None:
    cut, was_cut = truncate(value, limit)
    assert was_cut == (len(value.encode()) > limit)
    if was_cut:
        assert len(cut.encode()) <= limit
    else:
        assert cut == value
    prefix = cut_utf8(value, limit)
    assert value.startswith(prefix) and len(prefix.encode()) <= limit


@given(st.sampled_from(["mcp_timeout", "mcp_denied"]), st.text(max_size=2000),
       st.integers(min_value=60, max_value=3000))
def test_error_content_always_fits_and_parses(code: str, message: str, limit: int) -> None:
    body = error_content(code, message, limit)
    assert len(body.encode()) <= limit
    assert json.loads(body)["error"]["code"] == code
