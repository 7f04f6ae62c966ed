"""bench/d_durable.py's bookkeeping (no timing here): the model server counts
every request it gets, and a replay or resume row that reached the model
reports a miss whatever its ratio."""

from __future__ import annotations

from pathlib import Path

import httpx

from bench.d_durable import _CountingModel, _NoRequestsTarget
from bench.stats import Row, Series


def test_the_bench_model_counts_what_reaches_it(tmp_path: Path) -> None:
    with _CountingModel(0, tmp_path / "requests") as model:
        assert model.requests() == 0
        with httpx.Client(trust_env=False) as client:
            for _ in range(3):
                reply = client.post(model.base_url + "/chat/completions",
                                    json={"model": "bench", "messages": []})
                assert reply.status_code == 200
                assert reply.json()["choices"][0]["message"]["role"] == "assistant"
        assert model.requests() == 3


def _row(ratio: float, requests: int) -> Row:
    return Row("D.x", "D", "replay", "live", "ms", Series([ratio]), Series([1.0]),
               _NoRequestsTarget("<=", 0.1, "<= 0.1, 0 requests", requests=requests))


def test_a_row_that_reached_the_model_is_a_miss() -> None:
    assert _row(0.01, 0).met is True
    assert _row(0.01, 1).met is False  # fast, but it asked the model
    assert _row(0.5, 0).met is False
    assert _row(0.01, 1).as_dict()["met"] is False
