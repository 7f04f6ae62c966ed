"""`spearpy run --model-alias`: a guest that hard-codes gpt-4o-mini, as SPEAR's
samples do, runs against a local server that serves another model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import wasmtime

from spearpy import abi
from tests.test_routing_kit import routing_config

ROOT = Path(__file__).resolve().parents[1]
PARAM = '{"key":"model","value":"gpt-4o-mini"}'

# Sends "hi" with model gpt-4o-mini and prints the response body.
HARD_CODED = f"""
(module
  (import "spear" "cchat_create" (func $create (result i32)))
  (import "spear" "cchat_write_msg" (func $msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_ctl" (func $ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $send (param i32 i32) (result i32)))
  (import "spear" "cchat_recv" (func $recv (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "user")
  (data (i32.const 16) "hi")
  (data (i32.const 32) {json.dumps(PARAM)})
  (func (export "_start") (local $fd i32) (local $n i32)
    (local.set $fd (call $create))
    (drop (call $msg (local.get $fd) (i32.const 0) (i32.const 4) (i32.const 16) (i32.const 2)))
    (i32.store (i32.const 200) (i32.const {len(PARAM)}))
    (drop (call $ctl (local.get $fd) (i32.const {abi.CTL_SET_PARAM}) (i32.const 32)
                (i32.const 200)))
    (i32.store (i32.const 204) (i32.const 60000))
    (local.set $n (call $recv (call $send (local.get $fd) (i32.const 0)) (i32.const 1024)
                        (i32.const 204)))
    (i32.store (i32.const 208) (i32.const 1024))
    (i32.store (i32.const 212) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 208) (i32.const 1) (i32.const 216)))))
"""


def spearpy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spearpy", "run", "--no-cache",
                           "--max-retries", "0", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)


def test_model_alias_flag_remaps_a_hard_coded_model(scripted: Any, tmp_path: Path) -> None:
    server = scripted({"rules": [{"when": {"model": "qwen2.5:7b"},
                                  "reply": {"content": "qwen here"}}],
                       "default": {"status": 400, "error": "no such model"}})
    guest = tmp_path / "hard_coded.wasm"
    guest.write_bytes(bytes(wasmtime.wat2wasm(HARD_CODED)))
    config = routing_config(tmp_path / "c.toml", {"local": server.base_url})
    without = spearpy("--config", str(config), str(guest))
    assert without.returncode == 0, without.stderr
    assert "HTTP 400: no such model" in json.loads(without.stdout)["error"]["message"]
    done = spearpy("--config", str(config), "--model-alias", "gpt-4o-mini=local:qwen2.5:7b",
                   str(guest))
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["choices"][0]["message"]["content"] == "qwen here"
    assert body["_spear"]["backend"] == "local"
    bad = spearpy("--config", str(config), "--model-alias", "gpt-4o-mini", str(guest))
    assert bad.returncode == 2
    assert "invalid --model-alias 'gpt-4o-mini' is not NAME=BACKEND[:MODEL]" in bad.stderr
    unknown = spearpy("--config", str(config), "--model-alias", "gpt-4o-mini=nowhere",
                      str(guest))
    assert unknown.returncode == 2 and "backend 'nowhere' is not configured" in unknown.stderr
