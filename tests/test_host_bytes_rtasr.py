"""Host-bytes charging on a path other than chat sessions: the params a
guest sets on an rtasr fd are kept by the host, so each new key is charged
at its JSON's size (once: setting a key again replaces it), and a guest that
sets key after key ends its run with memory_limit instead of growing the
host without bound."""

from __future__ import annotations

import json
from typing import Any

import pytest
import wasmtime

from tests.test_audio_rtasr import asr  # noqa: F401 (the fixture)

SET = 1  # rtasr_ctl set-param


def test_rtasr_params_are_charged_once_per_key(asr: Any) -> None:  # noqa: F811
    a = asr()
    fd = a.create()
    before = a.run.host_bytes  # whatever the open fd itself costs
    param = {"key": "language", "value": "en"}
    assert a.ctl(fd, SET, param) == 0
    assert a.run.host_bytes - before == len(json.dumps(param))
    assert a.set(fd, "language", "a much longer value") == 0  # replaced: no new charge
    assert a.run.host_bytes - before == len(json.dumps(param))
    assert a.set(fd, "ws_url", "ws://elsewhere") != 0  # refused: costs nothing
    assert a.run.host_bytes - before == len(json.dumps(param))


def test_rtasr_params_past_the_budget_end_the_run(asr: Any) -> None:  # noqa: F811
    a = asr(max_host_bytes=1 << 20)
    fd = a.create()
    value = "x" * 60_000
    with pytest.raises(wasmtime.WasmtimeError, match="max_host_bytes"):
        for i in range(40):  # 40 keys of 60 kB: past the 1 MiB budget near the 18th
            assert a.set(fd, f"key{i}", value) == 0
    noted = a.run.interrupts.noted
    assert noted is not None and noted[0] == "memory_limit" and "rtasr params" in noted[1]
    assert 1 << 20 < a.run.host_bytes <= (1 << 20) + 60_100
