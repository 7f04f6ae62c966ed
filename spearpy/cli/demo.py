"""`spearpy demo`: a sample agent doing real auto tool calls on the offline model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from spearpy.config import HostConfig
from spearpy.host import Host
from spearpy.observe.events import Event

_SAMPLES = Path(__file__).resolve().parents[2] / "wasm-samples"
DEFAULT_SAMPLE = "c_multi_tool"


def _manifest() -> list[dict[str, Any]]:
    path = _SAMPLES / "manifest.json"
    if not path.is_file():
        raise click.ClickException(f"no sample manifest at {path}; run tools/build_wasm.sh")
    entries: list[dict[str, Any]] = json.loads(path.read_text())
    return entries


def _show(event: Event) -> None:
    data = event.data
    if event.kind == "completion_start":
        click.echo(f"  [iteration {data['iteration']}] asking the model ...")
    elif event.kind == "completion_end":
        calls = data.get("tool_calls") or 0
        with_calls = f" with {calls} tool call(s)" if calls else ""
        click.echo(f"  [iteration {data['iteration']}] model answered in "
                   f"{data['latency_ms']:.1f} ms{with_calls}")
    elif event.kind == "tool_end":
        state = "ok" if data.get("error") is None else data["error"]
        click.echo(f"    tool {data['name']} ({data['tool_call_id']}): {state} in "
                   f"{data['duration_ms']:.3f} ms")
    elif event.kind == "limit_hit":
        click.echo(f"  limit hit: {data['limit']} = {data['value']}")


def _replay_transcript(transcript: dict[str, Any]) -> None:
    click.echo("conversation:")
    for message in transcript["messages"]:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                fn = call["function"]
                click.echo(f"  assistant -> {fn['name']}({fn['arguments']})")
        elif role == "tool":
            click.echo(f"  tool[{message.get('tool_call_id')}] <- {message.get('content')}")
        else:
            click.echo(f"  {role}: {message.get('content')}")


@click.command()
@click.option("--sample", default=DEFAULT_SAMPLE, show_default=True,
              help="name of a sample in wasm-samples/manifest.json")
def demo(sample: str) -> None:
    """Run a tool-calling sample guest against the built-in scripted model."""
    entries = {entry["name"]: entry for entry in _manifest()}
    entry = entries.get(sample)
    if entry is None or not entry.get("script"):
        names = ", ".join(sorted(n for n, e in entries.items() if e.get("script")))
        raise click.ClickException(f"no scripted sample {sample!r}; try one of: {names}")
    root = _SAMPLES.parent
    click.echo(f"spearpy demo: {entry['name']} — {entry['demonstrates']}")
    click.echo(f"  module {entry['wasm']}, scripted model {entry['script']}")
    config = HostConfig(backend=f"scripted:{root / entry['script']}", cache_dir=None)
    with Host(config) as host:
        result = host.run(root / entry["wasm"], on_event=_show, capture_output=True)
    for transcript in result.transcripts:
        _replay_transcript(transcript)
    click.echo("guest stdout:")
    click.echo("  " + (result.stdout or b"").decode("utf-8", "replace").rstrip()
               .replace("\n", "\n  "))
    click.echo(f"outcome: {result.outcome}, exit code {result.exit_code}, "
               f"usage {result.usage}")
    sys.exit(result.exit_code)
