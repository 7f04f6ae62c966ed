"""The microphone (issue 20 part A): mic_* hostcalls over real sources.

Speech comes from espeak-ng (a real WAV made at test time, 22050 Hz mono),
played through the file source and resampled to 24000 and 16000 Hz. The
hostcalls are driven one by one from Python through a small WAT guest bound
to a real GuestRun (tests/wat/mic_probe.wat); test_audio_mic_guest.py runs
the C guest c_mic_read end to end.
"""

from __future__ import annotations

import base64
import math
import os
import struct
import threading
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.context import RunOptions
from tests.mic_support import MicCtl, needs_espeak
from tests.probe import wat_module

OUT, LEN, PARAMS, EV = 65536, 16, 1024, 32

pytestmark = needs_espeak


def rms(pcm: bytes) -> float:
    samples = struct.unpack(f"<{len(pcm) // 2}h", pcm[:len(pcm) // 2 * 2])
    return math.sqrt(sum(s * s for s in samples) / max(1, len(samples)))


class Mic(MicCtl):
    """The mic hostcalls called as the guest would, on a real GuestRun."""

    def __init__(self, host: Any, options: RunOptions | None = None) -> None:
        super().__init__(host, wat_module("mic_probe.wat"), options)

    def create(self) -> int:
        return int(self.call("p_mic_create"))

    def read(self, fd: int, capacity: int = 200000) -> tuple[int, bytes]:
        self.u32(LEN, capacity)
        rc = int(self.call("p_mic_read", fd, OUT, LEN))
        return rc, (self.run.memory.read(OUT, rc) if rc > 0 else b"")

    def wait(self, fd: int, timeout_ms: int) -> int:
        """The fd's events from a fresh epoll set (0: none within the timeout)."""
        ep = int(self.call("p_ep_create"))
        assert int(self.call("p_ep_ctl", ep, abi.EPOLL_CTL_ADD, fd, abi.EPOLLIN)) == 0
        self.u32(LEN, 8)
        n = int(self.call("p_ep_wait", ep, EV, LEN, timeout_ms))
        return self.u32(EV + 4) if n == 1 else 0

    def drain(self, fd: int) -> list[bytes]:
        """Every frame until EPOLLHUP; asserts the source did not fail."""
        frames = []
        while True:
            events = self.wait(fd, -1)
            assert not events & abi.EPOLLERR, self.status(fd)
            if events & abi.EPOLLIN:
                rc, frame = self.read(fd)
                assert rc > 0, rc
                frames.append(frame)
            elif events & abi.EPOLLHUP:
                return frames


@pytest.fixture
def mic(make_host: Any) -> Iterator[Any]:
    made: list[Mic] = []

    def make(options: RunOptions | None = None, **config: Any) -> Mic:
        m = Mic(make_host(base_url="http://127.0.0.1:9/v1", **config), options)
        made.append(m)
        return m

    yield make
    for m in made:
        for fd, _entry in m.run.fds.entries():
            m.run.fds.close(fd)
        m.close()


def mic_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("spearpy-mic-")]


# ---- the stub ------------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "channels", "ms"), [(16000, 1, 20), (24000, 2, 10),
                                                      (44100, 1, 10), (8000, 1, 1)])
def test_stub_silence_frames_are_exactly_one_frame_long(mic: Any, rate: int, channels: int,
                                                        ms: int) -> None:
    m = mic()
    fd = m.create()
    assert m.set(fd, {"source": "stub", "sample_rate_hz": rate, "channels": channels,
                      "frame_ms": ms}) == 0
    for _ in range(3):
        assert m.wait(fd, -1) & abi.EPOLLIN
        rc, frame = m.read(fd)
        assert rc == rate * channels * 2 * ms // 1000 == len(frame)
        assert frame == bytes(rc)
    status = m.status(fd)
    assert status["running"] is True and status["last_error"] is None
    assert status["config"] == {"sample_rate_hz": rate, "channels": channels, "frame_ms": ms,
                                "format": "pcm16"}
    assert status["generation"] == 1 and status["source"] == "stub"


def test_stub_loops_the_given_pcm_across_frames(mic: Any) -> None:
    pattern = bytes(range(1, 15))  # 14 bytes: frames of 320 cut it anywhere
    m = mic()
    fd = m.create()
    assert m.set(fd, {"source": "stub", "sample_rate_hz": 16000, "frame_ms": 10,
                      "stub_pcm16_base64": base64.b64encode(pattern).decode()}) == 0
    got = b""
    for _ in range(4):
        assert m.wait(fd, -1) & abi.EPOLLIN
        got += m.read(fd)[1]
    assert got == (pattern * (len(got) // len(pattern) + 1))[:len(got)] and len(got) == 1280


def test_bad_params_are_einval_and_other_fds_ebadf(mic: Any) -> None:
    m = mic()
    fd = m.create()
    for bad in ("{not json", {"format": "f32"}, {"sample_rate_hz": 0}, {"channels": 99},
                {"frame_ms": 5000}, {"source": "tape"}, {"stub_pcm16_base64": "***"},
                {"source": "file"}, {"source": "user_stream"}):
        assert m.set(fd, bad) == abi.EINVAL, bad
    assert int(m.call("p_mic_ctl", fd, 9, OUT, LEN)) == abi.EINVAL
    assert m.read(12345)[0] == abi.EBADF and int(m.call("p_mic_close", 12345)) == abi.EBADF
    assert m.read(fd)[0] == abi.EAGAIN  # never configured: nothing queued


# ---- the file source -------------------------------------------------------------------


@pytest.mark.parametrize("rate", [24000, 16000])
def test_speech_is_resampled_into_whole_frames_then_hup(mic: Any, speech: Path,
                                                        rate: int) -> None:
    m = mic(RunOptions(capture_output=True, dirs=[(str(speech.parent), "/audio")]),
            mic_pace="fast")
    fd = m.create()
    assert m.set(fd, {"source": "file", "path": "/audio/speech.wav", "sample_rate_hz": rate,
                      "frame_ms": 20}) == 0
    frames = m.drain(fd)
    frame_bytes = rate * 2 * 20 // 1000
    assert {len(f) for f in frames} == {frame_bytes}
    with wave.open(str(speech)) as w:
        source_frames, source_rate, original = w.getnframes(), w.getframerate(), \
            w.readframes(w.getnframes())
    expected = source_frames * rate / source_rate * 2
    total = sum(len(f) for f in frames)
    assert expected - frame_bytes <= total <= expected + frame_bytes
    # Real speech, not silence nor noise: as loud as the original.
    assert 0.8 < rms(b"".join(frames)) / rms(original) < 1.25
    status = m.status(fd)
    assert status["ended"] is True and status["running"] is False
    assert m.read(fd)[0] == abi.EAGAIN and m.wait(fd, 0) == abi.EPOLLHUP


def test_a_small_buffer_gets_enospc_and_the_frame_stays(mic: Any, speech: Path) -> None:
    m = mic(RunOptions(capture_output=True, dirs=[(str(speech.parent), str(speech.parent))]),
            mic_pace="fast")
    fd = m.create()
    assert m.set(fd, {"source": "file", "path": str(speech), "sample_rate_hz": 16000}) == 0
    assert m.wait(fd, -1) & abi.EPOLLIN
    assert m.read(fd, capacity=10)[0] == abi.ENOSPC and m.u32(LEN) == 640
    first = m.read(fd)[1]
    assert len(first) == 640 and m.read(fd)[1] != first  # kept once, then taken


def test_paths_outside_the_mounts_are_refused(mic: Any, speech: Path, tmp_path: Path) -> None:
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "escape.wav").symlink_to(speech)  # inside by name, outside for real
    m = mic(RunOptions(capture_output=True, dirs=[(str(mount), "/audio")]))
    fd = m.create()
    for path in (str(speech), "/audio/../" + str(speech), "/audio/escape.wav", "/etc/passwd"):
        assert m.set(fd, {"source": "file", "path": path}) == abi.EACCES, path
        status = m.status(fd)
        assert "outside the run's --dir mounts" in status["last_error"]
        assert status["running"] is False
    assert m.wait(fd, 0) == abi.EPOLLERR


def _float_wav(path: Path) -> None:
    """A WAV of 32-bit float samples (format tag 3), which the source refuses."""
    data = struct.pack("<4f", 0.0, 0.5, -0.5, 0.25)
    fmt = struct.pack("<HHIIHH", 3, 1, 16000, 64000, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + \
        struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def test_truncated_and_wrong_format_files_fail_clearly(mic: Any, speech: Path,
                                                       tmp_path: Path) -> None:
    raw = speech.read_bytes()
    (tmp_path / "cut.wav").write_bytes(raw[:len(raw) // 2])
    (tmp_path / "header.wav").write_bytes(raw[:30])
    (tmp_path / "text.wav").write_bytes(b"not audio at all, just text" * 10)
    _float_wav(tmp_path / "float.wav")
    os.mkfifo(tmp_path / "fifo.wav")  # opening it would block until a writer came
    m = mic(RunOptions(capture_output=True, dirs=[(str(tmp_path), "/a")]))
    fd = m.create()
    for name, why in (("cut.wav", "is truncated: its header declares"),
                      ("header.wav", "truncated inside its WAV header"),
                      ("text.wav", "is not a PCM WAV file"),
                      ("float.wav", "is not a PCM WAV file (unknown format: 3)"),
                      ("missing.wav", "cannot open missing.wav"),
                      ("fifo.wav", "fifo.wav is not a regular file"),
                      (".", "is not a regular file")):
        assert m.set(fd, {"source": "file", "path": f"/a/{name}"}) == abi.EIO, name
        assert why in m.status(fd)["last_error"], name
        assert m.wait(fd, 0) == abi.EPOLLERR
    assert m.set(fd, {"source": "stub"}) == 0  # the fd is still usable
    assert m.status(fd)["last_error"] is None


# ---- the device --------------------------------------------------------------------------


def test_device_without_a_microphone_fails_or_falls_back(mic: Any) -> None:
    try:
        import sounddevice  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
        pytest.skip("sounddevice is installed: this machine may have a microphone")
    except (ImportError, OSError):
        pass
    m = mic()
    fd = m.create()
    assert m.set(fd, {"source": "device", "fallback": {"to_stub": False}}) == abi.EIO
    status = m.status(fd)
    assert "device mic unavailable" in status["last_error"] and status["generation"] == 2
    assert m.set(fd, {"source": "device", "fallback.to_stub": False}) == abi.EIO  # dotted key
    assert m.set(fd, {"source": "device", "frame_ms": 10}) == 0  # fallback.to_stub: true
    assert m.status(fd)["source"] == "stub"
    assert m.wait(fd, -1) & abi.EPOLLIN and m.read(fd)[0] == 480


# ---- queues, limits, the end of waits and threads -------------------------------------------


def test_a_full_queue_drops_the_oldest_frames(mic: Any) -> None:
    m = mic()
    fd = m.create()
    assert m.set(fd, {"source": "stub", "sample_rate_hz": 16000, "frame_ms": 1,
                      "max_queue_bytes": 64}) == 0  # two 32-byte frames
    status = m.status(fd)
    while status["dropped_frames"] < 5:  # no reader: the stub keeps coming
        assert m.wait(fd, -1) & abi.EPOLLIN
        m.run.interrupts.wait(0.01)
        status = m.status(fd)
    assert status["queue_bytes"] <= status["max_queue_bytes"] == 64


def test_close_and_the_runs_end_stop_the_source_thread(mic: Any, make_host: Any,
                                                       speech: Path) -> None:
    m = mic(mic_pace="fast")
    fd = m.create()
    assert m.set(fd, {"source": "stub", "frame_ms": 5}) == 0
    assert len(mic_threads()) == 1
    assert int(m.call("p_mic_close", fd)) == 0
    assert mic_threads() == []
    assert int(m.call("p_mic_close", fd)) == 0  # closed twice: 0, as any fd
    # A fast file source waiting for room in a full queue stops as promptly.
    fd = m.create()
    m.run.options.dirs.append((str(speech.parent), "/audio"))
    assert m.set(fd, {"source": "file", "path": "/audio/speech.wav", "frame_ms": 20,
                      "max_queue_bytes": 960}) == 0
    while m.status(fd)["queue_bytes"] < 960:
        assert m.wait(fd, -1) & abi.EPOLLIN
        m.run.interrupts.wait(0.01)
    assert len(mic_threads()) == 1
    assert int(m.call("p_mic_close", fd)) == 0
    assert mic_threads() == []
    # _start opens a stub mic and returns without closing it.
    result = make_host(base_url="http://127.0.0.1:9/v1").run(wat_module("mic_probe.wat"))
    assert result.exit_code == 0
    assert mic_threads() == []


def test_hostile_mics_are_bounded(mic: Any) -> None:
    m = mic()
    fds = [m.create() for _ in range(17)]
    for fd in fds[:16]:
        assert m.set(fd, {"source": "stub", "frame_ms": 1000, "max_queue_bytes": 1 << 40}) == 0
    assert m.status(fds[0])["max_queue_bytes"] == m.run.config.max_host_bytes // 16
    assert m.set(fds[16], {"source": "stub"}) == abi.EMFILE
    assert "at most 16 at once" in m.status(fds[16])["last_error"]
    assert int(m.call("p_mic_close", fds[0])) == 0
    assert m.set(fds[16], {"source": "stub", "frame_ms": 10}) == 0  # room again
    # Pointers outside memory: EFAULT, and the frame is still there.
    assert int(m.call("p_mic_ctl", fds[16], 1, PARAMS, 1 << 30)) == abi.EFAULT
    m.u32(LEN, 60000)
    assert int(m.call("p_mic_ctl", fds[16], 2, 1 << 30, LEN)) == abi.EFAULT
    assert m.wait(fds[16], -1) & abi.EPOLLIN
    m.u32(LEN, 100000)
    assert int(m.call("p_mic_read", fds[16], (32 << 16) - 8, LEN)) == abi.EFAULT
    assert m.read(fds[16])[0] == 480


def test_a_bad_mic_file_fails_the_device_clearly(mic: Any, tmp_path: Path) -> None:
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio")
    m = mic(mic_file=bad)
    fd = m.create()
    assert m.set(fd, {"source": "device", "fallback": {"to_stub": False}}) == abi.EIO
    assert m.status(fd)["last_error"].startswith("--mic-file: notes.wav is not a PCM WAV")
    assert m.set(fd, {"source": "device"}) == 0 and m.status(fd)["source"] == "stub"


def test_a_raw_pcm_file_is_read_as_is_at_the_requested_format(mic: Any, tmp_path: Path) -> None:
    pcm = bytes((i * 13) % 256 for i in range(3000))  # 4.7 frames of 640 bytes
    (tmp_path / "clip.pcm").write_bytes(pcm)
    m = mic(RunOptions(capture_output=True, dirs=[(str(tmp_path), ".")]), mic_pace="fast")
    fd = m.create()
    assert m.set(fd, {"source": "file", "path": "clip.pcm", "sample_rate_hz": 16000,
                      "frame_ms": 20}) == 0
    frames = m.drain(fd)
    assert [len(f) for f in frames] == [640] * 5
    assert b"".join(frames) == pcm + bytes(5 * 640 - len(pcm))  # the tail padded with silence


def test_a_stereo_wav_mixes_down_to_the_exact_mono_samples(mic: Any, tmp_path: Path) -> None:
    mono = struct.pack("<640h", *((i * 997) % 65536 - 32768 for i in range(640)))
    with wave.open(str(tmp_path / "stereo.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"".join(mono[i:i + 2] * 2 for i in range(0, len(mono), 2)))
    m = mic(RunOptions(capture_output=True, dirs=[(str(tmp_path), "/a")]), mic_pace="fast")
    fd = m.create()
    assert m.set(fd, {"source": "file", "path": "/a/stereo.wav", "sample_rate_hz": 16000,
                      "frame_ms": 20}) == 0
    assert b"".join(m.drain(fd)) == mono  # 640 samples: two whole frames, no padding
