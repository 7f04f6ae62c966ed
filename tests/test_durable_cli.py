"""Durable runs end to end (issue 31, docs/durable.md): real `spearpy run
--journal`, `resume`, `replay` and `show` processes against a real scripted
OpenAI server on 127.0.0.1 in this process, which counts every completion
the processes ask for."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from spearpy.testing import ScriptedServer
from tests.probe import wat_module

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "wasm-samples"
MULTI_WASM = SAMPLES / "c_multi_tool.wasm"
MULTI_SCRIPT = json.loads((SAMPLES / "scripts" / "multi_tool.json").read_text())
SPEARPY = [sys.executable, "-m", "spearpy"]
# c_multi_tool asks four completions: the tool messages each carries, in order.
MULTI_TOOL_MESSAGES = [0, 1, 2, 4]
KEY = "sk-durable-0123456789abcdef"
# Generous: a `spearpy` process starts in ~0.5 s, but 8 engineers share 2 cores.
PATIENCE_S = 60.0


def _child_env(**more: str) -> dict[str, str]:
    """This process's environment without keys or spearpy settings of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SPEARPY_") and not k.endswith("_API_KEY")}
    return {**env, **more}


def _spearpy(*args: str | Path, cwd: Path, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPEARPY, *map(str, args)], cwd=cwd, env=env or _child_env(),
                          capture_output=True, text=True, timeout=PATIENCE_S * 2, check=False)


def _live(server: ScriptedServer, model: str = "m1", keyless: bool = True) -> list[str]:
    flags = ["--base-url", server.base_url, "--model", model]
    return [*flags, "--api-key-env", ""] if keyless else flags


def _slow(script: dict[str, Any], delay_ms: int) -> dict[str, Any]:
    """`script` with every answer held back delay_ms (a slow model)."""
    rules = [{**rule, "reply": {**rule["reply"], "delay_ms": delay_ms}}
             for rule in script["rules"]]
    return {**script, "rules": rules}


def _records(journal: Path) -> list[dict[str, Any]]:
    """The journal's complete lines (a line being written is not one yet)."""
    data = journal.read_bytes() if journal.exists() else b""
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def _kinds(journal: Path) -> list[str]:
    return [record["kind"] for record in _records(journal)]


def _cut(journal: Path, into: Path, records: int) -> Path:
    """The first `records` lines of `journal`: a run that crashed there."""
    lines = journal.read_bytes().split(b"\n")[:records]
    into.write_bytes(b"\n".join(lines) + b"\n")
    into.chmod(0o600)
    return into


def _tool_messages(server: ScriptedServer, since: int = 0) -> list[int]:
    return [sum(1 for m in r.body["messages"] if m.get("role") == "tool")
            for r in server.requests[since:] if r.body is not None]


def _journaled_run(tmp_path: Path, server: ScriptedServer, name: str = "run"
                   ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    journal = tmp_path / f"{name}.jsonl"
    done = _spearpy("run", *_live(server), "--journal", journal, MULTI_WASM, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _kinds(journal)[-1] == "end"
    return journal, done


@pytest.fixture
def uninterrupted(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """c_multi_tool run once, start to end, with no journal."""
    with ScriptedServer(MULTI_SCRIPT) as server:
        done = _spearpy("run", *_live(server), MULTI_WASM, cwd=tmp_path)
        assert len(server.requests) == len(MULTI_TOOL_MESSAGES)
    assert done.returncode == 0 and "answer: (2 + 3) * 4 = 20" in done.stdout, done.stderr
    return done


# ---- a crash and its resume ---------------------------------------------------------


def _kill_mid_request(process: subprocess.Popen[bytes], journal: Path,
                      server: ScriptedServer) -> None:
    """SIGKILL `process` once its journal holds 3 records or more and the
    server holds a completion request the journal has no answer to yet."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline and process.poll() is None:
        kinds = _kinds(journal)
        if len(kinds) >= 3 and len(server.requests) == kinds.count("chat.completion") + 1:
            process.send_signal(signal.SIGKILL)
            process.wait(PATIENCE_S)
            return
        time.sleep(0.01)
    process.kill()
    process.wait(PATIENCE_S)
    pytest.fail(f"no request in flight with 3 records journaled (exit {process.returncode})")


def test_sigkill_then_resume_finishes_the_run_no_paid_call_repeated(
        tmp_path: Path, uninterrupted: subprocess.CompletedProcess[str]) -> None:
    journal = tmp_path / "run.jsonl"
    with ScriptedServer(_slow(MULTI_SCRIPT, 300)) as server:
        process = subprocess.Popen(
            [*SPEARPY, "run", *_live(server), "--journal", str(journal), str(MULTI_WASM)],
            cwd=tmp_path, env=_child_env(), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        _kill_mid_request(process, journal, server)
        assert process.returncode == -signal.SIGKILL
        kinds = _kinds(journal)
        answered = kinds.count("chat.completion")
        assert "end" not in kinds and 1 <= answered < len(MULTI_TOOL_MESSAGES)
        before = len(server.requests)
        # The one in flight at the kill is the only request with no answer journaled.
        assert answered <= before <= answered + 1

        resumed = _spearpy("resume", journal, cwd=tmp_path)

        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == uninterrupted.stdout
        # The resume asks exactly the completions the journal had no answer to.
        assert _tool_messages(server, before) == MULTI_TOOL_MESSAGES[answered:]
        assert len(server.requests) <= len(MULTI_TOOL_MESSAGES) + 1
    kinds = _kinds(journal)
    assert kinds.count("chat.completion") == len(MULTI_TOOL_MESSAGES)
    assert kinds[-1] == "end" and _records(journal)[-1]["exit_code"] == 0
    # Every seq once, in order: the resume appended after the crash's last record.
    assert [r["seq"] for r in _records(journal)] == list(range(len(kinds)))


# ---- replay offline, --until, --fork-at -------------------------------------------------


def test_replay_is_offline_and_exact_and_stops_where_the_journal_does(tmp_path: Path) -> None:
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, original = _journaled_run(tmp_path, server)
    # The server is gone (its port refuses) and no key is set: replay needs neither.
    replayed = _spearpy("replay", journal, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == original.stdout

    cut = _cut(journal, tmp_path / "cut.jsonl", 4)  # start .. the first tool's output
    cut_bytes = cut.read_bytes()
    stopped = _spearpy("replay", cut, cwd=tmp_path)
    assert stopped.returncode == 138, stopped.stderr
    assert "replay_mismatch" in stopped.stderr and "step 4" in stopped.stderr
    assert "the journal holds no more" in stopped.stderr
    assert cut.read_bytes() == cut_bytes  # a replay writes nothing


def test_replay_until_stops_before_that_step(tmp_path: Path) -> None:
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, _ = _journaled_run(tmp_path, server)
    assert _kinds(journal)[3:5] == ["guest_tool.output", "chat.completion"]
    stopped = _spearpy("replay", "--until", "4", journal, cwd=tmp_path)
    assert stopped.returncode == 130, stopped.stderr
    assert "before step 4" in stopped.stderr
    # Step 3 (the first tool ran) is replayed; step 4 (the second answer) is not.
    assert stopped.stdout == "duplicate add: EEXIST\ntool add(2, 3)\n"


def test_fork_goes_live_from_a_step_with_another_model(tmp_path: Path) -> None:
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, original = _journaled_run(tmp_path, server)
        old_bytes = journal.read_bytes()
        server.clear_requests()
        fork = tmp_path / "fork.jsonl"

        forked = _spearpy("replay", journal, "--fork-at", "4", "--journal", fork,
                          "--model", "other", cwd=tmp_path)

        assert forked.returncode == 0, forked.stderr
        assert forked.stdout == original.stdout
        # Steps 2 and 4 were answered from the journal; the last two answers are live.
        assert [(r.body or {}).get("model") for r in server.requests] == ["other", "other"]
        assert _tool_messages(server) == MULTI_TOOL_MESSAGES[2:]
    assert journal.read_bytes() == old_bytes
    old, new = _records(journal), _records(fork)
    assert new[1:5] == old[1:5]
    assert new[0]["flags"]["host"]["model"] == "other"
    assert new[-1] == {"seq": len(new) - 1, "kind": "end", "outcome": "exited", "exit_code": 0}
    assert [r["kind"] for r in new] == [r["kind"] for r in old]


# ---- divergence -------------------------------------------------------------------------


def test_another_module_or_flag_at_an_unfinished_journal_diverges_at_step_0(
        tmp_path: Path) -> None:
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, _ = _journaled_run(tmp_path, server)
        crashed = _cut(journal, tmp_path / "crashed.jsonl", 4)
        crashed_bytes = crashed.read_bytes()
        server.clear_requests()

        other_module = _spearpy("run", *_live(server), "--journal", crashed,
                                SAMPLES / "c_hello.wasm", cwd=tmp_path)
        other_model = _spearpy("run", *_live(server, model="other"), "--journal", crashed,
                               MULTI_WASM, cwd=tmp_path)

        assert server.requests == []
    assert other_module.returncode == 138, other_module.stderr
    assert "replay_mismatch" in other_module.stderr
    assert "step 0 (start) diverges at module_sha256" in other_module.stderr
    assert other_model.returncode == 138, other_model.stderr
    assert 'step 0 (start) diverges at flags.host.model: recorded "m1", got "other"' \
        in other_model.stderr
    assert crashed.read_bytes() == crashed_bytes


ECHO_SCRIPT = {"rules": [{"reply": {"content": "you said: {{last_user}}"}}]}


def _file_guest(tmp_path: Path) -> Path:
    module = tmp_path / "durable_file.wasm"
    module.write_bytes(wat_module("durable_file.wat"))
    return module


def test_a_changed_mounted_file_diverges_at_its_completion(tmp_path: Path) -> None:
    module = _file_guest(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    note = data / "note.txt"
    note.write_text("alpha")
    journal = tmp_path / "file.jsonl"
    with ScriptedServer(ECHO_SCRIPT) as server:
        done = _spearpy("run", *_live(server), "--journal", journal, "--dir", f"{data}:/data",
                        module, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert '"content":"you said: alpha"' in done.stdout
        kinds = _kinds(journal)
        step = kinds.index("chat.completion")
        # Crashed before its end: everything after the file was read is journaled.
        crashed = _cut(journal, tmp_path / "crashed.jsonl", kinds.index("end"))
        crashed_bytes = crashed.read_bytes()
        server.clear_requests()
        note.write_text("bravo")

        # The mount is the run's own: vouched for (docs/durable.md, "Whose journal").
        replayed = _spearpy("replay", journal, "--trust-journal", cwd=tmp_path)
        resumed = _spearpy("resume", crashed, "--trust-journal", cwd=tmp_path)

        for diverged in (replayed, resumed):
            assert diverged.returncode == 138, diverged.stderr
            assert f"step {step} (chat.completion) diverges at request_sha256" \
                in diverged.stderr
        # Nothing went upstream, and the crashed run's journal is as it was:
        # once the file is put back, the run resumes.
        assert server.requests == []
        assert crashed.read_bytes() == crashed_bytes
        note.write_text("alpha")
        again = _spearpy("resume", crashed, "--trust-journal", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert again.stdout == done.stdout
        assert server.requests == []
    assert _kinds(crashed)[-1] == "end"


def test_resume_elsewhere_mounts_the_journaled_directories(tmp_path: Path) -> None:
    """A relative --dir is the directory it named when the run started,
    wherever the resume runs."""
    module = _file_guest(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "note.txt").write_text("alpha")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with ScriptedServer(ECHO_SCRIPT) as server:
        journal = tmp_path / "file.jsonl"
        done = _spearpy("run", *_live(server), "--journal", journal, "--dir", "data:/data",
                        module, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        crashed = _cut(journal, tmp_path / "crashed.jsonl", _kinds(journal).index("end"))
        # A journal cannot grant a mount: its user gives it, or vouches for the journal.
        refused = _spearpy("resume", crashed, cwd=elsewhere)
        assert refused.returncode == 1 and f"--dir {tmp_path / 'data'}:/data" \
            in refused.stderr and "--trust-journal" in refused.stderr, refused.stderr
        assert len(server.requests) == 1  # the run's own
        resumed = _spearpy("resume", crashed, "--trust-journal", cwd=elsewhere)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == done.stdout
        assert len(server.requests) == 1
        # A journaled directory that is gone is a clear error, not a traceback.
        (tmp_path / "data" / "note.txt").unlink()
        (tmp_path / "data").rmdir()
        gone = _spearpy("resume", _cut(journal, tmp_path / "again.jsonl", 2),
                        "--trust-journal", cwd=elsewhere)
    assert gone.returncode != 0 and "Traceback" not in gone.stderr
    assert f"{tmp_path / 'data'}" in gone.stderr and "not a directory" in gone.stderr


# ---- show -------------------------------------------------------------------------------


def test_show_lists_every_step_with_its_kind(tmp_path: Path) -> None:
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, _ = _journaled_run(tmp_path, server)
    shown = _spearpy("show", journal, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split()[:2] for line in shown.stdout.splitlines()]
    assert rows == [[str(r["seq"]), r["kind"]] for r in _records(journal)]
    kinds = {kind for _, kind in rows}
    assert {"start", "hostcall", "chat.completion", "guest_tool.output", "end"} <= kinds


# ---- secrets --------------------------------------------------------------------------


def _echoes_key(script: dict[str, Any]) -> dict[str, Any]:
    """The final answer carries the key, as a careless or hostile model might."""
    rules = [*script["rules"][:-1], {**script["rules"][-1], "reply": {
        "content": f"the key is {KEY}, and {{{{last_tool}}}}"}}]
    return {**script, "rules": rules}


def test_the_key_is_never_journaled_and_resume_reads_it_from_the_environment(
        tmp_path: Path) -> None:
    # The key reaches the run twice: in the model's last answer and in stdin.
    stdin = tmp_path / "stdin.txt"
    stdin.write_text(f"{KEY}\nand more input\n")
    keyed = _child_env(OPENAI_API_KEY=KEY)
    with ScriptedServer(_echoes_key(MULTI_SCRIPT), api_key=KEY) as server:
        journal = tmp_path / "run.jsonl"
        original = _spearpy("run", *_live(server, keyless=False), "--journal", journal,
                            "--stdin", stdin, MULTI_WASM, cwd=tmp_path, env=keyed)
        assert "the key is [redacted]" in original.stdout, original.stderr
        assert _kinds(journal)[-1] == "end"
        crashed = _cut(journal, tmp_path / "crashed.jsonl", 4)
        keyless = _cut(journal, tmp_path / "keyless.jsonl", 4)
        server.clear_requests()

        # Stdin holding the key is journaled as its digest only: given again, checked.
        # Its key went to the scripted server: vouched for ("Whose journal").
        no_stdin = _spearpy("resume", crashed, "--trust-journal", cwd=tmp_path, env=keyed)
        assert no_stdin.returncode == 2 and "--stdin" in no_stdin.stderr, no_stdin.stderr
        resumed = _spearpy("resume", crashed, "--stdin", stdin, "--trust-journal",
                           cwd=tmp_path, env=keyed)

        assert (resumed.returncode, resumed.stdout) == (original.returncode, original.stdout)
        assert {r.headers.get("authorization") for r in server.requests} == {f"Bearer {KEY}"}
        server.clear_requests()
        # Without the key the resume's first live completion is refused
        # upstream, and the guest is told so, as a run without it would be.
        refused = _spearpy("resume", keyless, "--stdin", stdin, "--trust-journal",
                           cwd=tmp_path)
        assert "upstream answered HTTP 401" in refused.stdout, refused.stderr
        assert [r.headers.get("authorization") for r in server.requests] == [None]
    spellings = [KEY, base64.b64encode(KEY.encode()).decode(), KEY.encode().hex()]
    for path in (journal, crashed, keyless):
        data = path.read_bytes().decode("ascii")
        assert not [s for s in spellings if s in data], path
    for output in (original, no_stdin, resumed, refused):
        assert KEY not in output.stdout + output.stderr


def test_resume_of_a_remote_run_without_its_key_refuses_before_anything(
        tmp_path: Path) -> None:
    """As `spearpy run` does: a resume that went on without the key would
    journal the upstream's 401 as the answer and end the run, losing it."""
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, original = _journaled_run(tmp_path, server)
    records = _records(journal)
    # The same run, as if made against a remote server (never contacted: the
    # journal below answers every step but the end).
    records[0]["flags"]["host"] = {"base_url": "https://spearpy-remote.invalid/v1",
                                   "model": "m1"}
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n"
                               for r in records[:-1]))
    crashed.chmod(0o600)
    crashed_bytes = crashed.read_bytes()

    refused = _spearpy("resume", crashed, "--trust-journal", cwd=tmp_path)

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "no API key" in refused.stderr and "OPENAI_API_KEY" in refused.stderr
    assert refused.stdout == "" and crashed.read_bytes() == crashed_bytes
    resumed = _spearpy("resume", crashed, "--trust-journal", cwd=tmp_path,
                       env=_child_env(OPENAI_API_KEY=KEY))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == original.stdout


# ---- a journaled run against a cassette ----------------------------------------------


def test_resume_reports_a_cassette_replay_mismatch_as_run_does(tmp_path: Path) -> None:
    """A run replaying a cassette (`--backend replay:FILE`) whose live part
    misses it failed as a replay, whatever its guest made of the error body:
    `spearpy run` says replay_mismatch and exits 138, and so must the
    resume that goes on live against the same cassette."""
    cassette = tmp_path / "run.cassette.json"
    recorded = _spearpy("run", "--no-cache", "--backend",
                        f"scripted:{SAMPLES / 'scripts' / 'multi_tool.json'}", "--model", "m",
                        "--record", cassette, MULTI_WASM, cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    journal = tmp_path / "run.jsonl"
    done = _spearpy("run", "--no-cache", "--backend", f"replay:{cassette}", "--journal",
                    journal, MULTI_WASM, cwd=tmp_path)
    assert done.returncode == 0 and _kinds(journal)[-1] == "end", done.stderr
    crashed = _cut(journal, tmp_path / "crashed.jsonl", 4)
    data = json.loads(cassette.read_text())
    data["exchanges"] = data["exchanges"][:1]  # the resume's live requests miss it
    cassette.write_text(json.dumps(data))
    resumed = _spearpy("resume", crashed, cwd=tmp_path)
    assert resumed.returncode == 138, resumed.stdout + resumed.stderr
    assert "spearpy: replay_mismatch: " in resumed.stderr
