"""Journals whose every line is well-formed JSON but whose values are hostile.

A journal is input from disk: edited by hand, copied from someone else,
crafted. File-level damage (torn tails, corrupt lines, seqs out of order) is
tested in test_journal_file.py; here real journals of real guest runs (a
run of clocks, randomness and two auto-tool sends to a Python tool and an
MCP server; a chat of guest tools; a user-stream chat; a stub microphone)
have a few of their records' *values* changed by hypothesis, and are then
replayed, resumed (Host.run, Host.resume) and shown. Whatever a journal
says, the host ends each run with a RunResult (or refuses the journal with
a SpearpyError before the run starts), says what is wrong in a short
escaped message naming the step, never hits a host bug (a hostcall failing
inside the host), never hangs (a thread joined with a guard), never writes
outside the guest's memory, and `show` lists the journal or names its
damage, never a traceback.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy.cli.show import show
from spearpy.durable import JournalSpec
from spearpy.errors import SpearpyError
from spearpy.host import Host
from spearpy.outcome import RunResult
from tests.probe import wat_module
from tests.test_durable_runs import DURABLE, SAMPLES, durable_run, tool_run, world
from tests.test_durable_streams_audio import (
    CHAT,
    MIC,
    STUB_PARAMS,
    chat_run,
    chat_world,
    mic_host,
    stub_run,
)

# fixtures, by import
__all__ = ["chat_run", "chat_world", "durable_run", "mic_host", "stub_run", "tool_run", "world"]

_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
HANG_GUARD_S = 60.0  # only a hung host waits that long; nothing asserts on time
LIMITS = {"timeout": HANG_GUARD_S / 2}
MULTI_TOOL = str(SAMPLES / "c_multi_tool.wasm")
MESSAGE_CHARS = 600  # a one-line-ish message: the damage named, not a dump of it

Record = dict[str, Any]


# ---- the journals and how each is run again -------------------------------------------


@dataclass(frozen=True)
class Case:
    """A journal of a real run, and how to run its module again with one."""

    name: str
    lines: list[str]
    run: Callable[[JournalSpec], RunResult]  # Host.run with the journal
    resume: Callable[[JournalSpec], RunResult]  # Host.resume: its start record read


@pytest.fixture(scope="module")
def tools_host() -> Iterator[Host]:
    with Host(cache_dir=None,
              backend=f"scripted:{SAMPLES / 'scripts' / 'multi_tool.json'}") as host:
        yield host


@pytest.fixture(scope="module")
def cases(world: Any, durable_run: Any, tool_run: Any, chat_world: Any, chat_run: Any,
          tools_host: Host, mic_host: Host, stub_run: Any) -> dict[str, Case]:
    w, c = world.host, chat_world.host
    mic_argv = [STUB_PARAMS, "40"]
    return {case.name: case for case in (
        Case("clocks", durable_run.lines,
             lambda spec: w.run(DURABLE, journal=spec, limits=LIMITS),
             lambda spec: w.resume(spec, module=DURABLE, limits=LIMITS)),
        Case("guest_tools", tool_run.lines,
             lambda spec: tools_host.run(MULTI_TOOL, journal=spec, limits=LIMITS),
             lambda spec: tools_host.resume(spec, limits=LIMITS)),
        Case("user_stream", chat_run.lines,
             lambda spec: c.run(CHAT, ["--summary"], journal=spec, limits=LIMITS),
             lambda spec: c.resume(spec, limits=LIMITS)),
        Case("mic", stub_run.lines,
             lambda spec: mic_host.run(MIC, mic_argv, journal=spec, limits=LIMITS),
             lambda spec: mic_host.resume(spec, limits=LIMITS)),
    )}


# ---- mutations: each takes the records and returns them changed ------------------------

HOSTILE_VALUES = [None, "", "x", "0", [], {}, [1, 2], {"a": 1}, 1.5, -1, 0, 2**80, -(2**80),
                  2**63, True, False, "\u001b[31mred\u0007\n", "é" * 3, 10**30, -0.0, 1e308,
                  -1e300, float("nan"), float("inf"), 10**400]
# Guest addresses no guest here has memory at (their memories are far smaller).
HOSTILE_ADDRESSES = [2**31, 2**32 - 1, 2**32 - 4, 2**32, 2**32 + 16, 2**40, 2**64 + 8,
                     0x7FFF_FFF0]
HOSTILE_DATA = ["!!not base64!!", "AAE", "deadbeef", "AAECAw==" * 40_000, "AAAA" * 300_000, "",
                "====", "AAECAw==\n", " AAECAw==", "aGVsbG8=" + "A" * 3]
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
HOSTILE_BODIES: list[Any] = [
    [], "text", 7, None, {}, {"choices": None}, {"choices": []}, {"choices": {}},
    {"choices": [None]}, {"choices": [{"message": None}]},
    {"choices": [{"message": {"role": "assistant", "content": 5}}]},
    {"choices": [{"message": {"role": "assistant", "content": None,
                              "tool_calls": [TOOL_CALL] * 10_000}}]},
    {"choices": [{"message": {"role": "assistant",
                              "tool_calls": [{**TOOL_CALL, "function": {"name": "add",
                                                                        "arguments": {}}}]}}]},
    {"choices": [{"message": {"role": "assistant",
                              "tool_calls": [{**TOOL_CALL, "function": {"name": 5,
                                                                        "arguments": 5}}]}}]},
    {"choices": [{"message": {"role": "assistant", "tool_calls": "all"}}]},
    {"choices": [{"message": {"role": "assistant", "tool_calls": [None, 1, "x"]}}]},
    {"choices": [{"finish_reason": 5, "message": {"role": 5, "content": "hi"}}],
     "usage": {"prompt_tokens": "many", "total_tokens": 2**80}},
]
HOSTILE_ERRORS: list[Any] = [[], "boom", 5, {}, {"code": 5}, {"kind": "x", "nonsense": 1},
                             {"message": None, "status": "x"}]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside `value` (a record), itself first."""
    yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*path, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value[:8]):  # a long list: its first few
            yield from _paths(inner, (*path, i))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _set(record: Record, path: tuple[Any, ...], new: Any) -> None:
    _at(record, path[:-1])[path[-1]] = new


def _renumbered(records: list[Record]) -> list[Record]:
    for seq, record in enumerate(records):
        if isinstance(record, dict) and "seq" in record:
            record["seq"] = seq
    return records


@st.composite
def _retyped(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    i = draw(st.integers(0, len(records) - 1), label="record")
    paths = [p for p in _paths(records[i]) if p]
    path = draw(st.sampled_from(paths), label="value at")
    _set(records[i], path, draw(st.sampled_from(HOSTILE_VALUES), label="becomes"))
    return records


@st.composite
def _keys_changed(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    i = draw(st.integers(0, len(records) - 1), label="record")
    dicts = [p for p in _paths(records[i]) if isinstance(_at(records[i], p), dict)
             and _at(records[i], p)]
    if not dicts:
        return records
    path = draw(st.sampled_from(dicts), label="object at")
    target = _at(records[i], path)
    if draw(st.booleans(), label="drop a key (else add one)"):
        del target[draw(st.sampled_from(sorted(target)), label="key")]
    else:
        target[draw(st.sampled_from(["extra", "seq", "t", "rc", "error", "answer"]),
                    label="key")] = draw(st.sampled_from(HOSTILE_VALUES), label="value")
    return records


def _indexes(records: list[Record], kind: str) -> list[int]:
    return [i for i, r in enumerate(records) if r.get("kind") == kind]


@st.composite
def _hostile_write(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    hostcalls = [i for i in _indexes(records, "hostcall") if isinstance(
        records[i].get("answer"), dict) and isinstance(records[i]["answer"].get("writes"), list)]
    if not hostcalls:
        return records
    i = draw(st.sampled_from(hostcalls), label="hostcall record")
    writes = records[i]["answer"]["writes"]
    address = draw(st.sampled_from(HOSTILE_ADDRESSES) | st.integers(0, 2**32 + 64),
                   label="address")
    data = draw(st.sampled_from(HOSTILE_DATA) | st.just("AAECAwQFBgc="), label="data")
    if writes and draw(st.booleans(), label="change a write (else add one)"):
        writes[draw(st.integers(0, len(writes) - 1))] = [address, data]
    else:
        writes.append([address, data])
    return records


@st.composite
def _odd_rc(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    hostcalls = [i for i in _indexes(records, "hostcall")
                 if isinstance(records[i].get("answer"), dict)]
    if not hostcalls:
        return records
    i = draw(st.sampled_from(hostcalls), label="hostcall record")
    records[i]["answer"]["rc"] = draw(st.sampled_from(
        [None, 2**80, -(2**80), 2**63, -(2**63) - 1, 2**64, 2**32, 2**31, -1, 10**400]),
        label="rc")
    return records


@st.composite
def _hostile_completion(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    completions = [i for i in _indexes(records, "chat.completion")
                   if isinstance(records[i].get("answer"), dict)]
    if not completions:
        return records
    i = draw(st.sampled_from(completions), label="completion record")
    answer = records[i]["answer"]
    which = draw(st.sampled_from(["body", "error", "answer", "backend", "latency_ms"]),
                 label="what")
    if which == "body":
        answer["body"] = draw(st.sampled_from(HOSTILE_BODIES), label="body")
    elif which == "error":
        answer["error"] = draw(st.sampled_from(HOSTILE_ERRORS), label="error")
    elif which == "answer":
        records[i]["answer"] = draw(st.sampled_from(HOSTILE_VALUES), label="answer")
    else:
        answer[which] = draw(st.sampled_from(HOSTILE_VALUES), label=which)
    return records


@st.composite
def _reordered(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    i = draw(st.integers(1, len(records) - 1), label="record")
    if draw(st.booleans(), label="duplicate (else swap)"):
        records.insert(i, copy.deepcopy(records[i]))
    else:
        j = draw(st.integers(1, len(records) - 1), label="swapped with")
        records[i], records[j] = records[j], records[i]
    return _renumbered(records)


@st.composite
def _renamed(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    i = draw(st.integers(0, len(records) - 1), label="record")
    records[i]["kind"] = draw(st.sampled_from(
        ["start", "end", "hostcall", "chat.completion", "tool.outcome", "guest_tool.output",
         "Hostcall", "hostcall ", "", "\u001b[2J"]), label="kind")
    return records


@st.composite
def _odd_end(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    end = records[-1]
    if end.get("kind") != "end":
        return records
    end[draw(st.sampled_from(["outcome", "exit_code"]), label="field")] = draw(
        st.sampled_from([*HOSTILE_VALUES, "exited", "timeout", "x" * 10_000, 138, 255, 256]),
        label="becomes")
    return records


@st.composite
def _odd_start(draw: st.DrawFn, records: list[Record]) -> list[Record]:
    flags = records[0].get("flags")
    if not (isinstance(flags, dict) and isinstance(flags.get("run"), dict)):
        return records
    where = draw(st.sampled_from(["flags", "run", "host", "dirs", "module", "invoke", "limits",
                                  "argv", "env_names", "stdin"]), label="start field")
    value = draw(st.sampled_from(HOSTILE_VALUES), label="becomes")
    if where == "flags":
        flags[draw(st.sampled_from(["run", "host", "module"]))] = value
    elif where in ("run", "host"):
        target = flags.get(where)
        if isinstance(target, dict) and target and draw(st.booleans()):
            target[draw(st.sampled_from(sorted(target)))] = value
        else:
            flags[where] = value
    elif where == "dirs":
        flags["run"]["dirs"] = draw(st.sampled_from(
            [[[1, 2]], [["/tmp"]], [None], "ab", [["/nonexistent-dir-xyz", "/x"]], [[], []]]))
    elif where in ("module", "invoke"):
        (flags if where == "module" else flags["run"])[where] = value
    elif where == "limits":
        records[0]["limits"] = {"timeout": value}
    elif where == "argv":
        records[0]["argv"] = draw(st.sampled_from([["a" * 100_000], ["\u0000"], [], ["x"] * 500]))
    elif where == "env_names":
        records[0]["env_names"] = draw(st.sampled_from([["A=B"], ["\u0000"], [""], ["X"] * 500]))
    else:
        records[0]["stdin_base64"] = draw(st.sampled_from(HOSTILE_DATA))
    return records


MUTATIONS = [_retyped, _keys_changed, _hostile_write, _odd_rc, _hostile_completion, _reordered,
             _renamed, _odd_end, _odd_start]


@st.composite
def mutated(draw: st.DrawFn, lines: list[str]) -> list[Record]:
    records = [json.loads(line) for line in lines]
    for _ in range(draw(st.integers(1, 3), label="mutations")):
        mutation = draw(st.sampled_from(MUTATIONS), label="mutation")
        records = draw(mutation(records))
    return records


# ---- what must hold whatever the journal says ------------------------------------------


def _bounded(call: Callable[[], Any]) -> Any:
    """call() on a thread, its result or the exception it raised; a hang fails the test."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # judged by the caller
            out.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), f"the host did not end within {HANG_GUARD_S} s"
    return out[0]


def _clear(message: str) -> None:
    assert message and len(message) <= MESSAGE_CHARS, f"not a short message: {message[:2000]!r}"
    assert "Traceback" not in message and message.count("\n") <= 2, message
    assert all(c.isprintable() or c == "\n" for c in message), f"unescaped: {message!r}"


def _judged(got: Any, what: str, refusals: tuple[type[Exception], ...] = (SpearpyError,)
            ) -> None:
    """A RunResult with a clear message when it did not exit, or one of
    `refusals` raised before the run started; never anything else."""
    if isinstance(got, refusals):
        _clear(str(got))
        return
    assert isinstance(got, RunResult), f"{what} raised {type(got).__name__}: {got}"
    if got.outcome in ("replay_mismatch", "host_error"):
        _clear(got.message)
        assert "step" in got.message or "journal" in got.message, (what, got.message)


def _write(records: list[Record], path: Path) -> Path:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path


def _shown(path: Path) -> None:
    for args in ([str(path)], [str(path), "--json"]):
        shown = CliRunner().invoke(show, args)
        assert shown.exception is None or isinstance(shown.exception, SystemExit), (
            f"show {args} raised {type(shown.exception).__name__}: {shown.exception}")
        if shown.exit_code != 0:
            assert shown.exit_code == 2 and shown.stderr.startswith("spearpy show: "), \
                shown.output
            _clear(shown.stderr.strip())


def _out_of_memory(records: list[Record]) -> bool:
    """Whether a hostcall record writes where no guest here has memory."""
    for record in records:
        answer = record.get("answer") if record.get("kind") == "hostcall" else None
        writes = answer.get("writes") if isinstance(answer, dict) else None
        for write in writes if isinstance(writes, list) else []:
            if isinstance(write, list) and write and type(write[0]) is int \
                    and write[0] >= 2**31:
                return True
    return False


def check_hostile(case: Case, records: list[Record], where: Path,
                  host_bugs: list[str]) -> None:
    host_bugs.clear()
    _shown(_write(records, where / "shown.jsonl"))
    replayed = _bounded(lambda: case.run(JournalSpec(_write(records, where / "r.jsonl"),
                                                     mode="replay")))
    _judged(replayed, "replay")
    if _out_of_memory(records) and isinstance(replayed, RunResult):
        assert replayed.outcome == "replay_mismatch", (replayed.outcome, replayed.message)
    # A resume goes on live past the journal: without its end record, so it may.
    unended = records[:-1] if records and records[-1].get("kind") == "end" else records
    resumed = _bounded(lambda: case.run(JournalSpec(_write(unended, where / "c.jsonl"))))
    _judged(resumed, "resume (Host.run)")
    again = _bounded(lambda: case.resume(JournalSpec(_write(unended, where / "h.jsonl"))))
    # Host.resume refuses the journal's inputs (an argv or an env name no run
    # starts with, a mount gone since) with a JournalError, as `spearpy
    # resume` reports: "the journaled run cannot start here".
    _judged(again, "Host.resume")
    assert host_bugs == []


# ---- the property, and the examples it found ----------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=_FIXTURES)
@given(data=st.data())
@pytest.mark.parametrize("name", ["clocks", "guest_tools", "user_stream", "mic"])
def test_a_journal_of_hostile_values_is_refused_clearly(
        name: str, cases: dict[str, Case], host_bugs: list[str],
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    case = cases[name]
    records = data.draw(mutated(case.lines), label="journal")
    check_hostile(case, records, tmp_path_factory.mktemp("hostile"), host_bugs)


# Each bug the property found, kept as its own case: the step a replay
# must stop at, and what its message must say.


def _records(case: Case) -> list[Record]:
    return [json.loads(line) for line in case.lines]


def _first(records: list[Record], kind: str, call: str | None = None) -> Record:
    return next(r for r in records if r["kind"] == kind
                and (call is None or r["request"]["call"] == call))


def _stops_at(result: RunResult, record: Record, words: str) -> None:
    assert result.outcome == "replay_mismatch", (result.outcome, result.message)
    assert f"step {record['seq']} " in result.message and words in result.message, \
        result.message
    _clear(result.message)


NAN = float("nan")


@pytest.mark.parametrize(("field", "value", "words"), [
    ("error", "boom", "answer's 'error' is not an object or null"),
    ("error", {"kind": "x", "message": "m"}, "answer's error has no 'code'"),
    ("error", {"code": "c", "message": "m", "extra": 1}, "unexpected field 'extra'"),
    ("latency_ms", "", "'latency_ms' is not a number of ms"),
    ("t", NAN, "'t' is not a number of ms"),
    ("t", -1e300, "'t' is not a number of ms"),
    ("body", [], "'body' is not an object or null"),
    ("backend", None, "'backend' is not a string"),
    (None, [], "answer is not an object"),
])
def test_a_completion_answer_that_is_no_completion_stops_the_replay_at_its_step(
        cases: dict[str, Case], host_bugs: list[str], tmp_path: Path, field: str | None,
        value: Any, words: str) -> None:
    """Was: a host bug (TypeError building the result, the guest got EIO)."""
    records = _records(cases["clocks"])
    completion = _first(records, "chat.completion")
    if field is None:
        completion["answer"] = value
    else:
        completion["answer"][field] = value
    replayed = cases["clocks"].run(JournalSpec(_write(records, tmp_path / "r.jsonl"),
                                               mode="replay"))
    _stops_at(replayed, completion, words)
    assert host_bugs == []


@pytest.mark.parametrize(("field", "value", "words"), [
    ("ok", "yes", "'ok' is not a boolean"),
    ("output", 5, "'output' is not a string"),
    ("rc", 1.5, "'rc' is not an int or null"),
    ("weight", 1, "unexpected field 'weight'"),
])
def test_a_tool_outcome_that_is_no_outcome_stops_the_replay_at_its_step(
        cases: dict[str, Case], host_bugs: list[str], tmp_path: Path, field: str, value: Any,
        words: str) -> None:
    records = _records(cases["clocks"])
    outcome = _first(records, "tool.outcome")
    outcome["answer"][field] = value
    replayed = cases["clocks"].run(JournalSpec(_write(records, tmp_path / "r.jsonl"),
                                               mode="replay"))
    _stops_at(replayed, outcome, words)
    assert host_bugs == []


def test_a_send_loop_clock_that_is_no_reading_stops_the_replay_at_its_step(
        cases: dict[str, Case], host_bugs: list[str], tmp_path: Path) -> None:
    """Was: a host bug (None / 1e6), the guest got EIO."""
    records = _records(cases["clocks"])
    clock = _first(records, "hostcall", "host.clock")
    clock["answer"]["rc"] = None
    replayed = cases["clocks"].run(JournalSpec(_write(records, tmp_path / "r.jsonl"),
                                               mode="replay"))
    _stops_at(replayed, clock, "the send loop's clock is not a reading in µs: None")
    assert host_bugs == []


@pytest.mark.parametrize("rc", [10**400, 2**64, -(2**63) - 1, 2**32, -(2**31) - 1])
def test_a_result_no_call_returns_stops_the_replay_at_its_step(
        cases: dict[str, Case], host_bugs: list[str], tmp_path: Path, rc: int) -> None:
    """Was: a host bug (the mic's replay hook charging 10**400 bytes of
    audio: OverflowError), or the guest given the result's low bits (mic_read
    returns an i32)."""
    records = _records(cases["mic"])
    read = _first(records, "hostcall", "mic.mic_read")
    read["answer"]["rc"] = rc
    replayed = cases["mic"].run(JournalSpec(_write(records, tmp_path / "r.jsonl"),
                                            mode="replay"))
    _stops_at(replayed, read, "rc is not a 32-bit int or null")
    assert host_bugs == []


@pytest.mark.parametrize(("where", "value", "words"), [
    (("flags", "run"), 5, "flags.run is not an object"),
    (("flags", "run", "dirs"), [[1, 2]], "flags.run.dirs is not [[host path, guest path]"),
    (("flags", "run", "dirs"), [["/tmp"]], "flags.run.dirs is not [[host path, guest path]"),
    (("flags", "run", "invoke"), 5, "flags.run's 'invoke' is not a string or null"),
    (("flags", "module"), 5, "flags.module is not a path or null"),
    (("flags", "host"), [], "flags.host is not an object"),
])
def test_a_start_record_no_run_can_start_from_is_refused_by_resume(
        cases: dict[str, Case], tmp_path: Path, where: tuple[str, ...], value: Any,
        words: str) -> None:
    """Was: Host.resume raising AttributeError, TypeError or IndexError."""
    records = _records(cases["guest_tools"])
    _set(records[0], where, value)
    path = _write(records[:-1], tmp_path / "j.jsonl")
    with pytest.raises(SpearpyError) as refused:
        cases["guest_tools"].resume(JournalSpec(path))
    assert "line 1" in str(refused.value) and words in str(refused.value), str(refused.value)
    _clear(str(refused.value))
    _shown(path)


@pytest.mark.parametrize(("where", "value", "words"), [
    (("argv",), ["a\0b"], "argv entries cannot contain NUL"),
    (("env_names",), ["A=B"], "env names must be non-empty and without '='"),
    (("flags", "run", "dirs"), [["/nonexistent-spearpy-mount", "/data"]], "is not a directory"),
])
def test_inputs_no_run_starts_with_are_a_journal_error_from_resume(
        cases: dict[str, Case], tmp_path: Path, where: tuple[str, ...], value: Any,
        words: str) -> None:
    """Was: Host.resume raising the ValueError Host.run refuses its inputs with."""
    from spearpy.journal import JournalError

    records = _records(cases["guest_tools"])
    _set(records[0], where, value)
    path = _write(records[:-1], tmp_path / "j.jsonl")
    with pytest.raises(JournalError, match="the journaled run cannot start here") as refused:
        cases["guest_tools"].resume(JournalSpec(path))
    assert words in str(refused.value)


def test_a_write_outside_the_guests_memory_stops_the_replay_at_its_step(
        cases: dict[str, Case], host_bugs: list[str], tmp_path: Path) -> None:
    records = _records(cases["clocks"])
    clock = _first(records, "hostcall", "wasi.clock_time_get")
    clock["answer"]["writes"][0][0] = 2**31
    replayed = cases["clocks"].run(JournalSpec(_write(records, tmp_path / "r.jsonl"),
                                               mode="replay"))
    _stops_at(replayed, clock, "[2147483648, 2147483656) is outside guest memory")
    assert host_bugs == []


def test_a_write_address_past_32_bits_is_refused(cases: dict[str, Case],
                                                 tmp_path: Path) -> None:
    """Was: guest memory masked it to 32 bits, so the bytes were written where
    the journal does not say (here, where the run wrote them), and the
    replay exited as if the journal were right."""
    records = _records(cases["clocks"])
    step = _first(records, "hostcall", "wasi.clock_time_get")
    step["answer"]["writes"][0][0] += 2**32
    replayed = cases["clocks"].run(JournalSpec(_write(records, tmp_path / "r.jsonl"),
                                               mode="replay"))
    assert replayed.outcome == "replay_mismatch", (replayed.outcome, replayed.message)
    assert f"line {step['seq'] + 1}: a hostcall write's address" in replayed.message, \
        replayed.message
    _clear(replayed.message)


SPIN = wat_module("clock_spin.wat", {"500000000": "1"})  # two readings, then spins


def test_a_journal_going_back_in_time_gives_a_resume_no_more_than_its_timeout(
        make_host: Callable[..., Host], tmp_path: Path) -> None:
    """Was: a reading at t -1e300 ms made the resumed run's deadline
    ~1e297 s away, and a spinning guest ran on past its timeout."""
    host = make_host(base_url="http://127.0.0.1:9/v1")
    path = tmp_path / "spin.jsonl"
    first = host.run(SPIN, journal=JournalSpec(path), limits={"timeout": 0.5})
    assert first.outcome == "timeout", first.message
    records = [json.loads(line) for line in path.read_text().splitlines()][:2]
    records[1]["answer"]["t"] = -1e300
    _write(records, path)
    resumed = _bounded(lambda: host.run(SPIN, journal=JournalSpec(path),
                                        limits={"timeout": 0.5}))
    assert isinstance(resumed, RunResult), resumed
    assert resumed.outcome == "replay_mismatch", (resumed.outcome, resumed.message)
    assert "line 2:" in resumed.message and "t is not a number of ms" in resumed.message


@pytest.mark.parametrize("outcome", ["\u001b[2J" + "x" * 10_000, "exited\n\u001b[2J"])
def test_an_end_record_a_replay_runs_into_is_named_short_and_escaped(
        cases: dict[str, Case], tmp_path: Path, outcome: str) -> None:
    """Was: its outcome in the message whole, control characters and all."""
    records = _records(cases["clocks"])
    del records[-2]  # the guest's last call: it asks past the end record
    records[-1].update(outcome=outcome, exit_code=2**80)
    path = _write(_renumbered(records), tmp_path / "r.jsonl")
    replayed = cases["clocks"].run(JournalSpec(path, mode="replay"))
    assert replayed.outcome == "replay_mismatch", (replayed.outcome, replayed.message)
    if len(outcome) > 64:
        assert f"line {len(records)}: an end record's outcome is longer than 64" in \
            replayed.message, replayed.message
    else:
        assert "the run ended there (exited\\n\\x1b[2J, exit" in replayed.message, \
            replayed.message
    _clear(replayed.message)
    assert "\u001b" not in replayed.message
