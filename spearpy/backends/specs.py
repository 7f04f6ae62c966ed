"""Named backends: the `[backends.NAME]` tables and `default` of the config
file (spearpy/config_file.py reads the file; this module owns these tables).

```toml
default = "local"                 # optional: the backend a session gets when it names none

[backends.local]
kind = "openai"                   # openai | anthropic | ollama | stub | scripted | replay
base_url = "http://127.0.0.1:11434/v1"
api_key_env = ""                  # name of the env var holding the key; "" = send none
model = "qwen2.5:7b"
quirks = "ollama"                 # none | ollama | llamacpp | vllm | mistral
request_timeout = 300
max_retries = 1

[backends.claude]
kind = "anthropic"
model = "claude-sonnet-4-5"
max_tokens = 8192
```

Routing across these backends (`[models]` aliases, `[[routes]]`,
`[circuit_breaker]`) is parsed by spearpy.backends.routing.spec; the `[mcp]`
table belongs to spearpy.mcp.

The whole file is validated when the host starts, so a typo fails at once
with the offending key named, not at the guest's first send.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from spearpy.backends.quirks import PROFILES, quirk_profile
from spearpy.backends.routing.spec import RoutingSpec, first_error, parse_routing
from spearpy.config_file import ConfigFile, read_config_file
from spearpy.errors import ConfigError
from spearpy.secret_env import ANTHROPIC_KEY_ENV, OPENAI_KEY_ENV

Kind = Literal["openai", "anthropic", "ollama", "stub", "scripted", "replay"]
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
    "ollama": "http://127.0.0.1:11434",  # Ollama's root: the backend appends /api/chat
}
DEFAULT_KEY_ENVS: dict[str, str] = {"openai": OPENAI_KEY_ENV, "anthropic": ANTHROPIC_KEY_ENV}


class BackendSpec(BaseModel):
    """One named backend. None = take the host-wide value (flags / env)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    model: str | None = None
    request_timeout: float | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0, le=10)
    quirks: str = "none"
    max_tokens: int | None = Field(None, gt=0)  # anthropic: the required max_tokens
    anthropic_version: str | None = None
    script: Path | None = None  # scripted: the script file
    cassette: Path | None = None  # replay: the cassette file

    @field_validator("quirks")
    @classmethod
    def _known_quirks(cls, value: str) -> str:
        try:
            return quirk_profile(value).name
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def url(self) -> str:
        return self.base_url or DEFAULT_BASE_URLS.get(self.kind, DEFAULT_BASE_URLS["openai"])

    def key_env(self) -> str:
        if self.api_key_env is not None:
            return self.api_key_env
        return DEFAULT_KEY_ENVS.get(self.kind, "")

    def problem(self) -> str | None:
        if self.kind == "scripted" and self.script is None:
            return "kind 'scripted' needs `script` (the script file)"
        if self.kind == "replay" and self.cassette is None:
            return "kind 'replay' needs `cassette` (the cassette file)"
        return None


@dataclass(frozen=True, slots=True)
class HostDefaults:
    """Host-wide values a spec falls back to (here, not in factory.py, so the
    catalog can read specs without importing httpx and the backends)."""

    model: str | None = None
    request_timeout: float = 120.0
    max_retries: int = 2


@dataclass(frozen=True, slots=True)
class BackendTables:
    """What the config file says of backends: the specs, the default, the routing."""

    specs: dict[str, BackendSpec]
    default: str | None = None
    routing: RoutingSpec = field(default_factory=RoutingSpec)


def load_config(path: Path | None) -> BackendTables:
    """The backend tables of the file at `path` (or of the default file, when
    `path` is None and one is there)."""
    return backend_tables(read_config_file(path))


def backend_tables(file: ConfigFile) -> BackendTables:
    specs, default = backend_specs(file)
    return BackendTables(specs, default, parse_routing(file.raw, file.label))


def backend_specs(file: ConfigFile) -> tuple[dict[str, BackendSpec], str | None]:
    """(backends by name, the file's default), every spec checked."""
    where = file.label
    specs: dict[str, BackendSpec] = {}
    for name, table in file.table("backends").items():
        if not NAME.fullmatch(name):
            raise ConfigError(f"{where}: backend name {name!r} must match {NAME.pattern}")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: [backends.{name}] must be a table")
        try:
            spec = BackendSpec.model_validate(table)
        except ValidationError as exc:
            raise ConfigError(f"{where}: [backends.{name}]: {first_error(exc)}") from None
        problem = spec.problem()
        if problem is not None:
            raise ConfigError(f"{where}: [backends.{name}]: {problem}")
        specs[name] = _relative_to(spec, file.base_dir)
    default = file.default
    if default is not None and (not isinstance(default, str) or default not in specs):
        known = ", ".join(specs) or "none"
        raise ConfigError(f"{where}: default {default!r} is not a configured backend "
                          f"(configured: {known})")
    return specs, default


def _relative_to(spec: BackendSpec, base: Path) -> BackendSpec:
    # Script and cassette paths in a config file are relative to the file.
    update = {key: base / value for key, value in (("script", spec.script),
                                                   ("cassette", spec.cassette))
              if value is not None and not value.is_absolute()}
    return spec.model_copy(update=update) if update else spec


__all__ = ["PROFILES", "BackendSpec", "BackendTables", "HostDefaults", "backend_specs",
           "backend_tables", "load_config"]
