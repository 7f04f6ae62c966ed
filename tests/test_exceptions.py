"""Every exception spearpy raises to a caller is a SpearpyError (keeping its
builtin base where callers expect one): `except SpearpyError` catches them
all. Checked on the source, so a new class cannot slip by."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from spearpy import errors

PACKAGE = Path(__file__).resolve().parents[1] / "spearpy"
_BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                       if isinstance(value, type) and issubclass(value, BaseException)}


def _classes() -> dict[str, tuple[str, list[str]]]:
    """Every class of the package: name -> (where, names of its bases)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                # A dotted base (httpx.StreamError) is another library's class.
                bases = [ast.unparse(b) for b in node.bases]
                found.setdefault(node.name, (str(path.relative_to(PACKAGE)), bases))
    return found


CLASSES = _classes()


def _is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
    if name in _BUILTIN_EXCEPTIONS or (name.endswith(("Error", "Exception")) and "." in name):
        return True
    if name not in CLASSES or name in seen:
        return False
    return any(_is_exception(base, seen | {name}) for base in CLASSES[name][1])


def _derives_from_spearpy_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
    if name == "SpearpyError":
        return True
    if name not in CLASSES or name in seen:
        return False
    return any(_derives_from_spearpy_error(b, seen | {name}) for b in CLASSES[name][1])


PUBLIC_EXCEPTIONS = sorted(name for name in CLASSES
                           if not name.startswith("_") and _is_exception(name))


def test_the_check_finds_the_exceptions() -> None:
    assert {"ModuleLoadError", "HostInterrupt", "McpError", "SsfError",
            "ResponseTooLarge"} <= set(PUBLIC_EXCEPTIONS)
    assert len(PUBLIC_EXCEPTIONS) > 40


@pytest.mark.parametrize("name", PUBLIC_EXCEPTIONS)
def test_every_public_exception_is_a_spearpy_error(name: str) -> None:
    assert _derives_from_spearpy_error(name), f"{name} ({CLASSES[name][0]})"


def test_the_base_keeps_builtin_bases_callers_expect() -> None:
    from spearpy.errors import ConfigError
    from spearpy.secret_env import SecretEnvError
    from spearpy.streams.ssf import SsfError

    for cls in (ConfigError, SecretEnvError, SsfError):
        assert issubclass(cls, errors.SpearpyError) and issubclass(cls, ValueError)
