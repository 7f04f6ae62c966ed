"""`spearpy new`: a guest project that builds and runs as it is written.

Projects are made from the templates in spearpy/data/templates/ and the
guest SDK shipped with the package (spearpy/data/sdk/): the header or the
crate is copied in, so the project needs no spearpy checkout and builds
offline.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from spearpy.build.sdk import c_header, rust_crate
from spearpy.errors import SpearpyError

TEMPLATES = Path(__file__).resolve().parent / "data" / "templates"
LANGUAGES = ("c", "rust")
DEFAULT_TOOL = "word_count"

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}\Z")
# The tool's name is a C and Rust function name and an OpenAI function name.
_TOOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,58}\Z")
# Keywords of either language, and names the templates already use.
_RESERVED = frozenset({
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "as", "async", "await", "crate", "dyn",
    "false", "fn", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
    "self", "super", "trait", "true", "type", "unsafe", "use", "where", "abstract", "become",
    "box", "final", "macro", "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
    "main", "json", "tool", "log", "Reply", "Session", "SCHEMA", "std", "core", "alloc", "test",
})
# Renamed on copy: dot-files tend to get lost on the way into a package.
_RENAMES = {"_gitignore": ".gitignore", "_cargo": ".cargo"}
_TEXT_SUFFIXES = {".c", ".h", ".rs", ".toml", ".lock", ".json", ".md", ""}


class ScaffoldError(SpearpyError, ValueError):
    """A name that cannot be used, or a directory that is already taken."""


def check_names(name: str, tool: str) -> None:
    if not _NAME.match(name):
        raise ScaffoldError(f"project name {name!r}: use a letter, then letters, digits, "
                            "'-' or '_' (up to 64)")
    if name.replace("-", "_") in _RESERVED:
        raise ScaffoldError(f"project name {name!r} is reserved (a keyword or a name the "
                            "template uses); pick another")
    if not _TOOL.match(tool):
        raise ScaffoldError(f"tool name {tool!r}: use a letter or '_', then letters, digits "
                            "or '_' (it is a C/Rust function name and the model's tool name)")
    if tool in _RESERVED or tool.startswith(("sp_", "spear_", "__")):
        raise ScaffoldError(f"tool name {tool!r} is reserved (a keyword, an SDK prefix or a "
                            "name the template uses); pick another")


def create(name: str, lang: str, *, tool: str = DEFAULT_TOOL,
           parent: Path = Path(".")) -> tuple[Path, list[Path]]:
    """Write project `name` under `parent`; (its directory, the files written)."""
    if lang not in LANGUAGES:
        raise ScaffoldError(f"language {lang!r}: choose one of {', '.join(LANGUAGES)}")
    check_names(name, tool)
    target = parent / name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"{target} already exists and is not empty; choose another name "
                            "or directory")
    values = {"name": name, "tool": tool, "version": _version()}
    written: list[Path] = []
    source = TEMPLATES / lang
    for path in sorted(source.rglob("*")):
        if path.is_dir():
            continue
        rel = Path(*(_RENAMES.get(part, part) for part in path.relative_to(source).parts))
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix in _TEXT_SUFFIXES:
            dest.write_text(_fill(path.read_text(encoding="utf-8"), values), encoding="utf-8")
        else:
            shutil.copyfile(path, dest)
        written.append(dest)
    if lang == "c":
        dest = target / "spear.h"
        shutil.copyfile(c_header(), dest)
        written.append(dest)
    else:
        src = rust_crate() / "src"
        for path in sorted(src.glob("*.rs")):
            dest = target / "vendor" / "spear-guest" / "src" / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            written.append(dest)
    return target, sorted(written)


def _fill(text: str, values: dict[str, str]) -> str:
    # Only the known placeholders: the scripts' own {{last_tool}} stays as it is.
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spearpy")
    except PackageNotFoundError:
        return "(unknown version)"
