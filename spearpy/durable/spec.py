"""Where a run's journal lives, what the run does with it, and opening it.

`JournalSpec(path)` names a journal: a `.jsonl` file (its directory is the
store, its stem the id), or a store (`sqlite:FILE`, `postgresql://...`, a
directory) with `journal_id`. A run given one:

- `record` (the default): a new journal is started; an existing one that has
  not ended is resumed (its steps replayed, then the run goes on live,
  appending), provided the run is started as the journaled one was (same
  module, arguments, stdin and flags; else `replay_diverged` at step 0);
- `replay`: the journal's steps answer and nothing is appended; the run stops
  where the journal does (or before step `until`);
- `fork`: the journal's steps up to `until` answer, copied into the journal
  `fork_into` names, and from there the run goes on live with its own flags.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from spearpy.config import HostConfig
from spearpy.context import RunContext, RunOptions
from spearpy.durable.run_journal import RunJournal
from spearpy.journal import (
    DEFAULT_MAX_JOURNAL_BYTES,
    FileJournalStore,
    JournalError,
    JournalReader,
    JournalStore,
    JournalWriter,
    Start,
    SyncPolicy,
    open_store,
)
from spearpy.journal.records import STDIN_STORED_MAX
from spearpy.journal.writer import MIN_SECRET_LENGTH

if TYPE_CHECKING:
    from spearpy.outcome import RunResult

Mode = Literal["record", "replay", "fork"]
# What a replay or fork must share with the journaled run (a fork's flags differ).
_SAME_RUN = ("module_sha256", "argv", "stdin_sha256")


@dataclass(frozen=True, slots=True)
class JournalSpec:
    path: str | os.PathLike[str]
    journal_id: str | None = None
    mode: Mode = "record"
    sync: SyncPolicy = SyncPolicy.SEND
    max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES
    until: int | None = None  # replay: stop before this step; fork: go live after it
    fork_into: JournalSpec | None = None

    def locate(self) -> tuple[JournalStore, str]:
        """(the store, the journal's id)."""
        text = os.fspath(self.path)
        if text.endswith(".jsonl") and not text.startswith(("sqlite:", "postgres")):
            path = Path(text)
            return FileJournalStore(path.parent if str(path.parent) else "."), path.stem
        if self.journal_id is None:
            raise JournalError(f"journal store {text!r}: name the journal (journal_id), or "
                               "give a .jsonl file")
        return open_store(text), self.journal_id


def read_start(spec: JournalSpec) -> Start:
    """Step 0 of the journal `spec` names: how its run was started."""
    store, journal_id = spec.locate()
    try:
        return JournalReader(store, journal_id).start
    finally:
        store.close()


def open_run_journal(spec: JournalSpec, start: Start, secrets: list[str]) -> RunJournal:
    """The RunJournal of a run started as `start` says. ReplayDiverged when
    it is not the journaled run; JournalBusy when another writer holds it."""
    store, journal_id = spec.locate()
    if spec.mode == "replay":
        reader = JournalReader(store, journal_id, secrets=secrets)
        reader.check_start(start, _SAME_RUN)
        # RunJournal's `until` is the last step it serves; a replay stops before its own.
        last = spec.until - 1 if spec.until is not None else None
        return RunJournal(reader=reader, until=last)
    if spec.mode == "fork":
        if spec.fork_into is None:
            raise JournalError("a fork needs the journal to write (fork_into)")
        reader = JournalReader(store, journal_id, secrets=secrets)
        reader.check_start(start, _SAME_RUN)
        new_store, new_id = spec.fork_into.locate()
        writer = _new_writer(spec.fork_into, new_store, new_id, start, secrets)
        return RunJournal(reader=reader, writer=writer, until=spec.until, copy=True)
    existing = store.info(journal_id)
    if existing is None:
        return RunJournal(writer=_new_writer(spec, store, journal_id, start, secrets))
    if existing.ended:
        raise JournalError(f"journal {journal_id!r} has ended: its run is over (replay it "
                           "with `spearpy replay`, or journal this run elsewhere)")
    # Not validated on opening: the reader decodes and checks every record
    # before the run goes live and appends (one pass over the journal, not two).
    writer = JournalWriter.open(store, journal_id, secrets=secrets, max_bytes=spec.max_bytes,
                                sync=spec.sync, buffered=True, validate=False)
    try:
        reader = JournalReader(store, journal_id, secrets=secrets)
        reader.check_start(start)
    except BaseException:
        writer.close()
        raise
    return RunJournal(reader=reader, writer=writer)


def _new_writer(spec: JournalSpec, store: JournalStore, journal_id: str, start: Start,
                secrets: list[str]) -> JournalWriter:
    writer = JournalWriter.open(store, journal_id, secrets=secrets, max_bytes=spec.max_bytes,
                                sync=spec.sync, buffered=True)
    try:
        writer.write_start(start)
        writer.sync()
    except BaseException:
        writer.close()
        raise
    return writer


def run_start(*, module_sha256: str, argv: list[str], env_names: list[str], stdin: bytes,
              limits: dict[str, Any], flags: dict[str, Any], secrets: list[str]) -> Start:
    """The start record of a run (Start.of_run, for a module known by digest)."""
    from spearpy.observe.scrub import SecretScrubber

    scrubber = SecretScrubber(secrets, min_length=MIN_SECRET_LENGTH)
    start = Start.of_run(module=b"", argv=argv, env=env_names, stdin=stdin, limits=limits,
                         flags=flags, scrubber=scrubber)
    return replace(start, module_sha256=module_sha256)


def run_arguments(start: Start, *, module: object = None,
                  stdin: bytes | None = None) -> dict[str, Any]:
    """Host.run's arguments to start the run `start` records again: its
    module (or `module`, when the file moved or the run was given bytes),
    argv, the environment's names (their values read again from this
    process's environment), stdin (or `stdin`, when the journal keeps only
    its digest), dirs, invoke, and the run's own limits (its timeout among
    them: the resumed run gets what was left of it)."""
    run = start.flags.get("run", {})
    where = module if module is not None else start.flags.get("module")
    if not where:
        raise JournalError("the journal names no module file (its run was given bytes): "
                           "give the module")
    if start.flags.get("module") is None and isinstance(where, (str, os.PathLike)):
        # Its run was given bytes (a service's, a worker's): so is this one,
        # or its start would name a file the journaled one did not.
        try:
            where = Path(where).read_bytes()
        except OSError as exc:
            raise JournalError(f"cannot read the module {str(where)!r}: {exc.strerror}") \
                from None
    given = start.stdin if start.stdin is not None else stdin
    if given is None and start.stdin_length:
        raise JournalError("the journal keeps only a digest of its run's stdin: give it again")
    return {"module": where, "argv": list(start.argv),
            "env": dict.fromkeys(start.env_names) or None, "stdin": given or None,
            "inherit_env": bool(run.get("inherit_env")),
            "dirs": [(d[0], d[1]) for d in run.get("dirs", [])] or None,
            "invoke": run.get("invoke"), "limits": dict(start.limits) or None}


# HostConfig fields that change where things are kept, not what a run does
# (max_parallel_tools: how many calls overlap, not what any call answers; a
# batch's journal reads as calls made one by one, so a resume may choose).
_NOT_BEHAVIOUR = frozenset({"cache_dir", "module_cache_bytes", "max_parallel_tools"})


def journaled_host_flags(start: Start) -> dict[str, Any]:
    """The host flags the journaled run had that a run started from it takes:
    not where things are kept, which run_flags never records. A hand-made
    journal naming them would choose the module cache wasmtime loads
    compiled code from unchecked (native code a bug report put there)."""
    host: dict[str, Any] = start.flags.get("host") or {}
    return {k: v for k, v in host.items() if k not in _NOT_BEHAVIOUR}


def run_flags(config: HostConfig, options: RunOptions,
              module: str | os.PathLike[str] | None) -> dict[str, Any]:
    """What a journal records of how its run was started, beside argv, the
    environment's names and stdin: the host's flags (those that change what
    a run does), the run's options and the module's path when it has one."""
    host = {k: v for k, v in config.model_dump(mode="json", exclude_defaults=True).items()
            if k not in _NOT_BEHAVIOUR}
    # A mount's host side as an absolute path: a resume may run elsewhere.
    dirs = [[os.path.abspath(host_path), guest_path] for host_path, guest_path in options.dirs]
    run = {"inherit_env": options.inherit_env, "dirs": dirs,
           "invoke": options.invoke}
    return {"host": host, "run": run,
            "module": os.path.abspath(module) if module is not None else None}


def bind_journal(run: RunContext, spec: JournalSpec, config: HostConfig, module_sha256: str,
                 module: str | os.PathLike[str] | None, secrets: list[str]) -> RunResult | None:
    """Give `run` (about to start as its options say) the journal `spec`
    names (`module`: the module's path, when it was given one); the result of
    a run that is not the journaled one (replay_mismatch at step 0, nothing
    run), or None."""
    from spearpy.journal import ReplayDiverged
    from spearpy.outcome import Outcome, RunResult, exit_code_for

    options = run.options
    start = run_start(module_sha256=module_sha256, argv=options.argv,
                      env_names=sorted(options.env or {}), stdin=options.stdin or b"",
                      limits=options.limits or {}, flags=run_flags(config, options, module),
                      secrets=secrets)
    try:
        run.journal = open_run_journal(spec, start, secrets)
    except ReplayDiverged as exc:
        return RunResult(run_id=run.run_id, outcome=Outcome.REPLAY_MISMATCH,
                         exit_code=exit_code_for(Outcome.REPLAY_MISMATCH), message=str(exc))
    run.journal.bind(run)
    return None


__all__ = ["STDIN_STORED_MAX", "JournalSpec", "Mode", "bind_journal", "journaled_host_flags",
           "open_run_journal", "read_start", "run_arguments", "run_flags", "run_start"]
