"""Realtime transcription backends: the `[realtime.NAME]` tables of the config
file (spearpy/config_file.py reads it; a SPEAR config's `openai_realtime_ws`
backends land here too), and which one an rtasr fd connects to.

```toml
[realtime.openai-realtime-asr]
base_url = "https://api.openai.com/v1"   # http(s): the realtime URL is derived from it
# url = "wss://host/v1/realtime?intent=transcription"   # or the WebSocket URL itself
api_key_env = "OPENAI_API_KEY"           # "" sends no key; unset: the host's realtime key
model = "gpt-4o-mini-transcribe"         # when the guest sets none
```

An rtasr fd's `backend` param picks one of these by name; a guest never
gives a URL (the operator's key goes there). Without the param: the
operator's `--rtasr-url`, else the first table here, else the URL derived
from the OpenAI backend's base URL. With no tables the param is ignored, as
before backends could be named.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from spearpy.asr import protocol
from spearpy.config import url_problem
from spearpy.config_file import ConfigFile, read_config_file
from spearpy.errors import ConfigError
from spearpy.secret_env import REALTIME_KEY_ENV

if TYPE_CHECKING:
    from spearpy.config import HostConfig



class RealtimeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str | None = None
    url: str | None = None
    api_key_env: str | None = None
    model: str | None = None

    @model_validator(mode="after")
    def _one_url(self) -> RealtimeSpec:
        if self.url is not None and self.base_url is not None:
            raise ValueError("give `url` (ws:// or wss://) or `base_url` (http:// or "
                             "https://), not both")
        if self.url is not None and (problem := protocol.ws_url_problem(self.url)):
            raise ValueError(f"url: {problem}")
        if self.base_url is not None and (problem := url_problem(self.base_url)):
            raise ValueError(f"base_url: {problem}")
        return self

    def ws_url(self, fallback_base: str) -> str:
        if self.url is not None:
            return self.url
        return protocol.derive_url(self.base_url or fallback_base)


def realtime_specs(file: ConfigFile) -> dict[str, RealtimeSpec]:
    """The file's realtime backends, in order (the first is the default)."""
    specs: dict[str, RealtimeSpec] = {}
    for name, table in file.table("realtime").items():
        if not isinstance(table, dict):
            raise ConfigError(f"{file.label}: [realtime.{name}] must be a table")
        try:
            specs[name] = RealtimeSpec.model_validate(table)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            message = str(err["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"{file.label}: [realtime.{name}]: "
                              f"{f'{loc}: ' if loc else ''}{message}") from None
    return specs


@dataclass(frozen=True, slots=True)
class RealtimeTarget:
    url: str
    key_env: str  # "" sends no key
    model: str | None  # None: the protocol's default, unless the guest sets one


def realtime_target(config: HostConfig, name: object) -> RealtimeTarget | str:
    """Where an rtasr fd whose `backend` param is `name` connects, or why it
    cannot (an unknown name, when backends are configured)."""
    specs = realtime_specs(read_config_file(config.config_file))
    requested = name if isinstance(name, str) and name else None
    if requested is not None and specs:
        spec = specs.get(requested)
        if spec is None:
            return (f"unknown realtime backend {requested!r}; configured: "
                    f"{', '.join(specs)}")
        return _target(config, spec)
    if config.rtasr_url is not None or not specs:
        url = config.rtasr_url or protocol.derive_url(config.base_url)
        return RealtimeTarget(url, _host_key_env(config), None)
    return _target(config, next(iter(specs.values())))


def _target(config: HostConfig, spec: RealtimeSpec) -> RealtimeTarget:
    key_env = spec.api_key_env if spec.api_key_env is not None else _host_key_env(config)
    return RealtimeTarget(spec.ws_url(config.base_url), key_env, spec.model)


def _host_key_env(config: HostConfig) -> str:
    """--rtasr-api-key-env when given, else OPENAI_REALTIME_API_KEY when set,
    else the default (OPENAI_API_KEY)."""
    if "rtasr_api_key_env" not in config.model_fields_set and os.environ.get(REALTIME_KEY_ENV):
        return REALTIME_KEY_ENV
    return config.rtasr_api_key_env


def realtime_key_envs(file: ConfigFile) -> list[str]:
    """The variables realtime backends read keys from (for redaction)."""
    return sorted({REALTIME_KEY_ENV, *(s.api_key_env for s in realtime_specs(file).values()
                                       if s.api_key_env)})


__all__ = ["REALTIME_KEY_ENV", "RealtimeSpec", "RealtimeTarget", "realtime_key_envs",
           "realtime_specs", "realtime_target"]
