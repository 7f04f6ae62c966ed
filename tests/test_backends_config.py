"""Named backends: the TOML file, the flag/env default, and the guest's choice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.catalog import BackendCatalog
from spearpy.backends.specs import BackendSpec, backend_specs
from spearpy.config import HostConfig
from spearpy.config_file import default_config_path, read_config_file
from spearpy.errors import ConfigError
from spearpy.host import Host
from tests.probe import Probe, wat_module
from tests.test_backends_kit import (
    MULTI_SCRIPT,
    MULTI_STDOUT,
    MULTI_WASM,
    ROOT,
    dialect_server,
    hosts,
    write_config,
)

__all__ = ["dialect_server", "hosts"]


def load_config_file(path: Path | None) -> tuple[dict[str, BackendSpec], str | None]:
    return backend_specs(read_config_file(path))


def catalog(**config: Any) -> BackendCatalog:
    return BackendCatalog.from_config(HostConfig(cache_dir=None, **config))


@pytest.mark.parametrize(("text", "problem"), [
    ("[backends.a]\nkind = 'gemini'\n", r"\[backends.a\]: kind: Input should be 'openai'"),
    ("[backends.a]\nquirks = 'olama'\n", r"quirks: unknown quirk profile 'olama'"),
    ("[backends.a]\nmodle = 'x'\n", r"\[backends.a\]: modle: Extra inputs are not permitted"),
    ("[backends.a]\nkind = 'scripted'\n", r"kind 'scripted' needs `script`"),
    ("[backends.a]\nkind = 'replay'\n", r"kind 'replay' needs `cassette`"),
    ("default = 'b'\n[backends.a]\n", r"default 'b' is not a configured backend \(configured: a\)"),
    ("defualt = 'a'\n", r"unknown top-level keys \['defualt'\]"),
    ("[backends.'a b']\n", r"backend name 'a b' must match"),
    ("[backends.a\n", r"is not valid TOML"),
])
def test_config_file_mistakes_are_named(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_config_file(path)
    with pytest.raises(ConfigError, match=problem):
        Host(config_file=path, cache_dir=None)  # at start-up, not at the first send


def test_an_explicit_config_file_must_exist_the_default_one_need_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config_file(tmp_path / "missing.toml")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_config_path() == tmp_path / "spearpy" / "config.toml"
    assert load_config_file(None) == ({}, None)
    write_config(tmp_path / "spearpy" / "config.toml", {"home": {"model": "h"}}, default="home")
    specs, default = load_config_file(None)
    assert default == "home" and specs["home"].model == "h"
    assert catalog().default == "home"


def test_kind_defaults_and_relative_paths(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {
        "a": {"kind": "anthropic"}, "o": {},
        "s": {"kind": "scripted", "script": "scripts/s.json"}})
    specs, default = load_config_file(path)
    assert default is None
    assert specs["a"].url() == "https://api.anthropic.com/v1"
    assert specs["a"].key_env() == "ANTHROPIC_API_KEY"
    assert specs["o"].url() == "https://api.openai.com/v1"
    assert specs["o"].key_env() == "OPENAI_API_KEY"
    assert specs["s"].script == tmp_path / "scripts" / "s.json"


def test_default_backend_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nowhere"))
    plain = catalog()
    assert plain.default == "openai" and plain.names == ["openai"]
    assert plain.specs["openai"].url() == "https://api.openai.com/v1"
    flags = catalog(base_url="http://127.0.0.1:1/v1", quirks="vllm")
    assert flags.specs["openai"].url() == "http://127.0.0.1:1/v1"
    assert flags.specs["openai"].quirks == "vllm"
    ant = catalog(backend="anthropic")
    assert ant.default == "anthropic" and ant.specs["anthropic"].key_env() == "ANTHROPIC_API_KEY"
    path = write_config(tmp_path / "c.toml", {"x": {}, "y": {}}, default="x")
    assert catalog(config_file=path).default == "x"
    assert catalog(config_file=path).names == ["x", "y"]  # no implicit `openai` beside them
    assert catalog(config_file=path, backend="y").default == "y"
    mixed = catalog(config_file=path, backend=f"scripted:{MULTI_SCRIPT}")
    assert mixed.default == "scripted" and mixed.names == ["scripted", "x", "y"]
    monkeypatch.setenv("SPEARPY_CONFIG", str(path))
    monkeypatch.setenv("SPEARPY_BACKEND", "y")
    assert catalog().default == "y"
    with pytest.raises(ConfigError, match="use openai, anthropic, ollama, stub, scripted:FILE, "
                                          "replay:FILE"):
        catalog(backend="nope")
    with pytest.raises(ConfigError, match=r"^--quirks / SPEARPY_QUIRKS: unknown quirk profile"):
        catalog(backend="openai", quirks="olama")


def test_the_guest_picks_a_backend_by_name(tmp_path: Path, dialect_server: Any,
                                           hosts: Any) -> None:
    one = dialect_server([{"reply": {"content": "from one ({{model}})"}}])
    two = dialect_server([{"reply": {"content": "from two ({{model}})"}}])
    path = write_config(tmp_path / "c.toml", {
        "one": {"base_url": one.base_url, "model": "m1", "api_key_env": ""},
        "two": {"base_url": two.base_url, "model": "m2", "api_key_env": ""}}, default="one")
    host = hosts(config_file=path)
    p = Probe(host, wat_module("probe.wat"))
    try:
        fd = p.hc("cchat_create")
        p.write_msg(fd, "user", "hi")
        body = p.recv_json(p.hc("cchat_send", fd, 0))
        assert body["choices"][0]["message"]["content"] == "from one (m1)"
        assert p.set_param(fd, "backend", "two") == 0
        body = p.recv_json(p.hc("cchat_send", fd, 0))
        assert body["choices"][0]["message"]["content"] == "from two (m2)"
        assert body["_spear"]["backend"] == "two" and body["_spear"]["model"] == "m2"
        assert p.set_param(fd, "backend", "three") == 0
        body = p.recv_json(p.hc("cchat_send", fd, 0))
        assert body["error"]["code"] == "bad_backend"
        assert body["error"]["message"] == (
            "unknown backend 'three'; configured backends: one, two")
    finally:
        p.close()
    assert host.backend_for("one")[0] is host.backend_for("")[0]  # built once per name
    assert len(one.requests) == 1 and len(two.requests) == 1


def test_a_backend_that_cannot_start_is_an_error_body_not_a_crash(
        tmp_path: Path, hosts: Any) -> None:
    script = tmp_path / "gone.json"
    script.write_text(json.dumps({"default": {"content": "hi"}}))
    path = write_config(tmp_path / "c.toml", {
        "s": {"kind": "scripted", "script": str(script)}}, default="s")
    host = hosts(config_file=path)  # checked at start: the script is there
    script.unlink()  # ... and gone by the time a guest asks for the backend
    backend, error = host.backend_for("s")
    assert backend is None and error is not None
    assert "backend 's' cannot start" in error and "gone.json" in error


def test_cli_config_and_backend_flags(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {
        "offline": {"kind": "scripted", "script": str(MULTI_SCRIPT), "model": "m"},
        "broken": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": ""}}, default="broken")
    cmd = [sys.executable, "-c", "from spearpy.cli import main; main()", "run", "--no-cache",
           "--config", str(path), "--backend", "offline", str(MULTI_WASM)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == MULTI_STDOUT
    bad = subprocess.run([*cmd[:6], str(tmp_path / "nope.toml"), str(MULTI_WASM)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 2 and "cannot read the config file" in bad.stderr


def test_sends_work_without_auto_flag_through_a_named_default(
        tmp_path: Path, dialect_server: Any, hosts: Any) -> None:
    server = dialect_server([{"reply": {"tool_calls": [{"name": "echo"}]}}])
    path = write_config(tmp_path / "c.toml", {"d": {"base_url": server.base_url,
                                                    "api_key_env": ""}}, default="d")
    p = Probe(hosts(config_file=path, model="host-model"), wat_module("probe.wat"))
    try:
        fd = p.hc("cchat_create")
        p.write_msg(fd, "user", "hi")
        body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_ENABLE_METRICS))
        assert body["_spear"]["model"] == "host-model"  # the spec has none: the host's
        assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "echo"
    finally:
        p.close()


def test_key_envs_name_every_configured_key_variable(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nowhere"))
    path = write_config(tmp_path / "c.toml", {
        "a": {"kind": "anthropic"}, "b": {"api_key_env": "MY_KEY"}, "c": {"api_key_env": ""}},
        default="c")
    # The realtime key rtasr fds may send (issue 32) is a key variable too.
    assert catalog(config_file=path).key_envs() == ["ANTHROPIC_API_KEY", "MY_KEY",
                                                    "OPENAI_REALTIME_API_KEY"]
    assert catalog().key_envs() == ["OPENAI_API_KEY", "OPENAI_REALTIME_API_KEY"]
