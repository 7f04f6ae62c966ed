"""Turns host configuration into a Backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy.backends.openai import OpenAIBackend
from spearpy.backends.retry import RetryPolicy
from spearpy.errors import ConfigError

if TYPE_CHECKING:
    from spearpy.backends.base import Backend
    from spearpy.config import HostConfig


class ScriptedBackend(OpenAIBackend):
    """The built-in offline model: a loopback spearpy.testing server answering
    from a script, reached over real HTTP so the whole upstream path runs."""

    def __init__(self, script_path: str, config: HostConfig) -> None:
        from spearpy.testing import Script, ScriptedServer

        try:
            script = Script.load(script_path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load the scripted model {script_path!r}: {exc}") from exc
        self._server = ScriptedServer(script)
        self._server.start()
        super().__init__(name="scripted", base_url=self._server.base_url,
                         api_key_env="",  # the loopback model needs no key: never send it
                         default_model=config.model or "scripted",
                         request_timeout=config.request_timeout,
                         retry=RetryPolicy(max_retries=config.max_retries))

    @property
    def server(self) -> object:
        return self._server

    def close(self) -> None:
        super().close()
        self._server.stop()


def build_backend(config: HostConfig) -> Backend:
    spec = config.backend
    if spec is None or spec == "openai":
        return OpenAIBackend(base_url=config.base_url, api_key_env=config.api_key_env,
                             default_model=config.model, request_timeout=config.request_timeout,
                             retry=RetryPolicy(max_retries=config.max_retries))
    kind, _, arg = spec.partition(":")
    if kind == "scripted" and arg:
        return ScriptedBackend(arg, config)
    raise ConfigError(f"unknown backend {spec!r}: use `openai` or `scripted:FILE`")
