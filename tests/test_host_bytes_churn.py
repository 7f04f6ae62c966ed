"""Everything a run keeps is charged against --max-host-bytes (issue 29, hole 2).

A guest looping cchat_create/cchat_close under `--max-host-bytes 1MiB
--max-memory 1MiB` reached 609 MiB in 20 s and ended by its timeout: each
closed session left a transcript (and the session_close event) that nothing
charged. Now every open fd is charged its kind's fixed cost while it is open
and gives back what it held when it closes; a closed session's transcript,
kept to the run's end, is charged for good; and the host's other per-run
structures are either charged or bounded (tool_function's cache, epoll
interest sets; the service's stored events: tests/test_serve_stored_events.py).
A guest churning objects it keeps ends with the host-bytes outcome; one
churning objects it frees runs on.

The attack runs as a real `spearpy run` in a process of its own under
RLIMIT_DATA (so a regression fails the test, not the machine), which reports
its peak RSS from /proc when it exits.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy.context import TRANSCRIPT_BYTES
from spearpy.fds import ChatResponseFd, ChatSessionFd, EpollFd
from spearpy.host import Host
from spearpy.instance import TOOL_FUNC_BYTES
from tests.probe import Probe, wat_module

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
RLIMIT_DATA = 512 * MiB
# Python, wasmtime and spearpy take ~70 MB here; the unfixed session churn
# passed 380 MB within 6 s.
PEAK_RSS_LIMIT = 160 * MiB
# `spearpy run` in a process of its own under RLIMIT_DATA, printing its peak
# RSS (VmHWM) on stderr as it exits (click ends it with sys.exit).
_RUNNER = f"""
import atexit, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, ({RLIMIT_DATA}, {RLIMIT_DATA}))
def _peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                sys.stderr.write("peak_rss_kib=" + line.split()[1] + "\\n")
atexit.register(_peak)
from spearpy.cli import main
sys.argv = ["spearpy", *sys.argv[1:]]
main()
"""

pytestmark = pytest.mark.usefixtures("no_host_bugs")


def churn(rounds: int = -1, start: str | None = None) -> bytes:
    """tests/wat/churn.wat looping `rounds` times (-1: forever); `start`: the
    entry exported as _start as well (the service runs _start)."""
    replace = {"(i32.const -1)) ;; ROUNDS": f"(i32.const {rounds})) ;; ROUNDS"}
    if start is not None:
        replace[f'(func (export "{start}")'] = f'(func (export "_start") (export "{start}")'
    return wat_module("churn.wat", replace)


def spearpy_run(tmp_path: Path, entry: str, *flags: str, rounds: int = -1
                ) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS) of `spearpy run --invoke ENTRY` of churn.wat."""
    module = tmp_path / "churn.wasm"
    module.write_bytes(churn(rounds))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _RUNNER, "run", "-q", "--no-cache", "--invoke", entry,
             "--max-host-bytes", "1MiB", "--max-memory", "1MiB", *flags, str(module)],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{entry}: still running after 120 s")
    peak = [line for line in proc.stderr.splitlines() if line.startswith("peak_rss_kib=")]
    assert peak, proc.stderr[-3000:]
    return proc.returncode, proc.stderr, int(peak[-1].split("=")[1]) << 10


@pytest.fixture
def churn_probe(make_host: Any) -> Iterator[Any]:
    probes: list[Probe] = []

    def make(rounds: int, host: Host | None = None) -> Probe:
        p = Probe(host or make_host(base_url="http://127.0.0.1:9/v1"), churn(rounds))
        probes.append(p)
        return p

    yield make
    for p in probes:
        p.close()


# ---- the attack: churning what the host keeps ends the run ------------------


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA and /proc/self/status")
def test_empty_session_churn_ends_at_the_host_bytes_limit(tmp_path: Path) -> None:
    # The timeout is the old ending: reaching it (124), or the rlimit, fails.
    code, stderr, peak = spearpy_run(tmp_path, "sessions", "--timeout", "20")
    assert code == 137, stderr[-3000:]
    assert "keep more than" in stderr and "max_host_bytes" in stderr, stderr[-3000:]
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak >> 20} MiB"


def test_each_closed_session_is_charged_its_transcript(churn_probe: Any) -> None:
    p = churn_probe(100)
    before = p.run.host_bytes
    assert p.call("sessions") == 0
    assert len(p.run.transcripts) == 100
    assert p.run.host_bytes - before == 100 * TRANSCRIPT_BYTES  # the session fds gave theirs back


# ---- what frees is given back: a long churn is not falsely charged ----------


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA and /proc/self/status")
def test_a_churn_that_frees_runs_on_under_the_limit(tmp_path: Path) -> None:
    # 20000 epoll sets opened and closed: 5 MB if each were charged for good.
    code, stderr, peak = spearpy_run(tmp_path, "epolls", "--timeout", "60", rounds=20_000)
    assert code == 0, stderr[-3000:]
    assert peak < PEAK_RSS_LIMIT


def test_open_fds_are_charged_and_closing_gives_it_back(churn_probe: Any, probe: Any) -> None:
    c = churn_probe(1000)
    before = c.run.host_bytes
    assert c.call("epolls") == 0
    assert c.run.host_bytes == before
    p = probe()
    before = p.run.host_bytes
    fds = [p.hc("cchat_create") for _ in range(10)]
    assert p.run.host_bytes - before == 10 * ChatSessionFd.host_bytes
    for fd in fds:
        assert p.hc("cchat_close", fd) == 0
    assert p.run.host_bytes - before == 10 * TRANSCRIPT_BYTES


def test_a_closed_response_gives_its_body_back(probe: Any, make_host: Any,
                                               scripted: Any) -> None:
    server = scripted({"default": {"content": "pong " * 200}})
    p = probe(make_host(base_url=server.base_url))
    fd = p.hc("cchat_create")
    assert p.write_msg(fd, "user", "ping") == 0
    rfd = p.hc("cchat_send", fd, 0)
    assert rfd >= 0
    open_cost = p.run.host_bytes
    body = p.run.fds.get(rfd, ChatResponseFd).response.body
    assert len(body) > 1000
    assert p.hc("cchat_close", rfd) == 0
    assert open_cost - p.run.host_bytes == ChatResponseFd.host_bytes + len(body)


# ---- siblings: host structures that grew with refused or closed things ------


def test_refused_tool_lookups_keep_nothing(churn_probe: Any) -> None:
    # cchat_write_fn at ever new indices past the table, all refused: each
    # one used to leave an entry in tool_function's cache, uncharged.
    p = churn_probe(5000)
    before = p.run.host_bytes
    assert p.call("bad_tools") == 0
    assert p.run.tool_funcs == {}
    assert p.run.host_bytes - before == ChatSessionFd.host_bytes


def test_tool_lookups_in_the_table_are_charged_once(churn_probe: Any) -> None:
    p = churn_probe(2 * 4096)  # every slot of the 4096-slot table, twice
    before = p.run.host_bytes
    assert p.call("sig_tools") == 0
    assert len(p.run.tool_funcs) == 4096
    assert p.run.host_bytes - before == ChatSessionFd.host_bytes + 4096 * TOOL_FUNC_BYTES


def test_an_epoll_set_drops_the_interests_of_closed_fds(churn_probe: Any) -> None:
    # Closed fds left a set only when it was waited on: a guest that adds and
    # closes without waiting grew it by one interest per fd, forever.
    p = churn_probe(3000)
    assert p.call("interests") == 0
    (epoll,) = [entry for _fd, entry in p.run.fds.entries() if isinstance(entry, EpollFd)]
    assert len(epoll.interests) <= 2  # twice the open fds (the set itself)
    assert len(p.run.transcripts) == 3000
