"""One hostile WAV file, written by the guest and opened as its microphone,
in a process of its own under a memory rlimit.

`python -m tests.wav_attack NAME DIR` runs a guest (tests/wat/wav_files.wat)
with DIR mounted writable at /w: it writes a 44-byte WAV header and grows
the file, sparse, to 200 MiB of "audio", opens it as a `file` mic source and
reads a few frames. It prints a JSON line: the set-param's result, the
frames read, the mic's status, and how much the process's resident memory
grew from just before the set-param to its peak. Run by
tests/test_audio_wav_bounds.py, which judges the line; a process of its own
so the peak is this attack's alone, and so an unbounded allocation meets the
rlimit instead of the machine (see tests/limits_attack.py on RLIMIT_DATA).
"""

from __future__ import annotations

import json
import resource
import struct
import sys
import time
from typing import Any

RLIMIT_BYTES = 1 << 30
LIMIT = 1 << 20  # --max-audio-bytes, --max-host-bytes and --max-memory of the report
DATA_BYTES = 200 << 20
FRAMES = 20
WAIT_S = 30.0  # only against a hung mic; the attack ends long before
# (sample rate, channels, bits) each header declares.
HEADERS = {
    "rate_bomb": (400_000_000, 1, 16),  # the report's: 400 MHz
    "widest": (768_000, 32, 32),  # every field at its largest accepted value
}
PATH, LEN, OUT, EV = 1024, 16, 65536, 32


def wav_header(rate: int, channels: int, bits: int, data_bytes: int) -> bytes:
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block & 0xFFFFFFFF, block, bits)
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", data_bytes))


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise LookupError(field)


def main(name: str, mount: str) -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (RLIMIT_BYTES, RLIMIT_BYTES))
    import wasmtime  # noqa: F401  (loaded before the baseline, as everything below)

    import spearpy.audio.select  # noqa: F401  (numpy and soxr: the mic's imports)
    from spearpy import abi
    from spearpy.context import RunOptions
    from spearpy.host import Host
    from tests.probe import Probe, wat_module

    host = Host(cache_dir=None, model="m", base_url="http://127.0.0.1:9/v1", max_retries=0,
                mic_pace="fast", max_audio_bytes=LIMIT, max_host_bytes=LIMIT, max_memory=LIMIT)
    p = Probe(host, wat_module("wav_files.wat"),
              RunOptions(capture_output=True, dirs=[(mount, "/w")]))
    bugs: list[str] = []
    p.run.note_host_bug = lambda where, exc: bugs.append(f"{where}: {exc!r}")  # type: ignore[method-assign]

    # The guest writes the file: header, then a sparse grow to its declared size.
    header = wav_header(*HEADERS[name], DATA_BYTES)
    path, path_len = p.put(PATH, "bomb.wav")
    oflags = 1 | 8  # O_CREAT | O_TRUNC
    assert p.hc("path_open", 3, 0, path, path_len, oflags, (1 << 29) - 1, 0, 0, 0) == 0
    fd = p.u32(0)
    p.put(2048, header)
    p.u32(8, 2048)
    p.u32(12, len(header))
    assert p.hc("fd_write", fd, 8, 1, 4) == 0 and p.u32(4) == len(header)
    assert p.hc("fd_filestat_set_size", fd, len(header) + DATA_BYTES) == 0
    assert p.hc("fd_close", fd) == 0

    params = json.dumps({"source": "file", "path": "/w/bomb.wav", "sample_rate_hz": 16000,
                         "frame_ms": 20}).encode()
    mic = int(p.hc("mic_create"))
    p.put(PATH, params)
    p.u32(LEN, len(params))
    ep = int(p.hc("ep_create"))
    assert p.hc("ep_ctl", ep, abi.EPOLL_CTL_ADD, mic, abi.EPOLLIN) == 0
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak (VmHWM) starts again from here
    baseline = _status_kib("VmRSS:")
    started = time.monotonic()
    set_rc = int(p.hc("mic_ctl", mic, 1, PATH, LEN))
    frames, events = 0, 0
    while set_rc == 0 and frames < FRAMES and time.monotonic() - started < WAIT_S:
        p.u32(LEN, 8)
        if p.hc("ep_wait", ep, EV, LEN, 1000) != 1:
            continue
        events = p.u32(EV + 4)
        if not events & abi.EPOLLIN:
            break
        p.u32(LEN, OUT)
        if p.hc("mic_read", mic, OUT, LEN) > 0:
            frames += 1
    p.u32(LEN, 4096)
    n = int(p.hc("mic_ctl", mic, 2, OUT, LEN))
    status: Any = json.loads(p.get(OUT, n)) if n > 0 else n
    added = (_status_kib("VmHWM:") - baseline) << 10
    print(json.dumps({"set_rc": set_rc, "frames": frames, "events": events, "status": status,
                      "added": added, "elapsed": time.monotonic() - started,
                      "host_bugs": bugs}))
    sys.stdout.flush()
    for entry_fd, _entry in p.run.fds.entries():
        p.run.fds.close(entry_fd)  # stops the pump's thread before the interpreter ends
    p.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
