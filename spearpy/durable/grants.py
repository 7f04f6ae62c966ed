"""What a journal's start record would grant a run started again from it.

A resume, replay or fork starts the guest with the flags step 0 recorded:
its mounts, the variables it read from the environment, the endpoints its
keys went to, its config and MCP files. For a journal this host wrote that
is the point. For a journal from anywhere else it would let a file decide
what the person running `spearpy resume` or `spearpy replay` hands a guest:
mount their home directory read-write, give the guest their GITHUB_TOKEN,
send their model key to another server, start the commands of an MCP
directory it names, or turn on (through its task layer) the servers of the
user's own. A journal is input, never a grant: what it asks beyond
what this invocation already grants (its own flags, environment and config)
is refused unless its user vouches for the journal (`--trust-journal`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from spearpy.context import RUN_LIMITS
from spearpy.secret_env import BUILTIN_KEY_ENVS, REALTIME_KEY_ENV, is_secret_name

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.journal import Start

# Host flags that read files or start commands wherever a run runs, replay
# included, and how `spearpy run` spells them.
_FILES = {"config_file": "--config", "mcp_dirs": "--mcp-dir", "record": "--record",
          "mic_file": "--mic-file"}
# (endpoint, key variable): a key read here and sent there, by a live run only.
_ENDPOINTS = (("base_url", "api_key_env"), ("rtasr_url", "rtasr_api_key_env"))
_SHOWN_CHARS = 120
_JSON = (",", ":")
# The guest's bounds: a run's limits but max_parallel_tools, which bounds no
# resource the guest takes.
_LIMITS = tuple(sorted(RUN_LIMITS - {"max_parallel_tools"}))


def journal_grants(start: Start, own: HostConfig, *, live: bool) -> list[str]:
    """What `start` would grant beyond `own` (the HostConfig this invocation
    has without the journal), one flag each as `spearpy run` spells it; `live`:
    the run may go on live (resume, fork), so endpoints its keys go to count."""
    host: dict[str, Any] = start.flags.get("host") or {}
    mine = own.model_dump(mode="json")
    grants = [f"{flag} {_shown(value)}" for name, flag in _FILES.items()
              if host.get(name) not in (None, [], mine.get(name))
              for value in (host[name] if isinstance(host[name], list) else [host[name]])]
    if live:
        for endpoint, key_env in _ENDPOINTS:
            theirs = {name: host.get(name, mine.get(name)) for name in (endpoint, key_env)}
            if theirs[key_env] and any(theirs[n] != mine.get(n) for n in theirs):
                grants.append(f"--{endpoint.replace('_', '-')} {_shown(theirs[endpoint])} "
                              f"with the key in ${theirs[key_env]}")
    # The task layer turns on the MCP servers of this user's own directories
    # (and lifts their config's denylist): a key set otherwise than here.
    task, own_task = host.get("task_params"), mine.get("task_params") or {}
    if isinstance(task, dict):
        grants += [f"--task-param {_shown(key + '=' + json.dumps(value, separators=_JSON))}"
                   for key, value in task.items()
                   if key not in own_task or own_task[key] != value]
    grants += _looser_limits(start, host, own)
    run: dict[str, Any] = start.flags.get("run") or {}
    grants += [f"--dir {_shown(f'{d[0]}:{d[1]}')}" for d in run.get("dirs") or ()
               if isinstance(d, list) and len(d) == 2]
    if run.get("inherit_env"):
        grants.append("--env-inherit")
    keys = {*BUILTIN_KEY_ENVS, REALTIME_KEY_ENV}
    grants += [f"--env {_shown(name)}" for name in start.env_names
               if is_secret_name(name) or name in keys]
    return grants


def _looser_limits(start: Start, host: dict[str, Any], own: HostConfig) -> list[str]:
    """The guest limits `start` sets looser than `own` (None: no bound). A
    journal may tighten them, as its run had them, not lift them for a guest
    that may have come with it."""
    from pydantic import ValidationError

    looser = []
    for name in _LIMITS:
        mine = getattr(own, name)
        if mine is None or (name not in start.limits and name not in host):
            continue
        theirs = start.limits.get(name, host.get(name))
        try:  # as the run would take it ("64MiB" among them)
            value = getattr(type(own).model_validate({name: theirs}), name)
        except (ValidationError, ValueError):
            value = theirs  # refused when the run starts; named here all the same
        if value is None or not isinstance(value, (int, float)) or value > mine:
            looser.append(f"--{name.replace('_', '-')} {_shown(theirs)}")
    return looser


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."
