"""`spearpy batch`: run a guest once per line of a JSONL file, N at a time."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

import click

from spearpy.backends.catalog import check_config
from spearpy.batch import (
    BatchError,
    Executor,
    JournalPolicy,
    ProcessExecutor,
    RayExecutor,
    ThreadExecutor,
    WorkerError,
    default_layout,
    run_batch,
)
from spearpy.batch.jobs import RunSettings
from spearpy.batch.progress import BatchProgress
from spearpy.cli.hints import NoModelHint
from spearpy.cli.journal_options import SYNC_POLICIES
from spearpy.cli.observe_options import Observability, observe_options, pop_observe_options
from spearpy.cli.options import config_from_options, host_options, key_envs, require_api_key
from spearpy.cli.sandbox import parse_dirs, parse_env, sandbox_options
from spearpy.config import HostConfig
from spearpy.errors import ConfigError, ModuleLoadError
from spearpy.secret_env import SecretEnvError, guest_env


def _executor(jobs: int, threads: bool, processes: bool, ray: str | None,
              max_attempts: int) -> Executor:
    if sum(bool(x) for x in (threads, processes, ray)) > 1:
        raise click.UsageError("--threads, --processes and --ray exclude each other")
    if ray:
        return RayExecutor(ray, jobs, max_attempts=max_attempts)
    if threads:
        return ThreadExecutor(jobs)
    if processes:
        return ProcessExecutor(jobs, 1, max_attempts=max_attempts)
    procs, per_proc = default_layout(jobs)
    return ProcessExecutor(procs, per_proc, max_attempts=max_attempts)


def _settings(config: HostConfig, env_pairs: tuple[str, ...], env_inherit: bool,
              dir_specs: tuple[str, ...], invoke: str | None) -> RunSettings:
    """The sandbox flags, resolved here: --env NAME and --env-inherit read
    this process's environment, as with `spearpy run`, wherever the runs go."""
    try:
        env = guest_env(os.environ, parse_env(env_pairs), inherit=env_inherit,
                        extra_deny=key_envs(config))
    except SecretEnvError as exc:
        raise click.BadParameter(str(exc), param_hint="--env") from None
    return RunSettings(env=env, dirs=tuple(parse_dirs(dir_specs)), invoke=invoke)


def _journal_policy(directory: str | None, off: bool, keep: bool, sync: str,
                    max_bytes: int | None) -> JournalPolicy | None:
    if off:
        given = [name for name, value in (("--journal", directory), ("--keep-journals", keep),
                 ("--max-journal-bytes", max_bytes)) if value]
        if given:
            raise click.UsageError(f"--no-journal excludes {' and '.join(given)}")
        return None
    from spearpy.journal.store import DEFAULT_MAX_JOURNAL_BYTES, SyncPolicy

    return JournalPolicy(directory, keep, SyncPolicy(sync),
                         max_bytes or DEFAULT_MAX_JOURNAL_BYTES)


def _exit_on_term(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (a job scheduler stopping us) gets the same orderly stop as Ctrl-C.
    raise KeyboardInterrupt


@click.command()
@click.argument("module", type=click.Path(exists=True, dir_okay=False))
@click.option("--inputs", "inputs_path", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="JSONL, one input a line: {\"id\", \"argv\", \"stdin\", \"env\"}")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="JSONL results, one line per input; inputs already in it are skipped")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="runs at once [number of cores]")
@click.option("--threads", is_flag=True, help="all runs as threads of this process")
@click.option("--processes", is_flag=True, help="one worker process per concurrent run")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto|local",
              help="run on a Ray cluster (needs the [ray] extra)")
@click.option("--transcripts", is_flag=True, help="put each run's chat transcripts in its line")
@click.option("--max-attempts", type=click.IntRange(min=1), default=3, show_default=True,
              help="runs of an input whose worker died before it is reported as worker_lost")
@click.option("--journal", "journal_dir", metavar="DIR", default=None,
              help="journal each input's run in DIR (a .jsonl file each), so a stopped batch "
                   "resumes a half-done input from its last step [OUT.journals]")
@click.option("--no-journal", is_flag=True,
              help="journal no run: a stopped batch redoes half-done inputs from their start")
@click.option("--keep-journals", is_flag=True,
              help="keep finished inputs' journals (for `spearpy replay`) instead of "
                   "deleting them")
@click.option("--journal-sync", type=click.Choice(SYNC_POLICIES), default="send",
              show_default=True,
              help="when a journal is made durable on disk: at each completed send, after "
                   "every record, or when the OS decides")
@click.option("--max-journal-bytes", type=click.IntRange(1 << 16), default=None,
              help="each journal's own cap; past it the run ends as memory_limit [64 MiB]")
@click.option("--progress/--no-progress", default=None,
              help="progress bar on stderr [on when stderr is a terminal and not --quiet]")
@sandbox_options
@host_options
@observe_options
def batch(module: str, inputs_path: str, out_path: str, jobs: int | None, threads: bool,
          processes: bool, ray_address: str | None, transcripts: bool, max_attempts: int,
          journal_dir: str | None, no_journal: bool, keep_journals: bool, journal_sync: str,
          max_journal_bytes: int | None,
          progress: bool | None, env_pairs: tuple[str, ...], env_inherit: bool,
          dir_specs: tuple[str, ...], invoke: str | None, **options: Any) -> None:
    """Run MODULE once per input line, writing one result line per input.

    By default the runs are spread over one worker process per core, each with
    a warm Host, with threads inside each process for the rest of --jobs.
    Interrupted batches resume: re-running skips inputs already in --out,
    and an input stopped halfway goes on from its journal (no completion
    asked again but the one in flight).

    The sandbox flags (--env, --env-inherit, --dir, --invoke) apply to every
    run (an input's own env wins); the output flags (--events, --transcript,
    --metrics-file, --log-format, ...) cover all runs: one events file, one
    transcript directory, one metrics file. With any of them each result
    line also carries its run_id.
    """
    observe = pop_observe_options(options)
    config = config_from_options(options)
    try:
        # Here, before any input runs: the hosts are built later, in workers.
        check_config(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    require_api_key(config)
    journals = _journal_policy(journal_dir, no_journal, keep_journals, journal_sync,
                               max_journal_bytes)
    settings = _settings(config, env_pairs, env_inherit, dir_specs, invoke)
    executor = _executor(jobs or os.cpu_count() or 1, threads, processes, ray_address,
                         max_attempts)
    show = progress if progress is not None else sys.stderr.isatty() and not observe["quiet"]
    # Runs overlap: their progress lines would interleave, the bar replaces them.
    observe_opts = {**observe, "quiet": True}
    wanted = any(v for k, v in observe.items() if k not in ("quiet", "metrics_addr"))
    previous = signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        with Observability(observe_opts, api_key_envs=key_envs(config)) as obs, \
                BatchProgress(enabled=show) as bar:
            obs.sink.add(NoModelHint())
            summary = run_batch(module, inputs_path, out_path, executor, config=config,
                                transcripts=transcripts, on_start=bar.start,
                                on_result=bar.advance, settings=settings,
                                on_event=obs.sink if wanted else None, journals=journals)
    except ModuleLoadError as exc:
        click.echo(f"spearpy: {exc}", err=True)
        sys.exit(65)
    except BatchError as exc:
        click.echo(f"spearpy: {exc}", err=True)
        sys.exit(70 if isinstance(exc, WorkerError) else 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items())) or "none"
    click.echo(f"spearpy batch: {summary.total} inputs, {summary.skipped} already done, "
               f"{summary.written} run ({outcomes}) on {executor.describe()} in "
               f"{summary.elapsed_s:.1f} s"
               + (f", {summary.resumed} resumed mid-run" if summary.resumed else ""), err=True)
    if summary.interrupted:
        click.echo(f"spearpy batch: interrupted; run the same command again to finish the "
                   f"{summary.total - summary.skipped - summary.written} remaining inputs",
                   err=True)
        sys.exit(130)
