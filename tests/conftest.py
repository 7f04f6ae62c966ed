from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from spearpy.host import Host
from spearpy.instance import GuestRun
from spearpy.testing import Script, ScriptedServer
from tests.long_sample import sample_long_items
from tests.mic_support import make_speech
from tests.probe import Probe, wat_module
from tests.xdist_groups import make_scheduler

# Started as a background job (`cmd &` in a script: no job control), the
# suite inherits SIGINT ignored, and so would every `spearpy` process it
# starts, which then never sees the Ctrl-C the interrupt tests send. They
# need what a user at a terminal has: SIGINT raising KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long_sample: a fixed-seed sample of a `long` test, run "
                                       "by default (tests/long_sample.py)")


@pytest.hookimpl(tryfirst=True)  # before `-m 'not long'` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sample_long_items(config.getoption("markexpr"), items)


@pytest.hookimpl(optionalhook=True)  # xdist's hook; a run without xdist never calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return make_scheduler(config, log)


# Property tests draw the same examples on every run (hypothesis' own "ci"
# profile: derandomized, no example database, a failure prints the blob that
# replays it), so a CI failure is one anybody can replay. To explore, by hand:
# `pytest --hypothesis-profile=random` (or SPEARPY_HYPOTHESIS_PROFILE=random),
# adding `--hypothesis-seed=N` replays one seed of those.
settings.register_profile("random", settings.get_profile("ci"), derandomize=False)
settings.load_profile(os.environ.get("SPEARPY_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real speech WAV made by espeak-ng (tests using it are marked
    tests.mic_support.needs_espeak)."""
    return make_speech(tmp_path_factory.mktemp("speech") / "speech.wav")


@pytest.fixture
def scripted() -> Iterator[Any]:
    """scripted(script, dialect=None, api_key=None, **dialect_options) -> a started
    ScriptedServer, stopped after the test."""
    servers: list[ScriptedServer] = []

    def start(script: Any, dialect: str | None = None, api_key: str | None = None,
              **options: Any) -> ScriptedServer:
        from spearpy.backends.scripted.dialect_names import dialect as make_dialect

        server = ScriptedServer(Script.load(script), api_key=api_key,
                                dialect=make_dialect(dialect, **options) if dialect else None)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def make_host() -> Iterator[Any]:
    hosts: list[Host] = []

    def make(**config: Any) -> Host:
        config.setdefault("cache_dir", None)
        config.setdefault("model", "test-model")
        config.setdefault("max_retries", 0)
        host = Host(**config)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()


@pytest.fixture
def make_probe(make_host: Any) -> Iterator[Any]:
    """make_probe(host, wasm, options=None) -> a Probe, closed after the test
    (before make_host's hosts are)."""
    probes: list[Probe] = []

    def make(host: Host, wasm: bytes, options: Any = None) -> Probe:
        p = Probe(host, wasm, options)
        probes.append(p)
        return p

    yield make
    for p in probes:
        p.close()


@pytest.fixture
def probe(make_host: Any, make_probe: Callable[..., Probe]) -> Any:
    """probe(host=None, replace=None) -> Probe over tests/wat/probe.wat."""

    def make(host: Host | None = None, replace: dict[str, str] | None = None) -> Probe:
        return make_probe(host or make_host(base_url="http://127.0.0.1:9/v1"),
                          wat_module("probe.wat", replace))

    return make


@pytest.fixture
def host_bugs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Host bugs reported by runs (`GuestRun.note_host_bug`: the hostcall that
    hit one answers EIO and logs it), recorded here instead of logged."""
    bugs: list[str] = []

    def record(_run: GuestRun, where: str, exc: BaseException) -> None:
        bugs.append(f"{where}: {type(exc).__name__}: {exc}")

    monkeypatch.setattr(GuestRun, "note_host_bug", record)
    yield bugs


@pytest.fixture
def no_host_bugs(host_bugs: list[str]) -> Iterator[None]:
    """Fails the test if any hostcall hit a host bug."""
    yield
    assert host_bugs == []
