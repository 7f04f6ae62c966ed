"""The MCP server registry: records from `mcp.d` directories and from Python.

Each `*.toml` or `*.json` file of a directory holds one record (SPEAR's
`config/sms/mcp.d/` layout). A bad file is reported as a `RecordError`
naming the file and the field, and every other record still loads. A record
whose environment references (`${VAR}`, `${ENV:VAR}`, `${ENV:VAR:-default}`)
cannot be resolved is kept but disabled, with the reason, so `spearpy mcp
list` can say why; it never fails the run.

Later sources override earlier ones with the same `server_id`, with a note:
directories in the order given (files in name order within one), then
records given as objects.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spearpy.config_file import TomlSyntaxError, parse_toml
from spearpy.mcp.records import ServerRecord

log = logging.getLogger("spearpy.mcp")

RecordSource = ServerRecord | Mapping[str, Any] | str | os.PathLike[str]

_REF = re.compile(r"\$\{(?:ENV:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Only what a server needs to start and find its tools; never API keys.
BASE_ENV_KEYS = ("PATH", "HOME", "LANG")


@dataclass(frozen=True)
class RecordError:
    source: str
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class ServerEntry:
    """A validated record with its references resolved against an environment.

    The resolved values may hold secrets, so they stay out of the repr."""

    record: ServerRecord
    source: str = "python"
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str | None = field(default=None, repr=False)
    disabled_reason: str | None = None

    @property
    def server_id(self) -> str:
        return self.record.server_id

    @property
    def enabled(self) -> bool:
        return self.disabled_reason is None

    def process_env(self, host_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a stdio server: PATH/HOME/LANG from the
        host, then what the record names. Nothing else of the host's."""
        source = os.environ if host_env is None else host_env
        env = {k: source[k] for k in BASE_ENV_KEYS if k in source}
        env.update(self.env)
        return env


def _expand(value: str, environ: Mapping[str, str], missing: list[str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if default is not None and not found:
            return default
        if found is None:
            missing.append(name)
            return ""
        return found

    return _REF.sub(substitute, value)


def resolve(record: ServerRecord, source: str = "python",
            environ: Mapping[str, str] | None = None) -> ServerEntry:
    """Resolve `${VAR}` references in stdio.env, http.headers and http.url."""
    env_map = os.environ if environ is None else environ
    missing: dict[str, list[str]] = {}

    def expand(where: str, value: str) -> str:
        names: list[str] = []
        out = _expand(value, env_map, names)
        for name in names:
            missing.setdefault(name, []).append(where)
        return out

    env: dict[str, str] = {}
    headers: dict[str, str] = {}
    url: str | None = None
    if record.transport == "stdio" and record.stdio is not None:
        env = {k: expand(f"stdio.env.{k}", v) for k, v in record.stdio.env.items()}
    elif record.http is not None:
        headers = {k: expand(f"http.headers.{k}", v) for k, v in record.http.headers.items()}
        url = expand("http.url", record.http.url)
    reason = None
    if missing:
        reason = "; ".join(f"environment variable {name} is not set (needed by {', '.join(where)})"
                           for name, where in missing.items())
    return ServerEntry(record, source, env, headers, url, reason)


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        return json.loads(text)
    return parse_toml(text)


def load_file(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None,
              notes: list[str] | None = None) -> tuple[ServerEntry | None, list[RecordError]]:
    """One record file: (entry, []) or (None, the errors naming file and field)."""
    where = str(path)
    try:
        data = _read(Path(path))
    except (OSError, UnicodeDecodeError) as exc:
        return None, [RecordError(where, None, f"cannot read: {exc}")]
    except (TomlSyntaxError, json.JSONDecodeError) as exc:
        return None, [RecordError(where, None, f"invalid {Path(path).suffix[1:].upper()}: {exc}")]
    if not isinstance(data, dict):
        return None, [RecordError(where, None, "a record must be a table/object")]
    return _from_mapping(data, where, environ, notes)


def _from_mapping(data: Mapping[str, Any], where: str, environ: Mapping[str, str] | None,
                  notes: list[str] | None) -> tuple[ServerEntry | None, list[RecordError]]:
    found: list[str] = []
    try:
        record = ServerRecord.parse(dict(data), found)
    except ValidationError as exc:
        return None, [RecordError(where, ".".join(str(p) for p in err["loc"]) or None, err["msg"])
                      for err in exc.errors(include_url=False)]
    if notes is not None:
        notes.extend(f"{where}: {note}" for note in found)
    return resolve(record, where, environ), []


def _dir_files(directory: Path) -> list[Path]:
    # Hidden files and editor leftovers are not records (SPEAR's scan rules).
    return sorted(p for p in directory.iterdir()
                  if p.suffix.lower() in (".toml", ".json") and not p.name.startswith(".")
                  and not p.name.endswith("~") and p.is_file())


@dataclass
class Registry:
    """server_id -> entry, plus what went wrong loading it."""

    entries: dict[str, ServerEntry] = field(default_factory=dict)
    errors: list[RecordError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, entry: ServerEntry) -> None:
        previous = self.entries.get(entry.server_id)
        if previous is not None:
            self.notes.append(f"server {entry.server_id!r} from {entry.source} overrides "
                              f"the one from {previous.source}")
        self.entries[entry.server_id] = entry

    def add_source(self, item: RecordSource | ServerEntry,
                   environ: Mapping[str, str] | None = None) -> None:
        """Add a record object, a mapping, a record file or a directory."""
        if isinstance(item, ServerEntry):
            self.add(item)
        elif isinstance(item, ServerRecord):
            self.add(resolve(item, "python", environ))
        elif isinstance(item, Mapping):
            entry, errors = _from_mapping(item, f"python record {item.get('server_id')!r}",
                                          environ, self.notes)
            self.errors.extend(errors)
            if entry is not None:
                self.add(entry)
        else:
            path = Path(item)
            if path.is_dir():
                for file in _dir_files(path):
                    self._add_file(file, environ)
            elif path.is_file():
                self._add_file(path, environ)
            else:
                self.errors.append(RecordError(str(path), None, "no such file or directory"))

    def _add_file(self, path: Path, environ: Mapping[str, str] | None) -> None:
        entry, errors = load_file(path, environ, self.notes)
        self.errors.extend(errors)
        if entry is not None:
            self.add(entry)

    def get(self, server_id: str) -> ServerEntry | None:
        return self.entries.get(server_id)

    def enabled_ids(self) -> tuple[str, ...]:
        return tuple(sid for sid, entry in self.entries.items() if entry.enabled)

    def __iter__(self) -> Iterator[ServerEntry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, server_id: object) -> bool:
        return server_id in self.entries


def load_registry(dirs: Iterable[str | os.PathLike[str]] = (),
                  records: Iterable[RecordSource | ServerEntry] = (), *,
                  environ: Mapping[str, str] | None = None) -> Registry:
    """A registry from `--mcp-dir` directories, then records given in Python
    (objects, mappings, file or directory paths); later ones win."""
    registry = Registry()
    for directory in dirs:
        path = Path(directory)
        if not path.is_dir():
            registry.errors.append(RecordError(str(path), None, "not a directory"))
            log.warning("MCP registry: %s is not a directory: no MCP servers from it", path)
            continue
        files = _dir_files(path)  # listed once: add_source(path) would list it again
        for file in files:
            registry._add_file(file, environ)
        if not files:
            log.warning("MCP registry: %s holds no records (*.toml, *.json): no MCP servers "
                        "from it", path)
    for item in records:
        registry.add_source(item, environ)
    return registry
