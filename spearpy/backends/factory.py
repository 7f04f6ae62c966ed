"""Turns one backend spec into a live Backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy.backends.anthropic import ANTHROPIC_VERSION, DEFAULT_MAX_TOKENS, AnthropicBackend
from spearpy.backends.httpbackend import HTTPBackend, TransportWrapper
from spearpy.backends.ollama import OllamaBackend
from spearpy.backends.openai import OpenAIBackend
from spearpy.backends.quirks import QuirkProfile
from spearpy.backends.specs import BackendSpec, HostDefaults
from spearpy.backends.stub import StubBackend
from spearpy.errors import ConfigError
from spearpy.retry import RetryPolicy

if TYPE_CHECKING:
    from spearpy.config import HostConfig

# What a spec builds: a backend over HTTP, or the stub, which has no network.
BuiltBackend = HTTPBackend | StubBackend


class ScriptedBackend(OpenAIBackend):
    """The built-in offline model: a loopback scripted server (backends/scripted) answering
    from a script, reached over real HTTP so the whole upstream path runs."""

    def __init__(self, script_path: str, config: HostConfig | HostDefaults, *,
                 name: str = "scripted", quirks: QuirkProfile | str | None = None,
                 wrap_transport: TransportWrapper | None = None) -> None:
        from spearpy.backends.scripted.script import Script
        from spearpy.backends.scripted.server import ScriptedServer

        try:
            script = Script.load(script_path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load the scripted model {script_path!r}: {exc}") from exc
        self._server = ScriptedServer(script)
        self._server.start()
        super().__init__(name=name, base_url=self._server.base_url,
                         api_key_env="",  # the loopback model needs no key: never send it
                         default_model=config.model or "scripted",
                         request_timeout=config.request_timeout,
                         retry=RetryPolicy(max_retries=config.max_retries),
                         quirks=quirks, wrap_transport=wrap_transport)

    @property
    def server(self) -> object:
        return self._server

    def close(self) -> None:
        super().close()
        self._server.stop()


def build_from_spec(name: str, spec: BackendSpec, defaults: HostDefaults,
                    wrap: TransportWrapper | None = None) -> BuiltBackend:
    """A backend of any kind but replay (which is the catalog's)."""
    timeout = spec.request_timeout or defaults.request_timeout
    retries = spec.max_retries if spec.max_retries is not None else defaults.max_retries
    model = spec.model or defaults.model
    if spec.kind == "stub":
        return StubBackend(name=name, default_model=model)
    if spec.kind == "scripted":
        assert spec.script is not None  # BackendSpec.problem() guarantees it
        return ScriptedBackend(str(spec.script), HostDefaults(model, timeout, retries),
                               name=name, quirks=spec.quirks, wrap_transport=wrap)
    if spec.kind == "anthropic":
        return AnthropicBackend(
            name=name, base_url=spec.url(), api_key_env=spec.key_env(), default_model=model,
            request_timeout=timeout, retry=RetryPolicy(max_retries=retries), quirks=spec.quirks,
            wrap_transport=wrap, max_tokens=spec.max_tokens or DEFAULT_MAX_TOKENS,
            anthropic_version=spec.anthropic_version or ANTHROPIC_VERSION,
        )  # fmt: skip
    if spec.kind in ("openai", "ollama"):
        dialect = OllamaBackend if spec.kind == "ollama" else OpenAIBackend
        return dialect(
            name=name, base_url=spec.url(), api_key_env=spec.key_env(), default_model=model,
            request_timeout=timeout, retry=RetryPolicy(max_retries=retries), quirks=spec.quirks,
            wrap_transport=wrap,
        )  # fmt: skip
    raise ConfigError(f"backend {name!r}: kind {spec.kind!r} cannot be built here")
