"""--env-inherit hands the guest no credential (issue 14, item 3).

The attack: an operator's shell or CI runner full of tokens, and a guest that
dumps its whole environment (tests/wat/wasi.wat `env_dump`) under
--env-inherit. None of the secrets, by name or by value, may reach it; `--env
NAME` passes exactly the one it names; a backend's own key variable is refused
even by name, with an error that names it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spearpy.host import Host
from spearpy.secret_env import (
    SecretEnvError,
    guest_env,
    inheritable_env,
    is_secret_name,
    is_secret_value,
)
from tests.probe import wat_module

ROOT = Path(__file__).resolve().parents[1]
WASI = wat_module("wasi.wat")
TAG = "leak4f2a9c"  # in every secret value, so one search finds any of them

# What a developer's shell or a CI runner typically holds.
SECRETS = {
    "OPENAI_API_KEY": f"sk-proj-{TAG}-aaaaaaaaaaaaaaaaaaaa",
    "ANTHROPIC_API_KEY": f"sk-ant-{TAG}-bbbbbbbbbbbbbbbbbbbb",
    "GITHUB_TOKEN": f"ghp_{TAG}cccccccccccccccccccccc",
    "GH_TOKEN": f"gho_{TAG}",
    "NPM_TOKEN": f"npm-{TAG}",
    "HF_TOKEN": f"hf-{TAG}",
    "AWS_ACCESS_KEY_ID": f"AKIA-{TAG}",
    "AWS_SECRET_ACCESS_KEY": f"aws-{TAG}",
    "AWS_SESSION_TOKEN": f"aws-session-{TAG}",
    "AZURE_CLIENT_SECRET": f"azure-{TAG}",
    "GOOGLE_APPLICATION_CREDENTIALS": f"/home/op/{TAG}.json",
    "DATABASE_URL": f"postgres://app:{TAG}@db:5432/app",
    "SENTRY_DSN": f"https://{TAG}@o1.ingest.sentry.io/1",
    "PGPASSWORD": f"pg-{TAG}",
    "MYSQL_PWD": f"my-{TAG}",
    "SSH_AUTH_SOCK": f"/tmp/ssh-{TAG}/agent.1",
    "DJANGO_SECRET_KEY": f"dj-{TAG}",
    "STRIPE_APIKEY": f"rk-{TAG}",
    "DEPLOY_PRIVATE_KEY": f"-----BEGIN OPENSSH PRIVATE KEY----- {TAG}",
    "SLACK_WEBHOOK_URL": f"https://hooks.slack.com/services/{TAG}",
    # Innocent names, credential values.
    "HTTPS_PROXY": f"http://user:{TAG}@proxy:3128",
    "BUILD_NOTE": f"ghp_{TAG}dddddddddddddddddddddd",
}
# What --env-inherit exists for: these must still reach the guest.
ORDINARY = {
    "LANG": "C.UTF-8", "TZ": "UTC", "TERM": "xterm", "HOME": "/home/op", "USER": "op",
    "NO_PROXY": "localhost", "HTTP_PROXY": "http://proxy:3128", "CI": "true",
    "TOKENIZERS_PARALLELISM": "false", "GIT_AUTHOR_NAME": "Op", "SPEARPY_MODEL": "m",
}


def dump(result: Any) -> dict[str, str]:
    assert result.exit_code == 0, result.message
    block: bytes = result.stdout or b""
    pairs = [item.partition("=") for item in block.decode().split("\0") if item]
    return {name: value for name, _, value in pairs}


@pytest.fixture
def operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**SECRETS, **ORDINARY}.items():
        monkeypatch.setenv(name, value)


# ---- the deny-list ------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    # DATABASE_URL and the last two are denied by their values (below).
    *sorted(SECRETS.keys() - {"DATABASE_URL", "HTTPS_PROXY", "BUILD_NOTE"}),
    "API_KEY", "apiKey", "npm_config__authToken", "NPM_CONFIG__AUTH", "TF_TOKEN_app_terraform_io",
    "VAULT_TOKEN", "CI_JOB_TOKEN", "TWINE_PASSWORD", "SMTP_PASS", "REDIS_PASSWD", "GITHUB_PAT",
    "AZURE_STORAGE_CONNECTION_STRING", "DOCKER_AUTH_CONFIG", "GPG_PASSPHRASE", "OP_SESSION_my",
    "KRB5CCNAME", "AWS_PROFILE", "CLIENT_SECRETS", "SESSION_COOKIE", "MAPBOX_KEY",
])
def test_credential_names_are_denied(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [*ORDINARY, "PATH", "PWD", "OLDPWD", "SHELL", "XAUTHORITY",
                                  "GIT_ASKPASS", "KEYBOARD_LAYOUT", "LC_ALL", "PYTHONPATH"])
def test_ordinary_names_pass(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize("value, secret", [
    ("postgres://u:p@db/x", True), ("redis://:pw@cache:6379", True),
    ("Bearer abcdefghijkl", True), ("AKIAABCDEFGHIJKLMNOP", True),
    ("xoxb-1234567890-abc", True), ("glpat-abcdefghijklmnopqrstu", True),
    ("http://proxy:3128", False), ("ssh://git@host:22/repo", False), ("/usr/bin:/bin", False),
    ("en_US.UTF-8", False),
])
def test_credential_values_are_denied(value: str, secret: bool) -> None:
    assert is_secret_value(value) is secret


def test_a_key_is_denied_under_any_name() -> None:
    environ = {"MODEL_ACCESS": "k" * 40, "COPY": "x" * 3 + "k" * 40, "SHORT": "ab", "LANG": "C"}
    assert inheritable_env(environ, extra_deny=["MODEL_ACCESS", "SHORT"]) == {"LANG": "C"}
    with pytest.raises(SecretEnvError, match=r"^COPY is refused: its value holds the API key "
                                             r"in MODEL_ACCESS"):
        guest_env(environ, {"COPY": None}, inherit=False, extra_deny=["MODEL_ACCESS"])


def test_pass_through_semantics() -> None:
    environ = {"GITHUB_TOKEN": "t", "LANG": "C"}
    # Named: exactly that one (unset names stay unset); values win over the host's.
    assert guest_env(environ, {"GITHUB_TOKEN": None, "UNSET": None}, inherit=False) == {
        "GITHUB_TOKEN": "t"}
    assert guest_env(environ, {"GITHUB_TOKEN": "mine"}, inherit=True) == {
        "GITHUB_TOKEN": "mine", "LANG": "C"}
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_KEY_VAR"):
        with pytest.raises(SecretEnvError, match=f"^{name} is refused: it holds a backend's"):
            guest_env({**environ, name: "v"}, {name: None}, inherit=True,
                      extra_deny=["MY_KEY_VAR"])
        # Typed out by the operator, it is theirs to give.
        assert guest_env(environ, {name: "given"}, inherit=False) == {name: "given"}


# ---- the attack, through Host.run -----------------------------------------------------


def test_inheriting_guest_sees_no_secret(operator_env: None) -> None:
    with Host(cache_dir=None) as host:
        inherited = dump(host.run(WASI, invoke="env_dump", inherit_env=True))
        one = dump(host.run(WASI, invoke="env_dump", inherit_env=True,
                            env={"GITHUB_TOKEN": None}))
        alone = dump(host.run(WASI, invoke="env_dump", env={"HF_TOKEN": None, "A": "1"}))
    assert not SECRETS.keys() & inherited.keys()
    assert [name for name, value in inherited.items() if TAG in value] == []
    assert {name: inherited.get(name) for name in ORDINARY} == ORDINARY
    assert "PATH" in inherited
    # --env NAME adds exactly that one variable, deny-list or not.
    assert one == {**inherited, "GITHUB_TOKEN": SECRETS["GITHUB_TOKEN"]}
    assert alone == {"HF_TOKEN": SECRETS["HF_TOKEN"], "A": "1"}


def test_a_backend_key_asked_for_by_name_is_refused(operator_env: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_ACCESS", f"model-{TAG}-0123456789")
    with Host(cache_dir=None, api_key_env="MODEL_ACCESS") as host:
        for name in ("MODEL_ACCESS", "OPENAI_API_KEY"):
            with pytest.raises(SecretEnvError, match=f"^{name} is refused"):
                host.run(WASI, invoke="env_dump", env={name: None})
        # The configured key variable is withheld although its name looks harmless.
        assert "MODEL_ACCESS" not in dump(host.run(WASI, invoke="env_dump", inherit_env=True))
        given = dump(host.run(WASI, invoke="env_dump", env={"MODEL_ACCESS": "explicit"}))
    assert given == {"MODEL_ACCESS": "explicit"}


# ---- the attack, through `spearpy run` --------------------------------------------------


def _cli(tmp_path: Path, *flags: str, extra_env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[bytes]:
    guest = tmp_path / "env.wasm"
    guest.write_bytes(WASI)
    env = {**os.environ, **SECRETS, **ORDINARY, **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "spearpy", "run", "--no-cache", *flags,
                           "--invoke", "env_dump", str(guest)],
                          capture_output=True, env=env, cwd=ROOT, timeout=120, check=False)


def test_cli_env_inherit_and_env_name(tmp_path: Path) -> None:
    done = _cli(tmp_path, "--env-inherit", "--env", "NPM_TOKEN", "--env", "UNSET_NAME",
                "--env", "X=1")
    assert done.returncode == 0, done.stderr
    seen = {k: v for k, _, v in (i.partition("=") for i in done.stdout.decode().split("\0") if i)}
    assert [name for name, value in seen.items() if TAG in value] == ["NPM_TOKEN"]
    assert seen["NPM_TOKEN"] == SECRETS["NPM_TOKEN"] and seen["X"] == "1"
    assert "UNSET_NAME" not in seen and seen["LANG"] == "C.UTF-8"
    assert TAG.encode() not in done.stderr


@pytest.mark.parametrize("flags, message", [
    (("--env", "OPENAI_API_KEY"), "OPENAI_API_KEY is refused: it holds a backend's API key"),
    (("--api-key-env", "MODEL_ACCESS", "--env-inherit", "--env", "MODEL_ACCESS"),
     "MODEL_ACCESS is refused: it holds a backend's API key"),
    (("--env", "=x"), "expected K=V or NAME, got '=x'"),
])
def test_cli_refusals_name_the_variable(tmp_path: Path, flags: tuple[str, ...],
                                        message: str) -> None:
    done = _cli(tmp_path, *flags, extra_env={"MODEL_ACCESS": "m" * 20})
    assert done.returncode == 2
    assert f"Invalid value for --env: {message}" in done.stderr.decode()
    assert done.stdout == b""  # the guest never ran
