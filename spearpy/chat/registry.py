"""The per-session tool registry: guest functions the model may call.

Schemas come from the guest and arguments from the model; neither is trusted.
A schema is checked once at registration and its validator built then, so a
send never pays for schema compilation. jsonschema itself (~50 ms to import)
loads with the first tool that has parameters, not with the host.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from spearpy import _json, abi
from spearpy.chat.fastschema import Check, compile_check
from spearpy.chat.protocol import JSONDict, ToolSource
from spearpy.chat.schemarefs import in_place_ref_problem
from spearpy.errors import SpearpyError

if TYPE_CHECKING:
    import referencing
    from jsonschema.protocols import Validator

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")

# Validation messages quote the offending instance; a model can produce huge
# arguments, and the message goes back to the model as a tool result.
_MAX_MESSAGE_CHARS = 500


@functools.cache
def _no_remote_refs() -> referencing.Registry[Any]:
    """An empty registry: "$ref" may only point inside the schema itself. Without
    it jsonschema would fetch http(s) refs from the network on behalf of a guest."""
    import referencing

    return referencing.Registry()


class RegistryError(SpearpyError):
    """A schema or registration the guest must be told about (negative errno)."""

    def __init__(self, errno: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno
        self.message = message


# Tool.approval values: what the host's policy says of a call of the tool.
ALLOW: Final = "allow"
DENY: Final = "deny"
ASK: Final = "ask"


@dataclass(frozen=True)
class Tool:
    name: str
    ref: Any  # what `source` knows the tool by: a guest's funcref table index, ...
    spec: JSONDict  # always {"type":"function","function":{name, description?, parameters?}}
    # None only in the pure loop's own tests, which never call a tool.
    source: ToolSource | None = field(default=None, compare=False, repr=False)
    # What the host's approval policy says of a call: "allow" runs it, "deny"
    # answers the model with an error, "ask" leaves the call pending for the
    # guest (an AUTO send with it still pending is the guest's approval).
    approval: str = "allow"
    # Where the source found it, for events and metrics: an MCP server's id.
    origin: str | None = None
    validator: Validator | None = field(default=None, compare=False, repr=False)
    # A compiled predicate for the common schema subset (chat/fastschema.py):
    # True means valid; False or None (no fast path) defers to `validator`.
    check: Check | None = field(default=None, compare=False, repr=False)

    def validate(self, arguments: object) -> str | None:
        """Return why `arguments` (parsed JSON) do not fit the schema, or None."""
        if self.validator is None:
            return None
        import referencing.exceptions
        from jsonschema.exceptions import best_match

        from spearpy.chat.patterns import PATTERN_BUDGET_S, PatternTimeout, pattern_budget

        try:
            with pattern_budget():
                error = best_match(self.validator.iter_errors(cast(Any, arguments)))
        except PatternTimeout as exc:
            return _clip(f"checking the arguments against the schema's pattern {exc.pattern!r} "
                         f"took longer than {PATTERN_BUDGET_S:g} s; the call was not made")
        except referencing.exceptions.Unresolvable as exc:
            return _clip(f"the tool schema has an unresolvable $ref: {exc.ref}")
        except RecursionError:
            return "arguments are nested too deeply to validate"
        if error is None:
            return None
        where = error.json_path
        return _clip(error.message if where == "$" else f"{where}: {error.message}")


def _clip(text: str) -> str:
    if len(text) <= _MAX_MESSAGE_CHARS:
        return text
    return text[: _MAX_MESSAGE_CHARS - 3] + "..."


def _invalid(message: str) -> RegistryError:
    return RegistryError(abi.EINVAL, message)


def parse_tool_schema(raw: bytes) -> tuple[str, JSONDict]:
    """Parse a cchat_write_fn schema in either accepted form.

    Returns the tool name and the wrapped spec that goes upstream. Only the
    keys OpenAI defines are kept, so strict servers accept the spec.
    """
    try:
        obj = _json.loads(raw.decode("utf-8"), allow_nan=False)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _invalid(f"tool schema is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _invalid("tool schema must be a JSON object")

    kind = obj.get("type", "function")
    if kind != "function":
        raise _invalid(f'tool "type" must be "function", not {kind!r}')
    if "function" in obj:
        fn = obj["function"]
        if not isinstance(fn, dict):
            raise _invalid('"function" must be an object')
    else:
        fn = obj  # the bare {"name","description","parameters"} form

    name = fn.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise _invalid("tool name must match ^[a-zA-Z0-9_-]{1,64}$")
    function: JSONDict = {"name": name}

    description = fn.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise _invalid('"description" must be a string')
        function["description"] = description

    parameters = fn.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise _invalid('"parameters" must be a JSON object')
        problem = schema_problem(parameters)
        if problem is not None:
            raise _invalid(f'"parameters" {problem}')
        function["parameters"] = parameters

    strict = fn.get("strict")
    if isinstance(strict, bool):
        function["strict"] = strict  # OpenAI structured outputs; meaningful upstream

    return name, {"type": "function", "function": function}


# Distinct schemas whose verdict is kept: a guest registers the same tools in
# every session it opens, and checking a schema against its metaschema costs
# ~1 ms (jsonschema walks the whole metaschema), the key ~10 us.
_VERDICTS_KEPT = 256


def schema_problem(parameters: JSONDict) -> str | None:
    """Why a tool's parameters schema cannot be used (None if it can): not a
    valid JSON Schema, or a $ref loop validation would never leave. The
    verdict is remembered by the schema's canonical text."""
    try:
        key = json.dumps(parameters, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return _schema_problem(parameters)
    return _schema_problem_of(key)


@functools.lru_cache(maxsize=_VERDICTS_KEPT)
def _schema_problem_of(canonical: str) -> str | None:
    parameters: JSONDict = json.loads(canonical)
    return _schema_problem(parameters)


def _schema_problem(parameters: JSONDict) -> str | None:
    import jsonschema.validators
    from jsonschema.exceptions import SchemaError

    try:
        jsonschema.validators.validator_for(parameters).check_schema(parameters)
    except SchemaError as exc:
        return _clip(f"is not a valid JSON Schema: {exc.message}")
    except RecursionError:
        return "is nested too deeply"
    problem = in_place_ref_problem(parameters)
    if problem is not None:
        return f"loops: {problem}"
    from spearpy.chat.patterns import pattern_problem

    return pattern_problem(parameters)


def _parameters(spec: JSONDict) -> JSONDict | None:
    function = spec.get("function")
    parameters = function.get("parameters") if isinstance(function, dict) else None
    return parameters if isinstance(parameters, dict) else None


def _build_check(spec: JSONDict) -> Check | None:
    parameters = _parameters(spec)
    return compile_check(parameters) if parameters is not None else None


def _build_validator(spec: JSONDict) -> Validator | None:
    parameters = _parameters(spec)
    if parameters is None:
        return None
    import jsonschema.validators

    cls = _bounded_patterns(jsonschema.validators.validator_for(parameters))
    return cls(parameters, registry=_no_remote_refs())


@functools.cache
def _bounded_patterns(cls: type[Validator]) -> type[Validator]:
    """The draft's validator with its regular expressions run by
    chat/patterns.py (GIL released, time-bounded) instead of `re`."""
    import jsonschema.validators

    from spearpy.chat.patterns import additional_properties, pattern, pattern_properties

    keywords = {"pattern": pattern, "patternProperties": pattern_properties}
    base = cls.VALIDATORS.get("additionalProperties")
    if base is not None:
        keywords["additionalProperties"] = additional_properties(base)
    extend = cast("Callable[..., type[Validator]]", jsonschema.validators.extend)
    return extend(cls, keywords)


class ToolRegistry:
    """Tools of one chat session: the guest's own, in registration order, then
    the groups a host source attaches for a send (MCP servers' tools).

    A guest tool's name is never shadowed: an attached tool with the same
    name is left out (and reported by `attach`)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._groups: dict[str, tuple[list[Tool], dict[str, str]]] = {}
        self._attached: dict[str, Tool] = {}
        self._aliases: dict[str, str] = {}
        self._specs: list[JSONDict] | None = None
        self._by_name: dict[str, Tool] | None = None

    def add(self, name: str, ref: Any, spec: JSONDict,
            source: ToolSource | None = None) -> Tool:
        """Register a guest tool; `spec` is the wrapped form from parse_tool_schema."""
        if name in self._tools:
            raise RegistryError(abi.EEXIST, f"tool {name!r} is already registered")
        tool = Tool(name=name, ref=ref, spec=spec, source=source,
                    validator=_build_validator(spec), check=_build_check(spec))
        self._tools[name] = tool
        self._specs = self._by_name = None
        return tool

    def attach(self, group: str, tools: list[Tool],
               aliases: dict[str, str] | None = None) -> list[str]:
        """Replace the tools of `group` (offered for the next send); `aliases`
        maps other names a model may use to a tool's name. Returns the names
        left out because a guest tool has them."""
        clashes = [tool.name for tool in tools if tool.name in self._tools]
        kept = [tool for tool in tools if tool.name not in self._tools]
        self._groups[group] = (kept, dict(aliases or {}))
        self._attached = {tool.name: tool for kept_tools, _ in self._groups.values()
                          for tool in kept_tools}
        self._aliases = {alias: name for _, group_aliases in self._groups.values()
                         for alias, name in group_aliases.items() if name in self._attached}
        self._specs = self._by_name = None
        return clashes

    @staticmethod
    def build(name: str, ref: Any, spec: JSONDict, source: ToolSource,
              approval: str = "allow", origin: str | None = None) -> Tool:
        """A tool for `attach`, with its argument checks compiled."""
        return Tool(name=name, ref=ref, spec=spec, source=source, approval=approval,
                    origin=origin, validator=_build_validator(spec),
                    check=_build_check(spec))

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if tool is None and self._attached:
            tool = self._attached.get(self._aliases.get(name, name))
        return tool

    def by_name(self) -> dict[str, Tool]:
        """Every name `get` answers, with the tool it gives: one dict lookup
        per call for a send, which takes it once. Shared; do not mutate it."""
        if self._by_name is None:
            table = dict(self._attached)
            table.update((alias, self._attached[name]) for alias, name in self._aliases.items())
            table.update(self._tools)
            self._by_name = table
        return self._by_name

    def specs(self) -> list[JSONDict] | None:
        """The `tools` array for upstream, or None when no tool is offered.

        The list is shared between sends; callers must not mutate it.
        """
        if not self._tools and not self._attached:
            return None
        if self._specs is None:
            self._specs = [tool.spec for tool in self._tools.values()]
            self._specs += [tool.spec for tool in self._attached.values()]
        return self._specs

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        """Whether the guest registered `name` (attached tools do not count)."""
        return name in self._tools
