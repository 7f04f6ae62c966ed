"""Routing configuration: the issue's exact TOML, mistakes failing at start
with the key named, aliases from HostConfig, and no router without routing."""
# ruff: noqa: E501  (the issue's TOML is kept verbatim, comments and all)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spearpy.backends.catalog import BackendCatalog
from spearpy.backends.routing.spec import AliasSpec, parse_alias_flag
from spearpy.backends.specs import load_config
from spearpy.cli.routes_cmd import routes
from spearpy.config import HostConfig
from spearpy.errors import ConfigError
from spearpy.host import Host

BACKENDS = """
default = "hosted"
[backends.hosted]
base_url = "http://127.0.0.1:9/v1"
api_key_env = ""
model = "gpt-4o-mini"
[backends.local]
base_url = "http://127.0.0.1:11434/v1"
api_key_env = ""
model = "qwen2.5:7b-instruct"
[backends.down]
base_url = "http://127.0.0.1:9/v1"
api_key_env = ""
"""

# The issue's format, verbatim.
ISSUE_TABLES = r"""
[models]                                   # aliases, applied before routes
"gpt-4o-mini" = "local"                    # this model name goes to backend local, with local's model
"gpt-4o" = { backend = "local", model = "qwen2.5:7b" }

[[routes]]                                 # tried in order; the first match decides
name = "private"
match = { content = ["password", "(?i)\\bssn\\b"] }  # regexes over user and tool message text
to = ["local"]
lock = true                                # the guest's `backend` param cannot override this route

[[routes]]
name = "default"
match = { model = "gpt-*" }                # globs; other keys: backend (the guest's param), tools (bool)
to = ["down", "hosted"]
policy = "priority"                        # priority | round_robin | weighted | least_inflight | ewma_latency
weights = [1, 3]                           # for weighted
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_the_issue_format_parses(tmp_path: Path) -> None:
    text = BACKENDS + ISSUE_TABLES  # verbatim: weights beside policy priority included
    loaded = load_config(write(tmp_path, text))
    routing = loaded.routing
    assert routing.aliases == {"gpt-4o-mini": AliasSpec(backend="local"),
                               "gpt-4o": AliasSpec(backend="local", model="qwen2.5:7b")}
    private, default = routing.routes
    assert private.name == "private" and private.lock and private.to == ["local"]
    assert private.match.content == ["password", r"(?i)\bssn\b"]
    assert default.match.model == ["gpt-*"] and default.policy == "priority"
    assert default.weights == [1, 3] and not default.lock
    assert routing.breaker.failures == 3 and routing.breaker.cooldown == 30.0
    host = Host(config_file=write(tmp_path, text), cache_dir=None)
    try:
        assert host._router is not None
    finally:
        host.close()


@pytest.mark.parametrize(("tables", "problem"), [
    ('[[routes]]\nname = "r"\nto = ["nope"]\n',
     r"\[\[routes\]\] #1 \('r'\): to: backend 'nope' is not configured \(configured: down, "
     r"hosted, local\)"),
    ('[[routes]]\nname = "r"\nto = []\n', r"\[\[routes\]\] #1 \('r'\): to: .*at least one"),
    ('[[routes]]\nname = "ok"\nto = ["local"]\n[[routes]]\nname = "bad"\n'
     'match = { content = ["fine", "(unclosed"] }\nto = ["local"]\n',
     r"\[\[routes\]\] #2 \('bad'\): match.content: entry 1 '\(unclosed' is not a valid regex"),
    ('[models]\n"gpt-4o" = "nowhere"\n',
     r"\[models\] 'gpt-4o': backend 'nowhere' is not configured"),
    ('[models]\n"gpt-4o" = { model = "x" }\n', r"\[models\] 'gpt-4o': backend: Field required"),
    ('[[routes]]\nname = "r"\nto = ["local"]\npolicy = "random"\n',
     r"#1 \('r'\): policy: Input should be 'priority'"),
    ('[[routes]]\nname = "r"\nto = ["local", "hosted"]\npolicy = "weighted"\nweights = [1]\n',
     r"#1 \('r'\): weights: need 2 positive numbers"),
    ('[[routes]]\nname = "r"\nto = ["local"]\nweights = [0]\n',
     r"weights: need 1 positive numbers"),
    ('[[routes]]\nname = "r"\nto = ["local"]\nlocked = true\n',
     r"#1 \('r'\): locked: Extra inputs are not permitted"),
    ('[[routes]]\nname = "r"\nmatch = { contents = ["x"] }\nto = ["local"]\n',
     r"match.contents: Extra inputs are not permitted"),
    ('[[routes]]\nto = ["local"]\n', r"\[\[routes\]\] #1: name: Field required"),
    ('[[routes]]\nname = "r"\nto = ["local"]\n[[routes]]\nname = "r"\nto = ["hosted"]\n',
     r"#2 \('r'\): name 'r' is used by an earlier route"),
    ('[circuit_breaker]\nfailures = 0\n', r"\[circuit_breaker\]: failures: Input should be"),
    ('routes = "x"\n', r"`routes` must be an array of \[\[routes\]\] tables"),
])
def test_bad_routing_fails_at_start_naming_the_key(tmp_path: Path, tables: str,
                                                   problem: str) -> None:
    # Top-level keys come before the tables in TOML.
    path = write(tmp_path, tables + BACKENDS if tables.startswith("routes =")
                 else BACKENDS + tables)
    with pytest.raises(ConfigError, match=problem):
        Host(config_file=path, cache_dir=None)
    result = CliRunner().invoke(routes, ["explain", "--config", str(path), "--model", "m"])
    assert result.exit_code == 2, result.output


def test_model_aliases_from_host_config_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, BACKENDS + '[models]\n"gpt-4o" = "hosted"\n')
    catalog = BackendCatalog.from_config(HostConfig(
        config_file=path, cache_dir=None,
        model_aliases={"gpt-4o": "local:qwen2.5:7b", "gpt-4o-mini": "local"}))
    assert catalog.routing.aliases == {"gpt-4o": AliasSpec(backend="local", model="qwen2.5:7b"),
                                       "gpt-4o-mini": AliasSpec(backend="local")}
    with pytest.raises(ConfigError, match=r"model alias m=ghost \(--model-alias, "
                                          r"SPEARPY_MODEL_ALIASES\): backend 'ghost' is not "
                                          r"configured"):
        Host(config_file=path, cache_dir=None, model_aliases={"m": "ghost"})
    with pytest.raises(ValueError, match="not NAME=BACKEND"):
        parse_alias_flag("gpt-4o")
    assert parse_alias_flag("gpt-4o=local:qwen2.5:7b") == (
        "gpt-4o", AliasSpec(backend="local", model="qwen2.5:7b"))


def test_aliases_alone_route_and_a_host_without_routing_has_no_router(
        tmp_path: Path) -> None:
    plain = Host(config_file=write(tmp_path, BACKENDS), cache_dir=None)
    aliased = Host(config_file=write(tmp_path, BACKENDS), cache_dir=None,
                   model_aliases={"gpt-4o-mini": "local"})
    try:
        assert plain._router is None
        backend, error = plain.backend_for("local", "gpt-4o-mini", object())
        assert error is None and type(backend).__name__ == "OpenAIBackend"
        assert aliased._router is not None
        routed, error = aliased.backend_for("", "gpt-4o-mini", object())
        assert error is None and type(routed).__name__ == "RoutedBackend"
        assert aliased.backend_for("ghost")[1] == (
            "unknown backend 'ghost'; configured backends: down, hosted, local")
    finally:
        plain.close()
        aliased.close()


def test_an_mcp_table_in_the_config_file_is_left_to_spearpy_mcp(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path, BACKENDS + '[mcp]\ndirs = ["mcp.d"]\n'))
    assert set(loaded.specs) == {"hosted", "local", "down"}


def explain(path: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(routes, ["explain", "--config", str(path), "--json", *args])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


def test_routes_explain_prints_the_decision_without_sending(tmp_path: Path) -> None:
    path = write(tmp_path, BACKENDS + ISSUE_TABLES)
    private = explain(path, "--model", "gpt-4.1", "--message", "my SSN is 078-05-1120",
                      "--backend", "hosted")
    assert private["route"] == "private" and private["reason"] == "locked route"
    assert private["chosen"] == "local" and private["routes"] == [
        {"name": "private", "matches": True, "lock": True,
         "evidence": r"'(?i)\\bssn\\b' in message 0 (user)"}]
    default = explain(path, "--model", "gpt-4.1", "--message", "hello")
    assert default["route"] == "default" and default["order"] == ["down", "hosted"]
    assert default["routes"][0]["why_not"].startswith("no user or tool message matches")
    assert default["models"] == {"down": "gpt-4.1", "hosted": "gpt-4.1"}
    aliased = explain(path, "--model", "gpt-4o", "--message", "hello")
    assert aliased["reason"] == "alias" and aliased["chosen"] == "local"
    assert aliased["models"] == {"local": "qwen2.5:7b"}
    assert aliased["matched_model"] == "qwen2.5:7b"
    tool = explain(path, "--model", "gpt-4.1", "--message", "hi", "--tool-output",
                   '{"password": "hunter2"}')
    assert tool["chosen"] == "local"
    assert tool["routes"][0]["evidence"] == "'password' in message 1 (tool)"
    text = CliRunner().invoke(routes, ["explain", "--config", str(path), "--model", "gpt-4.1",
                                       "--message", "hello"])
    assert "route:      private does not match" in text.output
    assert "order:      down (model gpt-4.1) then hosted (model gpt-4.1)" in text.output
    unknown = CliRunner().invoke(routes, ["explain", "--config", str(path), "--backend", "x"])
    assert unknown.exit_code == 2 and "unknown backend 'x'" in unknown.output
