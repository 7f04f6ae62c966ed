"""`spearpy serve`: agents as a service (docs/serve.md)."""

from __future__ import annotations

from typing import Any

import click

from spearpy.cli.options import host_from_options, host_options
from spearpy.executors.watch import GRACE_S, SILENCE_S
from spearpy.serve.config import DEFAULT_PORT, TOKEN_ENV, ServeConfig, default_state_dir
from spearpy.web.guard import check_bind, token_from_env


@click.command()
@click.option("--modules", "modules_dir", required=True,
              type=click.Path(exists=True, file_okay=False),
              help="directory of the *.wasm modules runs may name (nothing else is run)")
@click.option("--host", "bind", default="127.0.0.1", show_default=True,
              help="address to listen on; anything but loopback needs --token")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option("--state-dir", type=click.Path(file_okay=False),
              help=f"where runs and their events are kept [{default_state_dir()}]")
@click.option("--token", default=None,
              help=f"bearer token every route but /healthz needs [env {TOKEN_ENV}]")
@click.option("--max-concurrent", default=8, show_default=True, type=click.IntRange(1, 4096),
              help="runs at once; more get 429 with Retry-After")
@click.option("--executor", type=click.Choice(["auto", "threads", "processes"]), default=None,
              help="where runs execute: worker processes with a Host each, threads of this "
              "process's Host, or auto: processes, and threads for runs that use user "
              "streams or the microphone (docs/serve.md) [auto]")
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="worker processes (or Ray actors) [CPUs, at most --max-concurrent]")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="run each run on this Ray cluster ('auto', 'local', or host:port); "
                   "needs spearpy[ray]")
@click.option("--watch-grace", default=GRACE_S, show_default=True, metavar="S",
              type=click.FloatRange(0, min_open=True),
              help="seconds a run may go on past its deadline before its worker is taken "
                   "for stuck and killed (the run ends timeout)")
@click.option("--watch-silence", default=SILENCE_S, show_default=True, metavar="S",
              type=click.FloatRange(0, min_open=True),
              help="seconds a worker may send nothing under runs before it is pinged, and "
                   "then has to answer, before it is taken for hung and killed")
@click.option("--grace", default=10.0, show_default=True, type=click.FloatRange(0),
              help="seconds runs may finish in at SIGTERM/SIGINT before they are cancelled")
@click.option("--max-body-bytes", default=1 << 20, show_default=True,
              type=click.IntRange(1024), help="largest request body (413 beyond)")
@click.option("--max-connections", type=click.IntRange(1), default=None,
              help="open connections before new ones are closed unanswered "
                   "[half the file descriptor limit]")
@click.option("--head-timeout", default=10.0, show_default=True, type=click.FloatRange(0.1),
              help="seconds a request's head may take to arrive")
@click.option("--allow-model", "allow_models", multiple=True,
              help="a model a request may pick (repeatable; default: none)")
@click.option("--allow-backend", "allow_backends", multiple=True,
              help="a backend a request may pick (repeatable; default: none)")
@click.option("--no-event-content", is_flag=True,
              help="events carry tool arguments and results only as sizes and hashes")
@click.option("--journal/--no-journal", default=True, show_default=True,
              help="journal each run in the state directory, so a restarted service "
                   "resumes the runs a crash interrupted and a dead worker's run goes on "
                   "in another (docs/serve.md)")
@click.option("--access-log/--no-access-log", default=True, show_default=True)
@host_options
def serve(modules_dir: str, bind: str, port: int, state_dir: str | None, token: str | None,
          max_concurrent: int, executor: str | None, workers: int | None,
          ray_address: str | None, watch_grace: float, watch_silence: float,
          grace: float, max_body_bytes: int, max_connections: int | None,
          head_timeout: float, allow_models: tuple[str, ...], allow_backends: tuple[str, ...],
          no_event_content: bool, journal: bool, access_log: bool, **options: Any) -> None:
    """Run agents from MODULES as a service: an HTTP API, live events and a web page.

    The backend and limit options are those of `spearpy run`; the limits are
    each run's defaults and maxima (a request may only lower them)."""
    from spearpy.serve.app import create_app
    from spearpy.serve.server import serve as serve_app
    from spearpy.serve.store import StoreLocked
    from spearpy.web.connections import raise_fd_limit

    token = token_from_env(token, TOKEN_ENV)
    raise_fd_limit()  # before the default max_connections is read from it
    if ray_address and executor is not None:
        raise click.UsageError("--ray is an executor of its own: leave out --executor")
    try:
        check_bind(bind, token, f"--token or {TOKEN_ENV}")
        config = ServeConfig(modules_dir=modules_dir, token=token,
                             state_dir=state_dir or default_state_dir(),
                             max_concurrent=max_concurrent, grace=grace,
                             executor="ray" if ray_address else executor or "auto",
                             workers=workers,
                             ray_address=ray_address, watch_grace=watch_grace,
                             watch_silence=watch_silence,
                             max_body_bytes=max_body_bytes,
                             max_connections=max_connections, head_timeout=head_timeout,
                             allow_models=allow_models,
                             allow_backends=allow_backends, event_content=not no_event_content,
                             journal=journal)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    host = host_from_options(options)
    try:
        app = create_app(config, host)
    except (StoreLocked, OSError) as exc:
        host.close()
        raise click.ClickException(str(exc)) from exc
    # create_app was given the Host, so it is this command's to close.
    click.echo(f"spearpy serve: modules {modules_dir}, state {config.state_path}", err=True)
    try:
        serve_app(app, bind, port, grace, access_log=access_log)
    finally:
        host.close()
