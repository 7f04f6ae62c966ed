"""Compiled modules: the LoadedModule handle `Host.load` returns, and the
steps that make one (compile through the disk cache, carry one over from
another engine, check its imports and link it). The in-memory cache of them
is modcache.py; `Host.load` decides which step a module needs."""

from __future__ import annotations

import importlib.metadata
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import wasmtime

from spearpy import abi
from spearpy._files import atomic_write
from spearpy.errors import ModuleLoadError
from spearpy.hostcalls import HOSTCALLS

_WASI_MODULES = frozenset({"wasi_snapshot_preview1"})
# Compiled artifacts are only valid for the wasmtime that made them.
_WASMTIME_VERSION = f"wasmtime{importlib.metadata.version('wasmtime')}"
# wasmtime checks a serialized module's header, not its code: a file with
# damaged blocks in the middle (a power cut after the unsynced write below,
# bit rot) deserialized and segfaulted the host at its first call. Each file
# ends with the CRC-32 of the code before it, checked before wasmtime maps
# the file (which ignores bytes past the code's sections). A CRC, not a
# cryptographic hash: it is there to catch damage (0.14 ms for 600 KB, SHA-256
# 0.34); whoever can write the cache can write a matching digest anyway.
# ".v2" keeps files of the old layout (no CRC) from being read.
_CRC = struct.Struct("<I")
_SUFFIX = ".v2.cwasm"


@dataclass(frozen=True, slots=True)
class LoadedModule:
    """A compiled module, ready to instantiate in any number of stores."""

    name: str
    sha256: str
    module: wasmtime.Module
    pre: wasmtime.InstancePre
    engine: wasmtime.Engine
    from_disk_cache: bool = False


def compile_module(engine: wasmtime.Engine, wasm: bytes, digest: str,
                   cache_dir: Path | None) -> tuple[wasmtime.Module, bool, int]:
    """The compiled module, whether it came from the disk cache, and the
    bytes of its serialized code (what the in-memory cache weighs)."""
    path = None if cache_dir is None else \
        cache_dir / "modules" / f"{digest}-{_WASMTIME_VERSION}{_SUFFIX}"
    if path is not None and path.is_file():
        try:
            size = _intact_code_size(path.read_bytes())
            if size is not None:
                return wasmtime.Module.deserialize_file(engine, str(path)), True, size
        except (wasmtime.WasmtimeError, OSError):
            pass  # stale or foreign artifact: recompile and overwrite
    try:
        compiled = wasmtime.Module(engine, wasm)
    except wasmtime.WasmtimeError as exc:
        raise ModuleLoadError.invalid(wasm, exc) from exc
    # A copy of the code, ~1 ms for 0.5 MB of wasm whose compile took ~400.
    code = compiled.serialize()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A concurrent reader never sees half a file; the cache can be
            # rebuilt, so it is not worth an fsync.
            atomic_write(path, code + _CRC.pack(zlib.crc32(code)), durable=False)
        except OSError:
            pass  # the cache is an optimisation; a read-only home must not fail runs
    return compiled, False, len(code)


def _intact_code_size(data: bytes) -> int | None:
    """The length of a cache file's code, None when the file is torn or
    damaged (its CRC does not match): then it is compiled and written again."""
    size = len(data) - _CRC.size
    if size <= 0 or zlib.crc32(memoryview(data)[:size]) != _CRC.unpack_from(data, size)[0]:
        return None
    return size


def carry_over(engine: wasmtime.Engine, module: LoadedModule) -> tuple[wasmtime.Module, int]:
    """A handle from another Host: its code is reusable, its engine is not.
    The module on `engine`, and the bytes of its serialized code."""
    code = module.module.serialize()
    try:
        return wasmtime.Module.deserialize(engine, code), len(code)
    except wasmtime.WasmtimeError as exc:
        raise ModuleLoadError(_first_line(exc)) from exc


def link(linker: wasmtime.Linker, compiled: wasmtime.Module) -> wasmtime.InstancePre:
    _check_imports(compiled)
    try:
        return linker.instantiate_pre(compiled)
    except wasmtime.WasmtimeError as exc:
        raise ModuleLoadError(_first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_imports(module: wasmtime.Module) -> None:
    """Name the import a module needs and spearpy lacks, before wasmtime's
    less direct link error."""
    for item in module.imports:
        if item.module == abi.IMPORT_MODULE and item.name not in HOSTCALLS:
            raise ModuleLoadError(
                f"the module imports spear.{item.name}, which spearpy does not provide")
        if item.module not in _WASI_MODULES and item.module != abi.IMPORT_MODULE:
            raise ModuleLoadError(
                f"the module imports {item.module}.{item.name}; spearpy provides only the "
                "`spear` module and WASI preview 1")
