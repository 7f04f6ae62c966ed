"""The arrows of docs/architecture.md, checked on the source: no import cycle
(function-level imports included; only TYPE_CHECKING blocks are exempt), and
the rooms that must stay free of I/O or of the run core do."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spearpy"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module imported outside `if TYPE_CHECKING:` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.add(child.module)
                found.update(f"{child.module}.{alias.name}" for alias in child.names)
            elif isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


GRAPH = {_module(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def _internal(module: str) -> set[str]:
    return {name for name in GRAPH[module] if name in GRAPH and name != module}


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in _internal(node):
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            strong(node)
    assert cycles == []


@pytest.mark.parametrize(("room", "forbidden"), [
    ("spearpy.chat", ("wasmtime", "httpx", "spearpy.instance", "spearpy.hostcalls",
                      "spearpy.backends", "spearpy.mcp", "spearpy.driver")),
    ("spearpy.fds", ("wasmtime", "httpx", "spearpy.instance", "spearpy.hostcalls")),
    ("spearpy.backends", ("wasmtime", "spearpy.instance", "spearpy.hostcalls",
                          "spearpy.driver", "spearpy.testing")),
    ("spearpy.observe", ("wasmtime", "spearpy.instance", "spearpy.hostcalls",
                         "spearpy.driver", "click")),
    ("spearpy.serve", ("spearpy.chat.loop", "spearpy.driver", "spearpy.hostcalls",
                       "spearpy.batch")),
    # The entry points share spearpy.executors, never each other's internals;
    # the executors serve every entry point and know none of them.
    ("spearpy.batch", ("spearpy.serve", "spearpy.cli")),
    ("spearpy.executors", ("spearpy.batch", "spearpy.serve", "spearpy.cli")),
    # What every HTTP surface shares sits below them all: `mcp serve` reaches
    # it without reaching into `spearpy serve`.
    ("spearpy.mcp", ("spearpy.serve", "spearpy.cli")),
    ("spearpy.web", ("spearpy.serve", "spearpy.mcp", "spearpy.cli", "spearpy.host",
                     "spearpy.instance", "wasmtime")),
    # Audio sources and ASR connections run on their own threads: they reach a
    # run only through the fd that owns them, never its store or hostcalls.
    ("spearpy.audio", ("wasmtime", "spearpy.instance", "spearpy.hostcalls", "spearpy.driver")),
    ("spearpy.asr", ("wasmtime", "spearpy.instance", "spearpy.hostcalls", "spearpy.driver")),
])
def test_rooms_keep_to_their_side(room: str, forbidden: tuple[str, ...]) -> None:
    offenders = sorted(
        f"{module} imports {name}"
        for module, names in GRAPH.items() if module == room or module.startswith(room + ".")
        for name in names if any(name == f or name.startswith(f + ".") for f in forbidden))
    assert offenders == []


def test_only_the_mcp_package_imports_the_sdk() -> None:
    offenders = sorted(module for module, names in GRAPH.items()
                       if not module.startswith("spearpy.mcp")
                       and any(n == "mcp" or n.startswith("mcp.") for n in names))
    assert offenders == []
