"""What a guest may see of this machine: the flags `spearpy run` and
`spearpy batch` share (--env, --env-inherit, --dir, --invoke), same names
and meaning in both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--env", "env_pairs"), {"multiple": True,
                              "help": "guest env var K=V, or NAME to pass NAME through from "
                                      "this process's environment (repeatable)"}),
    (("--env-inherit",), {"is_flag": True,
                          "help": "give the guest this process's environment minus "
                                  "credentials (*_API_KEY, *_TOKEN, *SECRET*, *PASSWORD*, "
                                  "AWS_*, ...; see docs/security.md)"}),
    (("--dir", "dir_specs"), {"multiple": True, "help": "preopen HOST[:GUEST] (repeatable)"}),
    (("--invoke",), {"default": None, "help": "call this export instead of _start"}),
]
NAMES = ("env_pairs", "env_inherit", "dir_specs", "invoke")


def sandbox_options(func: Any) -> Any:
    for decls, kwargs in reversed(_OPTIONS):
        func = click.option(*decls, **kwargs)(func)
    return func


def parse_env(pairs: tuple[str, ...]) -> dict[str, str | None]:
    """K=V sets K; a bare NAME passes NAME through from this process's
    environment (None), the one way past --env-inherit's deny-list."""
    env: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not key:
            raise click.BadParameter(f"expected K=V or NAME, got {pair!r}", param_hint="--env")
        env[key] = value if sep else None
    return env


def parse_dirs(specs: tuple[str, ...]) -> list[tuple[str, str]]:
    dirs = []
    for spec in specs:
        host_path, _, guest_path = spec.partition(":")
        if not Path(host_path).is_dir():
            raise click.BadParameter(f"{host_path!r} is not a directory", param_hint="--dir")
        dirs.append((host_path, guest_path or host_path))
    return dirs
