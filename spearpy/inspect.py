"""What a module imports and exports, and whether spearpy can run it."""

from __future__ import annotations

from typing import Any

import wasmtime

from spearpy import abi
from spearpy.errors import ModuleLoadError
from spearpy.hostcalls import HOSTCALLS
from spearpy.hostcalls.unsupported import UNSUPPORTED

_WASI = "wasi_snapshot_preview1"


def _signature(ty: object) -> str:
    if isinstance(ty, wasmtime.FuncType):
        params = ",".join(str(p) for p in ty.params)
        results = ",".join(str(r) for r in ty.results)
        return f"({params})->({results})"
    return type(ty).__name__


def _expected_signature(name: str) -> str:
    params, results, _fn = HOSTCALLS[name]
    return f"({','.join(params)})->({','.join(results)})"


def inspect_module(wasm: bytes) -> dict[str, Any]:
    engine = wasmtime.Engine()
    try:
        module = wasmtime.Module(engine, wasm)
    except wasmtime.WasmtimeError as exc:
        raise ModuleLoadError.invalid(wasm, exc) from exc
    problems: list[str] = []
    spear_imports, other_imports = [], []
    for item in module.imports:
        signature = _signature(item.type)
        name = item.name or ""
        if item.module == abi.IMPORT_MODULE:
            provided = name in HOSTCALLS
            if not provided:
                problems.append(f"imports spear.{name}, which spearpy does not provide")
            elif signature != _expected_signature(name):
                problems.append(f"spear.{name} is imported as {signature}, spearpy "
                                f"provides {_expected_signature(name)}")
            spear_imports.append({"name": name, "signature": signature,
                                  "provided": provided, "enosys": name in UNSUPPORTED})
        else:
            if item.module != _WASI:
                problems.append(f"imports {item.module}.{item.name}; only `spear` and WASI "
                                "preview 1 are provided")
            other_imports.append({"module": item.module, "name": item.name,
                                  "signature": signature})
    exports = []
    table_name = None
    for export in module.exports:
        ty = export.type
        kind = ("func" if isinstance(ty, wasmtime.FuncType) else
                "memory" if isinstance(ty, wasmtime.MemoryType) else
                "table" if isinstance(ty, wasmtime.TableType) else
                "global" if isinstance(ty, wasmtime.GlobalType) else "other")
        exports.append({"name": export.name, "kind": kind,
                        "signature": _signature(ty) if kind == "func" else None})
        if kind == "table" and str(ty.element) == "funcref" and (  # type: ignore[union-attr]
                table_name is None or export.name == "__indirect_function_table"):
            table_name = export.name
    names = {e["name"] for e in exports}
    entry_ok = "_start" in names
    return {
        "exports_memory": any(e["kind"] == "memory" for e in exports),
        "funcref_table": table_name,
        "allocator": {"spear_alloc", "spear_free"} <= names,
        "has_start": entry_ok,
        "spear_imports": spear_imports,
        "other_imports": other_imports,
        "exports": exports,
        "problems": problems,
        "runnable": not problems,
    }
