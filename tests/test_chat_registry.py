"""ToolRegistry and parse_tool_schema with plain data (and one loopback HTTP check)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from spearpy import abi
from spearpy.chat.registry import RegistryError, ToolRegistry, parse_tool_schema

ADD_PARAMS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def schema(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_bare_form_is_wrapped() -> None:
    name, spec = parse_tool_schema(
        schema({"name": "add", "description": "adds", "parameters": ADD_PARAMS})
    )
    assert name == "add"
    assert spec == {
        "type": "function",
        "function": {"name": "add", "description": "adds", "parameters": ADD_PARAMS},
    }


def test_wrapped_form_keeps_known_keys_only() -> None:
    raw = {
        "type": "function",
        "function": {"name": "get-x_1", "parameters": {}, "strict": True, "extra": 1},
        "other": 2,
    }
    name, spec = parse_tool_schema(schema(raw))
    assert name == "get-x_1"
    assert spec == {
        "type": "function",
        "function": {"name": "get-x_1", "parameters": {}, "strict": True},
    }


def test_null_description_and_parameters_are_dropped() -> None:
    _, spec = parse_tool_schema(schema({"name": "t", "description": None, "parameters": None}))
    assert spec == {"type": "function", "function": {"name": "t"}}


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"\xff\xfe",
        b'{"name": NaN}',
        b"[]",
        b'"add"',
        schema({"description": "no name"}),
        schema({"name": ""}),
        schema({"name": "has space"}),
        schema({"name": "a" * 65}),
        schema({"name": "add\n"}),
        schema({"name": "dot.name"}),
        schema({"name": 5}),
        schema({"type": "function", "function": "add"}),
        schema({"type": "retrieval", "function": {"name": "add"}}),
        schema({"type": "object", "name": "add"}),
        schema({"name": "add", "description": 3}),
        schema({"name": "add", "parameters": []}),
        schema({"name": "add", "parameters": True}),
        schema({"name": "add", "parameters": {"type": 5}}),
        schema({"name": "add", "parameters": {"properties": {"a": {"minimum": "x"}}}}),
    ],
)
def test_invalid_schemas_are_einval(raw: bytes) -> None:
    with pytest.raises(RegistryError) as info:
        parse_tool_schema(raw)
    assert info.value.errno == abi.EINVAL
    assert str(info.value)


def test_name_of_64_characters_is_accepted() -> None:
    name, _ = parse_tool_schema(schema({"name": "A" * 64}))
    assert name == "A" * 64


def test_duplicate_name_is_eexist_and_keeps_the_first() -> None:
    registry = ToolRegistry()
    name, spec = parse_tool_schema(schema({"name": "add", "parameters": ADD_PARAMS}))
    registry.add(name, 1, spec)
    with pytest.raises(RegistryError) as info:
        registry.add(name, 2, spec)
    assert info.value.errno == abi.EEXIST
    tool = registry.get("add")
    assert tool is not None and tool.ref == 1
    assert len(registry) == 1


def test_specs_none_when_empty_cached_and_invalidated() -> None:
    registry = ToolRegistry()
    assert registry.specs() is None
    assert "a" not in registry
    registry.add(*_parsed("a"))
    first = registry.specs()
    assert first is registry.specs()  # cached between sends
    registry.add(*_parsed("b"))
    second = registry.specs()
    assert second is not first
    assert second is not None
    assert [s["function"]["name"] for s in second] == ["a", "b"]
    assert "a" in registry and "b" in registry and len(registry) == 2
    assert registry.get("c") is None


def _parsed(name: str) -> tuple[str, int, dict[str, object]]:
    parsed_name, spec = parse_tool_schema(schema({"name": name}))
    return parsed_name, 0, spec


def test_validate_reports_path_and_accepts_valid_arguments() -> None:
    registry = ToolRegistry()
    name, spec = parse_tool_schema(schema({"name": "add", "parameters": ADD_PARAMS}))
    tool = registry.add(name, 7, spec)
    assert tool.validate({"a": 1, "b": 2}) is None
    message = tool.validate({"a": "x", "b": 2})
    assert message is not None and "$.a" in message and "integer" in message
    missing = tool.validate({"a": 1})
    assert missing is not None and "'b'" in missing


def test_tool_without_parameters_accepts_anything() -> None:
    tool = ToolRegistry().add(*_parsed("free"))
    assert tool.validator is None
    assert tool.validate({"anything": [1, 2]}) is None


def test_validation_message_is_clipped() -> None:
    name, spec = parse_tool_schema(
        schema({"name": "t", "parameters": {"type": "object", "maxProperties": 0}})
    )
    tool = ToolRegistry().add(name, 0, spec)
    message = tool.validate({f"k{i}": "v" * 50 for i in range(100)})
    assert message is not None and len(message) <= 500


def test_local_refs_resolve() -> None:
    params = {
        "type": "object",
        "$defs": {"pos": {"type": "integer", "minimum": 0}},
        "properties": {"n": {"$ref": "#/$defs/pos"}},
    }
    name, spec = parse_tool_schema(schema({"name": "t", "parameters": params}))
    tool = ToolRegistry().add(name, 0, spec)
    assert tool.validate({"n": 3}) is None
    assert tool.validate({"n": -1}) is not None


def _ref_chain(length: int, last: dict[str, object]) -> dict[str, object]:
    defs: dict[str, object] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(length)}
    defs[f"d{length}"] = last
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"type": "object", "$ref": "#"}, "'#' loops back"),
        ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]},
                    "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
          "properties": {"x": {"$ref": "#/$defs/a"}}}, "loops back"),
        ({"$defs": {"a": {"$anchor": "A", "not": {"$ref": "#A"}}}}, "'#A' loops back"),
        ({"allOf": [{"$ref": "#/allOf/0"}]}, "loops back"),
        (_ref_chain(3000, {"type": "string"}), "longer than 32"),
    ],
)
def test_refs_that_never_descend_are_refused(params: dict[str, object], why: str) -> None:
    """jsonschema would recurse until Python's limit on these (forever, or 3000 refs deep)."""
    with pytest.raises(RegistryError) as info:
        parse_tool_schema(schema({"name": "t", "parameters": params}))
    assert info.value.errno == abi.EINVAL
    assert why in str(info.value)


def test_recursive_schemas_that_descend_are_accepted() -> None:
    tree = {"type": "object", "properties": {"label": {"type": "string"},
                                               "kids": {"type": "array", "items": {"$ref": "#"}}}}
    name, spec = parse_tool_schema(schema({"name": "tree", "parameters": tree}))
    tool = ToolRegistry().add(name, 0, spec)
    assert tool.validate({"label": "a", "kids": [{"label": "b", "kids": [{"label": "c"}]}]}) is None
    assert "is not of type 'string'" in str(tool.validate({"kids": [{"kids": [{"label": 1}]}]}))
    parse_tool_schema(schema({"name": "chain", "parameters": _ref_chain(30, {"type": "string"})}))


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []  # noqa: RUF012 - shared on purpose, one server per test

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = b'{"type": "integer"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def schema_server() -> Iterator[str]:
    _CountingHandler.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/int.json"
    finally:
        server.shutdown()
        server.server_close()


def test_remote_ref_is_never_fetched(schema_server: str) -> None:
    # jsonschema's default registry would GET this URL; a guest must not be
    # able to make the host issue requests through its schema.
    params = {"type": "object", "properties": {"n": {"$ref": schema_server}}}
    name, spec = parse_tool_schema(schema({"name": "t", "parameters": params}))
    tool = ToolRegistry().add(name, 0, spec)
    message = tool.validate({"n": 1})
    assert message is not None and "unresolvable" in message
    assert _CountingHandler.hits == []
