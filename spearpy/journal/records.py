"""The journal's records: one table of kinds, one encoding, one decoding.

A journal is an ordered list of records, one JSON object each (one line in a
file), numbered by `seq` from 0:

```
{"seq":0,"kind":"start","format":1,"spearpy":"0.1.0","module_sha256":"...",
 "argv":[...],"env_names":[...],"stdin_sha256":"...","stdin_length":5,
 "stdin_base64":"aGVsbG8=","limits":{...},"flags":{...}}
{"seq":1,"kind":"hostcall","request":{"call":"system.time_now_ms","args":[]},
 "answer":{"rc":1717171717171,"writes":[],"t":3.2}}
{"seq":2,"kind":"chat.completion","request_sha256":"...","answer":{...}}
{"seq":3,"kind":"hostcall","request":{"call":"wasi.clock_time_get","args":[1,0,4096]},
 "answer":{"rc":0,"writes":[[4096,"AAECAwQFBgc="]],"t":9.5}}
{"seq":4,"kind":"tool.outcome","request":{"source":"mcp","name":"add",
 "arguments_sha256":"..."},"answer":{...}}
{"seq":5,"kind":"end","outcome":"exited","exit_code":0}
```

The key says the form, so no value can pose as another: `request` holds the
request itself, `request_sha256` its digest (always for a kind that digests
it, and for any request over REQUEST_INLINE_MAX bytes); a field a kind
digests is stored as `<field>_sha256`; `answer` is JSON, `answer_sha256`
the digest of an output that is checked, not served. A `hostcall` step's
request and answer have a fixed shape (hostcall_answers.py builds the
answer and reads its bytes back), checked when written and when read.
Digests are sha256 of canonical JSON (sorted keys, no spaces, ASCII).
Lines are ASCII (`\\u` escapes), so every store keeps them as plain text.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from spearpy import __version__, _json
from spearpy.journal._jsonenc import canonical as canonical
from spearpy.journal._jsonenc import line_text as line_text
from spearpy.journal._jsonenc import sha256_json as sha256_json
from spearpy.journal.errors import JournalCorrupt, JournalError, shown
from spearpy.journal.hostcall_answers import b64_field, scrub_bytes
from spearpy.journal.hostcall_answers import hostcall_answer as hostcall_answer
from spearpy.journal.hostcall_answers import hostcall_writes as hostcall_writes
from spearpy.journal.shapes import start_flags
from spearpy.observe.scrub import SecretScrubber

FORMAT_VERSION = 1
START = "start"
END = "end"
REQUEST_INLINE_MAX = 4096
"""A request whose canonical JSON is longer is stored as its sha256: replay
compares it whole, and the journal does not grow by what the guest sent."""
STDIN_STORED_MAX = 1 << 20
"""Longer stdin is stored as its digest only: a resume must be given it again."""
MAX_OUTCOME_CHARS = 64
"""An end record stays small, so it is written even when the journal is full."""
HOSTCALL = "hostcall"


class Codec(StrEnum):
    """How a kind's answer is stored."""

    JSON = "json"
    DIGEST = "digest"  # checked, not served: its sha256 in `answer_sha256`


_ANSWER_KEY = {Codec.JSON: "answer", Codec.DIGEST: "answer_sha256"}


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of outside-world answer the guest observes."""

    name: str
    answer: Codec = Codec.JSON
    digest_request: bool = False  # the whole request kept as its sha256
    digest_fields: tuple[str, ...] = ()  # these request fields kept as <field>_sha256
    replayed: bool = True  # False: re-executed on replay, its answer only checked


KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    # Any hostcall whose answer depends on the outside world (a clock,
    # randomness, readiness, what a client, microphone or ASR server sent),
    # journaled at the hostcall-family seam: request {"call", "args"},
    # answer {"rc", "writes": [[guest address, base64]], "t": ms into the run}.
    Kind(HOSTCALL),
    # One completion of a send: the request body's digest, the result.
    Kind("chat.completion", digest_request=True),
    # A call of a tool that is not the guest's (MCP, Python): source, name,
    # the arguments' digest; the outcome.
    Kind("tool.outcome", digest_fields=("arguments",)),
    # A guest tool's output, re-made on replay and checked against its digest.
    Kind("guest_tool.output", Codec.DIGEST, digest_fields=("arguments",), replayed=False),
)}


@dataclass(frozen=True, slots=True)
class Start:
    """Step 0: what the run was started with. Environment names, never values."""

    module_sha256: str
    argv: tuple[str, ...]
    env_names: tuple[str, ...]
    stdin_sha256: str
    stdin_length: int
    stdin: bytes | None  # None: longer than STDIN_STORED_MAX, or it held a secret
    limits: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)
    spearpy_version: str = __version__
    format_version: int = FORMAT_VERSION
    seq: int = 0
    kind: str = START

    @classmethod
    def of_run(cls, *, module: bytes, argv: Iterable[str], env: Iterable[str], stdin: bytes,
               limits: dict[str, Any], flags: dict[str, Any],
               scrubber: SecretScrubber) -> Start:
        """The start record of a run. `env` may be the environment itself:
        iterating a mapping gives its names, and only names are kept."""
        held = stdin if len(stdin) <= STDIN_STORED_MAX and scrub_bytes(stdin, scrubber) is stdin \
            else None
        return cls(module_sha256=hashlib.sha256(module).hexdigest(),
                   argv=tuple(scrubber.text(str(a)) for a in argv),
                   env_names=tuple(sorted({str(name) for name in env})),
                   stdin_sha256=hashlib.sha256(stdin).hexdigest(), stdin_length=len(stdin),
                   stdin=held, limits=scrubber.value(limits), flags=scrubber.value(flags))


@dataclass(frozen=True, slots=True)
class Step:
    """An answer from the outside world, in its stored form (see make_step)."""

    seq: int
    kind: str
    request: Any = None
    request_sha256: str | None = None  # instead of `request`
    answer: Any = None  # the sha256 hex for DIGEST kinds


@dataclass(frozen=True, slots=True)
class End:
    seq: int
    outcome: str
    exit_code: int
    kind: str = END


Record = Start | Step | End


def kind_of(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise JournalError(f"unknown journal kind {shown(name)} (known: {', '.join(KINDS)})") \
            from None


@dataclass(frozen=True, slots=True)
class Digested:
    """A request given in its stored form, its sha256 (of its canonical JSON,
    scrubbed): a completion's, which the run keeps incrementally rather than
    encoding the whole conversation again at every completion."""

    sha256: str


def stored_request(kind: Kind, request: Any, scrubber: SecretScrubber) -> tuple[Any, str | None]:
    """(request, None) or (None, its sha256), as a step of `kind` stores it:
    scrubbed, its digested fields replaced. Replay compares these forms."""
    if isinstance(request, Digested):
        if not kind.digest_request:
            raise JournalError(f"a {kind.name} request is stored whole, not as a digest")
        return None, request.sha256
    value = scrubber.value(request)
    if kind.digest_fields and isinstance(value, dict):
        value = {(f"{k}_sha256" if k in kind.digest_fields else k):
                 (sha256_json(v) if k in kind.digest_fields else v) for k, v in value.items()}
    encoded = canonical(value)
    if kind.digest_request or len(encoded) > REQUEST_INLINE_MAX:
        return None, hashlib.sha256(encoded).hexdigest()
    # As a reader decodes it (a tuple as a list, a key as a string), so the
    # request a replay is asked compares equal to the stored one.
    return json.loads(line_text(value)), None


def stored_answer(kind: Kind, answer: Any, scrubber: SecretScrubber) -> Any:
    if kind.name == HOSTCALL:
        # Its only strings are base64 of bytes scrubbed before encoding
        # (hostcall_answers.py): a text scrub cannot see into them, and a short
        # secret that happens to spell a stretch of base64 would break them.
        return answer
    if kind.answer is Codec.DIGEST:
        if isinstance(answer, bytes | bytearray | memoryview):
            return hashlib.sha256(scrub_bytes(bytes(answer), scrubber)).hexdigest()
        return sha256_json(scrubber.value(answer))
    return scrubber.value(answer)


def make_step(seq: int, kind_name: str, request: Any, answer: Any,
              scrubber: SecretScrubber) -> Step:
    kind = kind_of(kind_name)
    inline, digest = stored_request(kind, request, scrubber)
    step = Step(seq, kind.name, inline, digest, stored_answer(kind, answer, scrubber))
    try:
        _check_hostcall(step)
    except JournalCorrupt as exc:  # not corrupt yet: refused before it is stored
        raise JournalError(f"step {seq}: {exc}") from None
    return step


def _check_hostcall(step: Step) -> None:
    """JournalCorrupt when a hostcall step is not of the shape replay relies on."""
    if step.kind != HOSTCALL:
        return
    request = step.request
    if step.request_sha256 is None and not (
            isinstance(request, dict) and request.keys() == {"call", "args"}
            and isinstance(request["call"], str) and isinstance(request["args"], list)
            and all(type(arg) is int for arg in request["args"])):
        raise JournalCorrupt('a hostcall request is not {"call": str, "args": [int, ...]}')
    hostcall_writes(step.answer)


# ---- encoding ---------------------------------------------------------------------

def encode(record: Record) -> bytes:
    """The record as one line of ASCII JSON, without the newline."""
    obj: dict[str, Any] = {"seq": record.seq, "kind": record.kind}
    if isinstance(record, Step):
        kind = kind_of(record.kind)
        if record.request_sha256 is not None:
            obj["request_sha256"] = record.request_sha256
        else:
            obj["request"] = record.request
        obj[_ANSWER_KEY[kind.answer]] = record.answer
    elif isinstance(record, Start):
        obj.update(format=record.format_version, spearpy=record.spearpy_version,
                   module_sha256=record.module_sha256, argv=list(record.argv),
                   env_names=list(record.env_names), stdin_sha256=record.stdin_sha256,
                   stdin_length=record.stdin_length,
                   stdin_base64=None if record.stdin is None
                   else base64.b64encode(record.stdin).decode("ascii"),
                   limits=record.limits, flags=record.flags)
    else:
        obj.update(outcome=record.outcome, exit_code=record.exit_code)
    try:
        return line_text(obj).encode("ascii")
    except (TypeError, ValueError, RecursionError) as exc:
        raise JournalError(f"step {record.seq} ({record.kind}) is not JSON: {exc}") from exc


def decode(line: bytes | str) -> Record:
    """A record from its line; JournalCorrupt saying what is wrong with it."""
    try:
        # A record holds a value a run parsed at MAX_JSON_DEPTH (a
        # completion's body) two levels down: the record, its answer.
        obj = _json.loads(line, max_containers=None, max_depth=_json.MAX_JSON_DEPTH + 2)
    except ValueError as exc:  # not JSON, not text, or a number too long to convert
        raise JournalCorrupt(f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise JournalCorrupt("not a JSON object")
    fields = _Fields(obj)
    seq, name = fields.take("seq", int), fields.take("kind", str)
    if seq < 0:
        raise JournalCorrupt(f"negative seq {seq}")
    record: Record
    if name == START:
        record = _decode_start(fields)
    elif name == END:
        record = End(seq, fields.take("outcome", str), fields.take("exit_code", int))
        if len(record.outcome) > MAX_OUTCOME_CHARS:  # as the writer refuses
            raise JournalCorrupt(f"an end record's outcome is longer than {MAX_OUTCOME_CHARS} "
                                 "characters")
    else:
        record = _decode_step(seq, name, fields)
    fields.done()
    return record


def _decode_start(fields: _Fields) -> Start:
    version = fields.take("format", int)
    if version > FORMAT_VERSION:
        raise JournalCorrupt(f"journal format {version} is newer than this spearpy reads "
                             f"({FORMAT_VERSION})")
    stdin = fields.take("stdin_base64", str, optional=True)
    return Start(spearpy_version=fields.take("spearpy", str),
                 module_sha256=fields.take("module_sha256", str),
                 argv=tuple(fields.take_strings("argv")),
                 env_names=tuple(fields.take_strings("env_names")),
                 stdin_sha256=fields.take("stdin_sha256", str),
                 stdin_length=fields.take("stdin_length", int),
                 stdin=None if stdin is None else b64_field(stdin),
                 limits=fields.take("limits", dict), flags=start_flags(fields.take("flags", dict)),
                 format_version=version)


def _decode_step(seq: int, name: str, fields: _Fields) -> Step:
    kind = KINDS.get(name)
    if kind is None:
        raise JournalCorrupt(f"unknown kind {shown(name)}")
    digest = fields.take("request_sha256", str, optional=True)
    request = None if digest is not None else fields.take_any("request")
    key = _ANSWER_KEY[kind.answer]
    answer = fields.take(key, str) if kind.answer is Codec.DIGEST else fields.take_any(key)
    step = Step(seq, name, request, digest, answer)
    _check_hostcall(step)
    return step


class _Fields:
    """Takes an object's fields by name and type; any left over is an error
    (a journal must be exact: nothing in it may be ignored)."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self._obj = dict(obj)

    def take_any(self, key: str) -> Any:
        if key not in self._obj:
            raise JournalCorrupt(f"no {key!r}")
        return self._obj.pop(key)

    def take(self, key: str, kind: type[Any], *, optional: bool = False) -> Any:
        value = self._obj.pop(key, None)
        if value is None and optional:
            return None
        # bool is an int to Python, never to the journal
        if type(value) is not kind and not (kind is float and type(value) is int):
            raise JournalCorrupt(f"{key!r} is not {kind.__name__}")
        return float(value) if kind is float else value

    def take_strings(self, key: str) -> list[str]:
        value = self.take(key, list)
        if not all(isinstance(item, str) for item in value):
            raise JournalCorrupt(f"{key!r} is not a list of strings")
        return value  # type: ignore[no-any-return]

    def done(self) -> None:
        if self._obj:
            raise JournalCorrupt(f"unexpected field(s) {', '.join(map(shown, self._obj))}")
