"""Host options shared by every command that runs guests."""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit

import click
from pydantic import ValidationError

from spearpy.config import BYTE_SIZE_HELP, HostConfig, parse_byte_size
from spearpy.errors import ConfigError
from spearpy.host import Host
from spearpy.loopback import is_loopback

if TYPE_CHECKING:
    _IntParam: TypeAlias = click.ParamType[int]
else:  # generic only in newer click; pyproject allows 8.1
    _IntParam = click.ParamType


class ByteSizeType(_IntParam):
    """A byte count: 65536, 64KiB, 16MiB, 1GB (pydantic's ByteSize units)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            parsed = parse_byte_size(value)
        except ValueError:
            self.fail(f"{value!r} is not {BYTE_SIZE_HELP}", param, ctx)
        if not isinstance(parsed, int):
            self.fail(f"{value!r} is not {BYTE_SIZE_HELP}", param, ctx)
        return parsed


BYTES = ByteSizeType()

# Options shared by every command that runs guests; None = not given, so the
# environment (OPENAI_BASE_URL, SPEARPY_*) and the defaults apply.
_HOST_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--base-url", {"help": "OpenAI-compatible base URL [env OPENAI_BASE_URL]"}),
    ("--api-key-env", {"help": "name of the env var holding the API key [OPENAI_API_KEY]"}),
    ("--model", {"help": "model used when the guest sets none [env SPEARPY_MODEL]"}),
    ("--backend", {"help": "a configured backend name, `openai`, `anthropic`, `ollama` (its "
                           "native API, --base-url its root), `stub` (SPEAR's offline stub), "
                           "`scripted:FILE` (built-in offline model) or `replay:FILE` (a "
                           "recorded run)"}),
    ("--config", {"type": click.Path(dir_okay=False), "help": "TOML file of named backends "
                  "[env SPEARPY_CONFIG; ~/.config/spearpy/config.toml]"}),
    ("--model-alias", {"multiple": True, "metavar": "NAME=BACKEND[:MODEL]",
                       "help": "send the guest's model NAME to BACKEND, as MODEL (else the "
                               "backend's own); repeatable, over the config file's [models] "
                               "[env SPEARPY_MODEL_ALIASES, a JSON object]"}),
    ("--quirks", {"help": "quirk profile of the flag/env backend: none, ollama, llamacpp, "
                          "vllm, mistral"}),
    ("--record", {"type": click.Path(dir_okay=False),
                  "help": "write every upstream exchange to this cassette (secrets removed)"}),
    ("--request-timeout", {"type": float, "help": "seconds per upstream request"}),
    ("--max-retries", {"type": int, "help": "retries of a failed upstream request [2]"}),
    ("--max-iterations", {"type": int, "help": "default completions per auto send [8]"}),
    ("--max-tool-calls", {"type": int, "help": "default tool executions per auto send [32]"}),
    ("--max-parallel-tools", {"type": int, "help": "tool calls of one reply run at once "
                                                   "(MCP, Python tools) [8]; 1: one by one"}),
    ("--max-tool-output-bytes", {"type": BYTES,
                                 "help": "default largest tool output [64KiB]"}),
    ("--timeout", {"type": float, "help": "wall-clock deadline of the whole run, seconds"}),
    ("--tool-timeout", {"type": float, "help": "deadline of one tool call, seconds"}),
    ("--fuel", {"type": int, "help": "CPU budget in wasmtime fuel units"}),
    ("--max-memory", {"type": BYTES, "help": "linear memory cap (65536, 64KiB, 16MiB, 1GB)"}),
    ("--max-open-fds", {"type": int, "help": "open fds per instance [1024]"}),
    ("--max-log-bytes", {"type": BYTES, "help": "guest log bytes per run [8MiB]"}),
    ("--max-host-bytes", {"type": BYTES,
                          "help": "bytes the host may keep for one run: messages, replies, "
                                  "schemas, params, open fds, closed sessions' "
                                  "transcripts [256 MiB]"}),
    ("--module-cache-bytes", {"type": BYTES, "help": "compiled modules kept in memory "
                                                     "(LRU) [512MiB]"}),
    ("--mcp-dir", {"type": click.Path(file_okay=False), "multiple": True,
                   "help": "a directory of MCP server records (SPEAR's mcp.d/*.toml); "
                           "repeatable [env SPEARPY_MCP_DIRS, a JSON list]"}),
    ("--mcp", {"help": "enable MCP for the run with these default servers: fs,git "
                       "(task keys mcp.enabled and mcp.default_server_ids)"}),
    ("--mcp-allow", {"help": "servers a guest may ask for beyond the defaults: fs,git,fetch "
                             "(task key mcp.allowed_server_ids)"}),
    ("--task-param", {"multiple": True, "metavar": "KEY=JSON",
                      "help": "a task-layer key, SPEAR's names: mcp.enabled=true, "
                              "'mcp.tool_denylist=[\"write_*\"]'; repeatable"}),
    ("--mic-file", {"type": click.Path(dir_okay=False),
                    "help": "the microphone (`device` source) reads this WAV/PCM file; "
                            "HUP at its end"}),
    ("--mic-pace", {"type": click.Choice(["realtime", "fast"]),
                    "help": "mic frames at the audio's pace or as fast as read [realtime]"}),
    ("--rtasr-url", {"help": "realtime transcription WebSocket URL (ws:// or wss://) "
                             "[from --base-url: wss://HOST/v1/realtime?intent=transcription]"}),
    ("--rtasr-api-key-env", {"help": "name of the env var holding the realtime key "
                                     "[OPENAI_API_KEY]"}),
    ("--max-audio-bytes", {"type": BYTES, "help": "audio bytes per run [64MiB]"}),
    ("--max-audio-seconds", {"type": float, "help": "seconds of audio per run [600]"}),
]


def host_options(func: Any) -> Any:
    for flag, kwargs in reversed(_HOST_OPTIONS):
        func = click.option(flag, default=None, **kwargs)(func)
    return click.option("--no-cache", is_flag=True, help="do not use the on-disk compile cache")(
        func)


def config_from_options(options: dict[str, Any]) -> HostConfig:
    """The HostConfig the host flags describe (flags not given fall back to env/defaults)."""
    given = {k: v for k, v in options.items()
             if v is not None and v != () and k not in ("no_cache", *_TASK_FLAGS)}
    if options.get("no_cache"):
        given["cache_dir"] = None
    if "mcp_dir" in given:
        given["mcp_dirs"] = list(given.pop("mcp_dir"))
    task = task_params_from_options(options)
    if task:
        given["task_params"] = task
    if "config" in given:
        given["config_file"] = given.pop("config")
    if "model_alias" in given:
        from spearpy.backends.routing.spec import aliases_from_flags

        try:
            given["model_aliases"] = aliases_from_flags(given.pop("model_alias"))
        except ValueError as exc:
            raise click.UsageError(f"invalid --model-alias {exc}") from None
    try:
        return HostConfig(**given)
    except ValidationError as exc:
        raise click.UsageError(_explain(exc, set(given))) from exc
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


_TASK_FLAGS = ("mcp", "mcp_allow", "task_param")


def task_params_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """The run's task layer from --task-param KEY=JSON, --mcp and --mcp-allow
    (the short forms win over the same keys given long)."""
    task: dict[str, Any] = {}
    for item in options.get("task_param") or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--task-param {item!r}: expected KEY=JSON")
        try:
            task[key] = json.loads(raw)
        except ValueError:
            task[key] = raw  # a bare word: SPEAR's task config holds strings too
    if options.get("mcp"):
        task["mcp.enabled"] = True
        task["mcp.default_server_ids"] = _ids(options["mcp"])
    if options.get("mcp_allow"):
        task["mcp.allowed_server_ids"] = _ids(options["mcp_allow"])
    return task


def _ids(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


# Fields whose flag or environment variable is not derived from the field name.
_FLAGS = {"config_file": "--config", "cache_dir": "--no-cache", "task_params": "--task-param",
          "mcp_dirs": "--mcp-dir"}
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
        host = Host(config)
    except (ValueError, ConfigError) as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        require_api_key(config)
    except click.UsageError:
        host.close()
        raise
    return host


def require_api_key(config: HostConfig) -> None:
    """Exit 2 at start, naming the variable, when the default backend is a
    remote OpenAI or Anthropic server and its key is not set: else the
    guest's first send fails with a 401 halfway through its work."""
    problem = missing_api_key(config)
    if problem is not None:
        raise click.UsageError(problem)


def missing_api_key(config: HostConfig) -> str | None:
    from spearpy.backends.catalog import BackendCatalog

    try:
        # Without --record: checking must not create the cassette.
        # Discovered backends send no key and never become the default.
        catalog = BackendCatalog.from_config(config.model_copy(update={"record": None}),
                                             discover=False)
    except (ValueError, ConfigError):
        return None  # Host() reports the configuration's own problem
    name = catalog.default
    spec = catalog.specs[name]
    variable = spec.key_env()
    if spec.kind not in ("openai", "anthropic") or not variable or os.environ.get(variable):
        return None
    # Nothing chosen at all (no URL, model or backend from flags, env or a
    # config file): a guest that never sends must still run without a key.
    chosen = config.model_fields_set & {"base_url", "model", "backend", "api_key_env"}
    if not chosen and spec.base_url is None and spec.model is None:
        return None
    url = spec.url()
    host = (urlsplit(url).hostname or "").lower()
    # A local server needs no key. *.localhost names resolve here too
    # (RFC 6761); is_loopback leaves them out for the web guard's sake, which
    # must not trust a name, but this is only a guess at a missing key.
    if is_loopback(host) or host.endswith(".localhost"):
        return None
    return (f"no API key: backend {name!r} ({url}) needs one in the environment variable "
            f"{variable}, which is not set. Set it (export {variable}=...), name the variable "
            "that holds your key with --api-key-env NAME, give --api-key-env '' for a server "
            "that needs none, or run offline with --backend scripted:FILE")


def key_envs(config: HostConfig) -> list[str]:
    """Every variable that holds a key this configuration may send (what
    Host.key_envs() says, without building a Host)."""
    from spearpy.backends.catalog import BackendCatalog

    names = {config.api_key_env}
    with contextlib.suppress(ValueError, ConfigError):  # Host() reports those
        names.update(BackendCatalog.from_config(config.model_copy(update={"record": None}),
                                                discover=False)
                     .key_envs())
    return sorted(n for n in names if n)


