"""SPEAR's configuration around the guest (issue 32 part A): SPEAR's mic ->
rtasr sample (c_mic_rtasr) against the realtime backend a SPEAR config names,
with no --rtasr-url, on a loopback ScriptedAsrServer; the rtasr `backend`
param choosing among configured backends only; OPENAI_REALTIME_API_KEY as the
realtime key; the MCP registry from SMS_MCP_DIR and `[mcp] dir`, and a
registry location that holds nothing is a warning naming it."""

from __future__ import annotations

import json
import logging
import struct
import sys
import wave
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spearpy.cli.mcp_cmd import mcp
from spearpy.testing import ScriptedAsrServer
from tests.test_spear_config import KEY, KEY_ENV, SPEARLET, backend, credential

ROOT = Path(__file__).resolve().parents[1]
GUEST = ROOT / "wasm-samples" / "c_mic_rtasr.wasm"
REALTIME_KEY = "sk-test-realtime-0123456789"
TOOLBOX = str(Path(__file__).parent / "mcp_servers" / "toolbox.py")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("SPEARPY_CONFIG", "SPEAR_HOME", "SMS_MCP_DIR", "OPENAI_API_KEY",
                 "OPENAI_REALTIME_API_KEY", "SPEARPY_MCP_DIRS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def tone(tmp_path: Path) -> Path:
    """Two seconds of a non-silent 24 kHz mono PCM16 WAV for the mic's file source."""
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(struct.pack("<h", 3000) * 48000)
    return path


def realtime_config(path: Path, server: ScriptedAsrServer, name: str) -> Path:
    base = f"http://127.0.0.1:{server.port}/v1"  # SPEAR's base_url: the ws URL is derived
    path.write_text(SPEARLET + credential("rt", KEY_ENV) + backend(
        name, base, None, "rt", kind="openai_realtime_ws", ops='["speech_to_text"]'))
    return path


def run_sample(make_host: Any, tone: Path, **config: Any) -> Any:
    config.setdefault("mic_pace", "fast")
    host = make_host(mic_file=tone, **config)
    return host.run(GUEST)


def test_the_mic_rtasr_sample_uses_the_configured_realtime_backend(
        make_host: Any, tone: Path, tmp_path: Path) -> None:
    with ScriptedAsrServer(["hello from spear"], ms_per_phrase=200, api_key=KEY) as server:
        # The sample asks for backend "openai-realtime-asr", SPEAR's example's name.
        path = realtime_config(tmp_path / "spear.toml", server, "openai-realtime-asr")
        # At the audio's pace, so transcripts are back before the mic ends.
        result = run_sample(make_host, tone, config_file=path, mic_pace="realtime")
        assert server.sessions, result.stdout
        assert result.exit_code == 0, result.stdout
    lines = (result.stdout or b"").decode().splitlines()
    assert lines[0] == "mic_rtasr started" and lines[-1] == "mic hup"
    assert "hello from spear" in lines
    session = server.sessions[0]
    assert session.path == "/v1/realtime?intent=transcription"
    assert session.headers["authorization"] == f"Bearer {KEY}"


def test_the_backend_param_picks_among_configured_backends_only(
        make_host: Any, tone: Path, tmp_path: Path) -> None:
    with ScriptedAsrServer(["never heard"], api_key=KEY) as server:
        path = realtime_config(tmp_path / "spear.toml", server, "some-other-asr")
        result = run_sample(make_host, tone, config_file=path)
    assert server.sessions == []  # nothing connected anywhere
    out = (result.stdout or b"").decode()
    assert "rtasr" in out and result.exit_code != 0


def test_openai_realtime_api_key_is_the_realtime_key_when_nothing_else_names_one(
        make_host: Any, tone: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_REALTIME_API_KEY", REALTIME_KEY)
    with ScriptedAsrServer(["hello"], ms_per_phrase=200, api_key=REALTIME_KEY) as server:
        result = run_sample(make_host, tone, rtasr_url=server.url)
        assert result.exit_code == 0, result.stdout
    assert server.sessions[0].headers["authorization"] == f"Bearer {REALTIME_KEY}"
    # ... and a key the operator names wins over it.
    monkeypatch.setenv("MY_RT_KEY", "sk-operator-named")
    with ScriptedAsrServer(["hello"], ms_per_phrase=200, api_key="sk-operator-named") as other:
        result = run_sample(make_host, tone, rtasr_url=other.url,
                            rtasr_api_key_env="MY_RT_KEY")
        assert result.exit_code == 0, result.stdout


# ---- the MCP registry ---------------------------------------------------------------


def write_registry(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "tb.toml").write_text(
        'server_id = "tb"\ntransport = "stdio"\nallowed_tools = ["echo"]\n'
        f"[stdio]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps([TOOLBOX])}\n")
    return directory


def listed(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(mcp, ["list", "--probe", "--json", *args],
                                catch_exceptions=False)
    return {row["server_id"]: row for row in json.loads(result.stdout)["servers"]}


def test_sms_mcp_dir_is_a_registry_location(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMS_MCP_DIR", str(write_registry(tmp_path / "sms-mcp")))
    rows = listed()
    assert set(rows) == {"tb"} and "echo" in json.dumps(rows["tb"])


def test_spears_singular_mcp_dir_is_accepted(tmp_path: Path) -> None:
    write_registry(tmp_path / "records")
    config = tmp_path / "spearpy.toml"
    config.write_text('[mcp]\ndir = "records"\n')
    assert set(listed("--config", str(config))) == {"tb"}


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_registry_location_that_holds_nothing_is_a_warning_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_host: Any, kind: str,
        caplog: pytest.LogCaptureFixture) -> None:
    where = tmp_path / "sms-mcp"
    if kind == "empty":
        where.mkdir()
    monkeypatch.setenv("SMS_MCP_DIR", str(where))
    host = make_host()
    with caplog.at_level(logging.WARNING, logger="spearpy.mcp"):
        host.tools.mcp()  # the registry is read at the first MCP use
    assert [r for r in caplog.records if str(where) in r.getMessage()], caplog.text
