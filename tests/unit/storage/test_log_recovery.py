"""Recovery at open: restarts keep everything, torn tails and corrupt batches are cut."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.storage.segment import Segment
from groupwire.protocol.batches import iter_batch_spans

H = Any


def build(h: H, log: Any, batches: int) -> list[list[bytes]]:
    out = []
    for b in range(batches):
        vals = [b"b%d-r%d" % (b, i) for i in range(1 + b % 3)]
        h.append(log, vals, ts=5_000 + b)
        out.append(vals)
    return out


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def layout(directory: Path) -> tuple[list[tuple[Path, int, bytes]], list[int]]:
    """The segment files as (path, start in the concatenated log, content), and the end
    position of every batch in the concatenated log."""
    files, ends, pos = [], [], 0
    for path in segment_files(directory):
        data = path.read_bytes()
        files.append((path, pos, data))
        ends += [pos + end for _, _, end in iter_batch_spans(data)]
        pos += len(data)
    return files, ends


def test_restart_keeps_everything(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=120)
    batches = build(h, log, 15)
    before = h.values(h.read_all(log))
    assert before == [v for b in batches for v in b]
    assert log.close() is True
    for trust in (True, False):
        again = open_log(segment_bytes=120, trust_index=trust)
        assert again.recovery is None
        assert h.values(h.read_all(again)) == before
        assert again.log_end_offset == len(before) == again.high_watermark
        h.append(again, [b"more"])
        assert again.close() is True
        before.append(b"more")


def test_a_clean_restart_uses_the_index_without_scanning(h: H, open_log: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(segment_bytes=120)
    build(h, log, 15)
    expected = h.values(h.read_all(log))
    log.close()

    def no_scan(self: Segment) -> None:
        raise AssertionError("scanned a segment whose index is trusted")

    monkeypatch.setattr(Segment, "recover", no_scan)
    again = open_log(segment_bytes=120, trust_index=True)
    assert h.values(h.read_all(again)) == expected


@pytest.mark.parametrize("damage", ["garbage", "truncate", "delete"])
def test_a_bad_index_is_rebuilt_even_when_trusted(h: H, open_log: Any, tmp_path: Path,
                                                  damage: str) -> None:
    log = open_log(segment_bytes=120)
    build(h, log, 15)
    expected = h.values(h.read_all(log))
    log.close()
    for index in (tmp_path / "t-0").glob("*.index"):
        if damage == "garbage":
            index.write_bytes(bytes(random.Random(1).randrange(256) for _ in range(64)))
        elif damage == "truncate":
            index.write_bytes(index.read_bytes()[:-32])
        else:
            index.unlink()
    again = open_log(segment_bytes=120, trust_index=True)
    assert again.recovery is None
    assert h.values(h.read_all(again)) == expected


def test_torn_tail_at_many_cut_points_keeps_exactly_the_complete_batches(
        h: H, open_log: Any, tmp_path: Path) -> None:
    source = tmp_path / "source"
    log = open_log(segment_bytes=100, directory=source)
    batches = build(h, log, 12)
    log.close(sync=False)
    files, ends = layout(source)
    total = ends[-1]
    assert len(files) >= 3
    # Every batch boundary and the bytes around it, and a spread of points in between.
    cuts = {c + d for c in [0, *ends] for d in (-1, 0, 1)} | set(range(0, total, 7))
    for cut in sorted(c for c in cuts if 0 <= c <= total):
        target = tmp_path / f"cut-{cut}"
        target.mkdir()
        for path, start, data in files:
            if start < cut or start == 0:
                (target / path.name).write_bytes(data[: max(0, cut - start)])
        kept = sum(1 for end in ends if end <= cut)
        good_end = ends[kept - 1] if kept else 0
        recovered = open_log(segment_bytes=100, directory=target)
        expected = [v for b in batches[:kept] for v in b]
        assert h.values(h.read_all(recovered)) == expected, cut
        assert recovered.log_end_offset == len(expected)
        if cut == good_end:
            assert recovered.recovery is None, cut
        else:
            assert recovered.recovery is not None
            assert recovered.recovery.truncated_bytes == cut - good_end
        # The log goes on at the right offset after recovery.
        assert h.append(recovered, [b"next"]) == len(expected)
        recovered.close()
        reopened = open_log(segment_bytes=100, directory=target)
        assert reopened.recovery is None
        assert h.values(h.read_all(reopened)) == [*expected, b"next"]
        reopened.close()


@pytest.mark.parametrize("tail", [b"\x00" * 4096, b"\x92\x95\xcf", b"\xff" * 33,
                                  bytes(random.Random(7).randrange(256) for _ in range(500))])
def test_garbage_after_the_last_batch_is_cut(h: H, open_log: Any, tmp_path: Path,
                                             tail: bytes) -> None:
    log = open_log(segment_bytes=10_000)
    batches = build(h, log, 5)
    log.close(sync=False)
    path = segment_files(tmp_path / "t-0")[-1]
    path.write_bytes(path.read_bytes() + tail)
    again = open_log(segment_bytes=10_000)
    assert again.recovery is not None
    assert again.recovery.truncated_bytes == len(tail)
    assert h.values(h.read_all(again)) == [v for b in batches for v in b]


@pytest.mark.parametrize("segment_bytes", [100, 100_000])
def test_a_flipped_byte_in_a_middle_batch_is_caught_and_never_served(
        h: H, open_log: Any, tmp_path: Path, segment_bytes: int) -> None:
    log = open_log(segment_bytes=segment_bytes)
    batches = build(h, log, 12)
    log.close(sync=False)
    files, ends = layout(tmp_path / "t-0")
    victim = 6
    flip_at = ends[victim - 1] + 40  # inside the records of batch 6 (header is 31 bytes)
    for path, start, data in files:
        if start <= flip_at < start + len(data):
            buf = bytearray(data)
            buf[flip_at - start] ^= 0x10
            path.write_bytes(bytes(buf))
    again = open_log(segment_bytes=segment_bytes)
    report = again.recovery
    assert report is not None and "CRC" in report.reason
    assert report.truncated_bytes == ends[-1] - ends[victim - 1]
    if segment_bytes == 100:
        assert report.deleted_segments > 0
    kept = [v for b in batches[:victim] for v in b]
    assert h.values(h.read_all(again)) == kept
    assert again.log_end_offset == len(kept)
    with pytest.raises(Exception, match="outside"):
        again.read(len(kept) + 1, 1 << 20, True)


def test_a_corrupt_base_offset_is_caught_by_offset_continuity(h: H, open_log: Any,
                                                              tmp_path: Path) -> None:
    log = open_log(segment_bytes=100_000)
    batches = build(h, log, 6)
    log.close(sync=False)
    files, ends = layout(tmp_path / "t-0")
    path, _, data = files[0]
    buf = bytearray(data)
    buf[ends[2] + 10] ^= 0x01  # low byte of batch 3's base offset: not covered by the CRC
    path.write_bytes(bytes(buf))
    again = open_log(segment_bytes=100_000)
    assert again.recovery is not None and "base offset" in again.recovery.reason
    assert h.values(h.read_all(again)) == [v for b in batches[:3] for v in b]


def test_a_missing_middle_segment_cuts_the_log_there(h: H, open_log: Any,
                                                     tmp_path: Path) -> None:
    log = open_log(segment_bytes=100)
    build(h, log, 12)
    log.close(sync=False)
    files = segment_files(tmp_path / "t-0")
    assert len(files) >= 3
    files[1].unlink()
    again = open_log(segment_bytes=100)
    assert again.recovery is not None and again.recovery.deleted_segments == len(files) - 2
    assert again.log_end_offset == int(files[1].stem)
    assert again.segment_count == 1
