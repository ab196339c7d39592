"""Helpers for the Kafka batch tests: rewrite a batch's fields or records with its
length and CRC made right again, and build one record byte by byte."""

from __future__ import annotations

import struct

import google_crc32c

from groupwire.protocol.kafka import records as kr


def reframe(batch: bytes | bytearray, records: bytes | None = None, **fields: int) -> bytes:
    """``batch`` with header fields replaced (and/or its records section), batchLength
    and CRC recomputed so that only what was changed is wrong."""
    names = ["base_offset", "batch_length", "leader_epoch", "magic", "crc", "attributes",
             "last_offset_delta", "base_timestamp_ms", "max_timestamp_ms", "producer_id",
             "producer_epoch", "base_sequence", "record_count"]
    values = dict(zip(names, struct.unpack_from(">qiibIhiqqqhii", batch), strict=True))
    values.update(fields)
    body = bytes(batch[kr.HEADER_SIZE:]) if records is None else records
    values["batch_length"] = kr.HEADER_SIZE - 12 + len(body)
    head = bytearray(struct.pack(">qiibIhiqqqhii", *values.values()))
    crc = google_crc32c.extend(google_crc32c.value(bytes(head[21:])), body)
    head[17:21] = struct.pack(">I", crc)
    return bytes(head) + body


def record(delta: int, *, ts: int = 0, key: bytes | None = None, value: bytes | None = b"v",
           headers: bytes = b"\x00", length_fix: int = 0) -> bytes:
    """One record's bytes, built here field by field (``headers``: their raw bytes)."""
    zz = kr._zz
    body = b"\x00" + zz(ts) + zz(delta)
    body += b"\x01" if key is None else zz(len(key)) + key
    body += b"\x01" if value is None else zz(len(value)) + value
    body += headers
    return zz(len(body) + length_fix) + body
