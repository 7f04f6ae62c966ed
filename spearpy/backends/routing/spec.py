"""The routing tables of the config file, validated when the host starts.

```toml
[models]                                   # aliases, applied before routes
"gpt-4o-mini" = "local"                    # backend local, with local's model
"gpt-4o" = { backend = "local", model = "qwen2.5:7b" }

[[routes]]                                 # matching locked routes decide, else the first match
name = "private"
match = { content = ["password", "(?i)\\bssn\\b"] }
to = ["local"]
lock = true

[circuit_breaker]                          # optional; these are the defaults
failures = 3                               # consecutive failures that open a circuit
cooldown = 30                              # seconds before a trial request is let through

[routing]                                  # optional
unknown_model = "default"                  # or "refuse": a model no alias or route names
                                           # gets no_candidate_backend (SPEAR's binding)
```

Whether `to` and alias backends exist is checked by the catalog, which knows
the backends the flags add to the file's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spearpy.errors import ConfigError

POLICIES = ("priority", "round_robin", "weighted", "least_inflight", "ewma_latency")
Policy = Literal["priority", "round_robin", "weighted", "least_inflight", "ewma_latency"]
ROUTE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")


def _listed(value: object) -> object:
    # `content = "password"` is as natural to write as a list of one.
    return [value] if isinstance(value, str) else value


class MatchSpec(BaseModel):
    """What a completion must look like for a route to take it. Every key
    given must hold; within a key, any entry may."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: list[str] = Field(default_factory=list)  # regexes over user and tool text
    model: list[str] = Field(default_factory=list)  # globs over the model (after aliases)
    backend: list[str] = Field(default_factory=list)  # globs over the guest's `backend` param
    tools: bool | None = None  # whether the request offers tools

    @field_validator("content", "model", "backend", mode="before")
    @classmethod
    def _as_list(cls, value: object) -> object:
        return _listed(value)

    @field_validator("content")
    @classmethod
    def _regexes_compile(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"entry {index} {pattern!r} is not a valid regex: {exc}") \
                    from None
        return patterns


class RouteSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    match: MatchSpec = Field(default_factory=MatchSpec)
    to: list[str]
    # A completion that matches never leaves `to`: not by the guest's model,
    # alias or `backend` param, not by an earlier route, not by fallback.
    lock: bool = False
    policy: Policy = "priority"
    weights: list[float] | None = None  # one per `to` entry; policy weighted reads them
    # Sent to this route's backends instead of the guest's model (which the
    # backend a route moved the completion to may not serve).
    model: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not ROUTE_NAME.match(value):
            raise ValueError(f"{value!r} must match {ROUTE_NAME.pattern}")
        return value

    @field_validator("to", mode="before")
    @classmethod
    def _to(cls, value: object) -> object:
        value = _listed(value)
        if isinstance(value, list) and not value:
            raise ValueError("must name at least one backend")
        return value

    @model_validator(mode="after")
    def _weights(self) -> RouteSpec:
        if len(set(self.to)) != len(self.to):
            raise ValueError(f"to: a backend is listed twice in {self.to}")
        # Checked whatever the policy (only `weighted` reads them): the issue's
        # own example keeps `weights` beside `policy = "priority"`.
        if self.weights is None:
            return self
        if len(self.weights) != len(self.to) or any(w <= 0 for w in self.weights):
            raise ValueError(f"weights: need {len(self.to)} positive numbers, one per `to` "
                             f"entry; got {self.weights}")
        return self


class AliasSpec(BaseModel):
    """A model name the guest asks for, remapped to a backend (and model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    model: str | None = None  # None: the backend's own model

    @classmethod
    def parse(cls, value: object) -> AliasSpec:
        """From `"BACKEND"`, `"BACKEND:MODEL"` (model names may hold colons;
        backend names cannot) or `{backend = ..., model = ...}`."""
        if isinstance(value, str):
            backend, _, model = value.partition(":")
            value = {"backend": backend, "model": model or None}
        spec = cls.model_validate(value)
        if not spec.backend:
            raise ValueError("names no backend (write BACKEND or BACKEND:MODEL)")
        return spec


class BreakerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    failures: int = Field(3, ge=1, le=1000)
    cooldown: float = Field(30.0, gt=0, le=86400)


class UnmatchedSpec(BaseModel):
    """The `[routing]` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # "refuse": a model the guest names that no alias and no route's `model`
    # glob takes is refused (SPEAR binds models to backends), instead of
    # going to the default backend.
    unknown_model: Literal["default", "refuse"] = "default"


@dataclass(frozen=True, slots=True)
class RoutingSpec:
    aliases: Mapping[str, AliasSpec] = field(default_factory=dict)
    routes: tuple[RouteSpec, ...] = ()
    breaker: BreakerSpec = field(default_factory=BreakerSpec)
    refuse_unknown_models: bool = False

    @property
    def active(self) -> bool:
        """False: the host routes exactly as it did before routing existed."""
        return bool(self.aliases or self.routes or self.refuse_unknown_models)

    def known_models(self) -> list[str]:
        """The model names aliases and routes take (globs as written)."""
        names = {*self.aliases, *(m for r in self.routes for m in r.match.model)}
        return sorted(names)

    def with_aliases(self, aliases: Mapping[str, AliasSpec]) -> RoutingSpec:
        """Aliases from flags or Host arguments, over the file's of the same name."""
        return replace(self, aliases={**self.aliases, **aliases}) if aliases else self

    def check_backends(self, known: set[str] | list[str], where: str) -> None:
        """ConfigError naming the alias or route that names an unknown backend."""
        names = ", ".join(sorted(known)) or "none"
        for model, alias in self.aliases.items():
            if alias.backend not in known:
                raise ConfigError(f"{where}: [models] {model!r}: backend {alias.backend!r} is "
                                  f"not configured (configured: {names})")
        for index, route in enumerate(self.routes):
            for target in route.to:
                if target not in known:
                    raise ConfigError(f"{where}: {_route_label(index, route.name)}: to: "
                                      f"backend {target!r} is not configured (configured: "
                                      f"{names})")


def parse_routing(raw: Mapping[str, object], where: str) -> RoutingSpec:
    """The routing tables of a parsed TOML document (ConfigError naming the key)."""
    aliases = parse_aliases(raw.get("models", {}), f"{where}: [models]")
    routes_raw = raw.get("routes", [])
    if not isinstance(routes_raw, list) or not all(isinstance(r, dict) for r in routes_raw):
        raise ConfigError(f"{where}: `routes` must be an array of [[routes]] tables")
    routes: list[RouteSpec] = []
    for index, table in enumerate(routes_raw):
        label = _route_label(index, table.get("name"))
        try:
            route = RouteSpec.model_validate(table)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {label}: {first_error(exc)}") from None
        if any(r.name == route.name for r in routes):
            raise ConfigError(f"{where}: {label}: name {route.name!r} is used by an earlier "
                              "route")
        routes.append(route)
    breaker = _table_of(BreakerSpec, raw, "circuit_breaker", where)
    unmatched = _table_of(UnmatchedSpec, raw, "routing", where)
    return RoutingSpec(aliases, tuple(routes), breaker,
                       unmatched.unknown_model == "refuse")


_M = TypeVar("_M", bound=BaseModel)


def _table_of(model: type[_M], raw: Mapping[str, object], key: str, where: str) -> _M:
    """The `[key]` table as `model`; ConfigError naming the table and key."""
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: `{key}` must be a table")
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        raise ConfigError(f"{where}: [{key}]: {first_error(exc)}") from None


def parse_aliases(raw: object, where: str) -> dict[str, AliasSpec]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table of model = backend entries")
    aliases: dict[str, AliasSpec] = {}
    for model, value in raw.items():
        if not model:
            raise ConfigError(f"{where}: an alias needs a model name")
        try:
            aliases[model] = AliasSpec.parse(value)
        except ValidationError as exc:
            raise ConfigError(f"{where} {model!r}: {first_error(exc)}") from None
        except ValueError as exc:
            raise ConfigError(f"{where} {model!r}: {exc}") from None
    return aliases


def parse_alias_flag(text: str) -> tuple[str, AliasSpec]:
    """`NAME=BACKEND[:MODEL]` (the --model-alias flag); ValueError saying why not."""
    model, sep, target = text.partition("=")
    if not sep or not model or not target:
        raise ValueError(f"{text!r} is not NAME=BACKEND[:MODEL]")
    try:
        return model, AliasSpec.parse(target)
    except ValidationError as exc:
        raise ValueError(f"{text!r}: {first_error(exc)}") from None


def aliases_from_flags(texts: Iterable[str]) -> dict[str, str]:
    """Repeated `--model-alias NAME=BACKEND[:MODEL]`, checked, as
    HostConfig.model_aliases holds them; ValueError naming the bad one."""
    aliases: dict[str, str] = {}
    for text in texts:
        model, alias = parse_alias_flag(text)
        aliases[model] = alias.backend + (f":{alias.model}" if alias.model else "")
    return aliases


def _route_label(index: int, name: object) -> str:
    shown = f" ({name!r})" if isinstance(name, str) else ""
    return f"[[routes]] #{index + 1}{shown}"


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"{loc}: {message}" if loc else message  # a check across keys names its own
