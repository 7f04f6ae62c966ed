"""spearpy's TOML config file, read once (`--config`, SPEARPY_CONFIG, or
~/.config/spearpy/config.toml when present, else SPEAR's ~/.spear/config.toml).

This module is the only one that parses TOML. It reads the file into one
`ConfigFile` with a field per top-level table and refuses keys it does not
know, naming the file and the key. Each room then reads its own tables from
that object, without I/O: `backends/specs.py` the backends and the default,
`backends/routing/spec.py` `[models]`, `[[routes]]` and `[circuit_breaker]`,
`mcp/config_tables.py` `[mcp]`, the Host `[task]`. The schema of a table
lives with the code that uses it, so a room's new key touches that room only;
the file's shape (which tables exist) lives here.

A SPEAR config (a file with a `[spearlet]` table, given as the file, found at
SPEAR's home location or named by `spear_config = "PATH"`) is translated by
spearpy/spear_config.py into these same tables, so no room knows the file
was SPEAR's. What the translation leaves out is in `ConfigFile.notes`,
logged once per process.

A file is parsed once per process and content: the CLI's start-up checks,
the Host and its catalog all ask for it, and each gets the same parse while
the file is unchanged. Without a file the TOML parser is not imported.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spearpy.errors import ConfigError

# Every top-level key the file may hold, and whether its value is a table
# (dict), an array of tables (list) or a plain value.
_TABLES: dict[str, type] = {"backends": dict, "models": dict, "routes": list,
                            "circuit_breaker": dict, "routing": dict, "realtime": dict,
                            "discovery": dict, "mcp": dict, "task": dict}
_VALUES = ("default", "spear_config")
TOP_LEVEL = (*_VALUES, *_TABLES)
log = logging.getLogger("spearpy.config")


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """The file's tables, each as the TOML gave it (rooms validate their own).
    `path` is None for the empty configuration (no file)."""

    path: Path | None = None
    default: object = None
    tables: dict[str, Any] = field(default_factory=dict)
    # What a SPEAR config holds that spearpy does not use, one line each.
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How errors name the file."""
        return f"config file {str(self.path)!r}" if self.path is not None else "configuration"

    @property
    def base_dir(self) -> Path:
        """Paths in the file are relative to its directory."""
        return self.path.parent if self.path is not None else Path.cwd()

    def table(self, name: str) -> Any:
        """One top-level table; an empty one of its kind when the file has none."""
        kind = _TABLES[name]
        return self.tables.get(name, kind())

    @property
    def raw(self) -> dict[str, Any]:
        """The tables and values as one mapping, as the TOML had them."""
        out: dict[str, Any] = dict(self.tables)
        if self.default is not None:
            out["default"] = self.default
        return out


EMPTY = ConfigFile()


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "spearpy" / "config.toml"


def spear_home_config_path() -> Path:
    """Where SPEAR looks for its config without `--config`: SPEAR_HOME (which
    SPEAR prefers to HOME), else the home directory."""
    home = os.environ.get("SPEAR_HOME") or str(Path.home())
    return Path(home) / ".spear" / "config.toml"


_cache_lock = threading.Lock()
_Key = tuple[str, int, int]
# The parsed TOML, and the shaped file when it is spearpy's alone: a SPEAR
# file's translation reads the environment (which credentials are set), so
# it is translated anew each time, from the kept parse.
_cache: dict[_Key, tuple[dict[str, Any], ConfigFile | None]] = {}
_reported: set[str] = set()


def read_config_file(path: str | os.PathLike[str] | None) -> ConfigFile:
    """The file at `path`, or at the default location when `path` is None and a
    file is there (spearpy's own, else SPEAR's; else the empty configuration).
    An explicit path that cannot be read is a ConfigError."""
    if path is not None:
        return _read(Path(path))
    for where in (default_config_path(), spear_home_config_path()):
        if where.exists():
            return _read(where)
    return EMPTY


def _read(where: Path) -> ConfigFile:
    key, raw, shaped = _cached(where)
    if shaped is not None:
        return shaped
    loaded = _shape(raw, where)
    if "spearlet" not in raw and "spear_config" not in raw:
        with _cache_lock:
            _cache[key] = (raw, loaded)
    for note in loaded.notes:
        with _cache_lock:
            if note in _reported:
                continue
            _reported.add(note)
        log.warning("%s", note)
    return loaded


def _parsed(where: Path) -> dict[str, Any]:
    return _cached(where)[1]


def _cached(where: Path) -> tuple[_Key, dict[str, Any], ConfigFile | None]:
    try:
        stat = where.stat()
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {str(where)!r}: {exc.strerror}") \
            from None
    key = (str(where.resolve()), stat.st_mtime_ns, stat.st_size)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return key, *cached
    raw = read_toml(where, "the config file")
    with _cache_lock:
        if len(_cache) > 16:  # a long-lived process editing its file: keep a few
            _cache.clear()
        _cache[key] = (raw, None)
    return key, raw, None


class TomlSyntaxError(ConfigError):
    """Text that is not valid TOML."""


def parse_toml(text: str) -> dict[str, Any]:
    """Parse TOML text (the config file, an MCP record file)."""
    import tomllib  # only when there is a file

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlSyntaxError(str(exc)) from None


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """Parse one TOML file; errors name it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(path)!r} is not UTF-8: {exc}") from None
    try:
        return parse_toml(text)
    except TomlSyntaxError as exc:
        raise ConfigError(f"{what} {str(path)!r} is not valid TOML: {exc}") from None


def _shape(raw: dict[str, Any], path: Path) -> ConfigFile:
    where = f"config file {str(path)!r}"
    if "spearlet" in raw:
        from spearpy.spear_config import translate

        return ConfigFile(path, *translate(raw, path))
    unknown = sorted(set(raw) - set(TOP_LEVEL))
    if unknown:
        raise ConfigError(f"{where}: unknown top-level keys {unknown}; allowed: "
                          f"{', '.join(TOP_LEVEL)}")
    tables: dict[str, Any] = {}
    for name, kind in _TABLES.items():
        if name not in raw:
            continue
        value = raw[name]
        if not isinstance(value, kind):
            shape = f"a [{name}] table" if kind is dict else f"an array of [[{name}]] tables"
            raise ConfigError(f"{where}: `{name}` must be {shape}")
        tables[name] = value
    own = ConfigFile(path, raw.get("default"), tables)
    spear = raw.get("spear_config")
    if spear is None:
        return own
    if not isinstance(spear, str) or not spear:
        raise ConfigError(f"{where}: `spear_config` must be the path of a SPEAR config file")
    from spearpy.spear_config import merge, translate

    spear_path = path.parent / spear
    spear_raw = _parsed(spear_path)
    if "spearlet" not in spear_raw:
        raise ConfigError(f"{where}: spear_config {str(spear_path)!r} has no [spearlet] "
                          "table: it is not a SPEAR config")
    theirs = translate(spear_raw, spear_path)
    default = own.default if own.default is not None else theirs.default
    return ConfigFile(path, default, merge(own.tables, theirs.tables), theirs.notes)


__all__ = ["EMPTY", "TOP_LEVEL", "ConfigFile", "TomlSyntaxError", "default_config_path",
           "parse_toml", "read_config_file", "read_toml", "spear_home_config_path"]
