"""Length-prefixed frames (docs/protocol.md §1): a 4-byte big-endian length, then the payload.

:class:`FrameDecoder` is sans-I/O: it is fed whatever bytes arrived and hands back every
complete payload. It checks each length as soon as the 4 header bytes are in, so an
oversized or empty frame is refused before its body is read (and never buffered).
"""

from __future__ import annotations

import mmap
import struct
from typing import Final

from groupwire.protocol.errors import FrameError, LocalProtocolError

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "HEADER_BYTES", "LARGE_FRAME_BYTES", "FrameDecoder",
           "Payload", "frame"]

DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
HEADER_BYTES: Final = 4
_MAX_LENGTH: Final = 0xFFFFFFFF
_HEADER = struct.Struct(">I")
Payload = bytes | memoryview
"""A frame's payload: ``bytes``, or a view of the buffer a large frame was gathered in."""
LARGE_FRAME_BYTES: Final = 64 * 1024
"""A frame announcing at least this many bytes is gathered in a buffer of its own size,
filled as its reads arrive and handed over whole: growing one ``bytearray`` to 16 MiB
re-copied it on the event loop (~9 ms a step), and copying the payload out cost ~10 ms."""


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length; refuses what no receiver may accept."""
    n = len(payload)
    if n == 0:
        raise LocalProtocolError("cannot frame an empty payload")
    if n > _MAX_LENGTH:
        raise LocalProtocolError(f"payload of {n} bytes does not fit a 4-byte length")
    return _HEADER.pack(n) + payload


class FrameDecoder:
    """Splits a byte stream into frame payloads.

    Bytes are kept in one ``bytearray`` read from an offset and compacted once per
    :meth:`feed`, so many small frames in one chunk cost O(total bytes). After a
    :class:`FrameError` the stream cannot be resynchronised: the decoder stays broken and
    every later :meth:`feed` raises the same error (the caller closes the connection).
    """

    __slots__ = ("_buf", "_error", "_large", "_large_fill", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 1 <= max_frame_bytes <= _MAX_LENGTH:
            raise ValueError(f"max_frame_bytes must be in 1..{_MAX_LENGTH}")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._error: FrameError | None = None
        self._large: mmap.mmap | None = None
        """The payload of a large frame being gathered (anonymous memory: its pages are
        taken as they are written, not all at once)."""
        self._large_fill = 0

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (header included), for slowloris checks."""
        if self._large is not None:
            return HEADER_BYTES + self._large_fill
        return len(self._buf)

    @property
    def frame_bytes(self) -> int:
        """Bytes the partial frame will take once complete (header plus its announced
        length), so memory can be reserved before its body arrives; ``buffered`` while
        the header itself is incomplete, 0 when nothing is held."""
        if self._large is not None:
            return HEADER_BYTES + len(self._large)
        buf = self._buf
        if len(buf) < HEADER_BYTES:
            return len(buf)
        return HEADER_BYTES + int(_HEADER.unpack_from(buf, 0)[0])

    def feed(self, data: bytes | bytearray | memoryview) -> list[Payload]:
        """Add ``data``; return the payloads of every frame it completes, in order.

        A large frame comes back as a ``memoryview`` of the buffer it was gathered in
        (``LARGE_FRAME_BYTES``), others as ``bytes``. Raises :class:`FrameError` naming
        why on a length of 0 or over the limit.
        """
        if self._error is not None:
            raise self._error
        if not data:
            return []
        if self._large is not None:
            return self._fill_large(data)
        buf = self._buf
        if buf:
            buf += data
            frames, consumed = self._split(buf)
            del buf[:consumed]
        else:
            # Common case: nothing pending. Parse the chunk in place and keep only its tail.
            frames, consumed = self._split(data)
            if consumed < len(data):
                buf += memoryview(data)[consumed:]
        if len(buf) >= HEADER_BYTES:
            (n,) = _HEADER.unpack_from(buf, 0)  # checked by _split: 0 < n <= the limit
            if n >= LARGE_FRAME_BYTES:
                self._large = mmap.mmap(-1, n)
                self._large_fill = 0
                rest = bytes(memoryview(buf)[HEADER_BYTES:])
                buf.clear()
                frames += self._fill_large(rest)
        return frames

    def _fill_large(self, data: bytes | bytearray | memoryview) -> list[Payload]:
        large = self._large
        assert large is not None
        at = self._large_fill
        take = min(len(data), len(large) - at)
        large[at:at + take] = data[:take] if take < len(data) else data
        self._large_fill = at + take
        if self._large_fill < len(large):
            return []
        self._large = None
        payload = memoryview(large)
        if take == len(data):
            return [payload]
        return [payload, *self.feed(memoryview(data)[take:])]

    def _split(self, data: bytes | bytearray | memoryview,
               ) -> tuple[list[Payload], int]:
        frames: list[Payload] = []
        limit = self.max_frame_bytes
        end = len(data)
        off = 0
        with memoryview(data) as view:
            while end - off >= HEADER_BYTES:
                (n,) = _HEADER.unpack_from(data, off)
                if n == 0 or n > limit:
                    self._error = FrameError(
                        "frame length 0"
                        if n == 0
                        else f"frame length {n} over the limit of {limit} bytes"
                    )
                    raise self._error
                stop = off + HEADER_BYTES + n
                if stop > end:
                    break
                frames.append(bytes(view[off + HEADER_BYTES : stop]))
                off = stop
        return frames, off
