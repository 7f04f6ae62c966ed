"""`spearpy show`: a finished run's conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


@click.command()
@click.argument("targets", metavar="TRANSCRIPT|RUN_ID|JOURNAL.jsonl...", nargs=-1,
                required=True)
@click.option("--transcript-dir", type=click.Path(file_okay=False), default=None,
              help="where to look a RUN_ID up [env SPEARPY_TRANSCRIPT_DIR; ./transcripts]")
@click.option("--json", "as_json", is_flag=True,
              help="print the transcript JSON (a list when the run had several sessions)")
@click.option("--full", is_flag=True, help="do not shorten long messages and tool outputs")
def show(targets: tuple[str, ...], transcript_dir: str | None, as_json: bool,
         full: bool) -> None:
    """Show a finished run's conversation: roles, tool calls with their
    arguments and results, durations and token usage.

    TRANSCRIPT is a file written by `spearpy run --transcript DIR`; a RUN_ID
    (or the start of one) shows every session of that run found in the
    transcript directory. Several may be given (`spearpy show transcripts/*`).
    Colour on a terminal, plain text when piped.

    A JOURNAL file (`<id>.jsonl`, docs/durable.md) lists its steps instead:
    seq, kind and a short summary each (--json: the records as stored).
    """
    journals = [t for t in targets if t.endswith(".jsonl") and Path(t).is_file()]
    if journals:
        _show_journals(journals, as_json)
        if len(journals) == len(targets):
            return
        targets = tuple(t for t in targets if t not in journals)
    from spearpy.show import DEFAULT_MAX_LINES, TranscriptNotFound, default_dir, find, load

    directory = Path(transcript_dir) if transcript_dir else default_dir()
    try:
        records = [load(path) for target in targets for path in find(target, directory)]
    except TranscriptNotFound as exc:
        click.echo(f"spearpy show: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(records[0] if len(records) == 1 else records, indent=2,
                              ensure_ascii=False))
        return
    from rich.console import Console

    from spearpy.show import render

    render(records, Console(highlight=False), max_lines=None if full else DEFAULT_MAX_LINES)


def _show_journals(paths: list[str], as_json: bool) -> None:
    from spearpy.journal import FileJournalStore, JournalError, encode
    from spearpy.journal.view import lines

    for number, path in enumerate(paths):
        if number:
            click.echo()
        try:
            store, journal_id = FileJournalStore.for_path(path)
            # A page at a time: a journal is never read whole.
            records = store.records(journal_id)
            for line in ((encode(r).decode("ascii") for r in records) if as_json
                         else lines(records)):
                click.echo(line)
        except JournalError as exc:
            click.echo(f"spearpy show: {exc}", err=True)
            sys.exit(2)
