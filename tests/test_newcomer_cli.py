"""Issue 18, the errors a newcomer meets: inspect says whether every import
is provided, byte sizes take units, a missing API key is refused at start naming
the variable, and a send without a model says how to choose one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from spearpy.config import HostConfig
from spearpy.host import Host
from spearpy.hostcalls import HOSTCALLS
from spearpy.inspect import inspect_module

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "wasm-samples" / "c_chat.wasm"
HELLO = ROOT / "wasm-samples" / "c_hello.wasm"
CHAT_SCRIPT = ROOT / "wasm-samples" / "scripts" / "chat.json"
HANG_GUARD_S = 120

# _start calls mic_create and exits 1 if it failed (the -38 of a stub), else 0.
MIC_GUEST = """(module
  (import "spear" "cchat_create" (func $create (result i32)))
  (import "spear" "mic_create" (func $mic (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (call $exit (i32.lt_s (call $mic) (i32.const 0)))))"""

def cli(*args: str, env: dict[str, str] | None = None,
        drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run([sys.executable, "-m", "spearpy", *args], capture_output=True,
                          text=True, timeout=HANG_GUARD_S, check=False, cwd=ROOT,
                          env={**environ, **(env or {})})


def wasm(text: str) -> bytes:
    return bytes(wasmtime.wat2wasm(text))


# ---- inspect -------------------------------------------------------------------


def test_every_import_of_spears_header_is_implemented() -> None:
    # SPEAR's audio and stream families were linked as -38 ENOSYS stubs until
    # issues 17 and 20; now each import the header declares is a real
    # hostcall with the header's arity, so inspect has no "enosys" state left.
    header = (ROOT / "guest" / "c" / "spear.h").read_text()
    declared = {name: 0 if args.strip() == "void" else args.count(",") + 1
                for name, args in re.findall(r'SPEAR_IMPORT\("(\w+)"\)[^(]*\(([^)]*)\)', header)}
    assert {"mic_create", "rtasr_ctl", "user_stream_write"} <= set(declared)
    arity = {name: len(params) for name, (params, _r, _f) in HOSTCALLS.items()}
    assert {name: arity.get(name) for name in declared} == declared


def test_an_audio_import_is_runnable(tmp_path: Path) -> None:
    report = inspect_module(wasm(MIC_GUEST))
    status = {i["name"]: i["status"] for i in report["spear_imports"]}
    assert status == {"cchat_create": "implemented", "mic_create": "implemented"}
    assert report["other_imports"][0]["status"] == "implemented"
    assert report["runnable"] and not report["problems"]
    module = tmp_path / "mic.wasm"
    module.write_bytes(wasm(MIC_GUEST))
    text = cli("inspect", str(module)).stdout
    assert "runnable: yes" in text and "ENOSYS" not in text
    # mic_create opens a real fd now.
    assert cli("run", "-q", "--no-cache", str(module)).returncode == 0


@pytest.mark.parametrize(("module", "name", "problem"), [
    ("spear", "teleport", "imports spear.teleport, which spearpy does not provide"),
    ("wasi_snapshot_preview1", "fd_teleport", "is not a WASI preview 1 function"),
    ("env", "abort", "only `spear` and WASI preview 1 are provided"),
])
def test_an_unknown_import_is_not_runnable(module: str, name: str, problem: str) -> None:
    report = inspect_module(wasm(f"""(module
      (import "{module}" "{name}" (func (result i32)))
      (memory (export "memory") 1) (func (export "_start")))"""))
    every = report["spear_imports"] + report["other_imports"]
    assert [i["status"] for i in every] == ["unknown"]
    assert not report["runnable"]
    assert any(problem in p for p in report["problems"]), report["problems"]


def test_a_wrong_signature_of_an_implemented_hostcall_is_a_problem() -> None:
    report = inspect_module(wasm("""(module
      (import "spear" "cchat_create" (func (param i32) (result i32)))
      (memory (export "memory") 1) (func (export "_start")))"""))
    assert report["spear_imports"][0]["status"] == "implemented"
    assert not report["runnable"] and "is imported as (i32)->(i32)" in report["problems"][0]


# ---- byte sizes --------------------------------------------------------------------


@pytest.mark.parametrize(("given", "expected"), [
    ("64KiB", 65536), ("16MiB", 16 << 20), ("1GB", 10**9), ("1.5KiB", 1536), ("65536", 65536),
    (4096, 4096),
])
def test_byte_sizes_take_units_and_stay_ints(given: object, expected: int) -> None:
    config = HostConfig(max_memory=given, max_host_bytes="1GiB", max_log_bytes=given)
    assert config.max_memory == expected and type(config.max_memory) is int
    assert config.max_host_bytes == 1 << 30 and config.max_log_bytes == expected


def test_byte_sizes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEARPY_MAX_TOOL_OUTPUT_BYTES", "128KiB")
    monkeypatch.setenv("SPEARPY_MAX_HOST_BYTES", "16MiB")
    config = HostConfig()
    assert (config.max_tool_output_bytes, config.max_host_bytes) == (128 << 10, 16 << 20)
    # Per-run limits are validated by the same fields.
    with Host(HostConfig(cache_dir=None)) as host:
        result = host.run(HELLO, ["x"], limits={"max_memory": "64MiB", "max_log_bytes": "1KiB"})
    assert result.outcome == "exited"


def test_byte_size_flags() -> None:
    ok = cli("run", "-q", "--no-cache", "--max-memory", "16MiB", "--max-host-bytes", "64MiB",
             "--max-log-bytes", "64KiB", "--max-tool-output-bytes", "1KiB", str(HELLO), "--",
             "hi")
    assert ok.returncode == 0, ok.stderr
    small = cli("run", "-q", "--no-cache", "--max-memory", "64KiB", str(HELLO))
    assert small.returncode == 137 and "memory_limit" in small.stderr  # it took the size
    bad = cli("run", "--max-memory", "16XiB", str(HELLO))
    assert bad.returncode == 2
    assert "Invalid value for '--max-memory': '16XiB' is not a byte count" in bad.stderr
    too_big = cli("run", "--max-tool-output-bytes", "2MiB", str(HELLO))
    assert too_big.returncode == 2 and "--max-tool-output-bytes" in too_big.stderr


def test_a_bad_byte_size_in_the_environment_names_the_variable() -> None:
    done = cli("run", str(HELLO), env={"SPEARPY_MAX_LOG_BYTES": "lots"})
    assert done.returncode == 2
    assert "invalid SPEARPY_MAX_LOG_BYTES 'lots': expected a byte count" in done.stderr


# ---- API key and model at start ------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "batch"])
@pytest.mark.parametrize(("flags", "env", "variable"), [
    (("--model", "gpt-4o-mini"), {}, "OPENAI_API_KEY"),
    ((), {"OPENAI_BASE_URL": "https://llm.example.com/v1"}, "OPENAI_API_KEY"),
    (("--backend", "anthropic", "--model", "claude"), {}, "ANTHROPIC_API_KEY"),
    (("--base-url", "https://llm.example.com/v1", "--api-key-env", "MY_LLM_KEY"), {},
     "MY_LLM_KEY"),
])
def test_a_missing_key_for_a_remote_server_is_refused_at_start(
        tmp_path: Path, command: str, flags: tuple[str, ...], env: dict[str, str],
        variable: str) -> None:
    where = [str(CHAT)]
    if command == "batch":
        (tmp_path / "in.jsonl").write_text('{"id": 1}\n')
        where += ["--inputs", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "out.jsonl")]
    done = cli(command, "--no-cache", *flags, *where, env=env,
               drop=("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_LLM_KEY"))
    assert done.returncode == 2, done.stderr
    assert f"needs one in the environment variable {variable}, which is not set" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()
    # With the variable set it starts (and fails later, at the unreachable send).
    assert f"{variable}, which is not set" not in cli(
        command, "--no-cache", "--max-retries", "0", "--request-timeout", "2", *flags, *where,
        env={**env, variable: "sk-test"}).stderr


@pytest.mark.parametrize("flags", [
    ("--base-url", "http://127.0.0.1:9/v1", "--model", "m"),
    ("--base-url", "http://localhost:9/v1", "--model", "m"),
    ("--base-url", "http://[::1]:9/v1", "--model", "m"),
    ("--base-url", "https://llm.example.com/v1", "--api-key-env", ""),
    (),  # nothing chosen: a guest that never sends runs without a key
])
def test_no_key_is_needed_for_loopback_keyless_or_unchosen_servers(flags: tuple[str, ...]) -> None:
    done = cli("run", "-q", "--no-cache", *flags, str(HELLO), "--", "hi",
               drop=("OPENAI_API_KEY", "OPENAI_BASE_URL", "SPEARPY_MODEL"))
    assert done.returncode == 0, done.stderr


def test_a_send_without_a_model_says_how_to_choose_one() -> None:
    result = cli("run", "-q", "--no-cache", "--base-url", "http://127.0.0.1:9/v1", str(CHAT),
                 drop=("SPEARPY_MODEL", "OPENAI_API_KEY"))
    assert result.returncode == 2  # chat.c exits 2 on an error body
    assert '"code":"no_model"' in result.stdout  # the guest got the error
    hint = result.stderr
    assert "--model NAME" in hint and "SPEARPY_MODEL" in hint
    assert '`model = "NAME"` in the backend\'s [backends.NAME] table' in hint
    assert hint.count("a send had no model") == 1


def test_no_hint_when_the_model_is_known() -> None:
    done = cli("run", "-q", "--no-cache", "--backend", f"scripted:{CHAT_SCRIPT}", str(CHAT))
    assert done.returncode == 0, done.stderr
    assert "had no model" not in done.stderr
    assert json.dumps("grew yes")[1:-1] in done.stdout
