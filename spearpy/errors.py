"""The exceptions spearpy raises to its embedder (guests never see exceptions:
they get errno values and error bodies)."""

from __future__ import annotations


class SpearpyError(Exception):
    """Base of every exception spearpy raises."""


class ModuleLoadError(SpearpyError):
    """The module cannot be read, compiled or linked."""


class ConfigError(SpearpyError):
    """The host configuration is unusable (bad backend spec, unreadable script...)."""
