"""The journal flags of `spearpy run` (docs/durable.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from spearpy.durable import JournalSpec

F = TypeVar("F", bound=Callable[..., Any])
SYNC_POLICIES = ("send", "every", "none")


def journal_options(func: F) -> F:
    func = click.option(
        "--max-journal-bytes", type=click.IntRange(1 << 16), default=None,
        help="the journal's own cap; past it the run ends as memory_limit [64 MiB]")(func)
    func = click.option(
        "--journal-sync", type=click.Choice(SYNC_POLICIES), default=None,
        help="when the journal is made durable on disk: at each completed send, after "
             "every record, or when the OS decides [send]")(func)
    return click.option(
        "--journal", "journal_path", metavar="PATH", default=None,
        help="journal every answer the guest gets from the outside world to PATH (a .jsonl "
             "file); an unfinished journal there is resumed, no paid call repeated "
             "(docs/durable.md)")(func)


def pop_journal_options(options: dict[str, Any]) -> JournalSpec | None:
    path = options.pop("journal_path", None)
    sync = options.pop("journal_sync", None)
    max_bytes = options.pop("max_journal_bytes", None)
    if path is None:
        if sync is not None or max_bytes is not None:
            raise click.UsageError("--journal-sync and --max-journal-bytes go with --journal")
        return None
    return journal_spec(path, sync, max_bytes)


def journal_spec(path: str, sync: str | None, max_bytes: int | None, **more: Any
                 ) -> JournalSpec:
    from spearpy.durable import JournalSpec
    from spearpy.journal import DEFAULT_MAX_JOURNAL_BYTES, SyncPolicy

    if not path.endswith(".jsonl"):
        raise click.BadParameter(f"{path!r}: a journal is a .jsonl file", param_hint="--journal")
    return JournalSpec(path, sync=SyncPolicy(sync or "send"),
                       max_bytes=max_bytes or DEFAULT_MAX_JOURNAL_BYTES, **more)
