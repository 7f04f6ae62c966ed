"""Drive a guest's exports directly, with the hostcalls bound to a real GuestRun."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import wasmtime

from spearpy import abi
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.testing.instance import LiveInstance

WAT_DIR = Path(__file__).parent / "wat"


def wat_module(name: str, replace: dict[str, str] | None = None) -> bytes:
    text = (WAT_DIR / name).read_text()
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    return bytes(wasmtime.wat2wasm(text))


class Probe(LiveInstance):
    """One instantiated guest whose exports tests call as if they were the guest."""

    # Scratch areas in guest memory (the probe's memory is 4 pages; heap at 128 KiB).
    A, B, C, D = 1024, 8192, 16384, 65536

    def __init__(self, host: Host, wasm: bytes, options: RunOptions | None = None) -> None:
        super().__init__(host, host.load(wasm), options)

    def hc(self, name: str, *args: int) -> Any:
        return self.call(f"p_{name}", *args)

    def put(self, ptr: int, data: bytes | str) -> tuple[int, int]:
        raw = data.encode() if isinstance(data, str) else data
        self.run.memory.write(ptr, raw)
        return ptr, len(raw)

    def get(self, ptr: int, length: int) -> bytes:
        return self.run.memory.read(ptr, length)

    def u32(self, ptr: int, value: int | None = None) -> int:
        if value is not None:
            self.run.memory.write(ptr, struct.pack("<I", value))
        return int(struct.unpack("<I", self.run.memory.read(ptr, 4))[0])

    # ---- conveniences over the raw ABI -------------------------------------

    def write_msg(self, fd: int, role: str, content: str) -> int:
        rp, rl = self.put(self.A, role)
        cp, cl = self.put(self.B, content)
        return int(self.hc("cchat_write_msg", fd, rp, rl, cp, cl))

    def set_param(self, fd: int, key: str, value: Any) -> int:
        ptr, length = self.put(self.B, json.dumps({"key": key, "value": value}))
        self.u32(self.A, length)
        return int(self.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, self.A))

    def write_fn(self, fd: int, index: int, schema: dict[str, Any] | str) -> int:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        ptr, length = self.put(self.B, text)
        return int(self.hc("cchat_write_fn", fd, index, ptr, length))

    def recv(self, rfd: int, capacity: int = 60000) -> tuple[int, bytes]:
        self.u32(self.A, capacity)
        rc = int(self.hc("cchat_recv", rfd, self.D, self.A))
        return rc, (self.get(self.D, rc) if rc > 0 else b"")

    def recv_json(self, rfd: int) -> dict[str, Any]:
        rc, body = self.recv(rfd)
        assert rc > 0, rc
        value: dict[str, Any] = json.loads(body)
        return value



def tool_schema(name: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": properties or {}}}}
