"""A base URL that is no URL, or a scripted model whose file is missing or
broken, is refused when the host starts, naming the flag or field (issue 14,
item 9). It used to surface at the guest's first send as an error body with
an unrelated code (`no_model`), after the guest had already run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spearpy.backends.catalog import BackendSpecError
from spearpy.config import HostConfig
from spearpy.errors import ConfigError
from spearpy.host import Host

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "wasm-samples" / "c_chat.wasm"
SCRIPT = ROOT / "wasm-samples" / "scripts" / "chat.json"


@pytest.fixture
def broken_script(tmp_path: Path) -> Path:
    path = tmp_path / "broken.json"
    path.write_text('{"rules": [{"nope": 1}]}')
    return path


def _cli(command: str, tmp_path: Path, *flags: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"id": 1}\n')
    where = ([str(CHAT), "--inputs", str(inputs), "--out", str(tmp_path / "out" / "r.jsonl")]
             if command == "batch" else [str(CHAT)])
    return subprocess.run([sys.executable, "-m", "spearpy", command, "--no-cache", *flags, *where],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("command", ["run", "batch"])
@pytest.mark.parametrize("flags, env, message", [
    (("--backend", "replay:missing.json"), None,
     "backend 'replay:missing.json' (--backend, SPEARPY_BACKEND): cannot read the cassette"),
    (("--base-url", "notaurl"), None,
     "invalid --base-url 'notaurl': must be an http:// or https:// URL"),
    (("--base-url", "ftp://example.com/v1"), None, "invalid --base-url 'ftp://example.com/v1'"),
    ((), {"OPENAI_BASE_URL": "localhost:8000"}, "invalid OPENAI_BASE_URL 'localhost:8000'"),
    (("--backend", "scripted:missing.json"), None,
     "backend 'scripted:missing.json' (--backend, SPEARPY_BACKEND): cannot load the scripted "
     "model: missing.json: cannot read script: No such file or directory"),
    (("--backend", "scripted:"), None,
     "backend 'scripted:' (--backend, SPEARPY_BACKEND): needs its script file: scripted:FILE"),
    (("--backend", "scripted:BROKEN"), None,
     "backend 'scripted:BROKEN' (--backend, SPEARPY_BACKEND): cannot load the scripted model: "
     "BROKEN: rule 0: unknown keys ['nope']"),
])
def test_cli_refuses_at_start(tmp_path: Path, broken_script: Path, command: str,
                              flags: tuple[str, ...], env: dict[str, str] | None,
                              message: str) -> None:
    flags = tuple(f.replace("BROKEN", str(broken_script)) for f in flags)
    done = _cli(command, tmp_path, *flags, env=env)
    assert done.returncode == 2, done.stderr
    assert f"Error: {message.replace('BROKEN', str(broken_script))}" in done.stderr
    # Refused before anything ran or was written.
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_good_urls_and_scripts_still_start(tmp_path: Path) -> None:
    for url in ("http://127.0.0.1:8000/v1", "http://[::1]:11434/v1", "https://example.com",
                "http://localhost"):
        Host(base_url=url, cache_dir=None).close()
    done = _cli("run", tmp_path, "--backend", f"scripted:{SCRIPT}")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("url, message", [
    ("notaurl", "must be an http:// or https:// URL"),
    ("http://host:0/v1", "port 0"),
    ("http://host:99999/v1", "not a URL"),
])
def test_host_raises_a_value_error_naming_the_base_url(url: str, message: str) -> None:
    for make in (lambda: Host(cache_dir=None, base_url=url), lambda: HostConfig(base_url=url)):
        with pytest.raises(ValueError) as caught:
            make()
        assert "base_url" in str(caught.value) and message in str(caught.value)
    # Overrides of a valid config are not validated by model_copy: the
    # catalog checks again.
    with pytest.raises(BackendSpecError, match=re.escape(f"base_url {url!r}: {message}")):
        Host(HostConfig(cache_dir=None), base_url=url)


def test_a_missing_script_fails_the_host_naming_the_field() -> None:
    with pytest.raises(BackendSpecError, match=r"^backend 'scripted:/no/such\.json' \(--backend, "
                                               r"SPEARPY_BACKEND\): cannot load the scripted "
                                               r"model: /no/such\.json: cannot read script"):
        Host(cache_dir=None, backend="scripted:/no/such.json")


def test_a_missing_cassette_fails_the_host_naming_the_field() -> None:
    with pytest.raises(BackendSpecError, match=r"^backend 'replay:/no/such\.json' \(--backend, "
                                               r"SPEARPY_BACKEND\): cannot read the cassette"):
        Host(cache_dir=None, backend="replay:/no/such.json")


def test_a_broken_script_fails_the_host(broken_script: Path) -> None:
    with pytest.raises(BackendSpecError, match=r"backend 'scripted:.*broken\.json'.*"
                                               r"unknown keys \['nope'\]") as caught:
        Host(cache_dir=None, backend=f"scripted:{broken_script}")
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("table, message", [
    ('kind = "openai"\nbase_url = "notaurl"', "[backends.b]: base_url 'notaurl': must be"),
    ('kind = "scripted"\nscript = "missing.json"', "[backends.b]: cannot load the scripted model"),
    ('kind = "replay"\ncassette = "gone.json"', "[backends.b]: the cassette file"),
])
def test_config_file_backends_are_checked_at_start(tmp_path: Path, table: str,
                                                   message: str) -> None:
    config = tmp_path / "spearpy.toml"
    config.write_text(f'default = "b"\n[backends.b]\n{table}\n')
    with pytest.raises(BackendSpecError) as caught:
        Host(cache_dir=None, config_file=config)
    assert str(config) in str(caught.value) and message in str(caught.value)
