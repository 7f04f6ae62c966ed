"""Start-up: `spearpy run` of a guest that never talks to a model imports only
what it needs (issue 8, P3). Checked by what is in sys.modules, never by time.

Each check runs in a fresh interpreter: this test process has imported
everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HELLO = ROOT / "wasm-samples" / "c_hello.wasm"
LOOP = ROOT / "wasm-samples" / "c_infinite_loop.wasm"
# Only a guard against a hung child; no test asserts on time.
HANG_GUARD_S = 300

# Loaded on first use only: the HTTP client and its retries (first send),
# jsonschema (first tool with parameters), structlog and rich (first log line,
# a terminal live view or progress bar), metrics, spans, Ray, batch, executors;
# the user-stream, mic and rtasr hostcalls (their first call), and the TOML
# parser and MCP config reader (a config file).
NOT_AT_START = ("httpx", "httpcore", "tenacity", "jsonschema", "referencing", "structlog",
                "rich", "pygments", "prometheus_client", "opentelemetry", "ray",
                "spearpy.batch", "spearpy.backends.httpbackend", "spearpy.backends.openai",
                "spearpy.backends.replay", "spearpy.observe.metrics", "spearpy.cli.batch",
                "numpy", "soxr", "websockets", "spearpy.audio.select",
                "spearpy.hostcalls.streams", "spearpy.hostcalls.mic", "spearpy.hostcalls.rtasr",
                "spearpy.streams", "spearpy.asr", "spearpy.fds.mic", "spearpy.fds.rtasr",
                "tomllib", "spearpy.mcp.config_tables", "spearpy.executors")

_REPORT = """
import json, sys
def loaded(names):
    return sorted(n for n in names
                  if any(m == n or m.startswith(n + ".") for m in sys.modules))
"""


def _python(code: str, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False,
                          env=env)


def _env_free_run(tmp_path: Path, module: Path, *flags: str) -> tuple[
        subprocess.CompletedProcess[str], dict[str, object]]:
    """`spearpy run` in-process in a fresh interpreter, then what it had loaded."""
    report = tmp_path / "report.json"
    code = _REPORT + f"""
from spearpy.cli import main
try:
    main(["run", "--no-cache", *sys.argv[2:]])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({{"exit": code, "loaded": loaded({list(NOT_AT_START)!r})}}, out)
"""
    # No config file of the machine's user: it would rightly load the TOML parser.
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    env.pop("SPEARPY_CONFIG", None)
    done = _python(code, str(report), *flags, str(module), env=env)
    assert report.is_file(), done.stderr
    data: dict[str, object] = json.loads(report.read_text())
    return done, data


@pytest.mark.skipif(not HELLO.is_file(), reason="tools/build_wasm.sh builds the samples")
def test_run_of_a_guest_that_never_sends_loads_no_optional_stack(tmp_path: Path) -> None:
    done, data = _env_free_run(tmp_path, HELLO)
    assert data["exit"] == 0, done.stderr
    assert "hello from C: ok" in done.stdout  # the guest really ran
    assert "exited, exit code 0" in done.stderr  # and the live view reported it
    assert data["loaded"] == []


def test_config_defaults_come_from_no_builtin_factory() -> None:
    # pydantic reads a default factory's signature when it builds HostConfig;
    # a builtin's (dict, list) is parsed with tokenize, whose regex compiles on
    # first use, at every `spearpy run` (spearpy/config.py).
    from spearpy.config import HostConfig

    for name, info in HostConfig.model_fields.items():
        assert getattr(info.default_factory, "__module__", None) != "builtins", name


def test_importing_the_cli_loads_no_host() -> None:
    # `spearpy --help`, `--version` and `inspect` must not pay for the host,
    # pydantic or any subcommand's module.
    done = _python(_REPORT + """
import spearpy.cli
print(json.dumps(loaded(["spearpy.host", "spearpy.config", "pydantic", "wasmtime",
                         "spearpy.cli.run", "spearpy.cli.demo", "spearpy.cli.batch"])))
""")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.skipif(not LOOP.is_file(), reason="tools/build_wasm.sh builds the samples")
def test_a_failed_run_is_reported_once_on_stderr(tmp_path: Path) -> None:
    # By default the live view reports the failure and the warning-level log
    # stays silent (it would repeat each line), so structlog is never loaded.
    done, data = _env_free_run(tmp_path, LOOP, "--timeout", "0.3")
    assert data["exit"] == 124, done.stderr
    assert "timeout" in done.stderr and "run ended" not in done.stderr
    assert "structlog" not in data["loaded"]
    # With --quiet there is no live view: the log reports it. Logging is
    # configured deferred; the first line at warning or above brings
    # structlog in, configured for stderr.
    done, data = _env_free_run(tmp_path, LOOP, "--timeout", "0.3", "--quiet")
    assert data["exit"] == 124, done.stderr
    assert "run ended" in done.stderr and "outcome=timeout" in done.stderr
    assert "run ended" not in done.stdout
    assert "structlog" in data["loaded"]  # what a line costs, and only then


def test_deferred_logging_keeps_the_run_context_for_later_lines() -> None:
    # While deferred, LogSink binds nothing in structlog (not loaded); a line
    # logged mid-run through get_logger must still carry the run's context,
    # and none of it once the run ended.
    done = _python("""
import io, json, sys
from spearpy.observe import events as ev
from spearpy.observe.logs import LogSink, configure_logging, get_logger

out = io.StringIO()
configure_logging("json", "warning", stream=out, defer=True)
sink = LogSink()
sink(ev.Event(ev.RUN_START, "r1", 0, 0.0, data={"module": "m.wasm"}))
sink(ev.Event(ev.SEND_START, "r1", 1, 0.0, fd=1000, data={"auto": True}))
sink(ev.Event(ev.COMPLETION_START, "r1", 2, 0.0, fd=1000, data={"iteration": 1}))
before = "structlog" in sys.modules
get_logger().error("mid-run")
sink(ev.Event(ev.LIMIT_HIT, "r1", 3, 0.0, fd=1000, data={"limit": "max_iterations"}))
sink(ev.Event(ev.SEND_END, "r1", 4, 0.0, fd=1000, data={"outcome": "ok"}))
sink(ev.Event(ev.RUN_END, "r1", 5, 0.0, data={"outcome": "exited", "exit_code": 0}))
get_logger().error("after")
print(json.dumps({"before": before, "lines": [json.loads(x) for x in out.getvalue().splitlines()]}))
""")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["before"] is False  # info lines alone never loaded structlog
    lines = {line["event"]: line for line in data["lines"]}
    assert list(lines) == ["mid-run", "limit hit", "after"]  # info-level events made no line
    assert (lines["mid-run"]["run_id"], lines["mid-run"]["session_fd"],
            lines["mid-run"]["iteration"]) == ("r1", 1000, 1)
    assert lines["limit hit"]["run_id"] == "r1" and lines["limit hit"]["level"] == "warning"
    assert (lines["after"]["run_id"], lines["after"]["session_fd"]) == (None, None)
