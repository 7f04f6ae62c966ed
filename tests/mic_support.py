"""What the microphone tests share: espeak-ng speech, the c_mic_read guest
(and its Rust twin rust_mic_read, which prints the same lines) and the
reading of its summary lines."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.probe import Probe

ROOT = Path(__file__).resolve().parents[1]
GUEST = ROOT / "wasm-samples" / "c_mic_read.wasm"
GUESTS = [GUEST, ROOT / "wasm-samples" / "rust_mic_read.wasm"]
HANG_GUARD_S = 120  # only against a hung host; nothing asserts on time


needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                  reason="espeak-ng missing: bash tools/setup.sh --toolchains")


def make_speech(path: Path, text: str = "the quick brown fox jumps over the lazy dog") -> Path:
    """A real speech WAV (espeak-ng: 22050 Hz mono PCM16)."""
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, timeout=HANG_GUARD_S)
    return path


def fnv(data: bytes) -> str:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return f"{h:08x}"


def run_guest(*args: str, host_args: tuple[str, ...] = (),
              guest: Path = GUEST) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "spearpy", "run", "--quiet", "--no-cache", *host_args,
           str(guest), "--", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                          check=False)


def summary(stdout: str) -> dict[str, Any]:
    fields = next(line for line in stdout.splitlines() if line.startswith("frames ")).split()
    out: dict[str, Any] = {k: int(v) for k, v in zip(fields[0::2], fields[1::2], strict=True)
                           if k != "fnv"}
    out["fnv"] = fields[-1]
    out["end"] = next(line for line in stdout.splitlines() if line.startswith("end: "))[5:]
    out["status"] = json.loads(next(line for line in stdout.splitlines()
                                    if line.startswith("status: "))[8:])
    return out


class MicCtl(Probe):
    """mic_ctl's set-param and get-status called as the guest would (its
    memory: the JSON at PARAMS, its length at LEN, the status at OUT)."""

    PARAMS, LEN, OUT = 1024, 16, 65536

    def set(self, fd: int, params: dict[str, Any] | str) -> int:
        raw = (params if isinstance(params, str) else json.dumps(params)).encode()
        self.run.memory.write(self.PARAMS, raw)
        self.u32(self.LEN, len(raw))
        return int(self.hc("mic_ctl", fd, 1, self.PARAMS, self.LEN))

    def status(self, fd: int) -> dict[str, Any]:
        self.u32(self.LEN, 60000)
        n = int(self.hc("mic_ctl", fd, 2, self.OUT, self.LEN))
        assert n > 0, n
        value: dict[str, Any] = json.loads(self.get(self.OUT, n))
        return value
