"""Which backends a host offers, which one is the default, and building them.

Sources, merged once when the Host starts:
- the TOML config file's `[backends.NAME]` tables and its `default`;
- the flags / environment (`--backend`, `--base-url`, `--api-key-env`,
  `--model`, `--quirks`, ...), which describe one more backend named after its
  kind (`openai`, `anthropic`, `scripted`) and make it the default; `--backend
  NAME` instead picks a configured backend as the default;
- `--backend replay:FILE` replaces all of that with the backends recorded in
  the cassette, each replaying its exchanges;
- `--record FILE` wraps every backend built so its exchanges land in FILE;
- the file's `[models]` aliases (and `--model-alias`, HostConfig.model_aliases,
  over them), `[[routes]]` and `[circuit_breaker]`: `routing`, checked here
  against the backends above (a whole-host replay holds only the backends its
  run used, so there the router skips the others instead).

Backends are built lazily (a scripted one starts a server), once per name;
so are their modules: a host whose guests never send imports no httpx. What
can be checked without building them is checked when the host starts (base
URLs, script and cassette files): a bad one is a BackendSpecError naming it,
not an unrelated error body at the guest's first send.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from spearpy.backends.routing.spec import (
    AliasSpec,
    MatchSpec,
    RouteSpec,
    RoutingSpec,
    first_error,
)
from spearpy.backends.specs import BackendSpec, HostDefaults, backend_tables
from spearpy.config import url_problem
from spearpy.config_file import ConfigFile, read_config_file
from spearpy.errors import ConfigError
from spearpy.secret_env import REALTIME_KEY_ENV

if TYPE_CHECKING:
    import httpx

    from spearpy.backends.cassette import CassetteWriter
    from spearpy.backends.factory import BuiltBackend
    from spearpy.backends.httpbackend import TransportWrapper
    from spearpy.backends.replay import ReplayCursor
    from spearpy.backends.router import Lookup, Router
    from spearpy.config import HostConfig

_SPEC_HELP = ("use openai, anthropic, ollama, stub, scripted:FILE, replay:FILE or a configured "
              "backend name")


class BackendSpecError(ConfigError, ValueError):
    """A configured backend cannot work (bad base URL, unreadable or invalid
    script or cassette), found when the host starts. A ValueError too, like
    HostConfig's own validation errors, for embedders building a Host."""


class BackendCatalog:
    def __init__(self, specs: dict[str, BackendSpec], default: str, defaults: HostDefaults,
                 *, record: str | None = None, replay: ReplayCursor | None = None,
                 routing: RoutingSpec | None = None) -> None:
        if default not in specs:
            raise ConfigError(f"the default backend {default!r} is not configured")
        self.specs = dict(specs)
        self.default = default
        self.defaults = defaults
        self.replay = replay  # set when the whole host replays one cassette
        self.routing = routing or RoutingSpec()  # not `active`: no router at all
        self.writer: CassetteWriter | None = None
        if record:
            from spearpy.backends.cassette import CassetteWriter

            self.writer = CassetteWriter(record)
        self._cursors: dict[str, ReplayCursor] = {}
        if self.writer is not None:
            self.writer.set_default(default)
        # What the config file holds that is not used (a SPEAR config's), and
        # the variables its realtime backends read keys from.
        self.notes: tuple[str, ...] = ()
        self.realtime_key_envs: list[str] = []

    @classmethod
    def from_config(cls, config: HostConfig, *, discover: bool = True) -> BackendCatalog:
        """The catalog the configuration describes. `discover=False`: without
        asking Ollama for its models (a check of the configured backends, as
        the CLI makes before its Host asks)."""
        defaults = HostDefaults(config.model, config.request_timeout, config.max_retries)
        record = str(config.record) if config.record is not None else None
        resolved = _resolve(config, discover=discover)
        catalog = cls(resolved.specs, resolved.default, defaults, record=record,
                      replay=resolved.cursor, routing=resolved.routing)
        file = resolved.file
        catalog.notes = file.notes
        if file.table("realtime"):  # else nothing of ASR is imported: most runs use none
            from spearpy.backends.realtime import realtime_key_envs

            catalog.realtime_key_envs = realtime_key_envs(file)
        else:
            catalog.realtime_key_envs = [REALTIME_KEY_ENV]
        return catalog

    @property
    def names(self) -> list[str]:
        return sorted(self.specs)

    def resolve(self, name: str) -> str | None:
        """The canonical name for a session's `backend` param ("" = the default)."""
        if not name:
            return self.default
        return name if name in self.specs else None

    def unknown(self, name: str) -> str:
        return f"unknown backend {name!r}; configured backends: {', '.join(self.names)}"

    def default_model(self, name: str) -> str | None:
        """The model a backend uses when the guest sets none, read from its
        spec (nothing is built): for aliases and `spearpy routes explain`."""
        spec = self.specs.get(name)
        if spec is None:
            return None
        if spec.kind == "replay" and self.replay is not None:
            recorded = self.replay.data["backends"].get(name, {})
            model = recorded.get("model") if isinstance(recorded, dict) else None
            return model if isinstance(model, str) and model else None
        return spec.model or self.defaults.model or ("scripted" if spec.kind == "scripted"
                                                     else None)

    def router(self, lookup: Lookup) -> Router | None:
        """The host's router over `lookup` (the host's backends by name), or
        None when nothing is routed: no aliases and no routes."""
        if not self.routing.active:
            return None
        from spearpy.backends.router import Router

        replaying = self.replay is not None
        return Router(self.routing, self.default, lookup, self.default_model,
                      known=self.specs.__contains__ if replaying else None,
                      follow=self.next_recorded if replaying else None)

    def next_recorded(self) -> str | None:
        """The backend of the next exchange a whole-host replay will serve."""
        cursor = self.replay
        if cursor is None:
            return None
        index = cursor.served
        exchanges = cursor.exchanges
        return str(exchanges[index]["backend"]) if index < len(exchanges) else None

    def build(self, name: str) -> BuiltBackend:
        spec = self.specs[name]
        wrap = self._recording_wrapper(name)
        backend: BuiltBackend
        if spec.kind == "replay":
            backend = self._build_replay(name, spec, wrap)
        else:
            from spearpy.backends.factory import build_from_spec

            backend = build_from_spec(name, spec, self.defaults, wrap)
        if self.writer is not None:
            self.writer.add_backend(name, backend.describe())
        return backend

    def _build_replay(self, name: str, spec: BackendSpec,
                      wrap: TransportWrapper | None) -> BuiltBackend:
        from spearpy.backends.replay import ReplayCursor, replay_backend

        if self.replay is not None:
            if name not in self.replay.data["backends"]:
                raise ConfigError(f"the cassette {self.replay.path!r} holds no exchange of "
                                  f"backend {name!r}: the recorded run never used it")
            return replay_backend(self.replay, name, wrap=wrap)
        # A configured replay backend serves its cassette's exchanges in order,
        # as the backend recorded there, under its configured name.
        cursor = self._cursors.get(name)
        if cursor is None:
            assert spec.cassette is not None  # BackendSpec.problem() guarantees it
            cursor = self._cursors[name] = ReplayCursor(spec.cassette)
        recorded = cursor.data.get("default") or next(iter(cursor.data["backends"]), None)
        if recorded is None:
            raise ConfigError(f"backend {name!r}: the cassette {cursor.path!r} recorded no "
                              "backend")
        return replay_backend(cursor, recorded, name, strict_backend=False, wrap=wrap)

    def _recording_wrapper(self, name: str) -> TransportWrapper | None:
        writer = self.writer
        if writer is None:
            return None

        def wrap(inner: httpx.BaseTransport) -> httpx.BaseTransport:
            from spearpy.backends.record import RecordingTransport

            return RecordingTransport(inner, writer, name)

        return wrap

    def key_envs(self) -> list[str]:
        """Names of the env vars holding API keys of the configured backends
        (for log redaction); a replay reads none."""
        if self.replay is not None:
            return []
        return sorted({*(env for s in self.specs.values() if (env := s.key_env())),
                       *self.realtime_key_envs})

    def replay_mismatch(self) -> str | None:
        """The first divergence any replay of this catalog hit, if one did."""
        cursors = [self.replay] if self.replay is not None else list(self._cursors.values())
        return next((c.mismatch for c in cursors if c is not None and c.mismatch), None)


def check_config(config: HostConfig) -> None:
    """Raise what `from_config` would, without its side effects (a --record
    cassette is not written): for commands that build their hosts later, in
    other processes (`spearpy batch`). Ollama discovery's settings are
    checked but Ollama is not asked: its trouble never raises, and each
    host asks it when it starts."""
    _resolve(config, discover=False)


@dataclass(slots=True)
class _Resolved:
    specs: dict[str, BackendSpec]
    default: str
    file: ConfigFile  # the config file the backends came from
    cursor: ReplayCursor | None = None  # a whole-host replay's
    routing: RoutingSpec = field(default_factory=RoutingSpec)


def _resolve(config: HostConfig, *, discover: bool = True) -> _Resolved:
    """The backends by name, the default's name, the cursor of a whole-host
    replay and the routing, every spec checked (`discover`: Ollama's models
    among them, else its settings checked only)."""
    chosen = config.backend
    file = read_config_file(config.config_file)
    loaded = backend_tables(file)  # a replay routes as the recorded run did
    file_label = file.label
    if chosen is not None and chosen.startswith("replay:"):
        from spearpy.backends.replay import ReplayCursor

        try:
            cursor = ReplayCursor(chosen.removeprefix("replay:"))
        except ConfigError as exc:
            raise BackendSpecError(f"backend {chosen!r} (--backend, SPEARPY_BACKEND): {exc}") \
                from None
        default = cursor.data.get("default") or next(iter(cursor.data["backends"]), "replay")
        names = {*cursor.data["backends"], default}
        routing = loaded.routing.with_aliases(_flag_aliases(config, None))
        return _Resolved({n: BackendSpec(kind="replay", cassette=cursor.path) for n in names},
                         default, file, cursor, routing)
    specs, default = loaded.specs, loaded.default
    where = {name: f"{file_label}: [backends.{name}]" for name in specs}
    if chosen is not None and chosen in specs:
        default = chosen
    elif chosen is not None:
        kind, _, arg = chosen.partition(":")
        specs[kind] = _flag_spec(config, kind, arg)
        where[kind] = f"backend {chosen!r} (--backend, SPEARPY_BACKEND)"
        default = kind
    elif default is None:
        if "openai" not in specs:
            specs["openai"] = _flag_spec(config, "openai", "")
            where["openai"] = "--base-url / OPENAI_BASE_URL"
        default = "openai"
    discovered = _discovered(file.table("discovery"), specs, where, file_label,
                             {route.name for route in loaded.routing.routes}, discover)
    for name, spec in specs.items():
        _check_spec(spec, where[name])
    routing = replace(loaded.routing, routes=(*loaded.routing.routes, *discovered)) \
        if discovered else loaded.routing
    routing.check_backends(set(specs), file_label)
    if file.table("realtime"):
        from spearpy.backends.realtime import realtime_specs

        realtime_specs(file)  # checked now: a bad one fails the host, not an rtasr connect
    routing = routing.with_aliases(_flag_aliases(config, set(specs)))
    return _Resolved(specs, default, file, None, routing)


def _discovered(tables: dict[str, Any], specs: dict[str, BackendSpec], where: dict[str, str],
                file_label: str, taken: set[str], ask: bool = True) -> list[RouteSpec]:
    """The models a local Ollama serves or has installed, as backends (SPEAR's
    discovery, read again whenever a catalog is built: at a Host's start and
    by `spearpy routes explain`), each with a route binding its model to it.
    An unreachable Ollama gives none, with a warning (ollama_discovery.py);
    not `ask`: the settings are checked, Ollama is not asked."""
    table = tables.get("ollama")
    if not table or not table.get("enabled"):
        return []
    from spearpy.backends.ollama_discovery import OllamaDiscovery, discover

    try:
        settings = OllamaDiscovery.model_validate(table)
    except ValidationError as exc:
        raise ConfigError(f"{file_label}: [spearlet.llm.discovery.ollama]: "
                          f"{first_error(exc)}") from None
    if not ask:
        return []
    routes = []
    for found in discover(settings, taken=set(specs)):
        specs[found.name] = found.spec
        where[found.name] = f"{file_label}: Ollama discovery ({settings.base_url})"
        model = found.spec.model or ""
        route = "discovered-" + re.sub(r"[^A-Za-z0-9_.-]", "_", found.name)[:50]
        if route in taken:
            continue
        taken.add(route)
        routes.append(RouteSpec(name=route, match=MatchSpec(model=[glob.escape(model)]),
                                to=[found.name], weights=[float(found.weight)]))
    return routes


def _flag_aliases(config: HostConfig, known: set[str] | None) -> dict[str, AliasSpec]:
    """HostConfig.model_aliases (`--model-alias NAME=BACKEND[:MODEL]`), each
    naming a backend in `known` (None: not checked)."""
    aliases: dict[str, AliasSpec] = {}
    for model, target in config.model_aliases.items():
        where = f"model alias {model}={target} (--model-alias, SPEARPY_MODEL_ALIASES)"
        try:
            alias = AliasSpec.parse(target)
        except ValidationError as exc:
            raise BackendSpecError(f"{where}: {first_error(exc)}") from None
        except ValueError as exc:
            raise BackendSpecError(f"{where}: {exc}") from None
        if known is not None and alias.backend not in known:
            raise BackendSpecError(f"{where}: backend {alias.backend!r} is not configured "
                                   f"(configured: {', '.join(sorted(known))})")
        aliases[model] = alias
    return aliases


def _check_spec(spec: BackendSpec, where: str) -> None:
    if spec.base_url is not None and (problem := url_problem(spec.base_url)) is not None:
        raise BackendSpecError(f"{where}: base_url {spec.base_url!r}: {problem}")
    if spec.kind == "scripted" and spec.script is not None:
        from spearpy.backends.scripted.script import Script

        try:
            Script.load(spec.script)
        except (OSError, ValueError) as exc:
            raise BackendSpecError(f"{where}: cannot load the scripted model: {exc}") from None
    if spec.kind == "replay" and spec.cassette is not None and not os.path.isfile(spec.cassette):
        raise BackendSpecError(f"{where}: the cassette file {str(spec.cassette)!r} does not "
                               "exist")


def _flag_spec(config: HostConfig, kind: str, arg: str) -> BackendSpec:
    """The backend the flags and environment describe."""
    try:
        return _flag_spec_unchecked(config, kind, arg)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"--quirks / SPEARPY_QUIRKS: {message}") from None


def _flag_spec_unchecked(config: HostConfig, kind: str, arg: str) -> BackendSpec:
    given = config.model_fields_set
    if kind == "scripted" and arg:
        return BackendSpec(kind="scripted", script=arg, quirks=config.quirks)
    if kind == "scripted":
        raise BackendSpecError(f"backend {config.backend!r} (--backend, SPEARPY_BACKEND): "
                               "needs its script file: scripted:FILE")
    if kind == "stub" and not arg:
        return BackendSpec(kind="stub")
    if kind in ("openai", "anthropic", "ollama") and not arg:
        return BackendSpec(
            kind=kind,
            base_url=config.base_url if "base_url" in given else None,
            api_key_env=config.api_key_env if "api_key_env" in given else None,
            quirks=config.quirks,
        )
    raise ConfigError(f"unknown backend {config.backend!r}: {_SPEC_HELP}")
