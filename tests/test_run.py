"""Whole runs: exit codes, traps, limits, WASI isolation, loading, the CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from spearpy.errors import ModuleLoadError
from tests.probe import wat_module

WASI = wat_module("wasi.wat")


def test_proc_exit_code_argv_and_stdout(make_host: Any) -> None:
    result = make_host().run(WASI, ["a", "b"])
    assert result.outcome == "exited"
    assert result.exit_code == 3 * 16  # argv[0] is the module name
    assert result.stdout == b"argc=3 envc=0\n"


def test_guest_sees_no_host_environment_unless_asked(make_host: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEARPY_TEST_VISIBLE", "do-not-leak")
    host = make_host()
    assert host.run(WASI).exit_code == 16
    assert host.run(WASI, invoke="env_dump").stdout == b""
    given = host.run(WASI, env={"A": "1", "B": "2"}, invoke="env_dump").stdout
    assert given == b"A=1\0B=2\0"
    inherited = host.run(WASI, inherit_env=True, invoke="env_dump").stdout or b""
    assert b"SPEARPY_TEST_VISIBLE=do-not-leak\0" in inherited


def test_trap_is_reported_with_its_name(make_host: Any) -> None:
    result = make_host().run(WASI, invoke="trap")
    assert (result.outcome, result.exit_code) == ("trap", 134)
    assert "unreachable" in result.message


def test_invoke_returns_the_exports_result(make_host: Any) -> None:
    assert make_host().run(WASI, invoke="returns_3").exit_code == 3
    missing = make_host().run(WASI, invoke="nope")
    assert missing.outcome == "load_error" and "nope" in missing.message


def test_run_deadline_interrupts_wasm_and_sleep(make_host: Any) -> None:
    host = make_host(timeout=0.3)
    for entry in ("spin", "nap"):
        result = host.run(WASI, invoke=entry)
        assert (result.outcome, result.exit_code) == ("timeout", 124), entry
        assert "deadline" in result.message


def test_fuel_budget(make_host: Any) -> None:
    result = make_host(fuel=100_000).run(WASI, invoke="spin")
    assert (result.outcome, result.exit_code) == ("fuel_exhausted", 135)


def test_unknown_spear_import_is_named() -> None:
    from spearpy.host import Host

    bad = b"(module (import \"spear\" \"teleport\" (func)) (func (export \"_start\")))"
    import wasmtime

    with Host(cache_dir=None) as host, pytest.raises(ModuleLoadError, match=r"spear\.teleport"):
        host.load(bytes(wasmtime.wat2wasm(bad.decode())))


def test_disk_cache_is_used_by_a_second_host(tmp_path: Path, make_host: Any) -> None:
    first = make_host(cache_dir=tmp_path).load(WASI)
    assert not first.from_disk_cache
    second = make_host(cache_dir=tmp_path).load(WASI)
    assert second.from_disk_cache
    assert make_host(cache_dir=tmp_path).run(second).exit_code == 16


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spearpy", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_cli_run_passes_exit_code_and_guest_args(tmp_path: Path) -> None:
    wasm = tmp_path / "wasi.wasm"
    wasm.write_bytes(WASI)
    done = _cli("run", "--no-cache", "--env", "X=1", str(wasm), "--", "one")
    assert done.returncode == 2 * 16 + 1
    assert done.stdout == "argc=2 envc=1\n"
    trapped = _cli("run", "--no-cache", "--invoke", "trap", str(wasm))
    assert trapped.returncode == 134
    assert trapped.stderr.strip().splitlines()[-1].startswith("spearpy: trap:")


def test_cli_inspect_json(tmp_path: Path) -> None:
    from tests.probe import WAT_DIR

    wasm = tmp_path / "probe.wasm"
    wasm.write_bytes(wat_module("probe.wat"))
    done = _cli("inspect", "--json", str(wasm))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["runnable"] and report["exports_memory"] and report["allocator"]
    assert report["funcref_table"] == "__indirect_function_table"
    names = {i["name"]: i for i in report["spear_imports"]}
    assert names["rtasr_create"]["provided"] and names["rtasr_create"]["status"] == "implemented"
    assert names["cchat_send"]["provided"]
    assert WAT_DIR.is_dir()


def test_c_chat_guest_against_an_unreachable_upstream_gets_an_error_body() -> None:
    """Issue 2: the guest gets the error body and decides its exit; the host never raises."""
    root = Path(__file__).resolve().parents[1]
    done = _cli("run", "--no-cache", "--model", "m", "--max-retries", "0", "--base-url",
                "http://127.0.0.1:9/v1", str(root / "wasm-samples" / "c_chat.wasm"))
    assert done.returncode == 2, done.stdout + done.stderr  # chat.c: 2 = error body
    assert '"code":"upstream_unreachable"' in done.stdout
    assert "Traceback" not in done.stderr


def test_a_file_that_is_not_wasm_is_named_as_such(tmp_path: Path) -> None:
    junk = tmp_path / "junk.wasm"
    junk.write_text("garbage")
    done = _cli("run", "--no-cache", str(junk))
    assert done.returncode == 65
    assert "not a valid wasm binary (no \\0asm header) or WAT text" in done.stderr
    truncated = tmp_path / "truncated.wasm"
    truncated.write_bytes(b"\0asm\1\0\0\0\5")
    done = _cli("run", "--no-cache", str(truncated))
    assert done.returncode == 65 and "not a valid wasm binary:" in done.stderr


CAT = wasmtime.wat2wasm("""(module
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 64)) (i32.store (i32.const 4) (i32.const 1024))
    (drop (call $read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (i32.store (i32.const 4) (i32.load (i32.const 8)))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))""")


def test_cli_stdin_is_given_only_when_asked(tmp_path: Path) -> None:
    wasm = tmp_path / "cat.wasm"
    wasm.write_bytes(CAT)
    piped = subprocess.run([sys.executable, "-m", "spearpy", "run", "-q", "--no-cache",
                            "--stdin", "-", str(wasm)], input="from the pipe", capture_output=True,
                           text=True, timeout=120)
    assert (piped.returncode, piped.stdout) == (0, "from the pipe"), piped.stderr
    source = tmp_path / "in.txt"
    source.write_text("from a file")
    done = _cli("run", "-q", "--no-cache", "--stdin", str(source), str(wasm))
    assert done.stdout == "from a file"
    # Without --stdin the guest reads nothing, even with data waiting on ours.
    unasked = subprocess.run([sys.executable, "-m", "spearpy", "run", "-q", "--no-cache",
                              str(wasm)], input="not for the guest", capture_output=True,
                             text=True, timeout=120)
    assert (unasked.returncode, unasked.stdout) == (0, "")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_cancels_a_spinning_guest(sig: signal.Signals) -> None:
    """Python's KeyboardInterrupt never reaches a thread running wasm: without
    spearpy's handler, Ctrl-C left `spearpy run` of a spinning guest running."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "spearpy", "run", "--no-cache",
                             str(root / "wasm-samples" / "c_infinite_loop.wasm")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "spinning forever\n"  # the guest is in its loop
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)  # a hang guard, not a timing assertion
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert f"{sig.name}: stopping the guest" in err and "cancelled" in err


_BROKEN_DEADLINE_CHECK = """
import sys
from spearpy import Host
from spearpy.instance import GuestRun
from spearpy.interrupts import Interrupts

def broken(self):
    raise RuntimeError("broken check")

bugs = []
Interrupts.reason = broken
GuestRun.note_host_bug = lambda self, where, exc: bugs.append(f"{where}: {exc}")
result = Host(cache_dir=None).run(sys.argv[1])
print(result.outcome, "|", result.message, "|", bugs)
"""


def test_a_failing_deadline_check_ends_the_run_instead_of_the_process() -> None:
    """An exception inside wasmtime's epoch callback used to reach ctypes, which
    handed wasmtime an uninitialised deadline update: a segfault. In a
    subprocess, so that a regression fails this test instead of the suite."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", _BROKEN_DEADLINE_CHECK,
                           str(root / "wasm-samples" / "c_infinite_loop.wasm")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome, message, bugs = done.stdout.strip().split(" | ")
    assert outcome == "trap"
    assert "spearpy host error in the epoch deadline check: RuntimeError" in message
    assert "the epoch deadline check: broken check" in bugs


def test_a_bad_setting_names_its_flag_or_variable(tmp_path: Path) -> None:
    import os

    wasm = tmp_path / "wasi.wasm"
    wasm.write_bytes(WASI)
    done = _cli("run", "--no-cache", "--timeout", "-1", str(wasm))
    assert done.returncode == 2
    assert "invalid --timeout -1.0: Input should be greater than 0" in done.stderr
    env = {**os.environ, "SPEARPY_MAX_RETRIES": "50"}
    done = _cli("run", "--no-cache", "--max-iterations", "0", str(wasm), env=env)
    assert done.returncode == 2
    assert "invalid SPEARPY_MAX_RETRIES '50'" in done.stderr
    assert "invalid --max-iterations 0" in done.stderr
    assert "pydantic.dev" not in done.stderr


def test_json_logs_stay_json_with_guest_log_lines() -> None:
    root = Path(__file__).resolve().parents[1]
    done = _cli("run", "--no-cache", "--log-format", "json",
                str(root / "wasm-samples" / "c_hello.wasm"))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    guest = [line for line in lines if line.get("source") == "guest"]
    assert guest and all(line["run_id"] == lines[0]["run_id"] for line in guest)
    assert "[info]" not in done.stderr


def test_a_deadline_set_without_its_configured_limit_is_still_named(probe: Any) -> None:
    # The fuzz suite sets `deadline` directly; formatting the missing limit
    # used to raise inside the deadline check (see the test above).
    p = probe()
    p.run.interrupts.deadline = time.monotonic() - 1
    assert p.run.interrupts.reason() == ("timeout", "the run exceeded its deadline")
    p.run.interrupts.deadline, p.run.interrupts.tool_deadline = None, time.monotonic() - 1
    assert p.run.interrupts.reason() == ("tool_timeout", "the tool exceeded its deadline")
