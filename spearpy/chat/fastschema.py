"""A fast path for the JSON schemas tools actually declare.

jsonschema's general validator costs ~20 us even for `{"a": int, "b": int}`,
more than the rest of a loop iteration. Most tool schemas use a small
subset (type, properties, required, additionalProperties: bool, string
enums, array items, annotations): `compile_check` turns such a schema into a
plain predicate with exactly jsonschema's answer for that subset, and returns
None for anything else, so the caller keeps using jsonschema there. The
predicate only says valid or not; the error message for an invalid call still
comes from jsonschema (a slow path the model pays only when it is wrong).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Check = Callable[[Any], bool]

# Keywords with no effect on validity (format is an annotation unless a
# format checker is configured, and spearpy configures none).
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "format",
                          "deprecated", "readOnly", "writeOnly", "$comment"})
_SUPPORTED = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "enum",
                             "items"}


def _is_integer(value: Any) -> bool:
    # jsonschema (draft 4 on): bools are not numbers; 1.0 is an integer.
    if type(value) is int:  # the common case, decided before the subclass checks
        return True
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


# Python types whose every value passes `{"type": name}` (JSON gives exactly
# these): a property of such a schema is accepted on one type test, without
# calling its check (two calls saved per `{"a": int, "b": int}` call).
_EXACT: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "integer": (int,),
    "number": (int, float), "boolean": (bool,), "null": (type(None),),
}


def _exact_types(schema: Any) -> tuple[type, ...]:
    """The types that always pass `schema` when it only names a type (else ())."""
    if isinstance(schema, dict) and isinstance(schema.get("type"), str) and \
            set(schema) <= _ANNOTATIONS | {"type"}:
        return _EXACT.get(schema["type"], ())
    return ()


def compile_check(schema: Any) -> Check | None:
    """A predicate equivalent to validating against `schema`, or None when the
    schema uses anything outside the supported subset."""
    if schema is True or schema == {}:
        return lambda _v: True
    if not isinstance(schema, dict) or not set(schema) <= _SUPPORTED:
        return None
    checks: list[Check] = []
    kind = schema.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else kind
        if not isinstance(names, list) or not names or \
                not all(isinstance(n, str) and n in _TYPES for n in names):
            return None
        tests = [_TYPES[n] for n in names]
        checks.append(tests[0] if len(tests) == 1 else (lambda v: any(t(v) for t in tests)))
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not all(isinstance(x, str) for x in values):
            return None  # non-string enums compare numbers and bools subtly: leave them
        allowed = frozenset(values)
        checks.append(lambda v: isinstance(v, str) and v in allowed)
    # `type: object` with object keywords and nothing else: one check that
    # also demands a dict, instead of two (every tool call of every loop).
    only_object = kind == "object" and "enum" not in schema and "items" not in schema
    supported, object_check = _object_check(schema, only_object)
    if not supported:
        return None
    if only_object and object_check is not None:
        return object_check
    if object_check is not None:
        checks.append(object_check)
    if "items" in schema:
        item = compile_check(schema["items"])
        if item is None:
            return None
        checks.append(lambda v: not isinstance(v, list) or all(item(x) for x in v))
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:  # the usual object schema: its type and its properties
        first, second = checks
        return lambda v: first(v) and second(v)
    return lambda v: all(check(v) for check in checks)


def _object_check(schema: dict[str, Any],
                  must_be_object: bool = False) -> tuple[bool, Check | None]:
    """(supported, the object keywords as one check or None when there are none);
    with `must_be_object` the check also fails anything but a dict."""
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or \
            not all(isinstance(r, str) for r in required) or not isinstance(extra, bool):
        return False, None
    if not props and not required and extra:
        return True, None
    needed = frozenset(required)
    compiled: list[tuple[str, tuple[type, ...], Check, bool]] = []
    for name, sub in props.items():
        check = compile_check(sub)
        if check is None:
            return False, None
        compiled.append((name, _exact_types(sub), check, name in needed))
    known = frozenset(props)
    # A required name with a property schema is tested in the walk over the
    # properties, which looks it up anyway; only the others take a set test
    # (a dict-view comparison cost more than the whole walk).
    unlisted = needed - known

    def check_object(value: Any) -> bool:
        if not isinstance(value, dict):
            return not must_be_object  # object keywords alone ignore other types
        if unlisted and not value.keys() >= unlisted:  # one set test, not one per name
            return False
        for name, exact, sub, is_required in compiled:
            if name in value:
                item = value[name]
                if type(item) not in exact and not sub(item):
                    return False
            elif is_required:
                return False
        return extra or all(key in known for key in value)

    return True, check_object
