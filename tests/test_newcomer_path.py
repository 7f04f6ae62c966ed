"""Issue 18: the newcomer path end to end, in a temp dir, as a user types it:
`spearpy new` (C and Rust), then the three commands of the project's own
README (build, run on the scripted model, run against a server: here the
loopback scripted server, the README's URL swapped for its), `spearpy run
--transcript` and `spearpy show`. Skipped, with the reason, only when
`spearpy build` reports the toolchain missing (exit 3); tools/setup.sh
--toolchains installs it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from spearpy.testing import Script, ScriptedServer

BIN = Path(sys.executable).parent  # where the `spearpy` script of this environment is
TOOLCHAIN_MISSING = 3
# Only a guard against a hung compiler; no test asserts on time.
HANG_GUARD_S = 600
README_URL = "https://api.openai.com/v1"
ANSWER = 'answer: The tool answered {"words":4}.'


def shell(command: str, cwd: Path, env: dict[str, str] | None = None,
          ) -> subprocess.CompletedProcess[str]:
    """`command` as a user's shell runs it, with this environment's spearpy first on PATH."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SPEARPY_MODEL", "NO_COLOR",
                            "FORCE_COLOR", "SPEARPY_TRANSCRIPT_DIR")}
    environ["PATH"] = f"{BIN}{os.pathsep}{environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, text=True, capture_output=True,
                          timeout=HANG_GUARD_S, check=False, env={**environ, **(env or {})})


def readme_commands(readme: str) -> list[str]:
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block, "the project README has no sh block"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("lang", ["c", "rust"])
def test_new_build_run_show(tmp_path: Path, lang: str) -> None:
    made = shell(f"spearpy new agent --lang {lang} --tool count_words", tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "agent"
    assert "spearpy build" in made.stdout
    build, offline, online = readme_commands((project / "README.md").read_text())

    # 1. build
    built = shell(build, project)
    if built.returncode == TOOLCHAIN_MISSING:
        pytest.skip(f"no {lang} toolchain for wasm32 (tools/setup.sh --toolchains): "
                    f"{built.stderr.strip()}")
    assert built.returncode == 0, built.stdout + built.stderr
    wasm = project / "agent.wasm"
    assert wasm.is_file() and f"built {wasm.name}" in built.stdout

    # 2. the scripted model, exactly as the README says
    ran = shell(offline, project)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == ANSWER

    # 3. a server: the loopback scripted server in place of the README's URL,
    # checking the README's key placeholder arrives as the bearer token.
    key = re.search(r"OPENAI_API_KEY=(\S+)", online)
    assert key and README_URL in online
    script = Script.load(str(project / "script.json"))
    with ScriptedServer(script, api_key=key.group(1)) as server:
        served = shell(online.replace(README_URL, server.base_url), project)
        asked = [r.body for r in server.requests if r.body]
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == ANSWER
    first = asked[0]
    assert first["model"] == shlex.split(online)[shlex.split(online).index("--model") + 1]
    assert [t["function"]["name"] for t in first["tools"]] == ["count_words"]
    assert asked[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_0_0",
                                        "content": '{"words":4}'}

    # 4. keep the conversation, then look at it
    kept = shell(offline.replace("spearpy run", "spearpy run --transcript transcripts"),
                 project)
    assert kept.returncode == 0, kept.stderr
    (transcript,) = (project / "transcripts").iterdir()
    run_id = transcript.name.split("-fd")[0]
    shown = shell(f"spearpy show {run_id}", project)  # ./transcripts is the default dir
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "\x1b[" not in text  # piped: no colour
    for expected in (f"run {run_id}", "user", "How many words are in 'the quick brown fox'?",
                     "tool call: count_words", '"text": "the quick brown fox"',
                     "result: count_words", '"words": 4', "The tool answered",
                     "tokens:", "tools offered: count_words", " ms"):
        assert expected in text, (expected, text)
    assert text.index("tool call: count_words") < text.index("result: count_words") \
        < text.index("The tool answered")
    dumped = json.loads(shell(f"spearpy show --json {transcript}", tmp_path).stdout)
    assert dumped["run_id"] == run_id and len(dumped["messages"]) == 4
    coloured = shell(f"spearpy show {run_id}", project, env={"FORCE_COLOR": "1"})
    assert "\x1b[" in coloured.stdout  # what a terminal gets


def test_show_of_an_unknown_run_says_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "abc123-fd1000.json").write_text('{"messages": []}')
    done = shell("spearpy show nope", tmp_path, env={"SPEARPY_TRANSCRIPT_DIR": "runs"})
    assert done.returncode == 2
    assert "no run 'nope' has transcripts in runs" in done.stderr
    assert "latest runs there: abc123" in done.stderr
    assert shell("spearpy show abc", tmp_path,
                 env={"SPEARPY_TRANSCRIPT_DIR": "runs"}).returncode == 0  # a prefix will do
