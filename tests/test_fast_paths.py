"""The performance fast paths give the same answers as the slow ones: the
compiled schema checks agree with jsonschema, and guest memory accesses stay
correct when the guest grows its memory between (and during) them."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st

from spearpy import _native
from spearpy.chat.fastschema import compile_check
from spearpy.guestcall import call_tool
from spearpy.memory import GuestFault
from tests.probe import Probe

# ---- compiled schema checks == jsonschema ---------------------------------

_types = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"])


def _schemas(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.fixed_dictionaries({}, optional={
        "type": st.one_of(_types, st.lists(_types, min_size=1, max_size=3)),
        "description": st.text(max_size=5),
        "enum": st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3),
    })
    if depth == 0:
        return leaf
    inner = _schemas(depth - 1)
    return st.one_of(leaf, st.fixed_dictionaries({}, optional={
        "type": st.just("object"),
        "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
        "required": st.lists(st.sampled_from(["a", "b", "d"]), max_size=3, unique=True),
        "additionalProperties": st.booleans(),
    }), st.fixed_dictionaries({"type": st.just("array"), "items": inner}))


_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([1.0, 2.5, -0.0]),
              st.sampled_from(["a", "b", "z", ""])),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), children,
                                               max_size=4)),
    max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(_schemas(), _json)
def test_compiled_checks_agree_with_jsonschema(schema: dict[str, Any], value: Any) -> None:
    check = compile_check(schema)
    assert check is not None, schema
    expected = jsonschema.validators.validator_for(schema)(schema).is_valid(value)
    assert check(value) == expected, (schema, value)


def test_schemas_outside_the_subset_are_left_to_jsonschema() -> None:
    for schema in ({"type": "integer", "minimum": 0}, {"$ref": "#/$defs/x"},
                   {"type": "object", "additionalProperties": {"type": "string"}},
                   {"enum": [1, True]}, {"type": "nonsense"}, {"anyOf": [{}]}):
        assert compile_check(schema) is None, schema


# ---- guest memory that grows ----------------------------------------------

_GROWER = """
(module
  (memory (export "memory") 1)
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  ;; table[0]: grows memory by 16 pages, then echoes its arguments, so the host
  ;; must read the output from a memory larger than the one it wrote into
  (func $grow_echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (drop (memory.grow (i32.const 16)))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (i32.store (local.get $lp) (local.get $n))
    (i32.const 0))
  (table (export "__indirect_function_table") 1 funcref)
  (elem (i32.const 0) $grow_echo)
  (func (export "_start")))
"""


def test_memory_access_follows_growth(make_host: Any) -> None:
    probe = Probe(make_host(base_url="http://127.0.0.1:9/v1"),
                  bytes(wasmtime.wat2wasm(_GROWER)))
    try:
        memory = probe.run.memory
        page = 65536
        assert memory.size() == page
        try:
            memory.read(page + 10, 4)
            raise AssertionError("a read past the end must fault")
        except GuestFault:
            pass
        for _ in range(20):  # grow step by step, touching the newest page each time
            old = memory.size()
            assert probe.call("grow", 1) == old // page
            memory.write(old + page - 3, b"end")
            memory.write_u32(old, 0xDEADBEEF)
            assert memory.read(old + page - 3, 3) == b"end"
            assert memory.read_u32(old) == 0xDEADBEEF
            _first, last = memory.read_pair(0, 4, old + page - 3, 3)
            assert last == b"end"
    finally:
        probe.close()


def test_tool_that_grows_memory_mid_call(make_host: Any) -> None:
    probe = Probe(make_host(base_url="http://127.0.0.1:9/v1"),
                  bytes(wasmtime.wat2wasm(_GROWER)))
    previous = _native.enter_run(probe.run)
    try:
        args = json.dumps({"text": "x" * 300})
        for round_ in range(4):
            before = probe.run.memory.size()
            outcome = call_tool(probe.run, 0, args, 65536, (1024, 4096))
            assert outcome.ok, outcome
            assert outcome.output == args
            assert probe.run.memory.size() == before + 16 * 65536, round_
    finally:
        _native.enter_run(previous)
        probe.close()
