"""Cassettes: every upstream exchange of a run, as one deterministic JSON file.

```
{"spearpy_cassette": 1,
 "default": "openai",                      # the backend a session gets when it names none
 "backends": {"openai": {"kind": "openai", "base_url": ..., "model": ..., "quirks": ...,
                         "max_retries": 2, "request_timeout": 120.0}},
 "exchanges": [
   {"backend": "openai",
    "request": {"method": "POST", "url": ..., "headers": {...}, "body": {...}},
    "response": {"status": 200, "headers": {"content-type": ...}, "body": {...}}}
   # or, when nothing usable came back:  "error": {"type": "ConnectError", "message": ...}
 ]}
```

Bodies are stored as JSON when they parse (`body`), else as text
(`body_text`) or base64 (`body_base64`). Secrets never reach the file:
credential headers are dropped, and every value they carried is scrubbed from
the whole exchange (servers echo keys back in 401 messages). Only the headers
a backend reads are kept, so two recordings of the same run are
byte-identical.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from spearpy import _json
from spearpy._files import atomic_write
from spearpy._jsondiff import first_difference as first_difference
from spearpy.errors import ConfigError
from spearpy.observe.scrub import SecretScrubber

FORMAT_VERSION = 1
REDACTED = "<redacted>"
MIN_SECRET_LENGTH = 4  # shorter "secrets" would scrub ordinary words

# Request headers worth keeping; everything else is transport detail
# (host, content-length, user-agent) or a credential.
KEPT_REQUEST_HEADERS = frozenset({"content-type", "accept", "anthropic-version", "anthropic-beta"})
# Response headers a backend acts on.
KEPT_RESPONSE_HEADERS = frozenset({"content-type", "retry-after", "retry-after-ms"})
SECRET_HEADERS = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie",
    "x-goog-api-key", "ocp-apim-subscription-key",
})  # fmt: skip
SECRET_QUERY_KEYS = frozenset({"key", "api_key", "api-key", "token", "access_token", "sig"})


def secrets_in_headers(headers: dict[str, str]) -> list[str]:
    """The credential values a request carries (with and without their scheme)."""
    found: list[str] = []
    for name, value in headers.items():
        if name.lower() in SECRET_HEADERS and value:
            found.append(value)
            _scheme, _, token = value.partition(" ")
            if token:
                found.append(token)
    return [s for s in found if len(s) >= MIN_SECRET_LENGTH]


def redact_url(url: str) -> tuple[str, list[str]]:
    parts = urlsplit(url)
    if not parts.query:
        return url, []
    secrets: list[str] = []
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() in SECRET_QUERY_KEYS:
            secrets.append(value)
            value = REDACTED
        query.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(query))), [
        s for s in secrets if len(s) >= MIN_SECRET_LENGTH]


def scrub(value: Any, secrets: list[str]) -> Any:
    """`value` with every secret removed, keys included, in every JSON spelling
    that decodes to it: a recorded reply holds the wire's escapes
    (observe/scrub.py)."""
    if not secrets:
        return value
    return SecretScrubber(secrets, marker=REDACTED,
                          min_length=MIN_SECRET_LENGTH).value(value)


def encode_body(raw: bytes) -> dict[str, Any]:
    try:
        return {"body": _json.loads(raw)}
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    try:
        return {"body_text": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(raw).decode("ascii")}


def decode_body(entry: dict[str, Any]) -> bytes:
    if "body" in entry:
        return json.dumps(entry["body"], separators=(",", ":"), ensure_ascii=False).encode()
    if "body_text" in entry:
        return str(entry["body_text"]).encode("utf-8")
    if "body_base64" in entry:
        return base64.b64decode(entry["body_base64"])
    return b""


def kept_headers(headers: dict[str, str], keep: frozenset[str]) -> dict[str, str]:
    return {k.lower(): v for k, v in sorted(headers.items()) if k.lower() in keep}


def dumps(cassette: dict[str, Any]) -> str:
    # Indented so a cassette diffs well in review; key order is insertion order,
    # which is the same for the same run.
    return json.dumps(cassette, indent=1, ensure_ascii=False) + "\n"


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        # The user's own file: a long recorded session may hold any number.
        data = _json.loads(Path(path).read_text(encoding="utf-8"), max_containers=None)
    except OSError as exc:
        raise ConfigError(f"cannot read the cassette {str(path)!r}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"the cassette {str(path)!r} is not valid JSON: {exc}") from exc
    problem = _invalid(data)
    if problem is not None:
        raise ConfigError(f"the cassette {str(path)!r} is not usable: {problem}")
    return data  # type: ignore[no-any-return]


def _invalid(data: Any) -> str | None:
    if not isinstance(data, dict) or data.get("spearpy_cassette") != FORMAT_VERSION:
        return f'expected an object with "spearpy_cassette": {FORMAT_VERSION}'
    backends, exchanges = data.get("backends"), data.get("exchanges")
    if not isinstance(backends, dict) or not all(isinstance(v, dict) for v in backends.values()):
        return '"backends" must map names to backend descriptions'
    if not isinstance(exchanges, list):
        return '"exchanges" must be a list'
    for i, ex in enumerate(exchanges):
        if not isinstance(ex, dict) or ex.get("backend") not in backends:
            return f"exchange {i} names no recorded backend"
        if not isinstance(ex.get("request"), dict):
            return f"exchange {i} has no request"
        if not isinstance(ex.get("response"), dict) and not isinstance(ex.get("error"), dict):
            return f"exchange {i} has neither a response nor an error"
    # "default" may name a backend that never sent anything (a run without
    # upstream traffic records none), so it is not checked against "backends".
    if data.get("default") is not None and not isinstance(data["default"], str):
        return '"default" must be a backend name'
    return None


class CassetteWriter:
    """Collects exchanges from any number of backends and threads, rewriting the
    file after each one, so a crashed run still leaves every exchange so far."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._data: dict[str, Any] = {"spearpy_cassette": FORMAT_VERSION, "default": None,
                                      "backends": {}, "exchanges": []}

    def set_default(self, name: str) -> None:
        with self._lock:
            self._data["default"] = name
            self._save()  # a run that never reaches a model still leaves a cassette

    def add_backend(self, name: str, description: dict[str, Any]) -> None:
        with self._lock:
            self._data["backends"].setdefault(name, description)
            self._save()

    def add_exchange(self, exchange: dict[str, Any]) -> None:
        with self._lock:
            self._data["exchanges"].append(exchange)
            self._save()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return _json.loads(dumps(self._data))  # type: ignore[no-any-return]

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, dumps(self._data).encode("utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot write the cassette {str(self.path)!r}: "
                              f"{exc.strerror}") from exc
