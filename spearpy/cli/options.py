"""Host options shared by every command that runs guests."""

from __future__ import annotations

import os
from typing import Any

import click
from pydantic import ValidationError

from spearpy.config import HostConfig
from spearpy.errors import ConfigError
from spearpy.host import Host

# Options shared by every command that runs guests; None = not given, so the
# environment (OPENAI_BASE_URL, SPEARPY_*) and the defaults apply.
_HOST_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--base-url", {"help": "OpenAI-compatible base URL [env OPENAI_BASE_URL]"}),
    ("--api-key-env", {"help": "name of the env var holding the API key [OPENAI_API_KEY]"}),
    ("--model", {"help": "model used when the guest sets none [env SPEARPY_MODEL]"}),
    ("--backend", {"help": "a configured backend name, `openai`, `anthropic`, `scripted:FILE` "
                           "(built-in offline model) or `replay:FILE` (a recorded run)"}),
    ("--config", {"type": click.Path(dir_okay=False), "help": "TOML file of named backends "
                  "[env SPEARPY_CONFIG; ~/.config/spearpy/config.toml]"}),
    ("--quirks", {"help": "quirk profile of the flag/env backend: none, ollama, llamacpp, "
                          "vllm, mistral"}),
    ("--record", {"type": click.Path(dir_okay=False),
                  "help": "write every upstream exchange to this cassette (secrets removed)"}),
    ("--request-timeout", {"type": float, "help": "seconds per upstream request"}),
    ("--max-retries", {"type": int, "help": "retries of a failed upstream request [2]"}),
    ("--max-iterations", {"type": int, "help": "default completions per auto send [8]"}),
    ("--max-tool-calls", {"type": int, "help": "default tool executions per auto send [32]"}),
    ("--max-tool-output-bytes", {"type": int, "help": "default largest tool output [65536]"}),
    ("--timeout", {"type": float, "help": "wall-clock deadline of the whole run, seconds"}),
    ("--tool-timeout", {"type": float, "help": "deadline of one tool call, seconds"}),
    ("--fuel", {"type": int, "help": "CPU budget in wasmtime fuel units"}),
    ("--max-memory", {"type": int, "help": "linear memory cap, bytes"}),
    ("--max-open-fds", {"type": int, "help": "open fds per instance [1024]"}),
    ("--max-log-bytes", {"type": int, "help": "guest log bytes per run"}),
    ("--max-host-bytes", {"type": int,
                          "help": "bytes the host may keep for one run's data [256 MiB]"}),
]


def host_options(func: Any) -> Any:
    for flag, kwargs in reversed(_HOST_OPTIONS):
        func = click.option(flag, default=None, **kwargs)(func)
    return click.option("--no-cache", is_flag=True, help="do not use the on-disk compile cache")(
        func)


def config_from_options(options: dict[str, Any]) -> HostConfig:
    """The HostConfig the host flags describe (flags not given fall back to env/defaults)."""
    given = {k: v for k, v in options.items() if v is not None and k != "no_cache"}
    if options.get("no_cache"):
        given["cache_dir"] = None
    if "config" in given:
        given["config_file"] = given.pop("config")
    try:
        return HostConfig(**given)
    except ValidationError as exc:
        raise click.UsageError(_explain(exc, set(given))) from exc
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


# Fields whose flag or environment variable is not derived from the field name.
_FLAGS = {"config_file": "--config", "cache_dir": "--no-cache"}
_ENVS = {"base_url": "OPENAI_BASE_URL", "config_file": "SPEARPY_CONFIG"}
# pydantic names the first alias whichever of them held the value.
_ALIAS_CHOICES = {"OPENAI_BASE_URL": ("OPENAI_BASE_URL", "SPEARPY_BASE_URL")}


def _explain(exc: ValidationError, given: set[str]) -> str:
    """pydantic's report in the words of the CLI: the flag (or environment
    variable) that holds the bad value, the value, and why it is refused."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        if field.isupper():  # read from the environment through an alias
            choices = _ALIAS_CHOICES.get(field, (field,))
            source = next((name for name in choices if name in os.environ), field)
        elif field in given:
            source = _FLAGS.get(field, "--" + field.replace("_", "-"))
        else:
            source = _ENVS.get(field, "SPEARPY_" + field.upper())
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"invalid {source} {error.get('input')!r}: {message}")
    return "\n".join(lines)


def host_from_options(options: dict[str, Any]) -> Host:
    config = config_from_options(options)
    try:
        return Host(config)
    except (ValueError, ConfigError) as exc:
        raise click.UsageError(str(exc)) from exc


