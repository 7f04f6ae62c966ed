"""`spearpy routes explain`: how a completion would be routed, sending nothing."""

from __future__ import annotations

import json
from typing import Any

import click

from spearpy.backends.routing.spec import aliases_from_flags
from spearpy.errors import ConfigError


@click.group("routes")
def routes() -> None:
    """Model aliases and routes across backends (the config file's [models] and [[routes]])."""


@routes.command("explain")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML config file [env SPEARPY_CONFIG; ~/.config/spearpy/config.toml]")
@click.option("--model", default=None, help="the model the guest asks for (its `model` param)")
@click.option("--message", "messages", multiple=True,
              help="text of a user message (repeatable, in order)")
@click.option("--tool-output", "tool_outputs", multiple=True,
              help="text of a tool message, after the user messages (repeatable)")
@click.option("--backend", default="", help="the guest's `backend` param")
@click.option("--tools/--no-tools", default=False, help="whether the request offers tools")
@click.option("--model-alias", "aliases", multiple=True, metavar="NAME=BACKEND[:MODEL]",
              help="an alias over the file's [models] (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print the decision as JSON")
def explain(config_file: str | None, model: str | None, messages: tuple[str, ...],
            tool_outputs: tuple[str, ...], backend: str, tools: bool,
            aliases: tuple[str, ...], as_json: bool) -> None:
    """Print the routing decision for one completion: the alias applied, each
    route tried and why it did or did not match, the policy, the candidates,
    those rejected and the backend chosen. Nothing is sent and no backend is
    started; circuits are all closed (a fresh host). Warnings about the
    routes themselves (an unlocked route listed before a locked one it can
    overlap, locked routes with no backend in common) come last."""
    from spearpy.backends.catalog import BackendCatalog
    from spearpy.backends.router import Router
    from spearpy.backends.routing.explain import explain as explain_decision
    from spearpy.backends.routing.explain import render
    from spearpy.config import HostConfig

    given: dict[str, Any] = {"cache_dir": None}
    if config_file:
        given["config_file"] = config_file
    try:
        given["model_aliases"] = aliases_from_flags(aliases)
        catalog = BackendCatalog.from_config(HostConfig(**given))
    except (ValueError, ConfigError) as exc:
        raise click.UsageError(str(exc)) from None
    if backend and catalog.resolve(backend) is None:
        raise click.UsageError(catalog.unknown(backend))
    router = Router(catalog.routing, catalog.default, lambda name: (None, "not started"),
                    catalog.default_model, quiet=True)  # the report carries the warnings
    history = [{"role": "user", "content": text} for text in messages]
    history += [{"role": "tool", "tool_call_id": f"call_{i}", "content": text}
                for i, text in enumerate(tool_outputs)]
    report = explain_decision(router, catalog, model=model, messages=history, backend=backend,
                              tools=tools)
    if not catalog.routing.active:
        report["note"] = "no [models] aliases and no [[routes]]: nothing is routed"
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(render(report))
    if "note" in report:
        click.echo(f"note:       {report['note']}")

