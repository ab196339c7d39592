"""Length-prefixed frames (docs/protocol.md §1): a 4-byte big-endian length, then the payload.

:class:`FrameDecoder` is sans-I/O: it is fed whatever bytes arrived and hands back every
complete payload. It checks each length as soon as the 4 header bytes are in, so an
oversized or empty frame is refused before its body is read (and never buffered).
"""

from __future__ import annotations

import struct
from typing import Final

from groupwire.protocol.errors import FrameError, LocalProtocolError

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "HEADER_BYTES", "FrameDecoder", "frame"]

DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
HEADER_BYTES: Final = 4
_MAX_LENGTH: Final = 0xFFFFFFFF
_HEADER = struct.Struct(">I")


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

    __slots__ = ("_buf", "_error", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 1 <= max_frame_bytes <= _MAX_LENGTH:
            raise ValueError(f"max_frame_bytes must be in 1..{_MAX_LENGTH}")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (header included), for slowloris checks."""
        return len(self._buf)

    @property
    def frame_bytes(self) -> int:
        """Bytes the partial frame will take once complete (header plus its announced
        length), so memory can be reserved before its body arrives; ``buffered`` while
        the header itself is incomplete, 0 when nothing is held."""
        buf = self._buf
        if len(buf) < HEADER_BYTES:
            return len(buf)
        return HEADER_BYTES + int(_HEADER.unpack_from(buf, 0)[0])

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data``; return the payloads of every frame it completes, in order.

        Raises :class:`FrameError` naming why on a length of 0 or over the limit.
        """
        if self._error is not None:
            raise self._error
        if not data:
            return []
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
        return frames

    def _split(self, data: bytes | bytearray | memoryview) -> tuple[list[bytes], int]:
        frames: list[bytes] = []
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
