"""`spearpy resume` and `spearpy replay`: a journaled run again (docs/durable.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from spearpy.cli.journal_options import SYNC_POLICIES, journal_spec
from spearpy.cli.observe_options import observe_options, pop_observe_options
from spearpy.cli.options import config_from_options, host_options, require_api_key
from spearpy.cli.run import exit_as, observed_run
from spearpy.errors import SpearpyError
from spearpy.journal.errors import said

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.durable import JournalSpec
    from spearpy.journal import Start


F = TypeVar("F", bound=Callable[..., Any])


def _run_inputs(func: F) -> F:
    """--module and --stdin: what the journal names but may not hold;
    --trust-journal: what it recorded and only its user may grant."""
    func = click.option("--trust-journal", is_flag=True,
                        help="start the run with the mounts, secret-named variables, key "
                             "endpoints, config or MCP files, task params and looser limits "
                             "the journal recorded (a journal from elsewhere is refused "
                             "them: docs/durable.md)")(func)
    func = click.option("--stdin", "stdin_file", type=click.File("rb"),
                        help="the run's stdin, when the journal keeps only its digest")(func)
    return click.option("--module", "module_path", type=click.Path(exists=True, dir_okay=False),
                        help="the module, when the journal's has moved (its sha256 must match)"
                        )(func)


@click.command()
@click.argument("path")
@_run_inputs
@click.option("--journal-sync", type=click.Choice(SYNC_POLICIES), default=None,
              help="when the journal is made durable on disk [send]")
@observe_options
def resume(path: str, module_path: str | None, stdin_file: Any, trust_journal: bool,
           journal_sync: str | None, **options: Any) -> None:
    """Go on with the journaled run at PATH after a crash: its steps are
    answered from the journal (no paid call made again), then it goes on live
    with the flags it was started with, appending to PATH."""
    spec = journal_spec(path, journal_sync, None)
    start = _start_of(spec)
    _check_grants(start, {}, live=True, trusted=trust_journal)
    config = _journaled_config(start, {})
    require_api_key(config)
    _run_again(spec, start, config, module_path, stdin_file, pop_observe_options(options))


@click.command()
@click.argument("path")
@click.option("--until", type=click.IntRange(1), default=None,
              help="stop before step N (see `spearpy show PATH`)")
@click.option("--fork-at", type=click.IntRange(0), default=None,
              help="answer steps 1..N from the journal, then go on live with the flags given "
                   "here (over the journaled ones), writing a new journal (--journal)")
@click.option("--journal", "fork_path", metavar="PATH", default=None,
              help="the new journal of a fork (.jsonl)")
@_run_inputs
@host_options
@observe_options
def replay(path: str, until: int | None, fork_at: int | None, fork_path: str | None,
           module_path: str | None, stdin_file: Any, trust_journal: bool,
           **options: Any) -> None:
    """Re-execute the journaled run at PATH offline: every answer from the
    journal, nothing sent upstream, no key needed. --until stops early;
    --fork-at goes live from a step with other flags, into a new journal."""
    observe = pop_observe_options(options)
    if fork_at is None:
        if fork_path is not None:
            raise click.UsageError("--journal goes with --fork-at")
        spec = journal_spec(path, None, None, mode="replay", until=until)
        start = _start_of(spec)
        _check_grants(start, {}, live=False, trusted=trust_journal)
        config = _journaled_config(start, {})
    else:
        if until is not None or fork_path is None:
            raise click.UsageError("--fork-at needs --journal NEW.jsonl (and no --until)")
        spec = journal_spec(path, None, None, mode="fork", until=fork_at,
                            fork_into=journal_spec(fork_path, None, None))
        start = _start_of(spec)
        _check_grants(start, options, live=True, trusted=trust_journal)
        config = _journaled_config(start, options)
        require_api_key(config)
    _run_again(spec, start, config, module_path, stdin_file, observe)


def _start_of(spec: JournalSpec) -> Start:
    from spearpy.durable import read_start

    try:
        return read_start(spec)
    except (SpearpyError, OSError) as exc:
        raise click.ClickException(f"journal {str(spec.path)!r}: {exc}") from None


def _check_grants(start: Start, options: dict[str, Any], *, live: bool,
                  trusted: bool) -> None:
    """Refuse what the journal would grant the run beyond what the flags
    given here and this environment do, unless its user vouches for it."""
    from spearpy.durable import journal_grants

    if trusted:
        return
    grants = journal_grants(start, config_from_options(options), live=live)
    if grants:
        raise click.ClickException(
            "the journal's run was started with what only you may grant, and a journal "
            "file may come from anyone: " + "; ".join(grants[:8])
            + (f" (and {len(grants) - 8} more)" if len(grants) > 8 else "")
            + ". Give them here again, or --trust-journal if you wrote this journal "
            "(docs/durable.md, 'Whose journal')")


def _journaled_config(start: Start, overrides: dict[str, Any]) -> HostConfig:
    """The host flags the journaled run had, with the ones given here over them."""
    from pydantic import ValidationError

    from spearpy.backends.routing.spec import first_error
    from spearpy.config import HostConfig
    from spearpy.durable.spec import journaled_host_flags

    journaled = journaled_host_flags(start)
    given = config_from_options(overrides) if any(
        v not in (None, (), False) for v in overrides.values()) else None
    merged = {**journaled, **(given.model_dump(exclude_unset=True) if given else {})}
    try:
        return HostConfig(**merged)
    except (ValidationError, ValueError) as exc:
        raise click.ClickException("the journal's flags are not usable here: " + said(
            first_error(exc) if isinstance(exc, ValidationError) else exc)) from None


def _run_again(spec: JournalSpec, start: Start, config: HostConfig, module_path: str | None,
               stdin_file: Any, observe: dict[str, Any]) -> None:
    from spearpy.durable import run_arguments
    from spearpy.host import Host

    try:
        arguments = run_arguments(start, module=module_path,
                                  stdin=stdin_file.read() if stdin_file is not None else None)
    except SpearpyError as exc:
        raise click.UsageError(f"{exc} (--module FILE, --stdin FILE)") from None
    host = Host(config)
    try:
        with observed_run(host, observe) as observed:
            result = host.run(**arguments, journal=spec, **observed)
    except ValueError as exc:
        # Host.run refusing its inputs: here they are the journal's (a --dir
        # gone since, a hand-edited start), which is bad input, not a crash.
        raise click.ClickException(f"the journaled run cannot start here: {said(exc)}") \
            from None
    finally:
        mismatch = host.replay_mismatch()
        host.close()
    exit_as(result, mismatch)  # as `spearpy run`, --cassette-mode replay too
