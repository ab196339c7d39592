"""Frames: 4-byte big-endian length, then the payload; the decoder is fed arbitrary chunks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.codec import decode_heartbeat
from groupwire.protocol.errors import FrameError, LocalProtocolError
from groupwire.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    LARGE_FRAME_BYTES,
    FrameDecoder,
    frame,
)
from groupwire.protocol.limits import SCAN_ABOVE_BYTES


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


def test_a_large_frame_is_handed_over_in_the_buffer_it_was_gathered_in() -> None:
    """Gathered in a buffer of its own size and handed over, not copied out (a 16 MiB
    copy on the event loop held it ~10 ms). What followed it in the same read is still
    split as usual, including a partial frame; the budget sees the whole frame's size."""
    big = bytes(range(256)) * (LARGE_FRAME_BYTES // 256 + 3)
    data = frame(big) + frame(b"next") + frame(b"partial")[:6]
    decoder = FrameDecoder()
    assert decoder.feed(data[:3]) == []
    assert decoder.feed(data[3:1000]) == []
    assert (decoder.buffered, decoder.frame_bytes) == (1000, 4 + len(big))
    assert decoder.feed(data[1000:2000]) == []
    assert decoder.buffered == 2000
    frames = decoder.feed(data[2000:])
    assert frames == [big, b"next"]
    assert type(frames[0]) is memoryview
    assert decoder.buffered == 6
    assert decoder.feed(frame(b"partial")[6:]) == [b"partial"]
    assert decoder.buffered == 0


def test_a_frame_below_the_hand_over_size_is_copied_out() -> None:
    small = b"x" * (LARGE_FRAME_BYTES - 1)
    decoder = FrameDecoder()
    data = frame(small)
    decoder.feed(data[:10])
    (payload,) = decoder.feed(data[10:])
    assert payload == small and type(payload) is bytes


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=70_000), min_size=1, max_size=12))
def test_large_and_small_frames_in_any_chunking(sizes: list[int]) -> None:
    payloads = [bytes([i % 251]) * LARGE_FRAME_BYTES if i % 2 else b"s" * (i + 1)
                for i in range(4)]
    data = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder()
    out: list[bytes | memoryview] = []
    pos, i = 0, 0
    while pos < len(data):
        size = sizes[i % len(sizes)]
        out += decoder.feed(data[pos:pos + size])
        pos, i = pos + size, i + 1
    assert [bytes(p) for p in out] == payloads
    assert decoder.buffered == 0


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


def test_large_frames_skip_the_heartbeat_fast_path_without_reading_it() -> None:
    """Only payloads up to SCAN_ABOVE_BYTES reach the fast path's ``startswith``: a large
    frame's memoryview must be longer than that."""
    assert LARGE_FRAME_BYTES > SCAN_ABOVE_BYTES
    decoder = FrameDecoder()
    data = frame(bytes((0x95, 12, 0)) + b"\x00" * LARGE_FRAME_BYTES)
    decoder.feed(data[:100])
    (payload,) = decoder.feed(data[100:])
    assert decode_heartbeat(payload) is None
