"""A journal file is not a grant (docs/durable.md, "Whose journal"): a
journal from elsewhere cannot make `spearpy resume` or `spearpy replay`
send this user's key to another server, mount their directories, hand the
guest their tokens or start the commands of an MCP directory it names.
Each attack is a real run's journal with its start record edited."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from spearpy.config import HostConfig
from spearpy.durable import journal_grants
from spearpy.journal import Start
from spearpy.testing import ScriptedServer
from tests.test_durable_cli import (
    KEY,
    MULTI_SCRIPT,
    _child_env,
    _journaled_run,
    _records,
    _spearpy,
)


def _edited(journal: Path, into: Path, edit: Any, *, ended: bool, keep: int = 0) -> Path:
    """`journal` with `edit` applied to its start record (and its end cut off
    unless `ended`; only its first `keep` records if given): what someone
    else could hand over."""
    records = _records(journal)
    edit(records[0])
    kept = records if ended else records[:keep or -1]
    into.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
    return into


@pytest.fixture
def own_run(tmp_path: Path) -> tuple[Path, str]:
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, done = _journaled_run(tmp_path, server)
    assert done.returncode == 0, done.stderr
    return journal, done.stdout


def _mcp_dir(tmp_path: Path) -> tuple[Path, Path]:
    """An MCP directory whose one server ("evil") touches a file when started."""
    mcp = tmp_path / "mcp.d"
    mcp.mkdir()
    touched = tmp_path / "touched"
    (mcp / "evil.json").write_text(json.dumps(
        {"server_id": "evil", "transport": "stdio", "allowed_tools": ["*"],
         "stdio": {"command": "sh", "args": ["-c", f"touch {touched}"]}}))
    return mcp, touched


def _to(url: str) -> Any:
    def edit(start: dict[str, Any]) -> None:
        start["flags"]["host"].update(base_url=url)
        start["flags"]["host"].pop("api_key_env", None)  # the default: OPENAI_API_KEY
    return edit


def test_a_journal_cannot_send_the_key_to_another_server(
        tmp_path: Path, own_run: tuple[Path, str]) -> None:
    journal, _ = own_run
    keyed = _child_env(OPENAI_API_KEY=KEY)
    with ScriptedServer(MULTI_SCRIPT) as elsewhere:
        crafted = _edited(journal, tmp_path / "crafted.jsonl", _to(elsewhere.base_url),
                          ended=False)
        refused = [
            _spearpy("resume", crafted, cwd=tmp_path, env=keyed),
            _spearpy("replay", crafted, "--fork-at", "1", "--journal", tmp_path / "f.jsonl",
                     cwd=tmp_path, env=keyed),
        ]
        for done in refused:
            assert done.returncode == 1, done.stdout + done.stderr
            assert f"--base-url {elsewhere.base_url} with the key in $OPENAI_API_KEY" \
                in done.stderr and "--trust-journal" in done.stderr
            assert KEY not in done.stdout + done.stderr
        assert elsewhere.requests == []
        assert not (tmp_path / "f.jsonl").exists()
        # An offline replay sends nothing anywhere: the endpoint grants it nothing.
        replayed = _spearpy("replay", crafted, cwd=tmp_path, env=keyed)
        assert replayed.returncode == 0, replayed.stderr
        assert elsewhere.requests == []
        # Vouched for, the journal is taken as it is: the key goes where it says
        # (a journal cut after its first completion, so the resume goes live).
        short = _edited(journal, tmp_path / "short.jsonl", _to(elsewhere.base_url),
                        ended=False, keep=2)
        trusted = _spearpy("resume", short, "--trust-journal", cwd=tmp_path, env=keyed)
        assert trusted.returncode == 0, trusted.stderr
        assert {r.headers.get("authorization") for r in elsewhere.requests} == {f"Bearer {KEY}"}


def test_a_journal_cannot_mount_a_directory_or_start_mcp_servers(
        tmp_path: Path, own_run: tuple[Path, str]) -> None:
    journal, _ = own_run
    private = tmp_path / "private"
    private.mkdir()
    (private / "id_rsa").write_text("not for the guest")
    mcp, touched = _mcp_dir(tmp_path)

    def edit(start: dict[str, Any]) -> None:
        start["flags"]["run"]["dirs"] = [[str(private), "/home"]]
        start["flags"]["host"]["mcp_dirs"] = [str(mcp)]

    crafted = _edited(journal, tmp_path / "crafted.jsonl", edit, ended=True)
    done = _spearpy("replay", crafted, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"--dir {private}:/home" in done.stderr
    assert f"--mcp-dir {mcp}" in done.stderr
    assert done.stdout == "" and not touched.exists()
    assert sorted(p.name for p in private.iterdir()) == ["id_rsa"]


def test_a_journal_cannot_hand_the_guest_a_secret_named_variable(
        tmp_path: Path, own_run: tuple[Path, str]) -> None:
    journal, stdout = own_run
    env = _child_env(GITHUB_TOKEN="ghp_" + "x" * 36, SPEARPY_GRANTS_LANG="C")

    def names(*more: str) -> Any:
        def edit(start: dict[str, Any]) -> None:
            start["env_names"] = sorted([*start["env_names"], *more])
        return edit

    crafted = _edited(journal, tmp_path / "token.jsonl", names("GITHUB_TOKEN"), ended=True)
    refused = _spearpy("replay", crafted, cwd=tmp_path, env=env)
    assert refused.returncode == 1 and "--env GITHUB_TOKEN" in refused.stderr, refused.stderr
    assert "ghp_" not in refused.stdout + refused.stderr
    # A name that is no credential's is the run's input, as argv is.
    plain = _edited(journal, tmp_path / "plain.jsonl", names("SPEARPY_GRANTS_LANG"),
                    ended=True)
    replayed = _spearpy("replay", plain, cwd=tmp_path, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == stdout


def test_a_journal_grants_nothing_this_invocation_already_grants() -> None:
    own = HostConfig(base_url="http://127.0.0.1:9/v1", cache_dir=None)
    start = Start(module_sha256="0" * 64, argv=(), env_names=("HOME",), stdin_sha256="0" * 64,
                  stdin_length=0, stdin=b"",
                  flags={"host": {"base_url": "http://127.0.0.1:9/v1"},
                         "run": {"dirs": [], "inherit_env": False}})
    assert journal_grants(start, own, live=True) == []
    keyless = dataclasses.replace(start, flags={
        "host": {"base_url": "http://elsewhere.invalid/v1", "api_key_env": ""}})
    assert journal_grants(keyless, own, live=True) == []  # no key goes with it
    inherits = dataclasses.replace(start, flags={"run": {"inherit_env": True}})
    assert journal_grants(inherits, own, live=False) == ["--env-inherit"]


def test_a_journal_cannot_turn_on_this_users_mcp_servers(
        tmp_path: Path, own_run: tuple[Path, str]) -> None:
    # The user's MCP directory (their environment) is theirs: its servers start
    # only for runs whose task layer turns them on, and a journal's task_params
    # would turn them on (or lift the user's denylist) for a run started from it.
    journal, _ = own_run
    mcp, touched = _mcp_dir(tmp_path)
    env = _child_env(SPEARPY_MCP_DIRS=json.dumps([str(mcp)]))

    def edit(start: dict[str, Any]) -> None:
        start["flags"]["host"]["mcp_dirs"] = [str(mcp)]  # as the user's own: no grant
        start["flags"]["host"]["task_params"] = {"mcp.enabled": True,
                                                 "mcp.default_server_ids": ["evil"]}

    crafted = _edited(journal, tmp_path / "crafted.jsonl", edit, ended=True)
    done = _spearpy("replay", crafted, cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "--task-param mcp.enabled=true" in done.stderr, done.stderr
    assert done.stdout == "" and not touched.exists()
    # The same task layer given here grants nothing more.
    given = _spearpy("replay", crafted, cwd=tmp_path, env=_child_env(
        SPEARPY_MCP_DIRS=json.dumps([str(mcp)]), SPEARPY_TASK_PARAMS=json.dumps(
            {"mcp.enabled": True, "mcp.default_server_ids": ["evil"]})))
    assert "--task-param" not in given.stderr, given.stderr


def test_a_journal_cannot_choose_where_compiled_code_is_loaded_from(
        tmp_path: Path, own_run: tuple[Path, str]) -> None:
    # The module cache holds native code wasmtime loads without checking it:
    # a journal naming the cache directory would run whatever a bug report
    # put there. Where things are kept is this invocation's (run_flags never
    # records it), so a journal's cache_dir is not taken.
    journal, stdout = own_run
    planted = tmp_path / "planted-cache"

    def edit(start: dict[str, Any]) -> None:
        start["flags"]["host"]["cache_dir"] = str(planted)
        start["flags"]["host"]["module_cache_bytes"] = 1

    crafted = _edited(journal, tmp_path / "crafted.jsonl", edit, ended=True)
    done = _spearpy("replay", crafted, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == stdout
    assert not planted.exists()


def test_a_journal_cannot_loosen_this_invocations_guest_limits(
        tmp_path: Path, own_run: tuple[Path, str]) -> None:
    # A hostile guest replayed from a bug report is held to the user's bounds:
    # its journal may tighten them (as its run had them), not lift them.
    journal, stdout = own_run

    def edit(start: dict[str, Any]) -> None:
        start["limits"] = {"max_host_bytes": 1 << 40, "max_memory": None}
        start["flags"]["host"]["max_log_bytes"] = 1 << 40

    crafted = _edited(journal, tmp_path / "crafted.jsonl", edit, ended=True)
    env = _child_env(SPEARPY_MAX_MEMORY="64MiB")
    done = _spearpy("replay", crafted, cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    for granted in (f"--max-host-bytes {1 << 40}", "--max-memory None",
                    f"--max-log-bytes {1 << 40}"):
        assert granted in done.stderr, done.stderr
    assert done.stdout == ""

    def tighter(start: dict[str, Any]) -> None:
        start["limits"] = {"max_host_bytes": "200MiB", "max_memory": 32 << 20, "timeout": 60}

    kept = _edited(journal, tmp_path / "tighter.jsonl", tighter, ended=True)
    replayed = _spearpy("replay", kept, cwd=tmp_path, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == stdout
