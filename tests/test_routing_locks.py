"""Locks are decided before order: a completion that matches a locked route
never leaves that route's backends, whatever the route order, the guest's
model, alias or `backend` param, and whatever fails (retries, fallback,
open circuits). Two loopback OpenAI servers play "hosted" and "local"; a
real wasm guest (probe.wat) sends. Also the load warning for files whose
order reads otherwise, and what `spearpy routes explain` says."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spearpy.backends.routing.overlap import could_overlap, lock_warnings
from spearpy.backends.routing.spec import MatchSpec, RouteSpec
from spearpy.cli.routes_cmd import routes
from spearpy.host import Host
from tests.test_routing_kit import content, guests, routing_config

__all__ = ["guests"]

SECRET = "my password is hunter2"
UNUSED = "http://127.0.0.1:9/v1"  # never asked: these tests only load the file

FAST = """
[[routes]]
name = "fast"
match = { model = "fast-*" }
to = ["hosted"]
"""

PRIVATE = """
[[routes]]
name = "private"
match = { content = "password" }
to = ["local"]
lock = true
"""


def named(text: str) -> list[dict[str, Any]]:
    return [{"reply": {"content": text}}]


def leaked(server: Any) -> list[Any]:
    """The requests of `server` that carried the secret."""
    return [r for r in server.requests if "hunter2" in json.dumps(r.body)]


@pytest.mark.parametrize("tables", [FAST + PRIVATE, PRIVATE + FAST],
                         ids=["unlocked-first", "locked-first"])
@pytest.mark.parametrize("model", ["fast-model", None, "other"])
def test_a_password_reaches_only_local_whatever_the_order_and_model(
        scripted: Any, guests: Any, tmp_path: Path, tables: str, model: str | None) -> None:
    # The attack: an unlocked route the guest can steer into by its model,
    # listed before the locked one, used to take the password to hosted.
    local, hosted = scripted(named("local")), scripted(named("hosted"))
    path = routing_config(tmp_path / "c.toml", {"hosted": hosted.base_url,
                                                "local": local.base_url}, tables)
    guest = guests(config_file=path)
    body = guest.send(SECRET, model=model)
    assert content(body) == "local" and body["_spear"]["backend"] == "local"
    assert leaked(hosted) == [] and len(leaked(local)) == 1
    (record,) = guest.routes()
    assert record["reason"] == "locked route" and record["route"] == "private"
    # Without the secret the fast route still takes a fast model to hosted.
    assert content(guest.send("hello", model="fast-model")) == "hosted"


def test_an_alias_cannot_steer_a_locked_prompt_into_an_earlier_route(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    local, hosted = scripted(named("local")), scripted(named("hosted"))
    tables = '[models]\n"cheap" = { backend = "hosted", model = "fast-model" }\n' \
        + FAST + PRIVATE
    path = routing_config(tmp_path / "c.toml", {"hosted": hosted.base_url,
                                                "local": local.base_url}, tables)
    guest = guests(config_file=path)
    assert content(guest.send(SECRET, model="cheap")) == "local"
    assert leaked(hosted) == []
    assert content(guest.send("hello", model="cheap")) == "hosted"  # the alias still works


def test_a_backend_param_cannot_steer_a_locked_prompt_into_an_earlier_route(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    local, hosted = scripted(named("local")), scripted(named("hosted"))
    by_param = '[[routes]]\nname = "by-param"\nmatch = { backend = "hosted" }\n' \
        'to = ["hosted"]\n'
    path = routing_config(tmp_path / "c.toml", {"hosted": hosted.base_url,
                                                "local": local.base_url}, by_param + PRIVATE)
    guest = guests(config_file=path)
    assert content(guest.send(SECRET, backend="hosted")) == "local"
    assert leaked(hosted) == []
    assert content(guest.send("hello", backend="hosted")) == "hosted"


SHARED_FIRST = """
[[routes]]
name = "fast"
match = { model = "fast-*" }
to = ["local", "hosted"]
"""


def test_a_5xx_from_the_locked_backend_does_not_fall_over_to_hosted(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    # An earlier unlocked route lists local then hosted: local's 500 (after
    # its own retry) used to move the password to hosted by fallback.
    local = scripted([{"reply": {"status": 500, "error": "local is down"}}])
    hosted = scripted(named("hosted"))
    path = routing_config(tmp_path / "c.toml", {"hosted": hosted.base_url,
                                                "local": local.base_url},
                          SHARED_FIRST + PRIVATE)
    guest = guests(config_file=path, max_retries=1)
    body = guest.send(SECRET, model="fast-model")
    assert body["error"]["code"] == "upstream_http_error" and "HTTP 500" in \
        body["error"]["message"]
    assert hosted.requests == [] and len(local.requests) == 2  # its retry stayed local
    (record,) = guest.routes()
    assert record["route"] == "private" and record["tried"] == [
        {"backend": "local", "error": "upstream_http_error", "status": 500}]


def test_fallback_stays_inside_the_locked_routes_backends_and_an_open_circuit_refuses(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    local = scripted([{"reply": {"status": 503}}])
    spare, hosted = scripted(named("spare")), scripted(named("hosted"))
    tables = SHARED_FIRST + PRIVATE.replace('to = ["local"]', 'to = ["local", "spare"]')
    path = routing_config(tmp_path / "c.toml", {"hosted": hosted.base_url,
                                                "local": local.base_url,
                                                "spare": spare.base_url}, tables)
    guest = guests(config_file=path)
    assert content(guest.send(SECRET, model="fast-model")) == "spare"
    assert hosted.requests == []

    only_local = routing_config(tmp_path / "d.toml", {"hosted": hosted.base_url,
                                                      "local": local.base_url},
                                SHARED_FIRST + PRIVATE
                                + "[circuit_breaker]\nfailures = 1\ncooldown = 60\n")
    guest = guests(config_file=only_local)
    assert guest.send(SECRET, model="fast-model")["error"]["status"] == 503  # opens local
    refused = guest.send(SECRET, model="fast-model")
    assert refused["error"]["code"] == "route_unavailable"
    assert "route 'private'" in refused["error"]["message"]
    assert hosted.requests == []


TWO_LOCKS = """
[[routes]]
name = "private"
match = { content = "password" }
to = ["local", "eu"]
lock = true

[[routes]]
name = "eu-only"
match = { content = "(?i)gdpr" }
to = ["eu", "hosted"]
lock = true
"""


def test_two_matching_locks_keep_to_the_backends_both_list(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    servers = {name: scripted(named(name)) for name in ("hosted", "local", "eu")}
    path = routing_config(tmp_path / "c.toml", {n: s.base_url for n, s in servers.items()},
                          TWO_LOCKS)
    guest = guests(config_file=path)
    assert content(guest.send(SECRET)) == "local"
    assert content(guest.send("GDPR data")) == "eu"
    assert content(guest.send(SECRET + ", GDPR applies")) == "eu"
    both = guest.routes()[2]
    assert both["route"] == "private" and both["order"] == ["eu"]
    assert both["rejected"] == [{"backend": "local", "reason": "outside locked route 'eu-only'"}]


def test_two_matching_locks_with_no_backend_in_common_refuse(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    servers = {name: scripted(named(name)) for name in ("hosted", "local", "eu")}
    tables = TWO_LOCKS.replace('to = ["local", "eu"]', 'to = ["local"]') \
        .replace('to = ["eu", "hosted"]', 'to = ["eu"]')
    path = routing_config(tmp_path / "c.toml", {n: s.base_url for n, s in servers.items()},
                          tables)
    guest = guests(config_file=path)
    body = guest.send(SECRET + ", GDPR applies")
    assert body["error"]["code"] == "route_unavailable"
    assert "local: outside locked route 'eu-only'" in body["error"]["message"]
    assert all(s.requests == [] for s in servers.values())


def test_a_shadowing_unlocked_route_is_warned_about_at_load(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    backends: dict[str, str | dict[str, Any]] = {"hosted": UNUSED, "local": UNUSED}
    shadowed = routing_config(tmp_path / "a.toml", backends, FAST + PRIVATE)
    tidy = routing_config(tmp_path / "b.toml", backends, PRIVATE + FAST)
    with caplog.at_level(logging.WARNING, logger="spearpy.routing"):
        Host(config_file=shadowed, cache_dir=None).close()
        warned = [r.getMessage() for r in caplog.records]
        caplog.clear()
        Host(config_file=tidy, cache_dir=None).close()
        assert caplog.records == []
    assert warned == ["routing: route 'fast' (#1) comes before locked route 'private' (#2) "
                      "and can match the same completion: the locked route takes it (locks "
                      "are decided before order); list the locked route first to make the "
                      "file read as it routes"]


def route(name: str, lock: bool = False, to: tuple[str, ...] = ("a",),
          **match: Any) -> RouteSpec:
    return RouteSpec(name=name, match=MatchSpec(**match), to=list(to), lock=lock)


def test_only_routes_that_can_meet_are_warned_about() -> None:
    locked = route("private", True, model="slow-*", tools=True)
    for apart in (route("x", model="fast-*"), route("x", model="fast-model"),
                  route("x", model="fast?"), route("x", tools=False)):
        assert not could_overlap(apart.match, locked.match)
        assert lock_warnings([apart, locked]) == ()
    assert not could_overlap(MatchSpec(model="*-fast"), MatchSpec(model="*-slow"))
    assert could_overlap(MatchSpec(model="*-fast"), MatchSpec(model="slow-*"))  # slow-x-fast
    for meets in (route("x"), route("x", model="slow-model"), route("x", model="s*"),
                  route("x", model="*model"), route("x", content="password"),
                  route("x", backend="hosted")):
        assert could_overlap(meets.match, locked.match)
        assert len(lock_warnings([meets, locked])) == 1
    other = route("other", True, to=("b",))
    (disjoint,) = lock_warnings([locked, other])
    assert "share no backend" in disjoint
    assert lock_warnings([locked, route("other", True, to=("a", "b"))]) == ()


def test_routes_explain_says_the_lock_decided_and_warns(tmp_path: Path) -> None:
    backends: dict[str, str | dict[str, Any]] = {"hosted": UNUSED, "local": UNUSED}
    path = routing_config(tmp_path / "c.toml", backends, FAST + PRIVATE)
    args = ["explain", "--config", str(path), "--model", "fast-model", "--message", SECRET]
    result = CliRunner().invoke(routes, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["reason"] == "locked route" and report["route"] == "private"
    assert report["chosen"] == "local" and report["locks"] == ["private"]
    assert report["routes"] == [
        {"name": "fast", "matches": True, "lock": False, "overridden_by": "private"},
        {"name": "private", "matches": True, "lock": True,
         "evidence": "'password' in message 0 (user)"}]
    assert len(report["warnings"]) == 1 and "route 'fast' (#1)" in report["warnings"][0]
    text = CliRunner().invoke(routes, args).output
    assert "route:      fast matches, overridden by locked route 'private'" in text
    assert "decided by: locked route 'private', policy priority" in text
    assert "chosen:     local" in text
    assert "warning:    route 'fast' (#1) comes before locked route 'private' (#2)" in text
