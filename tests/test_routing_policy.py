"""Policies and circuit breakers, on a fake clock and without servers."""

from __future__ import annotations

from collections import Counter

from spearpy.backends.routing.health import HealthBoard
from spearpy.backends.routing.policy import PolicyState
from spearpy.backends.routing.spec import BreakerSpec, RouteSpec


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fail(board: HealthBoard, name: str, times: int = 1) -> None:
    for _ in range(times):
        admitted = board.begin(name, check=True)
        assert not isinstance(admitted, str)
        board.end(name, False, trial=admitted)


def test_a_circuit_opens_after_n_failures_and_half_opens_after_the_cooldown() -> None:
    clock = Clock()
    board = HealthBoard(BreakerSpec(failures=2, cooldown=10), clock)
    fail(board, "a")
    assert board.blocked("a") is None  # one failure is not enough
    fail(board, "a")
    assert board.blocked("a") == "circuit open after 2 consecutive failures; half-open in 10.0 s"
    assert board.begin("a", check=True) == board.blocked("a")  # refused, nothing counted
    assert board.inflight("a") == 0
    clock.now += 10
    trial = board.begin("a", check=True)
    assert trial is True  # the half-open circuit's one trial request
    assert board.blocked("a") == "circuit half-open: its trial request is in flight"
    board.end("a", False, trial=trial)  # the trial failed: open for another cool-down
    assert board.blocked("a") is not None and board.blocked("a").startswith("circuit open")
    clock.now += 10
    trial = board.begin("a", check=True)
    board.end("a", True, 12.0, trial=trial)  # the trial succeeded: closed
    assert board.blocked("a") is None and board.snapshot()["a"]["failures"] == 0
    fail(board, "a")
    assert board.blocked("a") is None  # counting starts again from zero


def test_success_and_neutral_outcomes() -> None:
    board = HealthBoard(BreakerSpec(failures=2))
    fail(board, "a")
    board.begin("a", check=True)
    board.end("a", None)  # cancelled: says nothing
    fail(board, "a")
    assert board.blocked("a") is not None
    other = HealthBoard(BreakerSpec(failures=2))
    fail(other, "a")
    other.begin("a", check=False)
    other.end("a", True, 5.0)  # any answer that is not a failure resets the count
    fail(other, "a")
    assert other.blocked("a") is None


def route(policy: str, to: list[str], weights: list[float] | None = None) -> RouteSpec:
    return RouteSpec.model_validate({"name": "r", "to": to, "policy": policy,
                                     "weights": weights})


def test_round_robin_rotates_over_the_usable_backends() -> None:
    state, board = PolicyState(), HealthBoard()
    r = route("round_robin", ["a", "b", "c"])
    firsts = [state.order(r, ["a", "b", "c"], board)[0] for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    assert state.order(r, ["a", "b", "c"], board) == ["a", "b", "c"]
    assert state.order(r, ["a", "c"], board) == ["c", "a"]  # b skipped: its circuit is open


def test_weighted_is_exact_and_interleaved() -> None:
    state, board = PolicyState(), HealthBoard()
    r = route("weighted", ["a", "b"], [1, 3])
    firsts = [state.order(r, ["a", "b"], board)[0] for _ in range(400)]
    assert Counter(firsts) == {"a": 100, "b": 300}
    assert firsts[:4].count("a") == 1 and firsts[:8].count("a") == 2  # spread, not batched
    assert state.order(r, ["a", "b"], board)[1:] in (["a"], ["b"])  # the other as fallback


def test_least_inflight_and_ewma_latency() -> None:
    state, board = PolicyState(), HealthBoard()
    board.begin("a", check=False)
    board.begin("a", check=False)
    board.begin("b", check=False)
    assert state.order(route("least_inflight", ["a", "b", "c"]), ["a", "b", "c"], board) == \
        ["c", "b", "a"]
    for name, ms in (("a", 50.0), ("b", 10.0)):
        board.begin(name, check=False)
        board.end(name, True, ms)
    ewma = route("ewma_latency", ["a", "b", "c"])
    assert state.order(ewma, ["a", "b", "c"], board) == ["c", "b", "a"]  # c not measured yet
    board.begin("b", check=False)
    board.end("b", True, 200.0)  # b slows down: 0.3 * 200 + 0.7 * 10 = 67
    assert board.ewma_ms("b") == 67.0
    assert state.order(ewma, ["a", "b"], board) == ["a", "b"]
    assert state.order(route("priority", ["b", "a"]), ["b", "a"], board) == ["b", "a"]
