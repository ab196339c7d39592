"""``check_batch_steps``: the produce-time check (``validate_batch`` then ``check_records``)
as steps, so that a batch near the frame limit never holds the broker's loop for long.
It must take the same decisions as the two functions: the same header, and the same
error class, message, offset and record errors, wherever in a big batch the fault is."""

from __future__ import annotations

import gc
import struct
import zlib

import pytest

from groupwire.protocol.batches import (
    CRC_PIECE,
    HEADER_SIZE_V0,
    MAX_RECORD_ERRORS,
    RECORD_CHUNK,
    ROW_PIECE,
    SKIP_PIECE,
    BatchHeader,
    BatchRecord,
    CorruptBatchError,
    MalformedRecordError,
    check_batch_steps,
    check_records,
    encode_batch,
    validate_batch,
)
from groupwire.protocol.errors import ErrorCode
from tests.steps import steps_taken
from tests.unit.protocol.test_batch_validation import (
    BAD_ROWS,
    BAD_UTF8_STR,
    batch_of_rows,
    good_row,
    pack,
)

N = 3 * RECORD_CHUNK + 17
"""Rows of a "big" batch: several chunks, and more than a piece of bytes of each kind."""


def big_rows(n: int = N, value: bytes = b"v" * 40) -> list[bytes]:
    return [good_row(i, value) for i in range(n)]


def outcome(run: object) -> tuple[object, ...]:
    """What a check ends with: the header, or everything an error carries."""
    try:
        header = run() if callable(run) else None
    except CorruptBatchError as exc:
        errors = [(e.batch_index, e.message) for e in getattr(exc, "record_errors", [])]
        return type(exc), exc.code, str(exc), exc.position, exc.offset, errors
    return ("ok", header)


def old_way(data: bytes) -> object:
    def run() -> BatchHeader:
        header = validate_batch(data)
        check_records(data, header)
        return header
    return outcome(run)


def new_way(data: bytes) -> object:
    return outcome(lambda: steps_taken(check_batch_steps(data))[1])


def with_crc(buf: bytes | bytearray) -> bytes:
    """``buf`` with its CRC recomputed (bytes 11-24 and 30 onwards)."""
    out = bytearray(buf)
    struct.pack_into(">I", out, 26, zlib.crc32(bytes(out[30:]), zlib.crc32(bytes(out[11:25]))))
    return bytes(out)


# --- good batches ---------------------------------------------------------------------------


def test_a_big_batch_is_checked_in_many_steps_and_gives_the_header() -> None:
    data = batch_of_rows(big_rows(), base_offset=7)
    assert len(data) > 2 * SKIP_PIECE
    yields, header = steps_taken(check_batch_steps(data))
    assert header == validate_batch(data)
    assert header.record_count == N and header.base_offset == 7
    # the rows are fed ROW_PIECE bytes a step (and the walk SKIP_PIECE bytes a step)
    assert yields >= len(data) // ROW_PIECE


def test_one_big_record_is_checked_in_pieces_too() -> None:
    """A single row larger than the pieces: the unpacker resumes it when fed more."""
    data = encode_batch([BatchRecord(value=b"x" * (2 * CRC_PIECE), timestamp_ms=5)])
    yields, header = steps_taken(check_batch_steps(data))
    assert header == validate_batch(data) and header.record_count == 1
    assert yields >= 2 * CRC_PIECE // ROW_PIECE


def test_a_small_batch_takes_one_step() -> None:
    data = encode_batch([BatchRecord(value=b"v", headers=[("h", b"1")])] * 10)
    assert steps_taken(check_batch_steps(data)) == (0, validate_batch(data))


def test_the_collector_is_on_between_steps_and_left_as_found() -> None:
    """The collector is paused within a step only: other work runs between steps."""
    data = batch_of_rows(big_rows())
    was = gc.isenabled()
    try:
        gc.enable()
        steps = check_batch_steps(data)
        seen = set()
        for _ in steps:
            seen.add(gc.isenabled())
        assert seen == {True} and gc.isenabled()
        gc.disable()
        steps_taken(check_batch_steps(data))
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


# --- bad batches: the same error as validate_batch + check_records ----------------------------

LATE = 2 * RECORD_CHUNK + 5
"""A row index past the first chunk and past the first pieces of bytes."""


def _bad_crc() -> bytes:
    buf = bytearray(batch_of_rows(big_rows()))
    buf[-1] ^= 0xFF   # the last byte: only a CRC run over every piece sees it
    return bytes(buf)


def _wrong_count() -> bytes:
    buf = bytearray(batch_of_rows(big_rows()))
    struct.pack_into(">I", buf, 21, N + 1)
    return with_crc(buf)


def _trailing() -> bytes:
    return with_crc(batch_of_rows(big_rows()) + b"\xc0\xc0")


def _truncated() -> bytes:
    return with_crc(batch_of_rows(big_rows())[:-3])


def _malformed_late() -> bytes:
    """A byte that is no msgpack at all, far into the records: a framing error."""
    rows = big_rows()
    rows[LATE] = b"\x95" + pack(LATE) + b"\x00\xc0\xc1\x90"
    return batch_of_rows(rows)


def _bad_row_then_malformed() -> bytes:
    """A bad row, then a framing error: the framing error wins, as validate_batch runs first."""
    rows = big_rows()
    rows[3] = BAD_ROWS["short-row"]
    rows[LATE] = b"\x95" + pack(LATE) + b"\x00\xc0\xc1\x90"
    return batch_of_rows(rows)


def _rows_at(where: dict[int, bytes], n: int = N) -> bytes:
    rows = big_rows(n)
    for index, row in where.items():
        rows[index] = row
    return batch_of_rows(rows, base_offset=100)


BAD: dict[str, bytes] = {
    "crc-mismatch": _bad_crc(),
    "wrong-count": _wrong_count(),
    "trailing-bytes": _trailing(),
    "truncated": _truncated(),
    "malformed-late": _malformed_late(),
    "bad-row-then-malformed": _bad_row_then_malformed(),
    "short-row-late": _rows_at({LATE: BAD_ROWS["short-row"]}),
    "str-key-first-chunk": _rows_at({5: pack([5, 0, "k", b"v", []])}),
    "undecodable-late": _rows_at({LATE: b"\x95" + pack(LATE) + b"\x00\xc0\xc4\x01v\x91\x92"
                                  + BAD_UTF8_STR + b"\xc0"}),
    "undecodable-and-wrong": _rows_at({
        7: b"\x95\x07\x00\xc0\xc4\x01v\x81\x01\x02",
        RECORD_CHUNK + 3: pack([RECORD_CHUNK + 3, "late", None, b"v", []]),
        N - 1: pack([N - 1, 0, None, b"v"])}),
    "more-than-the-limit": _rows_at({i: pack([i]) for i in range(40, 40 + 3 * MAX_RECORD_ERRORS)}),
    "bad-rows-in-every-chunk": _rows_at({i * RECORD_CHUNK + 1: pack([0])
                                         for i in range(N // RECORD_CHUNK + 1)}),
    "one-big-bad-row": batch_of_rows([pack([0, 0, None, "x" * (3 * ROW_PIECE), []])]),
    "small-bad-row": batch_of_rows([good_row(0), pack([1]), good_row(2)]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_batch_raises_what_the_two_functions_raise(name: str) -> None:
    data = BAD[name]
    new = new_way(data)
    assert new[0] in (CorruptBatchError, MalformedRecordError)
    assert new == old_way(data)


def _raised(data: bytes) -> CorruptBatchError:
    with pytest.raises(CorruptBatchError) as info:
        steps_taken(check_batch_steps(data))
    return info.value


def test_the_errors_are_the_ones_the_batch_checks_have_always_given() -> None:
    """The messages, classes and record errors, spelled out (not only compared)."""
    assert type(_raised(BAD["crc-mismatch"])) is CorruptBatchError
    assert str(_raised(BAD["crc-mismatch"])) == "CRC mismatch"
    assert str(_raised(BAD["wrong-count"])) == (
        f"records array holds {N} items, header says {N + 1}")
    assert str(_raised(BAD["trailing-bytes"])) == "2 trailing bytes after the records array"
    assert str(_raised(BAD["truncated"])) == "truncated batch"
    for name in ("malformed-late", "bad-row-then-malformed"):
        exc = _raised(BAD[name])
        assert type(exc) is CorruptBatchError and exc.code == ErrorCode.CORRUPT_MESSAGE
        assert str(exc).startswith("malformed msgpack in records: ")

    late = _raised(BAD["short-row-late"])
    assert isinstance(late, MalformedRecordError) and late.code == ErrorCode.INVALID_RECORD
    assert str(late) == f"record {LATE}: not a 5-item array (an array of 1)"
    assert late.offset == 100 + LATE
    assert [(e.batch_index, e.message) for e in late.record_errors] == [
        (LATE, "not a 5-item array (an array of 1)")]

    undecodable = _raised(BAD["undecodable-late"])
    assert isinstance(undecodable, MalformedRecordError)
    assert [(e.batch_index, e.message) for e in undecodable.record_errors] == [
        (LATE, "does not unpack: 'utf-8' codec can't decode byte 0xff in position 0: "
               "invalid start byte")]

    both = _raised(BAD["undecodable-and-wrong"])
    assert isinstance(both, MalformedRecordError)
    assert [e.batch_index for e in both.record_errors] == [7, RECORD_CHUNK + 3, N - 1]
    assert both.record_errors[0].message.startswith("does not unpack: ")

    many = _raised(BAD["more-than-the-limit"])
    assert isinstance(many, MalformedRecordError)
    assert [e.batch_index for e in many.record_errors] == list(range(40, 40 + MAX_RECORD_ERRORS))
    assert f"({MAX_RECORD_ERRORS} or more bad records)" in str(many)


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_every_bad_row_is_named_past_the_first_chunk(name: str) -> None:
    """The rows the single-chunk check refuses, placed where the steps feed them in
    pieces (some rows given with offset_delta 1 are put at index 1 of a later chunk)."""
    row = BAD_ROWS[name]
    data = _rows_at({1: row, LATE: row})
    exc = _raised(data)
    assert isinstance(exc, MalformedRecordError)
    assert [e.batch_index for e in exc.record_errors] == [1, LATE]
    assert new_way(data) == old_way(data)


@pytest.mark.parametrize("at", [ROW_PIECE - 1, ROW_PIECE, ROW_PIECE + 1, SKIP_PIECE - 2,
                                SKIP_PIECE + 1])
def test_rows_cut_by_a_piece_boundary_are_checked_whole(at: int) -> None:
    """The bytes after the header are fed in pieces: a row (or a value) cut by the end
    of one is resumed with the next, wherever the cut falls."""
    first = HEADER_SIZE_V0 + 3 + 9   # where the first record's value starts (v0), about
    data = encode_batch([BatchRecord(value=b"p" * (at - first)),
                         BatchRecord(value=b"q" * 3, headers=[("h", None)])] * 3, version=0)
    assert new_way(data) == old_way(data) == ("ok", validate_batch(data))
    bad = with_crc(data.replace(b"\xa1h", b"\xa1\xff"))   # header names that are not UTF-8
    assert new_way(bad) == old_way(bad)
    assert isinstance(_raised(bad), MalformedRecordError)
