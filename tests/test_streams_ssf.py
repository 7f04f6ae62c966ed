"""The SSF v1 codec: exact layout, round trips, and a decoder that takes any
bytes without crashing or reading past what it was given (hypothesis)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spearpy.streams import ssf

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, (1 << 64) - 1)

frames = st.builds(ssf.Frame, stream_id=u32, seq=u64, data=st.binary(max_size=512),
                   meta=st.binary(max_size=128), msg_type=u16, flags=u16,
                   extension=st.binary(max_size=64))


def test_the_header_is_spears_layout() -> None:
    raw = ssf.build(7, 3, b"hello", b'{"a":1}', msg_type=ssf.MsgType.DATA, flags=5)
    assert raw[:4] == b"SPST"
    assert struct.unpack_from("<HHHHIQII", raw, 4) == (1, 32, 2, 5, 7, 3, 7, 5)
    assert raw[32:] == b'{"a":1}hello'
    assert ssf.decode(raw).meta_json() == {"a": 1}


@given(frames)
def test_round_trip(frame: ssf.Frame) -> None:
    raw = ssf.encode(frame)
    assert len(raw) == ssf.HEADER_LEN + len(frame.extension) + len(frame.meta) + len(frame.data)
    assert ssf.decode(raw) == frame
    assert ssf.encode(ssf.decode(raw)) == raw


@given(st.binary(max_size=256), st.binary(max_size=64))
@settings(max_examples=500)
def test_any_bytes_decode_or_fail_cleanly_and_never_over_read(raw: bytes, tail: bytes) -> None:
    buffer = raw + tail
    try:
        frame = ssf.decode(memoryview(buffer)[:len(raw)])
    except ssf.SsfError as exc:
        assert str(exc)  # the reason a client is closed with
        with pytest.raises(ssf.SsfError):
            ssf.decode(raw)
        return
    # What it decoded lies inside the bytes it was given, and is exactly them.
    assert ssf.encode(frame) == raw
    assert ssf.decode(raw) == frame


@given(frames, st.data())
def test_every_truncation_is_refused(frame: ssf.Frame, data: st.DataObject) -> None:
    raw = ssf.encode(frame)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ssf.SsfError):
        ssf.decode(raw[:cut])


@given(frames, st.data())
def test_a_mutated_frame_is_refused_or_decodes_to_its_own_bytes(frame: ssf.Frame,
                                                                 data: st.DataObject) -> None:
    raw = bytearray(ssf.encode(frame))
    at = data.draw(st.integers(0, ssf.HEADER_LEN - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    try:
        decoded = ssf.decode(bytes(raw))
    except ssf.SsfError:
        return
    assert ssf.encode(decoded) == bytes(raw)


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "truncated"),
    (b"SPST" + bytes(27), "truncated"),
    (b"XPST" + struct.pack("<HHHHIQII", 1, 32, 2, 0, 1, 1, 0, 0), "bad magic"),
    (b"SPST" + struct.pack("<HHHHIQII", 2, 32, 2, 0, 1, 1, 0, 0), "unsupported version 2"),
    (b"SPST" + struct.pack("<HHHHIQII", 1, 16, 2, 0, 1, 1, 0, 0), "header_len 16"),
    (b"SPST" + struct.pack("<HHHHIQII", 1, 40, 2, 0, 1, 1, 0, 0), "header_len 40"),
    (b"SPST" + struct.pack("<HHHHIQII", 1, 32, 2, 0, 1, 1, 0, 4) + b"abc", "data_len 4"),
    (b"SPST" + struct.pack("<HHHHIQII", 1, 32, 2, 0, 1, 1, 0xFFFFFFFF, 1) + b"a", "meta_len"),
])
def test_malformed_frames_say_what_is_wrong(raw: bytes, reason: str) -> None:
    with pytest.raises(ssf.SsfError, match=reason):
        ssf.decode(raw)


def test_the_size_limit_is_checked_first() -> None:
    raw = ssf.build(1, 1, b"x" * 100)
    with pytest.raises(ssf.SsfError, match="over the 64-byte limit"):
        ssf.check(raw, max_frame_bytes=64)
    assert ssf.check(raw, max_frame_bytes=len(raw)).data_len == 100


def test_build_refuses_fields_out_of_range() -> None:
    with pytest.raises(ValueError):
        ssf.build(1 << 32, 1, b"")
    with pytest.raises(ValueError):
        ssf.build(1, 1, b"", extension=bytes(0x10000))
    assert ssf.meta_bytes({"é": 1}) == '{"é":1}'.encode()
    assert ssf.meta_bytes(None) == b"" and ssf.meta_bytes(b"raw") == b"raw"
