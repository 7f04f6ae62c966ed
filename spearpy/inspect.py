"""What a module imports and exports, and whether spearpy can run it.

Every import gets a status:
- "implemented": a spear hostcall spearpy implements, or a WASI preview 1
  function (wasmtime's WASI, with spearpy's own poll_oneoff/clock_time_get);
- "unknown": nothing provides it: the module cannot be instantiated.
"""

from __future__ import annotations

from typing import Any, Final

import wasmtime

from spearpy import abi
from spearpy.errors import ModuleLoadError
from spearpy.hostcalls import HOSTCALLS

_WASI = "wasi_snapshot_preview1"
IMPLEMENTED, UNKNOWN = "implemented", "unknown"

# Every function of WASI preview 1 (wasmtime links them all).
WASI_PREVIEW1: Final = frozenset({
    "args_get", "args_sizes_get", "environ_get", "environ_sizes_get", "clock_res_get",
    "clock_time_get", "fd_advise", "fd_allocate", "fd_close", "fd_datasync", "fd_fdstat_get",
    "fd_fdstat_set_flags", "fd_fdstat_set_rights", "fd_filestat_get", "fd_filestat_set_size",
    "fd_filestat_set_times", "fd_pread", "fd_prestat_get", "fd_prestat_dir_name", "fd_pwrite",
    "fd_read", "fd_readdir", "fd_renumber", "fd_seek", "fd_sync", "fd_tell", "fd_write",
    "path_create_directory", "path_filestat_get", "path_filestat_set_times", "path_link",
    "path_open", "path_readlink", "path_remove_directory", "path_rename", "path_symlink",
    "path_unlink_file", "poll_oneoff", "proc_exit", "proc_raise", "sched_yield", "random_get",
    "sock_accept", "sock_recv", "sock_send", "sock_shutdown",
})


def _signature(ty: object) -> str:
    if isinstance(ty, wasmtime.FuncType):
        params = ",".join(str(p) for p in ty.params)
        results = ",".join(str(r) for r in ty.results)
        return f"({params})->({results})"
    return type(ty).__name__


def _expected_signature(name: str) -> str:
    params, results, _fn = HOSTCALLS[name]
    return f"({','.join(params)})->({','.join(results)})"


def import_status(module: str, name: str) -> str:
    if module == abi.IMPORT_MODULE:
        return IMPLEMENTED if name in HOSTCALLS else UNKNOWN
    if module == _WASI:
        return IMPLEMENTED if name in WASI_PREVIEW1 else UNKNOWN
    return UNKNOWN


def _check_import(module: str, name: str, signature: str, status: str) -> str | None:
    if status == UNKNOWN and module == abi.IMPORT_MODULE:
        return f"imports spear.{name}, which spearpy does not provide"
    if status == UNKNOWN and module == _WASI:
        return f"imports {_WASI}.{name}, which is not a WASI preview 1 function"
    if status == UNKNOWN:
        return f"imports {module}.{name}; only `spear` and WASI preview 1 are provided"
    if module == abi.IMPORT_MODULE and signature != _expected_signature(name):
        return (f"spear.{name} is imported as {signature}, spearpy provides "
                f"{_expected_signature(name)}")
    return None


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
        status = import_status(item.module, name)
        problem = _check_import(item.module, name, signature, status)
        if problem is not None:
            problems.append(problem)
        if item.module == abi.IMPORT_MODULE:
            spear_imports.append({"name": name, "signature": signature, "status": status,
                                  "provided": status != UNKNOWN})
        else:
            other_imports.append({"module": item.module, "name": item.name,
                                  "signature": signature, "status": status})
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
    return {
        "exports_memory": any(e["kind"] == "memory" for e in exports),
        "funcref_table": table_name,
        "allocator": {"spear_alloc", "spear_free"} <= names,
        "has_start": "_start" in names,
        "spear_imports": spear_imports,
        "other_imports": other_imports,
        "exports": exports,
        "problems": problems,
        "runnable": not problems,
    }
