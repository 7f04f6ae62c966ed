"""`spearpy run`: execute one guest module."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

import click

from spearpy.cli.hints import NoModelHint
from spearpy.cli.journal_options import journal_options, pop_journal_options
from spearpy.cli.observe_options import Observability, observe_options, pop_observe_options
from spearpy.cli.options import host_from_options, host_options
from spearpy.cli.sandbox import parse_dirs, parse_env, sandbox_options
from spearpy.errors import SpearpyError
from spearpy.outcome import exit_code_for
from spearpy.secret_env import SecretEnvError, passed_through

if TYPE_CHECKING:
    from spearpy.context import GuestLogSink
    from spearpy.host import Host
    from spearpy.outcome import RunResult
    from spearpy.streams.stdio import StdioBridge


@contextlib.contextmanager
def _cancel_on_signals(cancel: threading.Event) -> Iterator[None]:
    """Ctrl-C or SIGTERM cancels the run: the guest stops at its next epoch
    tick (or wait) and the run ends as `cancelled`, transcripts and metrics
    written. Python's default would raise KeyboardInterrupt, which never
    reaches a thread running wasm: it is swallowed in the next hostcall. A
    second signal exits at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, _frame: object) -> None:
        if cancel.is_set():
            os._exit(exit_code_for("cancelled"))
        cancel.set()
        name = signal.Signals(signum).name
        click.echo(f"spearpy: {name}: stopping the guest ({name} again to quit at once)",
                   err=True)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _guest_log_sink(observe: dict[str, Any]) -> GuestLogSink | None:
    """With JSON logs, guest `log` lines join the structured stream instead of
    interleaving `[level] text` lines with it."""
    if observe.get("log_format") != "json":
        return None
    from spearpy.observe.logs import log_guest_line

    return log_guest_line


@contextlib.contextmanager
def observed_run(host: Host, observe: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """What `spearpy run`, `resume` and `replay` give Host.run besides the
    run itself: the observability's sink, a cancel event that Ctrl-C and
    SIGTERM set, the guest log sink. A SpearpyError from the run is printed
    and exits 65."""
    cancel = threading.Event()
    try:
        with Observability(observe, api_key_envs=host.key_envs()) as obs, \
                _cancel_on_signals(cancel):
            yield {"capture_output": False, "on_event": obs.sink, "cancel": cancel,
                   "on_guest_log": _guest_log_sink(observe)}
    except SpearpyError as exc:
        click.echo(f"spearpy: {exc}", err=True)
        sys.exit(65)


def _stdio_bridge(stream_id: int) -> StdioBridge:
    from spearpy.streams import StreamHub
    from spearpy.streams.stdio import StdioBridge

    # One session: once stdin is done, no client can come back to the guest.
    return StdioBridge(StreamHub(max_sessions=1), stream_id, sys.stdin.buffer,
                       sys.stdout.buffer).start()


@click.command()
@click.argument("module", type=click.Path(exists=True, dir_okay=False))
@click.argument("guest_args", nargs=-1, type=click.UNPROCESSED)
@sandbox_options
@click.option("--stdin", "stdin_file", type=click.File("rb"),
              help="what the guest reads on fd 0: FILE, or - for this process's stdin, read "
                   "whole before the run [default: nothing]")
@click.option("--stream-stdio", is_flag=True,
              help="bridge one bidirectional user stream to this terminal: each stdin line is "
                   "one frame to the guest, the data of the guest's frames goes to stdout; at "
                   "end of input the session closes once the guest has answered")
@click.option("--stream-id", type=click.IntRange(0, 0xFFFFFFFF),
              help="the stream id --stream-stdio uses [1]")
@journal_options
@host_options
@observe_options
def run(module: str, guest_args: tuple[str, ...], env_pairs: tuple[str, ...], env_inherit: bool,
        dir_specs: tuple[str, ...], invoke: str | None, stdin_file: BinaryIO | None,
        stream_stdio: bool, stream_id: int | None, **options: Any) -> None:
    """Run MODULE; arguments after `--` go to the guest."""
    journal = pop_journal_options(options)
    if stream_id is not None and not stream_stdio:
        raise click.UsageError("--stream-id goes with --stream-stdio")
    if stream_stdio and stdin_file is not None and stdin_file.name == "<stdin>":
        raise click.UsageError("--stdin - and --stream-stdio would both read this stdin")
    env = parse_env(env_pairs)
    dirs = parse_dirs(dir_specs)
    # Opt-in, never inherited: a caller whose stdin is a pipe nobody closes
    # (a CI runner, a service manager) must not hang every run.
    stdin = stdin_file.read() if stdin_file is not None else None
    observe = pop_observe_options(options)
    host = host_from_options(options)
    try:
        passed_through(os.environ, [k for k, v in env.items() if v is None], host.key_envs())
    except SecretEnvError as exc:
        host.close()
        raise click.BadParameter(str(exc), param_hint="--env") from None
    bridge = _stdio_bridge(stream_id if stream_id is not None else 1) if stream_stdio else None
    try:
        with observed_run(host, observe) as observed:
            observed["on_event"].add(NoModelHint())
            result = host.run(module, list(guest_args), env=env or None, stdin=stdin,
                              inherit_env=env_inherit, dirs=dirs, invoke=invoke,
                              streams=bridge.hub if bridge is not None else None,
                              journal=journal, **observed)
        if bridge is not None:
            bridge.join(5.0)  # what the guest wrote last reaches stdout
    finally:
        mismatch = host.replay_mismatch()
        host.close()
    exit_as(result, mismatch)


def exit_as(result: RunResult, mismatch: str | None) -> NoReturn:
    """Say how the run ended (on stderr) and exit with its code: a run against
    a cassette whose request missed it (`mismatch`) exits as replay_mismatch."""
    if result.outcome != "exited":
        click.echo(f"spearpy: {result.outcome}: {result.message}", err=True)
    if mismatch is not None:
        # The guest saw an error body and exited as it chose; the run still
        # failed as a replay, whatever the guest made of it.
        click.echo(f"spearpy: replay_mismatch: {mismatch}", err=True)
        sys.exit(exit_code_for("replay_mismatch"))
    sys.exit(result.exit_code)


