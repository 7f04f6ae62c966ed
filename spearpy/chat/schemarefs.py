"""Find `$ref` loops that would make validation recurse forever.

A recursive schema is fine when each round descends into the instance
(`"properties": {"child": {"$ref": "#"}}` stops at the instance's depth, which
spearpy._json bounds). A loop that stays on the same instance value
(`{"$ref": "#"}`, or two `$defs` referring to each other through `allOf`)
never stops: jsonschema recurses until Python's recursion limit, and at that
depth even unrelated finalizers fail. Such schemas are refused at
registration.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

# Keywords whose subschemas apply to the same instance value as their parent.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas",)
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


MAX_IN_PLACE_CHAIN = 32
"""Longest chain of in-place subschemas and refs accepted: jsonschema spends a
few stack frames on each, and the instance's own depth multiplies them."""


def in_place_ref_problem(root: dict[str, Any]) -> str | None:
    """Why validating against `root` could recurse without bound, or None."""
    anchors = _anchors(root)
    chain: dict[int, int] = {}  # finished node -> longest in-place chain from it
    # Iterative depth-first search: a chain of refs can be longer than
    # Python's recursion limit.
    for start in _subschemas(root):
        if id(start) in chain:
            continue
        on_path = {id(start)}
        stack = [(start, iter(_in_place_children(start, root, anchors)), 1)]
        while stack:
            node, children, longest = stack[-1]
            step = next(children, None)
            if step is None:
                stack.pop()
                on_path.discard(id(node))
                chain[id(node)] = longest
                if longest > MAX_IN_PLACE_CHAIN:
                    return (f"$ref/allOf/anyOf/oneOf/not/if chains longer than "
                            f"{MAX_IN_PLACE_CHAIN} are not supported")
                if stack:
                    parent, siblings, best = stack[-1]
                    stack[-1] = (parent, siblings, max(best, longest + 1))
                continue
            child, via = step
            if not isinstance(child, dict):
                continue
            if id(child) in chain:
                stack[-1] = (node, children, max(longest, chain[id(child)] + 1))
                continue
            if id(child) in on_path:
                return (f'"$ref": {via!r} loops back without descending into the arguments'
                        if via else "allOf/anyOf/oneOf/not/if loop back on themselves")
            on_path.add(id(child))
            stack.append((child, iter(_in_place_children(child, root, anchors)), 1))
    return None


def _in_place_children(
    node: dict[str, Any], root: dict[str, Any], anchors: dict[str, Any]
) -> list[tuple[Any, str]]:
    children: list[tuple[Any, str]] = [(node[k], "") for k in _IN_PLACE_ONE if k in node]
    for key in _IN_PLACE_MANY:
        if isinstance(node.get(key), list):
            children += [(item, "") for item in node[key]]
    for key in _IN_PLACE_MAP:
        if isinstance(node.get(key), dict):
            children += [(item, "") for item in node[key].values()]
    for key in _REF_KEYWORDS:
        ref = node.get(key)
        if isinstance(ref, str):
            children.append((_resolve(ref, root, anchors), ref))
    return children


def _resolve(ref: str, root: dict[str, Any], anchors: dict[str, Any]) -> Any:
    """The local subschema a ref names; None for one spearpy does not resolve
    (remote refs are refused by the validator's empty registry anyway)."""
    if not ref.startswith("#"):
        return None
    fragment = unquote(ref[1:])
    if not fragment.startswith("/"):
        return root if not fragment else anchors.get(fragment)
    node: Any = root
    for part in fragment[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _subschemas(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _anchors(root: dict[str, Any]) -> dict[str, Any]:
    return {
        node[key]: node
        for node in _subschemas(root)
        for key in ("$anchor", "$dynamicAnchor")
        if isinstance(node.get(key), str)
    }
