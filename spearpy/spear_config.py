"""SPEAR's own config file (a `[spearlet]` table), read as spearpy's.

spearpy/config_file.py hands a parsed file here when it holds `[spearlet]`;
this module turns SPEAR's LLM section into spearpy's per-room tables, so no
room downstream knows the file was SPEAR's:

- `[[spearlet.llm.credentials]]` (`kind = "env"`, `api_key_env`) give the
  variables backends read their keys from; a backend whose variable is unset
  is left out (a note says so), as SPEAR filters it;
- `[[spearlet.llm.backends]]` of the chat kinds become `[backends.NAME]`
  (`openai_chat_completion` -> `openai`, `ollama_chat` -> `ollama`, `stub`
  -> `stub`), those of `openai_realtime_ws` (`speech_to_text`) become
  `[realtime.NAME]` for rtasr fds;
- each model the chat backends are bound to becomes a `[[routes]]` entry
  matching that model, to its backends (by priority, then as listed) with
  `default_policy` (`weighted_random` -> `weighted`) and their weights, and
  `[routing] unknown_model = "refuse"` answers any other model with
  `no_candidate_backend` and the models there are;
- `[spearlet.llm.discovery.ollama]` becomes `[discovery.ollama]`.

Everything else SPEAR's spearlet reads (SMS addresses, gRPC, HTTP, storage,
logging, the router's gRPC filter stream, ...) is accepted and listed in
`ConfigFile.notes` as not used, key by key; a key SPEAR does not have is an
error naming the file, the table and the key. A secret written into the file
(`api_key` instead of `api_key_env`) refuses the whole file, and its value is
never repeated.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from spearpy.errors import ConfigError

# spearlet's keys spearpy has no use for: a table's keys are listed one by one.
_UNUSED_VALUES = frozenset({
    "node_name", "sms_grpc_addr", "sms_http_addr", "auto_register", "heartbeat_interval",
    "cleanup_interval", "sms_connect_timeout_ms", "sms_connect_retry_ms",
    "reconnect_total_timeout_ms", "local_models_dir",
})
_UNUSED_TABLES = frozenset({"grpc", "http", "storage", "logging"})
_LLM_KEYS = frozenset({"default_policy", "credentials", "backends", "discovery",
                       "router_grpc_filter_stream"})
_CREDENTIAL_KEYS = frozenset({"name", "kind", "api_key_env"})
_BACKEND_KEYS = frozenset({"name", "kind", "base_url", "hosting", "model", "credential_ref",
                           "api_key_env", "ops", "features", "transports", "weight",
                           "priority"})
# Keys that would hold a secret itself: refused, the value never repeated.
_SECRET_KEYS = ("api_key", "key", "token", "secret", "password")
CHAT_KINDS = {"openai_chat_completion": "openai", "ollama_chat": "ollama", "stub": "stub"}
REALTIME_KINDS = frozenset({"openai_realtime_ws"})
CHAT_OP, ASR_OP = "chat_completions", "speech_to_text"
POLICIES = {"weighted_random": "weighted"}
_SPEARPY_POLICIES = ("priority", "round_robin", "weighted", "least_inflight", "ewma_latency")
_ROUTE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")

Notes = list[str]


class Translated(NamedTuple):
    """What config_file.ConfigFile is made of (this module is below it)."""

    default: str | None
    tables: dict[str, Any]
    notes: tuple[str, ...]


def translate(raw: Mapping[str, Any], path: Path) -> Translated:
    """The spearpy tables of a parsed SPEAR config file."""
    where = f"SPEAR config file {str(path)!r}"
    unknown = sorted(set(raw) - {"spearlet"})
    if unknown:
        raise ConfigError(f"{where}: unknown top-level keys {unknown}; a SPEAR config holds "
                          "[spearlet] only (spearpy's own tables go in spearpy's file, which "
                          "may name this one with spear_config = \"PATH\")")
    spearlet = _table(raw["spearlet"], where, "spearlet")
    notes: Notes = []
    for key, value in spearlet.items():
        if key in _UNUSED_VALUES:
            notes.append(_unused(where, f"spearlet.{key}"))
        elif key in _UNUSED_TABLES:
            _unused_table(value, where, f"spearlet.{key}", notes)
        elif key != "llm":
            raise ConfigError(f"{where}: unknown key {key!r} in [spearlet]; known: "
                              f"{', '.join(sorted({*_UNUSED_VALUES, *_UNUSED_TABLES, 'llm'}))}")
    tables, default = _llm(_table(spearlet.get("llm", {}), where, "spearlet.llm"), where,
                           notes)
    return Translated(default, tables, tuple(notes))


def merge(own: Mapping[str, Any], spear: Mapping[str, Any]) -> dict[str, Any]:
    """spearpy's tables `own` over a SPEAR file's (`spear_config`): its
    entries win key by key and its routes come first."""
    tables: dict[str, Any] = {}
    for name in {*spear, *own}:
        mine, theirs = own.get(name), spear.get(name)
        if isinstance(mine, list) and isinstance(theirs, list):
            tables[name] = [*mine, *theirs]
        elif isinstance(mine, dict) and isinstance(theirs, dict):
            tables[name] = {**theirs, **mine}
        else:
            tables[name] = mine if mine is not None else theirs
    return tables


# ---- pieces -----------------------------------------------------------------


def _table(value: object, where: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: `{name}` must be a table")
    return value


def _unused(where: str, key: str) -> str:
    return f"{where}: {key} is not used by spearpy (accepted and ignored)"


def _unused_table(value: object, where: str, name: str, notes: Notes) -> None:
    if not isinstance(value, dict):
        notes.append(_unused(where, name))
        return
    for key, inner in value.items():
        if isinstance(inner, dict):
            _unused_table(inner, where, f"{name}.{key}", notes)
        else:
            notes.append(_unused(where, f"{name}.{key}"))


def _refuse_secrets(table: Mapping[str, Any], where: str, label: str) -> None:
    for key in _SECRET_KEYS:
        if key in table:
            raise ConfigError(
                f"{where}: {label}: `{key}` would hold the API key itself, and spearpy refuses "
                "secrets in config files (they end up in backups, version control and "
                "support bundles): put the key in an environment variable and name the "
                "variable with `api_key_env` (a [[spearlet.llm.credentials]] entry with "
                "kind = \"env\")")


def _unknown_keys(table: Mapping[str, Any], known: frozenset[str], where: str,
                  label: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown keys in {label}: {unknown}; known: "
                          f"{', '.join(sorted(known))}")


def _str(table: Mapping[str, Any], key: str, where: str, label: str,
         default: str | None = None) -> str | None:
    value = table.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where}: {label}: `{key}` must be a string")
    return value


def _strings(table: Mapping[str, Any], key: str, where: str, label: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {label}: `{key}` must be a list of strings")
    return value


def _int(table: Mapping[str, Any], key: str, where: str, label: str, default: int) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: {label}: `{key}` must be an integer")
    return value


def _entries(llm: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = llm.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{where}: `spearlet.llm.{key}` must be an array of "
                          f"[[spearlet.llm.{key}]] tables")
    return value


def _label(kind: str, index: int, table: Mapping[str, Any]) -> str:
    name = table.get("name")
    shown = f" ({name!r})" if isinstance(name, str) else ""
    return f"[[spearlet.llm.{kind}]] #{index + 1}{shown}"


# ---- the LLM section --------------------------------------------------------


def _llm(llm: dict[str, Any], where: str, notes: Notes) -> tuple[dict[str, Any], str | None]:
    _unknown_keys(llm, _LLM_KEYS, where, "[spearlet.llm]")
    if "router_grpc_filter_stream" in llm:
        _unused_table(llm["router_grpc_filter_stream"], where,
                      "spearlet.llm.router_grpc_filter_stream", notes)
    policy = _policy(llm, where)
    credentials = _credentials(_entries(llm, "credentials", where), where)
    chat: list[tuple[int, int, str, dict[str, Any], str | None, int]] = []
    realtime: list[tuple[int, int, str, dict[str, Any]]] = []
    seen: set[str] = set()
    for index, table in enumerate(_entries(llm, "backends", where)):
        label = _label("backends", index, table)
        _refuse_secrets(table, where, label)
        _unknown_keys(table, _BACKEND_KEYS, where, label)
        name = _str(table, "name", where, label)
        if not name:
            raise ConfigError(f"{where}: {label}: needs a `name`")
        if name in seen:
            raise ConfigError(f"{where}: {label}: the name {name!r} is used by an earlier "
                              "backend")
        seen.add(name)
        built = _backend(table, name, where, label, credentials, notes)
        if built is None:
            continue
        op, spec = built
        weight = max(_int(table, "weight", where, label, 100), 1)  # SPEAR's floor
        priority = _int(table, "priority", where, label, 0)
        if op == CHAT_OP:
            chat.append((-priority, index, name, spec, _str(table, "model", where, label),
                         weight))
        else:
            realtime.append((-priority, index, name, spec))
    for key in ("hosting", "features", "transports"):
        if any(key in table for table in _entries(llm, "backends", where)):
            # One line per key: SPEAR matches them against what a request
            # requires, which a spearpy guest cannot say.
            notes.append(_unused(where, f"[[spearlet.llm.backends]] {key}"))
    chat.sort(key=lambda entry: entry[:2])
    realtime.sort(key=lambda entry: entry[:2])
    tables: dict[str, Any] = {
        "backends": {name: spec for _p, _i, name, spec, _m, _w in chat},
        "realtime": {name: spec for _p, _i, name, spec in realtime},
        "routes": _routes(chat, policy),
        "routing": {"unknown_model": "refuse"},
    }
    discovery = llm.get("discovery")
    if discovery is not None:
        tables["discovery"] = _discovery(discovery, where)
    default = chat[0][2] if chat else None
    return tables, default


def _policy(llm: Mapping[str, Any], where: str) -> str:
    policy = llm.get("default_policy", "weighted_random")
    if isinstance(policy, str) and policy in POLICIES:
        return POLICIES[policy]
    if isinstance(policy, str) and policy in _SPEARPY_POLICIES:
        return policy
    known = ", ".join([*POLICIES, *_SPEARPY_POLICIES])
    raise ConfigError(f"{where}: [spearlet.llm] default_policy {policy!r} is not known; "
                      f"known: {known}")


def _credentials(entries: list[dict[str, Any]], where: str) -> dict[str, str]:
    """credential name -> the name of the variable holding its key."""
    found: dict[str, str] = {}
    for index, table in enumerate(entries):
        label = _label("credentials", index, table)
        _refuse_secrets(table, where, label)
        _unknown_keys(table, _CREDENTIAL_KEYS, where, label)
        name = _str(table, "name", where, label)
        kind = _str(table, "kind", where, label, "env")
        env = _str(table, "api_key_env", where, label)
        if not name:
            raise ConfigError(f"{where}: {label}: needs a `name`")
        if kind != "env":
            raise ConfigError(f"{where}: {label}: kind {kind!r} is not supported; SPEAR's "
                              "v1 and spearpy read keys from the environment only "
                              "(kind = \"env\")")
        if not env:
            raise ConfigError(f"{where}: {label}: needs `api_key_env`, the name of the "
                              "variable holding the key")
        if name in found:
            raise ConfigError(f"{where}: {label}: the name {name!r} is used by an earlier "
                              "credential")
        found[name] = env
    return found


def _backend(table: Mapping[str, Any], name: str, where: str, label: str,
             credentials: Mapping[str, str], notes: Notes,
             ) -> tuple[str, dict[str, Any]] | None:
    """(the op it serves, its spearpy table), or None when left out (noted)."""
    kind = _str(table, "kind", where, label)
    if kind not in CHAT_KINDS and kind not in REALTIME_KINDS:
        known = ", ".join([*CHAT_KINDS, *sorted(REALTIME_KINDS)])
        raise ConfigError(f"{where}: {label}: kind {kind!r} is not known; known: {known}")
    hosting = _str(table, "hosting", where, label)
    if hosting not in (None, "local", "remote"):
        raise ConfigError(f"{where}: {label}: hosting {hosting!r} must be local or remote")
    for key in ("features", "transports"):
        _strings(table, key, where, label)
    op = ASR_OP if kind in REALTIME_KINDS else CHAT_OP
    ops = _strings(table, "ops", where, label) or [op]
    if op not in ops:
        notes.append(f"{where}: {label} is not used: spearpy serves {op} from kind {kind!r}, "
                     f"and its ops are {ops}")
        return None
    if len(ops) > 1:
        notes.append(_unused(where, f"{label} ops {[o for o in ops if o != op]}"))
    env = _key_env(table, where, label, credentials)
    if env and not os.environ.get(env):
        notes.append(f"{where}: {label} is left out: its key variable {env} is not set")
        return None
    spec: dict[str, Any] = {"api_key_env": env}
    base_url = _str(table, "base_url", where, label)
    if base_url:
        spec["base_url"] = base_url
    model = _str(table, "model", where, label)
    if model:
        spec["model"] = model
    if kind in REALTIME_KINDS:
        return op, spec
    spec["kind"] = CHAT_KINDS[str(kind)]
    if spec["kind"] == "stub":
        spec.pop("api_key_env")
    return op, spec


def _key_env(table: Mapping[str, Any], where: str, label: str,
             credentials: Mapping[str, str]) -> str:
    """The variable holding the backend's key ("" = it sends none)."""
    ref = _str(table, "credential_ref", where, label)
    direct = _str(table, "api_key_env", where, label)
    if ref and direct:
        raise ConfigError(f"{where}: {label}: give `credential_ref` or `api_key_env`, not both")
    if ref:
        if ref not in credentials:
            known = ", ".join(credentials) or "none"
            raise ConfigError(f"{where}: {label}: credential_ref {ref!r} names no "
                              f"[[spearlet.llm.credentials]] entry (configured: {known})")
        return credentials[ref]
    return direct or ""


def _routes(chat: list[tuple[int, int, str, dict[str, Any], str | None, int]],
            policy: str) -> list[dict[str, Any]]:
    """One route per bound model: that model goes to its backends only."""
    bound: dict[str, list[tuple[str, int]]] = {}
    for _p, _i, name, _spec, model, weight in chat:
        if model:
            bound.setdefault(model, []).append((name, weight))
    routes: list[dict[str, Any]] = []
    used: set[str] = set()
    for model, backends in bound.items():
        base = "model-" + _ROUTE_CHARS.sub("_", model)[:50]
        route_name, n = base, 1
        while route_name in used:
            n += 1
            route_name = f"{base}-{n}"
        used.add(route_name)
        routes.append({"name": route_name, "match": {"model": [glob.escape(model)]},
                       "to": [name for name, _w in backends], "policy": policy,
                       "weights": [weight for _n, weight in backends]})
    return routes


def _discovery(value: object, where: str) -> dict[str, Any]:
    table = _table(value, where, "spearlet.llm.discovery")
    out: dict[str, Any] = {}
    for name, settings in table.items():
        if name != "ollama":
            raise ConfigError(f"{where}: unknown discovery {name!r} in "
                              "[spearlet.llm.discovery]; known: ollama")
        inner = _table(settings, where, "spearlet.llm.discovery.ollama")
        _refuse_secrets(inner, where, "[spearlet.llm.discovery.ollama]")
        out[name] = dict(inner)  # the catalog discovers (backends/catalog.py)
    return out


__all__ = ["CHAT_KINDS", "POLICIES", "REALTIME_KINDS", "Translated", "merge", "translate"]
