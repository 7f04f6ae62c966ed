"""Host configuration: one value object, read from arguments and the environment.

Field names are the CLI flag names (`--request-timeout` -> request_timeout), so
`Host(request_timeout=5)` and `spearpy run --request-timeout 5` mean the same.
Environment variables follow the openai SDK (OPENAI_BASE_URL) and otherwise
use the SPEARPY_ prefix (SPEARPY_MODEL, SPEARPY_TIMEOUT, ...).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    BeforeValidator,
    ByteSize,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from spearpy.secret_env import OPENAI_KEY_ENV

if TYPE_CHECKING:
    from spearpy.chat.params import LimitPolicy


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "spearpy"


# Empty defaults come from these rather than `dict` and `list`: pydantic reads
# a default factory's signature when it builds the model, and a builtin's is
# parsed from its text with tokenize, whose regex compiles on first use:
# ~2 ms of every `spearpy run` (the class itself builds in ~3.5).
def _no_entries() -> dict[str, Any]:
    return {}


def _no_items() -> list[Any]:
    return []


def url_problem(url: str) -> str | None:
    """Why `url` cannot be an upstream base URL, or None. Checked when the
    host starts: httpx would only refuse it at the first send, which the
    guest then sees as an unrelated error body."""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0  # parsing the port can raise
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host, like https://api.openai.com/v1"
    if not port_ok:
        return "port 0 cannot be connected to"
    if any(ch.isspace() for ch in url):
        return "must not contain whitespace"
    return None


@cache
def _byte_size_adapter() -> TypeAdapter[ByteSize]:
    return TypeAdapter(ByteSize)


BYTE_SIZE_HELP = "a byte count: 65536, or with a unit: 64KiB, 16MiB, 1GB (KB = 1000, KiB = 1024)"


def parse_byte_size(value: object) -> object:
    """'64KiB', '16MiB', '1GB', '65536' -> an int (pydantic's ByteSize units);
    anything but a string is left for the field's own validation."""
    if not isinstance(value, str):
        return value
    try:
        return int(_byte_size_adapter().validate_python(value.strip()))
    except ValidationError:
        raise ValueError(f"expected {BYTE_SIZE_HELP}") from None


# An int field that also takes a size with a unit, in flags, env and arguments.
ByteCount = Annotated[int, BeforeValidator(parse_byte_size)]


class HostConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SPEARPY_", populate_by_name=True, frozen=True, extra="forbid"
    )

    # Upstream. The key itself is never stored here: only the name of the
    # variable that holds it, so a config object can be logged or pickled.
    base_url: str = Field(
        "https://api.openai.com/v1",
        validation_alias=AliasChoices("OPENAI_BASE_URL", "SPEARPY_BASE_URL"),
    )
    api_key_env: str = OPENAI_KEY_ENV
    model: str | None = None
    # A configured backend name, `openai`, `anthropic`, `scripted:FILE` or
    # `replay:FILE`; None = the config file's default, else `openai`.
    backend: str | None = None
    quirks: str = "none"  # quirk profile of the flag/env backend (spearpy.backends.quirks)
    # Named backends (TOML); None = ~/.config/spearpy/config.toml when it exists.
    config_file: Path | None = Field(
        None, validation_alias="SPEARPY_CONFIG")
    # Model names the guest asks for -> "BACKEND" or "BACKEND:MODEL" (the
    # config file's [models] table, over it); checked when the Host starts.
    model_aliases: dict[str, str] = Field(default_factory=_no_entries)
    record: Path | None = None  # write every upstream exchange to this cassette
    # openai-python uses 600 s; agents wait on tools too, so fail a stuck upstream sooner.
    request_timeout: float = Field(120.0, gt=0)
    # openai-python retries twice by default.
    max_retries: int = Field(2, ge=0, le=10)

    # Tool loop: per-send defaults, and caps no guest param can pass. The
    # absolute caps (128 / 10000 / 1 MiB) come from spear-abi.md.
    max_iterations: int = Field(8, ge=1, le=128)
    max_tool_calls: int = Field(32, ge=0, le=10000)
    max_tool_output_bytes: ByteCount = Field(65536, ge=1, le=1 << 20)
    max_iterations_cap: int = Field(128, ge=1, le=128)
    max_tool_calls_cap: int = Field(10000, ge=0, le=10000)
    max_tool_output_bytes_cap: ByteCount = Field(1 << 20, ge=1, le=1 << 20)
    # Tool calls of one reply run at once (MCP and Python tools; the guest's
    # stay on its thread): the default and the cap of the session param
    # `max_parallel_tools`, and a run limit. 1 runs them one after another.
    max_parallel_tools: int = Field(8, ge=1, le=64)

    # Guest limits.
    timeout: float | None = Field(None, gt=0)  # wall clock for the whole run, seconds
    tool_timeout: float | None = Field(None, gt=0)  # per tool call, seconds
    fuel: int | None = Field(None, gt=0)
    max_memory: ByteCount | None = Field(None, gt=0)  # bytes of linear memory per run
    max_open_fds: int = Field(1024, ge=1, le=1 << 20)
    max_log_bytes: ByteCount = Field(8 << 20, ge=0)  # guest `log` bytes per run
    # What the host keeps for one run (messages, schemas, params, tool outputs,
    # replies): a guest under a small --max-memory must not make the host hold GBs.
    max_host_bytes: ByteCount = Field(256 << 20, ge=1 << 20)

    cache_dir: Path | None = Field(default_factory=_default_cache_dir)  # None = no disk cache
    # Compiled modules kept in memory (bytes of their serialized code, LRU);
    # a service loading many modules must not grow without bound.
    module_cache_bytes: ByteCount = Field(512 << 20, ge=0)

    # MCP tool servers: directories of SPEAR registry records (mcp.d/*.toml).
    mcp_dirs: list[Path] = Field(default_factory=_no_items)
    # The task layer of every run, in SPEAR's task-config keys (mcp.enabled,
    # mcp.default_server_ids, mcp.allowed_server_ids, mcp.tool_allowlist,
    # mcp.tool_denylist); Host.run(task_params=...) adds to it per run.
    task_params: dict[str, Any] = Field(default_factory=_no_entries)

    # Audio in (SPEAR's mic_* and rtasr_*: docs/audio.md). A headless machine
    # has no microphone: the `device` source then reads this WAV/PCM file,
    # and at its end the mic fd raises HUP.
    mic_file: Path | None = None
    # "realtime": frames come at the pace of the audio; "fast": as soon as read.
    mic_pace: Literal["realtime", "fast"] = "realtime"
    # The realtime transcription WebSocket (OpenAI-compatible); None = derived
    # from the OpenAI backend's base URL. The key is read from rtasr_api_key_env.
    rtasr_url: str | None = None
    rtasr_api_key_env: str = OPENAI_KEY_ENV
    # Per run, over every mic and rtasr fd: PCM bytes read or written, and
    # seconds of audio at the fd's format.
    max_audio_bytes: ByteCount = Field(64 << 20, ge=0)
    max_audio_seconds: float = Field(600.0, ge=0)

    @field_validator("base_url")
    @classmethod
    def _base_url_is_a_url(cls, value: str) -> str:
        problem = url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("rtasr_url")
    @classmethod
    def _rtasr_url_is_a_ws_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        # A leaf import: config is below everything that would use asr.
        from spearpy.asr.protocol import ws_url_problem

        problem = ws_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def limit_policy(self) -> LimitPolicy:
        # Imported here: config is read by commands that never run a guest
        # (`spearpy batch`'s parent checks it), and spearpy.chat loads the
        # whole chat package.
        from spearpy.chat.params import LimitPolicy

        return LimitPolicy(
            default_max_iterations=self.max_iterations,
            max_iterations_cap=self.max_iterations_cap,
            default_max_total_tool_calls=self.max_tool_calls,
            max_total_tool_calls_cap=self.max_tool_calls_cap,
            default_max_tool_output_bytes=self.max_tool_output_bytes,
            max_tool_output_bytes_cap=self.max_tool_output_bytes_cap,
        )
