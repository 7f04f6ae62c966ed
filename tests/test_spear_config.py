"""SPEAR's own configuration, unchanged (issue 32 part A): a config in SPEAR's
documented format (its shipped example, base URLs pointed at loopback
scripted OpenAI servers) routes SPEAR's chat and tool_sum samples and a probe
guest by model and by backend name, filters a backend whose key variable is
unset, answers a model no backend serves with no_candidate_backend and
available_models, is found at ~/.spear/config.toml or named by spearpy's own
config, reports what spearpy does not use, and is refused, without its
value ever showing, when it holds a secret."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spearpy.config_file import read_config_file
from spearpy.errors import ConfigError
from spearpy.host import Host
from tests.test_routing_kit import Guest, content, guests

__all__ = ["guests"]

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "wasm-samples"
KEY_ENV, KEY = "SPEAR_TEST_CHAT_KEY", "sk-test-spear-chat-0123456789"
MISSING_ENV = "SPEAR_TEST_UNSET_KEY"
SECRET = "sk-live-DO-NOT-LEAK-9f8e7d6c5b4a"
HANG_GUARD_S = 120  # only against a hung host; nothing asserts on time

# SPEAR's shipped config/spearlet/config.toml, section by section; the LLM
# section's base URLs and variables are the test's.
SPEARLET = """
[spearlet]
node_name = ""
sms_grpc_addr = "127.0.0.1:50051"
sms_http_addr = "127.0.0.1:8080"
auto_register = true
heartbeat_interval = 30
cleanup_interval = 300
local_models_dir = ""

[spearlet.grpc]
addr = "0.0.0.0:50052"
enable_tls = false

[spearlet.http]
cors_enabled = true
swagger_enabled = true

[spearlet.http.server]
addr = "0.0.0.0:8081"

[spearlet.storage]
backend = "memory"
data_dir = "./data/spearlet"
max_cache_size_mb = 512
compression_enabled = true
max_object_size = 67108864

[spearlet.logging]
level = "debug"
format = "pretty"
file = "./logs/spearlet.log"

[spearlet.llm]
default_policy = "weighted_random"

[spearlet.llm.router_grpc_filter_stream]
enabled = false
addr = ""
decision_timeout_ms = 5
fail_open = true
max_candidates_sent = 64
max_debug_kv = 32
max_inflight_total = 4096
per_agent_max_inflight = 512
content_fetch_enabled = false
content_fetch_max_bytes = 65536
"""


def credential(name: str, env: str) -> str:
    return f'[[spearlet.llm.credentials]]\nname = "{name}"\nkind = "env"\napi_key_env = "{env}"\n'


def backend(name: str, base_url: str, model: str | None, credential_ref: str | None = "chat",
            kind: str = "openai_chat_completion", ops: str = '["chat_completions"]',
            weight: int = 100, priority: int = 0, extra: str = "") -> str:
    lines = ["[[spearlet.llm.backends]]", f'name = "{name}"', f'kind = "{kind}"',
             f'base_url = "{base_url}"', 'hosting = "remote"']
    if model is not None:
        lines.append(f'model = "{model}"')
    if credential_ref is not None:
        lines.append(f'credential_ref = "{credential_ref}"')
    lines += [f"ops = {ops}", 'features = ["supports_tools", "supports_json_schema"]',
              'transports = ["http"]', f"weight = {weight}", f"priority = {priority}"]
    return "\n".join(lines) + "\n" + extra


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No user config of either kind, and the test's key set.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("SPEARPY_CONFIG", "SPEAR_HOME", "SMS_MCP_DIR", MISSING_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def servers(scripted: Any) -> dict[str, Any]:
    """Three loopback OpenAI servers that each say who they are, need the key,
    and play the tool_sum sample's model when offered its tool."""
    def script(name: str) -> dict[str, Any]:
        return {"rules": [
            {"when": {"tool_messages": 0, "tool_names_include": ["sum"]},
             "reply": {"tool_calls": [{"name": "sum", "arguments": {"a": 7, "b": 35}}]}},
            {"when": {"tool_names_include": ["sum"]},
             "reply": {"content": f"{name}: 7 + 35 = {{{{last_tool}}}}"}}],
            "default": {"content": f"{name} says {{{{model}}}}"}}

    return {name: scripted(script(name), api_key=KEY) for name in ("chat-a", "chat-b", "other")}


def spear_file(path: Path, servers: dict[str, Any], extra: str = "") -> Path:
    text = SPEARLET + credential("chat", KEY_ENV) + credential("gone", MISSING_ENV)
    text += backend("openai-chat", servers["chat-a"].base_url, "gpt-4o-mini", priority=1)
    text += backend("openai-chat-b", servers["chat-b"].base_url, "gpt-4o-mini", weight=300)
    text += backend("other-chat", servers["other"].base_url, "other-model")
    text += backend("filtered", servers["other"].base_url, "filtered-model", "gone")
    text += extra
    path.write_text(text)
    return path


# ---- read as it is ------------------------------------------------------------------


def test_spears_shipped_format_is_read_and_what_is_not_used_is_named_once(
        servers: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = spear_file(tmp_path / "config.toml", servers)
    with caplog.at_level(logging.WARNING, logger="spearpy.config"):
        file = read_config_file(path)
        read_config_file(path)  # the Host and the CLI read it again: reported once
    assert set(file.table("backends")) == {"openai-chat", "openai-chat-b", "other-chat"}
    assert file.default == "openai-chat"  # the highest priority
    spec = file.table("backends")["openai-chat"]
    assert spec == {"kind": "openai", "base_url": servers["chat-a"].base_url,
                    "api_key_env": KEY_ENV, "model": "gpt-4o-mini"}
    route = next(r for r in file.table("routes") if r["to"][0] == "openai-chat")
    assert route["policy"] == "weighted" and route["weights"] == [100, 300]
    for key in ("spearlet.sms_grpc_addr", "spearlet.node_name", "spearlet.grpc.addr",
                "spearlet.http.server.addr", "spearlet.storage.data_dir",
                "spearlet.logging.level", "spearlet.llm.router_grpc_filter_stream.enabled",
                "spearlet.llm.router_grpc_filter_stream.content_fetch_max_bytes"):
        hits = [r for r in caplog.records if f"{key} is not used" in r.getMessage()]
        assert len(hits) == 1, key
    left_out = [r.getMessage() for r in caplog.records if "'filtered'" in r.getMessage()]
    assert len(left_out) == 1 and MISSING_ENV in left_out[0] and "left out" in left_out[0]


def test_the_samples_go_to_the_backends_bound_to_the_default_model(
        servers: dict[str, Any], tmp_path: Path, make_host: Any) -> None:
    path = spear_file(tmp_path / "config.toml", servers)
    host = make_host(config_file=path, model=None)
    chat = host.run(SAMPLES / "c_chat.wasm", collect_events=True)
    assert chat.exit_code == 0, chat.stdout
    assert b"assistant: chat-a says gpt-4o-mini" in (chat.stdout or b"") or \
        b"assistant: chat-b says gpt-4o-mini" in (chat.stdout or b"")
    (record,) = [e.data["route"] for e in chat.events if e.kind == "completion_end"]
    assert record["reason"] == "route" and record["policy"] == "weighted"
    assert set(record["candidates"]) == {"openai-chat", "openai-chat-b"}

    tool_sum = host.run(SAMPLES / "c_tool_sum.wasm")
    assert tool_sum.exit_code == 0, tool_sum.stdout
    assert b"tool sum(a=7, b=35) -> 42" in (tool_sum.stdout or b"")
    # Weighted by SPEAR's weights (1:3), deterministic: over four completions
    # chat-a answers one; the `other` server, bound to another model, none.
    for _ in range(2):
        assert host.run(SAMPLES / "c_chat.wasm").exit_code == 0
    asked = [r.body["model"] for s in ("chat-a", "chat-b") for r in servers[s].requests]
    assert set(asked) == {"gpt-4o-mini"}
    assert servers["other"].requests == []
    assert len(servers["chat-a"].requests) >= 1 and len(servers["chat-b"].requests) >= 3
    auth = {r.headers.get("authorization") for s in servers.values() for r in s.requests}
    assert auth == {f"Bearer {KEY}"}


def test_a_model_goes_to_its_backends_a_name_picks_one_and_unknown_is_refused(
        servers: dict[str, Any], tmp_path: Path, guests: Any) -> None:
    guest: Guest = guests(config_file=spear_file(tmp_path / "config.toml", servers))
    body = guest.send(model="other-model")
    assert content(body) == "other says other-model"
    assert body["_spear"]["backend"] == "other-chat"

    body = guest.send(backend="openai-chat-b")
    assert content(body) == "chat-b says gpt-4o-mini"

    refused = guest.send(model="gpt-5-imaginary")
    assert refused["error"]["code"] == "no_candidate_backend"
    assert refused["error"]["available_models"] == ["gpt-4o-mini", "other-model"]
    assert "gpt-5-imaginary" in refused["error"]["message"]
    assert [r["outcome"] for r in guest.routes()][-1] == "unavailable"
    # The backend whose key variable is unset is not there at all.
    gone = guest.send(backend="filtered")
    assert gone["error"]["code"] == "bad_backend"
    assert servers["other"].requests[-1].body["model"] == "other-model"
    assert all(r.body["model"] != "filtered-model" for r in servers["other"].requests)


def test_spearpys_own_routing_keeps_sending_unknown_models_to_the_default(
        servers: dict[str, Any], tmp_path: Path, guests: Any) -> None:
    # The refusal is the [routing] table's, which only SPEAR configs set.
    path = tmp_path / "spearpy.toml"
    path.write_text(f'default = "a"\n[backends.a]\nbase_url = "{servers["chat-a"].base_url}"\n'
                    f'api_key_env = "{KEY_ENV}"\nmodel = "gpt-4o-mini"\n'
                    '[[routes]]\nname = "m"\nmatch = { model = "gpt-4o-mini" }\nto = ["a"]\n')
    assert content(guests(config_file=path).send(model="anything")) == "chat-a says anything"
    path.write_text(path.read_text() + '[routing]\nunknown_model = "refuse"\n')
    refused = guests(config_file=path).send(model="anything")
    assert refused["error"]["available_models"] == ["gpt-4o-mini"]


# ---- where it is found --------------------------------------------------------------


def test_spears_home_config_is_read_when_spearpy_has_none(
        servers: dict[str, Any], tmp_path: Path, guests: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".spear").mkdir(parents=True)
    spear_file(home / ".spear" / "config.toml", servers)
    assert content(guests().send(model="other-model")) == "other says other-model"
    # SPEAR prefers SPEAR_HOME to HOME, and so does spearpy.
    elsewhere = tmp_path / "spear-home"
    (elsewhere / ".spear").mkdir(parents=True)
    (elsewhere / ".spear" / "config.toml").write_text(
        SPEARLET + credential("chat", KEY_ENV)
        + backend("only", servers["chat-b"].base_url, "m1"))
    monkeypatch.setenv("SPEAR_HOME", str(elsewhere))
    assert content(guests().send(model="m1")) == "chat-b says m1"
    # spearpy's own file wins over SPEAR's.
    own = tmp_path / "xdg" / "spearpy" / "config.toml"
    own.parent.mkdir(parents=True)
    own.write_text(f'default = "mine"\n[backends.mine]\nbase_url = "{servers["chat-a"].base_url}"\n'
                   f'api_key_env = "{KEY_ENV}"\nmodel = "m1"\n')
    assert content(guests().send(model="m1")) == "chat-a says m1"


def test_spearpys_config_may_name_a_spear_config(servers: dict[str, Any], tmp_path: Path,
                                                 guests: Any) -> None:
    spear_file(tmp_path / "spear.toml", servers)
    own = tmp_path / "spearpy.toml"
    own.write_text(f'spear_config = "spear.toml"\n[backends.mine]\n'
                   f'base_url = "{servers["chat-a"].base_url}"\napi_key_env = "{KEY_ENV}"\n'
                   'model = "mine-model"\n[models]\n"alias-model" = "mine"\n')
    guest = guests(config_file=own)
    assert content(guest.send(model="other-model")) == "other says other-model"
    assert content(guest.send(model="alias-model")) == "chat-a says mine-model"
    assert content(guest.send(backend="mine")) == "chat-a says mine-model"


# ---- refused, naming what -------------------------------------------------------------


@pytest.mark.parametrize("where", ["credential", "backend"])
def test_a_secret_in_the_file_is_refused_and_never_repeated(
        servers: dict[str, Any], tmp_path: Path, where: str,
        caplog: pytest.LogCaptureFixture) -> None:
    secret_line = f'api_key = "{SECRET}"\n'
    if where == "credential":
        text = SPEARLET + ('[[spearlet.llm.credentials]]\nname = "chat"\nkind = "env"\n'
                           + secret_line)
        text += backend("openai-chat", servers["chat-a"].base_url, "gpt-4o-mini")
    else:
        text = SPEARLET + backend("openai-chat", servers["chat-a"].base_url, "gpt-4o-mini",
                                  credential_ref=None, extra=secret_line)
    path = tmp_path / "config.toml"
    path.write_text(text)
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigError) as caught:
        Host(config_file=path, cache_dir=None)
    message = str(caught.value)
    assert "api_key" in message and "api_key_env" in message and "environment" in message
    assert SECRET not in message and SECRET not in caplog.text
    proc = subprocess.run([sys.executable, "-m", "spearpy", "run", "--no-cache", "--config",
                           str(path), str(SAMPLES / "c_hello.wasm")], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
    assert proc.returncode != 0 and "api_key_env" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert servers["chat-a"].requests == []


@pytest.mark.parametrize(("text", "problem"), [
    ("[spearlet]\nnode_nmae = 'x'\n", r"unknown key 'node_nmae' in \[spearlet\]"),
    (SPEARLET + backend("b", "http://127.0.0.1:9/v1", "m", None, extra='modle = "m"\n'),
     r"unknown keys in \[\[spearlet.llm.backends\]\] #1 \('b'\): \['modle'\]"),
    (SPEARLET.replace('"weighted_random"', '"fastest"'), r"default_policy 'fastest'"),
    (SPEARLET + backend("b", "http://127.0.0.1:9/v1", "m", None, kind="magic"),
     r"kind 'magic' is not known"),
    (SPEARLET + backend("b", "http://127.0.0.1:9/v1", "m", "nope"),
     r"credential_ref 'nope' names no"),
    ("[spearlet]\n[colour]\nx = 1\n", r"unknown top-level keys \['colour'\]"),
])
def test_what_spear_does_not_have_is_an_error_naming_file_table_and_key(
        tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem) as caught:
        Host(config_file=path, cache_dir=None)
    assert str(path) in str(caught.value)


def test_routes_explain_shows_what_is_not_used(servers: dict[str, Any],
                                               tmp_path: Path) -> None:
    path = spear_file(tmp_path / "config.toml", servers)
    proc = subprocess.run([sys.executable, "-m", "spearpy", "routes", "explain", "--config",
                           str(path), "--model", "other-model", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["chosen"] == "other-chat"
    notes = "\n".join(report["config_notes"])
    assert "spearlet.storage.backend is not used" in notes and "'filtered'" in notes


def test_ollama_discovery_adds_the_served_models_as_backends_bound_to_them(
        servers: dict[str, Any], tmp_path: Path, guests: Any) -> None:
    from tests.ollama_server import OllamaServer

    with OllamaServer(installed=["llama3:latest", "phi3:mini"],
                      serving=["llama3:latest"]) as ollama:
        extra = ("[spearlet.llm.discovery.ollama]\nenabled = true\n"
                 f'base_url = "{ollama.base_url}"\nscope = "installed"\n')
        guest: Guest = guests(config_file=spear_file(tmp_path / "config.toml", servers,
                                                     extra=extra))
        body = guest.send(model="phi3:mini")
        assert body["_spear"]["backend"] == "ollama/phi3_mini"
        assert content(body) == "hello"
        assert [c["model"] for c in ollama.chats()] == ["phi3:mini"]
        by_name = guest.send(backend="ollama/llama3_latest")
        assert by_name["_spear"]["backend"] == "ollama/llama3_latest"
        assert content(guest.send(model="other-model")) == "other says other-model"
    # Ollama gone: the host still starts, with the configured backends only.
    guest = guests(config_file=tmp_path / "config.toml")
    assert content(guest.send(model="other-model")) == "other says other-model"
    assert guest.send(model="phi3:mini")["error"]["code"] == "no_candidate_backend"


def test_a_run_asks_ollama_once_at_start(servers: dict[str, Any], tmp_path: Path) -> None:
    """The CLI's checks before its Host starts (the key check, the key names
    to redact) read the configured backends without asking Ollama again."""
    from tests.ollama_server import OllamaServer

    with OllamaServer(installed=["phi3:mini"], serving=["phi3:mini"]) as ollama:
        extra = ("[spearlet.llm.discovery.ollama]\nenabled = true\n"
                 f'base_url = "{ollama.base_url}"\n')
        path = spear_file(tmp_path / "config.toml", servers, extra=extra)
        proc = subprocess.run([sys.executable, "-m", "spearpy", "run", "--config", str(path),
                               str(ROOT / "wasm-samples" / "c_hello.wasm")], cwd=ROOT,
                              capture_output=True, text=True, timeout=HANG_GUARD_S,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        assert [r.path for r in ollama.requests] == ["/api/ps"]
