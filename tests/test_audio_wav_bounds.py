"""A WAV header is input: no field of it sizes an allocation (issue 29, hole 4).

A guest with a writable --dir wrote a sparse WAV whose 44-byte header said
400 MHz and 200 MiB of data, then opened it as a `file` mic source: the
source read `rate * 0.25` frames per step and converted them to float in
one block, 1.38 GB of resident memory under 1 MiB audio, host and memory
limits. Now every header field is checked against what real audio has
(spearpy.audio.wavheader) and each decoding step is a fixed size
(spearpy.audio.wavfile.STEP_BYTES), whatever the header says.

The attacks run in processes of their own under RLIMIT_DATA
(tests/wav_attack.py), measured from just before the set-param to the peak.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.audio import wavheader
from spearpy.context import RunOptions
from spearpy.observe.events import AUDIO_CLOSE, Event
from tests.mic_support import MicCtl
from tests.probe import wat_module
from tests.wav_attack import LIMIT

ROOT = Path(__file__).resolve().parents[1]
# What one attack may add to the process's peak: a step's arrays and the
# mic's queue are well under it; the reported 400 MHz header took 1.38 GB.
MAX_ADDED = 32 << 20
LEN, OUT, EV = 16, 65536, 32

pytestmark = pytest.mark.usefixtures("no_host_bugs")


def _attack(name: str, mount: Path) -> dict[str, Any]:
    try:
        proc = subprocess.run([sys.executable, "-m", "tests.wav_attack", name, str(mount)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: still running after 120 s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["host_bugs"] == [], report
    assert report["added"] <= MAX_ADDED, f"{name}: the host took {report['added'] >> 20} MiB"
    return report


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA and /proc/self/status")
def test_the_header_bomb_fails_cleanly_and_small(tmp_path: Path) -> None:
    report = _attack("rate_bomb", tmp_path)
    assert report["set_rc"] == abi.EIO and report["frames"] == 0, report
    assert report["status"]["last_error"] == (
        "file source: bomb.wav has a sample rate field of 400000000 Hz in its WAV header, "
        "outside 1000..768000 Hz")


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA and /proc/self/status")
def test_the_widest_header_accepted_plays_in_bounded_steps(tmp_path: Path) -> None:
    """768 kHz, 32 channels of 32 bits, 200 MiB declared and present: legal,
    so it plays, a fixed-size step at a time, into a queue within its share
    of max_host_bytes (SPEAR's 512 KiB default is past that share here)."""
    report = _attack("widest", tmp_path)
    assert report["set_rc"] == 0 and report["frames"] == 20, report
    status = report["status"]
    assert status["last_error"] is None and status["source"] == "file"
    assert status["max_queue_bytes"] == LIMIT // 16


# ---- every field, in process ------------------------------------------------------------


def wav(rate: int = 16000, channels: int = 1, bits: int = 16, *, tag: int = 1,
        align: int | None = None, fmt_tail: bytes = b"", before: bytes = b"",
        after_fmt: bytes = b"", data: bytes = bytes(640), data_len: int | None = None) -> bytes:
    """A WAV file whose every field the caller may set to anything."""
    block = channels * ((bits + 7) // 8) if align is None else align
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block & 0xFFFFFFFF, block,
                      bits) + fmt_tail
    body = (b"WAVE" + before + b"fmt " + struct.pack("<I", len(fmt)) + fmt + after_fmt +
            b"data" + struct.pack("<I", len(data) if data_len is None else data_len) + data)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def chunk(name: bytes, payload: bytes, declared: int | None = None) -> bytes:
    size = len(payload) if declared is None else declared
    return name + struct.pack("<I", size) + payload + b"\0" * (len(payload) & 1)


def extensible(subformat: int) -> bytes:
    """WAVE_FORMAT_EXTENSIBLE's 24 bytes past the 16 of PCM: cbSize, valid
    bits, channel mask, and the sub-format GUID."""
    guid = struct.pack("<H", subformat) + bytes.fromhex("000000001000800000aa00389b71")
    return struct.pack("<HHI", 22, 16, 0) + guid


BAD = [
    ("no_channels", wav(channels=0, align=2), "has a channels field of 0 in its WAV header"),
    ("many_channels", wav(channels=33), "channels field of 33 in its WAV header, outside 1..32"),
    ("slow", wav(rate=999), "sample rate field of 999 Hz in its WAV header, outside 1000..768000"),
    ("fast", wav(rate=768_001), "sample rate field of 768001 Hz"),
    ("no_bits", wav(bits=0, align=2), "bits per sample field of 0 in its WAV header"),
    ("wide_bits", wav(bits=40), "bits per sample field of 40 in its WAV header, outside 1..32"),
    ("align", wav(channels=2, align=2),
     "block align field of 2; 2 channels of 2-byte samples need 4"),
    ("float", wav(tag=3, bits=32), "is not a PCM WAV file (unknown format: 3)"),
    ("ext_float", wav(tag=0xFFFE, fmt_tail=extensible(3)), "WAVE_FORMAT_EXTENSIBLE of a sub"),
    ("short_fmt", wav()[:16] + struct.pack("<I", 14) + wav()[20:34] + wav()[36:],
     "has a fmt chunk of 14 bytes, under the 16 it needs"),
    ("huge_chunk", wav(before=chunk(b"LIST", b"ab", declared=0xFFFFFFF0)),
     "its 'LIST' chunk declares 4294967280 bytes"),
    ("many_chunks", wav(before=chunk(b"junk", b"") * 65), "more than 64 chunks before"),
    ("data_first", b"RIFF\0\0\0\0WAVE" + chunk(b"data", bytes(4)),
     "the data chunk comes before the fmt chunk"),
    ("two_fmt", wav(after_fmt=chunk(b"fmt ", wav()[20:36])), "has two fmt chunks"),
    ("data_past_end", wav(data_len=1 << 30),
     "is truncated: its header declares 1073741824 bytes of audio and the file holds 640"),
]


class WavGuest(MicCtl):
    def drain(self, fd: int) -> bytes:
        """Every byte of the mic until HUP; asserts it never failed."""
        ep = int(self.hc("ep_create"))
        assert self.hc("ep_ctl", ep, abi.EPOLL_CTL_ADD, fd, abi.EPOLLIN) == 0
        got = bytearray()
        while True:
            self.u32(LEN, 8)
            assert self.hc("ep_wait", ep, EV, LEN, -1) == 1
            events = self.u32(EV + 4)
            assert not events & abi.EPOLLERR, self.status(fd)
            if not events & abi.EPOLLIN:
                return bytes(got)
            self.u32(LEN, OUT)
            n = int(self.hc("mic_read", fd, OUT, LEN))
            assert n > 0, n
            got += self.get(OUT, n)


@pytest.fixture
def guest(make_host: Any, tmp_path: Path) -> Iterator[tuple[WavGuest, list[Event]]]:
    events: list[Event] = []
    g = WavGuest(make_host(base_url="http://127.0.0.1:9/v1", mic_pace="fast"),
                 wat_module("wav_files.wat"),
                 RunOptions(capture_output=True, dirs=[(str(tmp_path), "/w")],
                            sinks=[events.append]))
    yield g, events
    for fd, _entry in g.run.fds.entries():
        g.run.fds.close(fd)
    g.close()


@pytest.mark.parametrize(("name", "raw", "why"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_field_fails_the_open_naming_file_and_field(guest: Any, tmp_path: Path,
                                                          name: str, raw: bytes,
                                                          why: str) -> None:
    g, events = guest
    (tmp_path / f"{name}.wav").write_bytes(raw)
    fd = int(g.hc("mic_create"))
    assert g.set(fd, {"source": "file", "path": f"/w/{name}.wav"}) == abi.EIO
    error = g.status(fd)["last_error"]
    assert error.startswith(f"file source: {name}.wav ") and why in error, error
    # The operator's log line: audio_close carries the reason (docs/audio.md).
    assert g.hc("mic_close", fd) == 0
    closes = [e.data for e in events if e.kind == AUDIO_CLOSE]
    assert closes and closes[-1]["last_error"] == error


def test_odd_chunks_extensible_pcm_and_streaming_sizes_still_play(guest: Any,
                                                                  tmp_path: Path) -> None:
    g, _events = guest
    # 8 kHz stereo 24-bit in WAVE_FORMAT_EXTENSIBLE, after an odd-sized chunk
    # (and its pad byte), with a streaming writer's unknown data size.
    samples = bytes(range(96)) * 100  # 1600 frames of 6 bytes
    (tmp_path / "ext.wav").write_bytes(wav(8000, 2, 24, tag=0xFFFE, fmt_tail=extensible(1),
                                           before=chunk(b"LIST", b"odd"), data=samples,
                                           data_len=0xFFFFFFFF))
    fd = int(g.hc("mic_create"))
    assert g.set(fd, {"source": "file", "path": "/w/ext.wav", "sample_rate_hz": 8000,
                      "frame_ms": 10}) == 0
    got = g.drain(fd)
    # 1600 frames at the same rate, mixed to mono pcm16, in whole 160-byte frames.
    assert len(got) == 1600 * 2 and g.status(fd)["ended"] is True


def test_a_step_is_bounded_whatever_the_rates() -> None:
    from spearpy.audio.params import MicFormat
    from spearpy.audio.wavfile import STEP_BYTES, step_frames

    out = MicFormat(sample_rate_hz=384_000, channels=8, frame_ms=20)
    for rate, channels, width in ((wavheader.RATE_MIN, 1, 1), (wavheader.RATE_MAX, 32, 4),
                                  (44100, 2, 3)):
        frames = step_frames(rate, channels, width, out)
        assert frames >= 1
        # Raw bytes, their float copy and the resampled output all fit a step.
        assert frames * channels * max(width, 4) <= STEP_BYTES
        assert frames * out.sample_rate_hz / rate * out.channels * 4 <= STEP_BYTES
