"""Frames: 4-byte big-endian length, then the payload; the decoder is fed arbitrary chunks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.errors import FrameError, LocalProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, frame


def test_frame_prefixes_the_big_endian_length() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"x" * 0x0102) [:4] == b"\x00\x00\x01\x02"  # fmt: skip


def test_frame_refuses_an_empty_payload() -> None:
    with pytest.raises(LocalProtocolError):
        frame(b"")


def test_default_limit_is_16_mib() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 16_777_216
    assert FrameDecoder().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES


def test_many_frames_in_one_chunk() -> None:
    payloads = [bytes([i % 256]) * (i % 7 + 1) for i in range(5000)]
    decoder = FrameDecoder()
    assert decoder.feed(b"".join(frame(p) for p in payloads)) == payloads
    assert decoder.buffered == 0


def test_one_frame_byte_by_byte() -> None:
    data = frame(b"hello world")
    decoder = FrameDecoder()
    for i, byte in enumerate(data[:-1]):
        assert decoder.feed(bytes([byte])) == []
        assert decoder.buffered == i + 1
    assert decoder.feed(data[-1:]) == [b"hello world"]
    assert decoder.buffered == 0


def test_partial_tail_is_kept_across_feeds() -> None:
    decoder = FrameDecoder()
    data = frame(b"one") + frame(b"two")
    assert decoder.feed(data[:9]) == [b"one"]
    assert decoder.buffered == 2
    assert decoder.feed(data[9:] + frame(b"three")[:5]) == [b"two"]
    assert decoder.feed(frame(b"three")[5:]) == [b"three"]


def test_empty_feed_returns_nothing() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.buffered == 0


def test_length_zero_is_a_frame_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="length 0"):
        decoder.feed(frame(b"ok") + b"\x00\x00\x00\x00")


def test_over_the_limit_fails_on_the_header_alone() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    assert decoder.feed(frame(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(FrameError, match="11 over the limit of 10"):
        decoder.feed(b"\x00\x00\x00\x0b")  # no body yet: refused before reading it


def test_a_broken_decoder_stays_broken() -> None:
    decoder = FrameDecoder(max_frame_bytes=4)
    with pytest.raises(FrameError):
        decoder.feed(b"\xff\xff\xff\xff")
    with pytest.raises(FrameError):
        decoder.feed(frame(b"ok"))


def test_header_split_across_feeds_is_checked_when_complete() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(FrameError):
        decoder.feed(b"\x01\x00")


def test_max_frame_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=0)


def test_accepts_bytearray_and_memoryview_chunks() -> None:
    decoder = FrameDecoder()
    data = frame(b"abc") + frame(b"de")
    assert decoder.feed(bytearray(data[:5])) == []
    assert decoder.feed(memoryview(data)[5:]) == [b"abc", b"de"]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=40), max_size=20),
    st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=30),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], sizes: list[int]) -> None:
    data = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(max_frame_bytes=40)
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        size = sizes[i % len(sizes)]
        out += decoder.feed(data[pos : pos + size])
        pos, i = pos + size, i + 1
        assert decoder.buffered <= 44  # never more than one incomplete frame
    assert out == payloads
    assert decoder.buffered == 0
