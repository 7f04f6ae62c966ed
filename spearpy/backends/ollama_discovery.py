"""Ollama discovery (SPEAR's `[spearlet.llm.discovery.ollama]`): the models a
local Ollama serves (`/api/ps`) or has installed (`/api/tags`), each offered
as a backend of kind `ollama` bound to that model.

```toml
[spearlet.llm.discovery.ollama]
enabled = true
scope = "serving"                  # serving (/api/ps) | installed (/api/tags)
base_url = "http://127.0.0.1:11434"
allow_remote = false               # a non-loopback base_url is refused unless true
timeout_ms = 1500                  # the whole exchange, not each read
max_models = 32
allow_models = []                  # exact names; empty = all
deny_models = []
name_prefix = "ollama/"
name_conflict = "skip"             # skip | overwrite
default_weight = 100
default_priority = 0
default_ops = ["chat_completions"]
default_features = []
default_transports = ["http"]
```

What Ollama answers is untrusted: the answer is read up to MAX_ANSWER_BYTES
within `timeout_ms`, model names must be short printable strings, and any
failure (Ollama not running, an error status, an answer that is not the
documented JSON) is a warning naming the URL and the reason, with no models:
a machine without Ollama still starts. Redirects are not followed and proxy
variables are not used, so the only host asked is the one configured.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spearpy import _json
from spearpy.backends.bounded_get import AnswerRefused, bounded_get
from spearpy.backends.specs import BackendSpec
from spearpy.loopback import is_loopback

log = logging.getLogger("spearpy.ollama")

# /api/tags of a machine with a hundred models is ~50 KiB.
MAX_ANSWER_BYTES = 4 << 20
MAX_MODEL_NAME_LEN = 256
_ENDPOINTS = {"serving": "/api/ps", "installed": "/api/tags"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_./-]")
_PRINTABLE = re.compile(r"[\x21-\x7e]+")


class OllamaDiscovery(BaseModel):
    """The discovery table, SPEAR's keys and defaults (off unless `enabled`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    scope: Literal["serving", "installed"] = "serving"
    base_url: str = "http://127.0.0.1:11434"
    allow_remote: bool = False
    timeout_ms: int = Field(1500, gt=0, le=600_000)
    max_models: int = Field(32, ge=0, le=4096)
    allow_models: list[str] = Field(default_factory=list)
    deny_models: list[str] = Field(default_factory=list)
    name_prefix: str = "ollama/"
    name_conflict: Literal["skip", "overwrite"] = "skip"
    default_weight: int = Field(100, ge=0)
    default_priority: int = 0
    default_ops: list[str] = Field(default_factory=lambda: ["chat_completions"])
    default_features: list[str] = Field(default_factory=list)
    default_transports: list[str] = Field(default_factory=lambda: ["http"])

    @model_validator(mode="after")
    def _safe_base_url(self) -> OllamaDiscovery:
        if self.enabled:
            problem = base_url_problem(self.base_url, self.allow_remote)
            if problem is not None:
                raise ValueError(problem)
        return self


@dataclass(frozen=True, slots=True)
class DiscoveredBackend:
    """One model Ollama offered, as a backend, with SPEAR's routing defaults."""

    name: str
    spec: BackendSpec  # kind ollama, the discovery's base_url, the model bound
    weight: int
    priority: int
    ops: tuple[str, ...]
    features: tuple[str, ...]
    transports: tuple[str, ...]


def discover(settings: OllamaDiscovery, taken: Collection[str] = ()) -> list[DiscoveredBackend]:
    """The backends Ollama's models make, asked once, now.

    `taken`: the names of backends configured otherwise. With `name_conflict
    = "skip"` a discovered backend of such a name is left out (the configured
    one stays); with `"overwrite"` it is returned and the caller puts it in
    the configured one's place. Names are `name_prefix` + the model with each
    character outside `[A-Za-z0-9_./-]` made `_` (as SPEAR does: `ollama/` +
    `llama3:latest` is `ollama/llama3_latest`); the spec keeps the model's own
    name. Models are sorted, filtered by `allow_models` then `deny_models`,
    and the first `max_models` kept. Never raises for Ollama's trouble: an
    unreachable or misbehaving Ollama is a warning and no models. Disabled
    discovery asks nothing and returns [].
    """
    if not settings.enabled:
        return []
    url = settings.base_url.rstrip("/") + _ENDPOINTS[settings.scope]
    try:
        names = _model_names(_fetch(url, settings.timeout_ms / 1000.0))
    except _Unusable as exc:
        log.warning("spearpy: Ollama discovery at %s found no models: %s", url, exc)
        return []
    kept = _filtered(names, settings)
    found: list[DiscoveredBackend] = []
    seen: set[str] = set()
    for model in kept:
        name = settings.name_prefix + _UNSAFE.sub("_", model)
        if name in seen:
            log.warning("spearpy: Ollama discovery: model %r is named %r like another; "
                        "left out", model, name)
            continue
        seen.add(name)
        if name in taken and settings.name_conflict == "skip":
            log.info("spearpy: Ollama discovery: backend %r is configured already; the "
                     "configured one stays (name_conflict = skip)", name)
            continue
        spec = BackendSpec(kind="ollama", base_url=settings.base_url, model=model,
                           api_key_env="")
        found.append(DiscoveredBackend(
            name, spec, settings.default_weight, settings.default_priority,
            tuple(settings.default_ops), tuple(settings.default_features),
            tuple(settings.default_transports)))
    return found


def base_url_problem(base_url: str, allow_remote: bool) -> str | None:
    """Why discovery may not ask `base_url` (None: it may). Only loopback
    hosts unless `allow_remote`: a config that names another host makes
    spearpy send requests there, and read what comes back as backends."""
    import httpx

    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        return f"base_url {base_url!r} is not a URL: {exc}"
    if url.scheme not in ("http", "https") or not url.host:
        return f"base_url {base_url!r} must be an http:// or https:// URL with a host"
    if url.userinfo:
        return f"base_url {base_url!r} must not hold credentials"
    if not allow_remote and not is_loopback(url.host):
        return (f"base_url {base_url!r} is not a loopback address; discovery asks only this "
                "machine's Ollama unless `allow_remote = true` (a remote base_url lets the "
                "config send requests to any host)")
    return None


class _Unusable(Exception):
    """Ollama's answer gives no model list (the message says why)."""


def _fetch(url: str, timeout: float) -> bytes:
    import httpx

    try:
        with httpx.Client(follow_redirects=False, trust_env=False) as client:
            status, raw = bounded_get(client, url, headers={"Accept": "application/json"},
                                      timeout=timeout, max_bytes=MAX_ANSWER_BYTES)
    except AnswerRefused as exc:
        raise _Unusable(str(exc)) from None
    except httpx.HTTPError as exc:
        reason = (str(exc) or "no detail").splitlines()[0][:300]
        raise _Unusable(f"{type(exc).__name__}: {reason}") from None
    if status != 200:
        raise _Unusable(f"it answered HTTP {status}")
    return raw


def _model_names(raw: bytes) -> list[str]:
    try:
        body = _json.loads(raw)
    except (ValueError, RecursionError):
        raise _Unusable("its answer is not JSON") from None
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list):
        raise _Unusable('its answer has no "models" list')
    names: set[str] = set()
    for entry in models:
        name = (entry.get("name") or entry.get("model")) if isinstance(entry, dict) else None
        # A name becomes a backend name, a request's model and a log field.
        if isinstance(name, str) and len(name) <= MAX_MODEL_NAME_LEN \
                and _PRINTABLE.fullmatch(name):
            names.add(name)
    return sorted(names)


def _filtered(names: list[str], settings: OllamaDiscovery) -> list[str]:
    allow, deny = set(settings.allow_models), set(settings.deny_models)
    kept = [n for n in names if (not allow or n in allow) and n not in deny]
    return kept[:settings.max_models]
