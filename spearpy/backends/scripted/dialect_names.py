"""Dialects by name: the one place that knows every dialect module, so the
dialects themselves (and the Anthropic one built on them) import one way."""

from __future__ import annotations

from typing import Any

from spearpy.backends.scripted.anthropic_dialect import AnthropicDialect
from spearpy.backends.scripted.dialects import (
    Dialect,
    LlamaCppDialect,
    MistralDialect,
    OllamaDialect,
    VLLMDialect,
)
from spearpy.backends.scripted.reply import ScriptError


def dialect(spec: str | Dialect | None, **options: Any) -> Dialect:
    """A Dialect from its name (options go to its constructor) or as given."""
    if isinstance(spec, Dialect):
        return spec
    kinds: dict[str, type[Dialect]] = {
        "openai": Dialect, "ollama": OllamaDialect, "llamacpp": LlamaCppDialect,
        "vllm": VLLMDialect, "mistral": MistralDialect, "anthropic": AnthropicDialect,
    }  # fmt: skip
    kind = kinds.get(spec or "openai")
    if kind is None:
        raise ScriptError(f"unknown dialect {spec!r}; known: {', '.join(kinds)}")
    return kind(**options)
