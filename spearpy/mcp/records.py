"""One MCP server record, in SPEAR's registry format (pydantic models).

A record is what an operator writes in `mcp.d/<server>.toml`; SPEAR's own
files load unchanged. Fields SPEAR defines and spearpy does not use
(`tool_namespace`, `http.auth_ref`) are kept; unknown fields are ignored with
a note rather than an error, as SPEAR's serde does, so a record written for a
newer SPEAR still loads. Out-of-range budgets are clamped as SPEAR clamps
them, with a note.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from spearpy.mcp.policy import parse_approval

DEFAULT_TOOL_TIMEOUT_MS = 8_000
TOOL_TIMEOUT_RANGE = (100, 120_000)
DEFAULT_LIST_TIMEOUT_MS = 12_000
LIST_TIMEOUT_RANGE = (100, 180_000)
DEFAULT_MAX_CONCURRENCY = 8
MAX_CONCURRENCY_RANGE = (1, 64)
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
MAX_OUTPUT_RANGE = (1024, 10 * 1024 * 1024)


def _note(info: ValidationInfo, message: str) -> None:
    notes = info.context.get("notes") if isinstance(info.context, dict) else None
    if isinstance(notes, list):
        notes.append(message)


def _budget(value: int | None, default: int, bounds: tuple[int, int], info: ValidationInfo) -> int:
    # 0 is "unset" in SPEAR's protobuf record; a [budgets] table without the
    # key must mean the default, not the clamp floor SPEAR gives it.
    if value is None or value == 0:
        return default
    low, high = bounds
    clamped = min(max(value, low), high)
    if clamped != value:
        _note(info, f"budgets.{info.field_name} = {value} clamped to {clamped} ({low}..{high})")
    return clamped


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", str_strip_whitespace=False)


class StdioConfig(_Section):
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    env_from: list[str] = Field(default_factory=list)

    @field_validator("cwd")
    @classmethod
    def _empty_cwd(cls, value: str | None) -> str | None:
        return value or None  # SPEAR's records say cwd = "" for "inherit"

    @model_validator(mode="after")
    def _expand_env_from(self) -> StdioConfig:
        # SPEAR's shorthand: env_from = ["X"] means env.X = "${ENV:X}".
        for name in self.env_from:
            if name.strip():
                self.env.setdefault(name.strip(), f"${{ENV:{name.strip()}}}")
        return self


class HttpConfig(_Section):
    url: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    auth_ref: str = ""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://", "${")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("auth_ref")
    @classmethod
    def _auth_ref(cls, value: str, info: ValidationInfo) -> str:
        if value:
            _note(info, "http.auth_ref is ignored (spearpy has no secret store): "
                        "put the credential in http.headers as ${VAR}")
        return value


class Budgets(_Section):
    tool_timeout_ms: int = Field(default=DEFAULT_TOOL_TIMEOUT_MS, ge=0)
    list_timeout_ms: int | None = Field(default=None, ge=0)
    max_concurrency: int = Field(default=DEFAULT_MAX_CONCURRENCY, ge=0)
    max_tool_output_bytes: int = Field(default=DEFAULT_MAX_OUTPUT_BYTES, ge=0)

    @field_validator("tool_timeout_ms", mode="after")
    @classmethod
    def _tool_timeout(cls, value: int, info: ValidationInfo) -> int:
        return _budget(value, DEFAULT_TOOL_TIMEOUT_MS, TOOL_TIMEOUT_RANGE, info)

    @field_validator("list_timeout_ms", mode="after")
    @classmethod
    def _list_timeout(cls, value: int | None, info: ValidationInfo) -> int | None:
        if not value:
            return None
        return _budget(value, DEFAULT_LIST_TIMEOUT_MS, LIST_TIMEOUT_RANGE, info)

    @field_validator("max_concurrency", mode="after")
    @classmethod
    def _concurrency(cls, value: int, info: ValidationInfo) -> int:
        return _budget(value, DEFAULT_MAX_CONCURRENCY, MAX_CONCURRENCY_RANGE, info)

    @field_validator("max_tool_output_bytes", mode="after")
    @classmethod
    def _output(cls, value: int, info: ValidationInfo) -> int:
        return _budget(value, DEFAULT_MAX_OUTPUT_BYTES, MAX_OUTPUT_RANGE, info)

    @property
    def effective_list_timeout_ms(self) -> int:
        """`list_timeout_ms` (a spearpy key), else 12 s or the tool budget if
        longer. SPEAR has no key of its own: it lists with the tool budget
        (12 s without a [budgets] table); a first list also starts the
        server, so it never gets less than 12 s here."""
        if self.list_timeout_ms:
            return self.list_timeout_ms
        low, high = LIST_TIMEOUT_RANGE
        return min(max(DEFAULT_LIST_TIMEOUT_MS, self.tool_timeout_ms, low), high)


class ApprovalPolicyConfig(_Section):
    default_policy: str = ""
    per_tool: dict[str, str] = Field(default_factory=dict)

    @field_validator("default_policy")
    @classmethod
    def _default(cls, value: str) -> str:
        parse_approval(value)
        return value.strip().lower()

    @field_validator("per_tool")
    @classmethod
    def _per_tool(cls, value: dict[str, str]) -> dict[str, str]:
        for tool, policy in value.items():
            try:
                parse_approval(policy)
            except ValueError as exc:
                raise ValueError(f"{tool}: {exc}") from None
        return {tool: policy.strip().lower() for tool, policy in value.items()}


class ServerRecord(_Section):
    """One MCP server the platform allows (SPEAR's `McpServerRecord`)."""

    server_id: str = Field(min_length=1, max_length=256)
    display_name: str = ""
    transport: Literal["stdio", "streamable_http"]
    tool_namespace: str = ""
    allowed_tools: list[str] = Field(default_factory=list)
    stdio: StdioConfig | None = None
    http: HttpConfig | None = None
    budgets: Budgets = Field(default_factory=Budgets)
    approval_policy: ApprovalPolicyConfig = Field(default_factory=ApprovalPolicyConfig)

    @field_validator("server_id")
    @classmethod
    def _server_id(cls, value: str) -> str:
        if value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("must not contain control characters or surrounding spaces")
        return value

    @field_validator("allowed_tools")
    @classmethod
    def _allowed(cls, value: list[str]) -> list[str]:
        return [p for p in value if p]  # SPEAR drops empty patterns

    @model_validator(mode="after")
    def _transport_section(self, info: ValidationInfo) -> ServerRecord:
        needed, other = ("stdio", "http") if self.transport == "stdio" else ("http", "stdio")
        if getattr(self, needed) is None:
            raise ValueError(f"transport {self.transport!r} needs a [{needed}] table")
        if getattr(self, other) is not None:
            _note(info, f"[{other}] is ignored: transport is {self.transport!r}")
        if not self.allowed_tools:
            _note(info, f"server {self.server_id!r} exposes no tool: allowed_tools is empty "
                        "(default deny); add patterns such as [\"read_*\"]")
        return self

    def unknown_fields(self) -> list[str]:
        """Dotted names of fields present in the record but not in the format."""
        found: list[str] = []

        def walk(model: BaseModel, prefix: str) -> None:
            found.extend(prefix + key for key in (model.model_extra or {}))
            for name in type(model).model_fields:
                child = getattr(model, name)
                if isinstance(child, BaseModel):
                    walk(child, f"{prefix}{name}.")

        walk(self, "")
        return found

    @classmethod
    def parse(cls, data: Any, notes: list[str] | None = None) -> ServerRecord:
        """Validate `data` (a mapping); notes (clamps, ignored fields) are
        appended to `notes`. Raises pydantic.ValidationError."""
        collected: list[str] = []
        record = cls.model_validate(data, context={"notes": collected})
        collected.extend(f"unknown field {name!r} ignored" for name in record.unknown_fields())
        if notes is not None:
            notes.extend(collected)
        return record
