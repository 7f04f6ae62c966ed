"""Each input's run journaled (docs/durable.md), so a batch stopped in the
middle of an input resumes that input where it was instead of from its
start: no completion its journal holds is asked again.

The journals are a directory of `<id>.jsonl` files (the file store), one per
input, written by whichever worker runs the input. No two writers share a
file, so worker processes never queue behind each other's appends, as they
would on one SQLite file. A journal's id is the input's id made file-safe
plus a digest of the id and of what a resume checks at step 0 (module,
argv, stdin, flags) and the input's own env: an input whose line, module or
flags changed gets a new journal and starts over, instead of ending as
`replay_mismatch`.

Before an input runs, its journal (if any) is made resumable:
- unfinished (the batch or its worker was killed): resumed as it is;
- ended (Ctrl-C and SIGTERM cancel the runs in flight, which ends their
  journals `cancelled`; or the run ended but its result line was never
  written): its steps without the end are copied into a file that then
  replaces it, so the run goes on from its last step;
- empty (killed before its start record): removed, the input starts over;
- damaged: set aside as `<file>.damaged` and the input starts over.

Once an input's result line is durable (the results file fsynced), its
journal is deleted, unless the batch keeps them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spearpy.batch.jobs import BatchError, BatchInput, RunSettings
from spearpy.journal.store import DEFAULT_MAX_JOURNAL_BYTES, SyncPolicy

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.durable import JournalSpec
    from spearpy.journal import FileJournalStore, JournalInfo
    from spearpy.journal.store import StoreWriter

log = logging.getLogger("spearpy.batch")

# A worker killed with its parent lets go of its journal once it has
# cancelled its runs (a few seconds); a lock held longer is another batch's.
BUSY_WAIT_S = 60.0
_BUSY_POLL_S = 0.1
# Deletions wait for this many finished inputs: one fsync of the results
# file makes all their lines durable before their journals go.
_DELETE_EVERY = 8
_REOPEN = ".reopen"  # the id suffix of an ended journal's copy being made
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
# Names the journal store would read as something other than a directory.
_NOT_A_DIRECTORY = (".jsonl", ".sqlite3", ".sqlite", ".db")


def default_directory(out: str | os.PathLike[str]) -> Path:
    """Where a batch writing `out` keeps its runs' journals."""
    target = Path(out)
    return target.with_name(target.name + ".journals")


@dataclass(frozen=True, slots=True)
class JournalPolicy:
    """How a batch journals its runs: in `directory` (None: `<out>.journals`),
    each journal made durable per `sync` and capped at `max_bytes`
    (docs/durable.md); `keep`: finished inputs' journals are kept, not deleted."""

    directory: str | os.PathLike[str] | None = None
    keep: bool = False
    sync: SyncPolicy = SyncPolicy.SEND
    max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES


class RunJournals:
    """The journals of one batch's runs. `before_delete` makes the results
    file durable."""

    def __init__(self, policy: JournalPolicy, out: str | os.PathLike[str], *,
                 module_sha256: str, config: HostConfig, settings: RunSettings,
                 before_delete: Callable[[], None]) -> None:
        from spearpy.context import RunOptions
        from spearpy.durable import run_flags
        from spearpy.journal import FileJournalStore

        directory = policy.directory if policy.directory is not None else \
            default_directory(out)
        self.directory = Path(directory).absolute()
        if self.directory.name.endswith(_NOT_A_DIRECTORY):
            raise BatchError(f"journals directory {str(self.directory)!r}: a name ending in "
                             f"{', '.join(_NOT_A_DIRECTORY)} would be read as a journal file "
                             "or database")
        self.policy = policy
        self.keep = policy.keep
        self._store: FileJournalStore = FileJournalStore(self.directory)
        self._before_delete = before_delete
        options = RunOptions(dirs=list(settings.dirs), invoke=settings.invoke)
        # What every input's step 0 shares (the flags as the run will record them).
        self._shared = [module_sha256, run_flags(config, options, None),
                        sorted(settings.env)]
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._resumed: set[str] = set()

    @property
    def resumed(self) -> int:
        """Inputs that went on from a journal an earlier batch left."""
        return len(self._resumed)

    def journal_id(self, job: BatchInput) -> str:
        identity = [job.key, list(job.argv), hashlib.sha256(job.stdin or b"").hexdigest(),
                    job.env, *self._shared]
        text = json.dumps(identity, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        return f"{_UNSAFE.sub('_', str(job.id))[:40] or 'input'}-{digest}"

    def sweep(self, todo: Iterable[BatchInput]) -> None:
        """At the batch's start: delete the journals no input still to run
        will use (finished inputs', changed inputs', half-made copies).
        The results file is made durable first: a finished input's line
        must not be lost with its journal gone."""
        wanted = {self.journal_id(job) for job in todo}
        stale = [info.id for info in self._journal_list()
                 if info.id.endswith(_REOPEN) or (not self.keep and info.id not in wanted)]
        if stale:
            self._before_delete()
        for journal_id in stale:
            self._delete(journal_id)

    def prepare(self, job: BatchInput) -> JournalSpec:
        """The journal `job`'s run writes, made resumable first (see above)."""
        from spearpy.durable import JournalSpec
        from spearpy.journal import JournalCorrupt, JournalError

        journal_id = self.journal_id(job)
        path = self._store.path_of(journal_id)
        try:
            if path.exists() and self._resumable(journal_id):
                self._resumed.add(job.key)
        except JournalCorrupt as exc:
            aside = path.with_name(path.name + ".damaged")
            log.warning("input %s: its journal cannot be read (%s); set aside as %s, the "
                        "input starts over", job.id, exc, aside)
            self._os(os.replace, path, aside)
        except JournalError as exc:
            raise BatchError(f"input {job.id!r}: {exc}") from exc
        return JournalSpec(path=str(self.directory), journal_id=journal_id,
                           sync=self.policy.sync, max_bytes=self.policy.max_bytes)

    def finished(self, job: BatchInput) -> None:
        """`job`'s result line is written: its journal goes once the line is durable."""
        if self.keep:
            return
        with self._lock:
            self._pending.append(self.journal_id(job))
            due = len(self._pending) >= _DELETE_EVERY
        if due:
            self.flush()

    def flush(self) -> None:
        """Make the written result lines durable and delete their journals."""
        with self._lock:
            pending, self._pending = self._pending, []
            if not pending:
                return
            self._before_delete()
            for journal_id in pending:
                self._delete(journal_id)

    # ---- helpers ---------------------------------------------------------------

    def _resumable(self, journal_id: str) -> bool:
        """Make an existing journal one a run resumes; whether it holds a
        step past the start."""
        writer = self._locked(journal_id)
        try:
            if writer.next_seq == 0:
                self._delete(journal_id)  # not even a start record: nothing to go on from
            elif writer.ended:
                self._reopen(journal_id)
            return writer.next_seq - writer.ended > 1
        finally:
            writer.close()

    def _locked(self, journal_id: str) -> StoreWriter:
        """The journal's writer lock: a worker of a killed batch may still
        hold it while it cancels its runs."""
        from spearpy.journal import JournalBusy

        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            try:
                return self._store.open_writer(journal_id)
            except JournalBusy:
                if time.monotonic() > deadline:
                    raise BatchError(
                        f"journal {str(self._store.path_of(journal_id))!r} stayed locked for "
                        f"{BUSY_WAIT_S:.0f} s: is another `spearpy batch` writing the same "
                        "results?") from None
                time.sleep(_BUSY_POLL_S)

    def _reopen(self, journal_id: str) -> None:
        """Replace an ended journal with its steps without the end. The copy is
        complete and synced before it replaces the journal; a copy a crash
        cut short is another id, removed by the next sweep."""
        from spearpy.journal import encode
        from spearpy.journal.filestore import _sync_dir
        from spearpy.journal.records import END

        copy_id = journal_id + _REOPEN
        self._delete(copy_id)
        with self._store.open_writer(copy_id) as copy:
            for record in self._store.records(journal_id):
                if record.kind == END:
                    break
                copy.append(record.seq, record.kind, encode(record))
            copy.sync()
        self._os(os.replace, self._store.path_of(copy_id), self._store.path_of(journal_id))
        self._os(_sync_dir, self.directory)

    def _journal_list(self) -> list[JournalInfo]:
        from spearpy.journal import JournalError

        try:
            return self._store.list()
        except (JournalError, OSError) as exc:
            raise BatchError(f"cannot list journals in {str(self.directory)!r}: {exc}") from exc

    def _delete(self, journal_id: str) -> None:
        self._os(self._store.path_of(journal_id).unlink, missing_ok=True)

    @staticmethod
    def _os(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            call(*args, **kwargs)
        except OSError as exc:
            raise BatchError(f"batch journals: {exc}") from exc
