"""``protocol.stored_batches``: msgpack and Kafka batches mixed as a log holds them, split,
checked, stamped and decoded by their first byte, with ``protocol.batches``'s contract."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol import batches as mp
from groupwire.protocol import stored_batches as sb
from groupwire.protocol.batches import BatchRecord, CorruptBatchError
from groupwire.protocol.kafka import records as kr

T0 = 1_732_250_000_000


def recs(n: int, tag: str = "") -> list[BatchRecord]:
    return [BatchRecord(value=f"{tag}{i}".encode() * 5, timestamp_ms=T0 + i) for i in range(n)]


def mixed(seed: int = 1, batches: int = 12) -> tuple[bytes, list[tuple[bool, int, int]]]:
    """Stamped batches of random formats, layouts and codecs at consecutive offsets;
    with (kafka, base offset, count) of each."""
    rng = random.Random(seed)
    out, shape, offset = [], [], 0
    for b in range(batches):
        n = rng.randint(1, 6)
        kind = rng.choice(["v0", "v1", "kafka"])
        if kind == "kafka":
            batch = kr.encode_batch(recs(n, f"k{b}-"), offset, leader_epoch=b,
                                    compression=rng.choice([0, 1, 2, 3, 4]))
        else:
            version = mp.BATCH_V0 if kind == "v0" else mp.BATCH_V1
            batch = mp.encode_batch(recs(n, f"m{b}-"), offset, version=version,
                                    leader_epoch=-1 if kind == "v0" else b)
        out.append(batch)
        shape.append((kind == "kafka", offset, n))
        offset += n
    return b"".join(out), shape


def test_spans_of_a_mix() -> None:
    data, shape = mixed()
    spans = list(sb.iter_any_batch_spans(data))
    assert [(h.kafka, h.base_offset, h.record_count) for h, _, _ in spans] == shape
    assert spans[-1][2] == len(data)
    assert all(spans[i][2] == spans[i + 1][1] for i in range(len(spans) - 1))
    for header, start, end in spans:
        assert sb.read_any_header(data, start) == header
        assert sb.crc_matches(data, start, end, header)
        assert sb.validate_any_batch(data[start:end]) == header
        assert header.next_offset == header.base_offset + header.record_count
        assert header.header_size == (kr.HEADER_SIZE if header.kafka
                                      else mp.header_size(header.version))


def test_pure_msgpack_spans_match_protocol_batches() -> None:
    data = b"".join(mp.encode_batch(recs(i + 1), 10 * i, version=i % 2) for i in range(30))
    theirs = [(sb.as_stored(h), s, e) for h, s, e in mp.iter_batch_spans(data)]
    assert list(sb.iter_any_batch_spans(data)) == theirs


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10_000), st.data())
def test_errors_are_at_the_bad_batchs_start_after_the_good_ones(seed: int,
                                                                  draw: st.DataObject) -> None:
    data, _ = mixed(seed, 6)
    good = [(s, e) for _, s, e in sb.iter_any_batch_spans(data)]
    damaged = bytearray(data)
    at = draw.draw(st.integers(0, len(data) - 1))
    damaged[at] ^= draw.draw(st.integers(1, 255))
    cut = draw.draw(st.sampled_from([len(data), at + 1, len(data) - 1]))
    damaged = damaged[:cut]
    victim = next(i for i, (s, e) in enumerate(good) if s <= at < e)
    seen = []
    try:
        for _, start, end in sb.iter_any_batch_spans(bytes(damaged)):
            seen.append((start, end))
    except CorruptBatchError as exc:
        assert exc.position == good[len(seen)][0]
    assert seen == good[:len(seen)]
    # batches before the damaged one always come through (a change the CRC does not
    # cover, an offset or an epoch, may pass the damaged one too)
    assert len(seen) >= victim


def test_a_torn_tail_stops_at_the_last_whole_batch() -> None:
    data, shape = mixed(3)
    starts = [s for _, s, _ in sb.iter_any_batch_spans(data)]
    for cut in range(starts[-1] + 1, len(data)):
        spans = sb.iter_any_batch_spans(data[:cut])
        got = []
        with pytest.raises(CorruptBatchError) as info:
            for span in spans:
                got.append(span)
        assert info.value.position == starts[-1]
        assert len(got) == len(shape) - 1


def test_stamping_either_format() -> None:
    v0 = mp.encode_batch(recs(2), version=mp.BATCH_V0)
    v1 = mp.encode_batch(recs(2))
    kafka = kr.encode_batch(recs(2), compression=kr.COMPRESSION_LZ4)
    for batch in (v0, v1, kafka):
        stamped = sb.stamp_any_batch(batch, 1234, 7)
        header = sb.validate_any_batch(stamped)
        assert (header.base_offset, header.leader_epoch) == (1234, 7)
        assert header == sb.stamped_header(sb.read_any_header(batch), 1234, 7)
        assert sb.stamp_stored(batch, header) == stamped
        assert sb.decode_any_records(stamped)[0].offset == 1234
    kept = sb.stamped_header(sb.read_any_header(v0), 99, 7, keep_v0=True)
    assert (kept.version, kept.leader_epoch, kept.base_offset) == (mp.BATCH_V0, -1, 99)
    assert sb.read_any_header(sb.stamp_stored(v0, kept)) == kept


def test_validate_any_batch_wants_exactly_one() -> None:
    batch = kr.encode_batch(recs(2))
    with pytest.raises(CorruptBatchError):
        sb.validate_any_batch(batch + batch)
    with pytest.raises(CorruptBatchError):
        sb.validate_any_batch(b"")
    with pytest.raises(CorruptBatchError):
        sb.read_any_header(batch, len(batch))


def test_decoding_a_mix() -> None:
    data, shape = mixed(5)
    every = sb.decode_any_records(data)
    total = sum(n for _, _, n in shape)
    assert [r.offset for r in every] == list(range(total))
    middle = shape[len(shape) // 2][1] + 1
    assert [r.offset for r in sb.decode_any_records(data, middle)] == list(range(middle, total))
    assert sb.decode_any_records(b"") == []


def test_as_stored_of_each_header() -> None:
    kafka = kr.read_header(kr.encode_batch(recs(3), 40, timestamp_type=1,
                                           max_timestamp_ms=T0 + 77))
    stored = sb.as_stored(kafka)
    assert (stored.kafka, stored.version, stored.offset_count, stored.timestamp_ms,
            stored.last_offset) == (True, sb.KAFKA_VERSION, 3, T0 + 77, 42)
    assert sb.as_stored(stored) is stored
    msgpack = mp.read_header(mp.encode_batch(recs(2), 8))
    assert sb.as_stored(msgpack).timestamp_ms == T0
    assert sb.is_kafka_batch(kr.encode_batch(recs(1))) and not sb.is_kafka_batch(
        mp.encode_batch(recs(1)))
