"""SET_PARAM checking, forwarding and limit resolution (spear-abi.md section 3)."""

from __future__ import annotations

import pytest

from spearpy import abi
from spearpy.chat.params import (
    HOST_KEYS,
    LimitPolicy,
    check_param,
    forwarded_params,
    resolve_limits,
)
from spearpy.chat.protocol import LoopLimits

OK = [
    ("model", "gpt-4o-mini"),
    ("stream", True),
    ("stream", False),
    ("backend", "local"),
    ("timeout_ms", 0),
    ("timeout_ms", 30000),
    ("max_iterations", 3),
    ("max_total_tool_calls", 0),
    ("max_tool_calls", 5),
    ("max_tool_output_bytes", 1 << 30),  # above the cap: accepted, clamped later
    ("tool_arena_ptr", 65536),
    ("tool_arena_len", 0xFFFF_FFFF),
    ("strict_tools", True),
    ("max_total_tokens", 1000),
    ("cache_tool_results", False),
    ("validate_tool_args", False),
    ("temperature", 0),
    ("temperature", 0.7),
    ("top_p", 1.0),
    ("max_tokens", 256),
    ("max_completion_tokens", 256),
    ("seed", -42),
    ("stop", "\n"),
    ("stop", ["a", "b"]),
    ("stop", []),
    ("tool_choice", "auto"),
    ("tool_choice", {"type": "function", "function": {"name": "add"}}),
    ("parallel_tool_calls", False),
    ("response_format", {"type": "json_object"}),
    ("temperature", None),  # unset
    ("frequency_penalty", 0.5),  # unknown keys are forwarded
    ("logit_bias", {"50256": -100}),
    ("user", "guest-1"),
    ("metadata", {"nested": [1, {"x": None}]}),
]

EINVAL = [
    ("", 1),
    ("model", ""),
    ("model", 5),
    ("backend", 0),
    ("timeout_ms", -1),
    ("timeout_ms", 1.5),
    ("timeout_ms", "100"),
    ("max_iterations", True),
    ("max_iterations", -1),
    ("max_total_tool_calls", 2.0),
    ("max_tool_calls", False),
    ("max_tool_output_bytes", "64k"),
    ("tool_arena_ptr", -8),
    ("tool_arena_len", 0x1_0000_0000),
    ("strict_tools", 1),
    ("cache_tool_results", "true"),
    ("validate_tool_args", 0),
    ("max_total_tokens", -5),
    ("temperature", "hot"),
    ("temperature", True),
    ("temperature", float("nan")),
    ("top_p", float("inf")),
    ("max_tokens", 1.0),
    ("max_tokens", -1),
    ("max_completion_tokens", True),
    ("seed", 1.5),
    ("stop", 5),
    ("stop", ["a", 1]),
    ("tool_choice", 3),
    ("parallel_tool_calls", "yes"),
    ("response_format", "json"),
    ("messages", []),
    ("tools", []),
    ("stream", "yes"),
    ("n", 1),
    ("messages", None),
    ("unknown_float", float("nan")),
    ("unknown_nested", {"a": [1, float("-inf")]}),
]


@pytest.mark.parametrize(("key", "value"), OK)
def test_accepted(key: str, value: object) -> None:
    assert check_param(key, value) == 0


@pytest.mark.parametrize(("key", "value"), EINVAL)
def test_rejected_einval(key: str, value: object) -> None:
    assert check_param(key, value) == abi.EINVAL


@pytest.mark.parametrize("key", ["mcp.servers", "mcp.", "mcp.tool.allow"])
def test_mcp_keys_are_eacces(key: str) -> None:
    assert check_param(key, ["x"]) == abi.EACCES
    assert check_param(key, None) == abi.EACCES


def test_forwarded_params_drops_host_keys() -> None:
    params: dict[str, object] = {key: 1 for key in HOST_KEYS}
    params.update(temperature=0.2, stop=["x"], user="u", tool_choice="none", seed=None)
    assert forwarded_params(params) == {
        "temperature": 0.2,
        "stop": ["x"],
        "user": "u",
        "tool_choice": "none",
    }
    assert params["model"] == 1  # the input is not modified


def test_resolve_limits_defaults() -> None:
    assert resolve_limits({}, LimitPolicy()) == LoopLimits(
        max_iterations=8,
        max_total_tool_calls=32,
        max_tool_output_bytes=65536,
        max_total_tokens=None,
        strict_tools=False,
        cache_tool_results=False,
        validate_tool_args=True,
    )


def test_resolve_limits_takes_params_and_clamps_to_caps() -> None:
    limits = resolve_limits(
        {
            "max_iterations": 1000,
            "max_total_tool_calls": 3,
            "max_tool_output_bytes": 10 << 20,
            "max_total_tokens": 500,
            "strict_tools": True,
            "cache_tool_results": True,
            "validate_tool_args": False,
        },
        LimitPolicy(),
    )
    assert limits == LoopLimits(
        max_iterations=128,
        max_total_tool_calls=3,
        max_tool_output_bytes=1 << 20,
        max_total_tokens=500,
        strict_tools=True,
        cache_tool_results=True,
        validate_tool_args=False,
    )


def test_alias_and_canonical_key() -> None:
    policy = LimitPolicy()
    assert resolve_limits({"max_tool_calls": 4}, policy).max_total_tool_calls == 4
    both = {"max_tool_calls": 4, "max_total_tool_calls": 6}
    assert resolve_limits(both, policy).max_total_tool_calls == 6


def test_host_policy_lowers_caps_and_moves_defaults() -> None:
    policy = LimitPolicy(
        default_max_iterations=50,  # above the cap below: clamped
        max_iterations_cap=10,
        default_max_total_tool_calls=5,
        max_total_tool_calls_cap=20,
        default_max_tool_output_bytes=100,
        max_tool_output_bytes_cap=4096,
        default_validate_tool_args=False,
        default_max_total_tokens=900,
    )
    assert policy.default_max_iterations == 10
    limits = resolve_limits({"max_total_tool_calls": 1000}, policy)
    assert limits.max_iterations == 10
    assert limits.max_total_tool_calls == 20
    assert limits.max_tool_output_bytes == 100
    assert limits.validate_tool_args is False
    assert limits.max_total_tokens == 900


def test_wrong_typed_stored_values_fall_back_to_defaults() -> None:
    limits = resolve_limits({"max_iterations": True, "strict_tools": 1}, LimitPolicy())
    assert limits.max_iterations == 8
    assert limits.strict_tools is False


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_iterations_cap": 129},
        {"max_total_tool_calls_cap": -1},
        {"max_tool_output_bytes_cap": (1 << 20) + 1},
        {"default_max_iterations": -1},
        {"default_max_total_tokens": -1},
        {"max_iterations_cap": True},
    ],
)
def test_policy_rejects_caps_beyond_the_abi(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        LimitPolicy(**kwargs)  # type: ignore[arg-type]
