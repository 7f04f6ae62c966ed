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


# The rooms of docs/architecture.md, top to bottom. A module belongs to the
# longest prefix listed; it may import (at module or function level) its own
# rank and anything below, never above. TYPE_CHECKING imports are types only
# and exempt here (but see the next test).
ORDER: tuple[tuple[str, ...], ...] = (
    # entry points: flags, HTTP, many inputs, embedding, tests' helpers
    ("spearpy", "spearpy.__main__", "spearpy.cli", "spearpy.serve", "spearpy.batch",
     "spearpy.testing", "spearpy.build", "spearpy.scaffold", "spearpy.show", "spearpy.inspect",
     "spearpy.mcp.serve"),
    ("spearpy.executors",),
    ("spearpy.host", "spearpy.embed", "spearpy.engine", "spearpy.modload", "spearpy.modcache"),
    ("spearpy.instance", "spearpy.wasi_runtime", "spearpy.endings"),
    ("spearpy.hostcalls",),
    ("spearpy.driver",),
    ("spearpy.tools", "spearpy.mcp", "spearpy.backends", "spearpy.guestcall", "spearpy.web",
     "spearpy.durable"),
    ("spearpy.context", "spearpy.config"),
    ("spearpy.fds.stream", "spearpy.fds.mic", "spearpy.fds.rtasr"),
    ("spearpy.audio", "spearpy.asr"),
    ("spearpy.streams",),
    ("spearpy.chat",),
    ("spearpy.interrupts",),
    ("spearpy.fds",),
    ("spearpy.memory", "spearpy._native"),
    ("spearpy.journal",),
    ("spearpy.observe",),
    ("spearpy._json", "spearpy._jsondiff", "spearpy.abi", "spearpy.outcome",
     "spearpy.secret_env", "spearpy.scratch", "spearpy.errors", "spearpy._files",
     "spearpy._lazy", "spearpy._term", "spearpy.capture", "spearpy.config_file",
     "spearpy.spear_config",
     "spearpy.retry", "spearpy.logring", "spearpy.loopback"),
)


def _rank(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, rank from the bottom)
    for index, rooms in enumerate(ORDER):
        for prefix in rooms:
            inside = module == prefix or (prefix != "spearpy" and module.startswith(prefix + "."))
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), len(ORDER) - index)
    return None if best is None else best[1]


def _upward(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, names in graph.items():
        low = _rank(module)
        for name in _internal_of(graph, module, names):
            high = _rank(name)
            if low is not None and high is not None and high > low:
                found.append(f"{module} imports {name}, a room above it")
    return sorted(found)


def _internal_of(graph: dict[str, set[str]], module: str, names: set[str]) -> set[str]:
    return {n for n in names if n in graph and n != module and not module.startswith(n + ".")}


def test_every_module_has_a_room() -> None:
    assert sorted(m for m in GRAPH if _rank(m) is None) == []


def test_no_module_imports_a_room_above_it() -> None:
    assert _upward(GRAPH) == []


def test_the_order_check_sees_an_upward_import() -> None:
    # The check itself: a hostcall importing the Host would be caught.
    planted = {**GRAPH, "spearpy.hostcalls.system":
               GRAPH["spearpy.hostcalls.system"] | {"spearpy.host"}}
    assert _upward(planted) == [
        "spearpy.hostcalls.system imports spearpy.host, a room above it"]


BELOW_THE_RUN = ("spearpy.hostcalls", "spearpy.driver", "spearpy.tools", "spearpy.mcp",
                 "spearpy.fds", "spearpy.audio", "spearpy.asr", "spearpy.chat",
                 "spearpy.backends", "spearpy.context", "spearpy.guestcall")


def _everything_imported(path: Path) -> set[str]:
    """Every module imported, TYPE_CHECKING blocks included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _reaches_the_host(path: Path) -> list[str]:
    """`<a run>.host` attribute reads: the Host reached through a run."""
    return [ast.unparse(node) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Attribute) and node.attr == "host"
            and ast.unparse(node.value).rsplit(".", 1)[-1].lstrip("_") in ("run", "ctx")]


def test_nothing_below_the_host_knows_the_host_or_the_instance() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        if not any(module == r or module.startswith(r + ".") for r in BELOW_THE_RUN) or \
                module == "spearpy.mcp.serve":
            continue
        offenders += [f"{module} imports {name}" for name in sorted(_everything_imported(path))
                      if name in ("spearpy.host", "spearpy.instance")]
        offenders += [f"{module} reads {expr}" for expr in _reaches_the_host(path)]
    assert offenders == []
