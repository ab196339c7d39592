"""Options and offsets, pure: these run without pyspark or Java."""

from __future__ import annotations

import itertools
import json

import pytest

from groupwire.pipeline.offsets import (
    OffsetRange,
    OffsetSpecError,
    TopicPartition,
    canonical_text,
    cap,
    from_json,
    parse_offset_spec,
    ranges_between,
    rate_limit,
    resolve_spec,
    split_ranges,
    to_json,
)
from groupwire.pipeline.options import OptionError, parse_sink_options, parse_source_options

BASE = {"bootstrap": "127.0.0.1:9092", "subscribe": "orders"}
T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def test_defaults_follow_kafka_per_mode() -> None:
    batch = parse_source_options(BASE, "batch")
    stream = parse_source_options(BASE, "stream")
    assert (batch.starting, batch.ending) == ("earliest", "latest")
    assert stream.starting == "latest"
    assert batch.fail_on_data_loss and batch.topics == ("orders",)
    assert batch.max_offsets_per_trigger is None and batch.min_partitions is None


def test_option_names_are_case_insensitive_as_spark_passes_them_lowercased() -> None:
    opts = parse_source_options({"BOOTSTRAP": "h:1", "subscribepattern": "o.*",
                                 "maxoffsetspertrigger": "10", "FAILONDATALOSS": "False",
                                 "minpartitions": "4"}, "stream")
    assert opts.pattern == "o.*" and opts.topics is None
    assert (opts.max_offsets_per_trigger, opts.fail_on_data_loss, opts.min_partitions) == (
        10, False, 4)
    assert opts.matches("orders") and not opts.matches("xorders")


@pytest.mark.parametrize(("options", "mode", "named"), [
    ({**BASE, "maxOffsetPerTrigger": "5"}, "stream", "maxOffsetPerTrigger"),
    ({"subscribe": "t"}, "batch", "bootstrap"),
    ({**BASE, "bootstrap": "nohostport"}, "batch", "bootstrap"),
    ({"bootstrap": "h:1"}, "batch", "subscribe"),
    ({**BASE, "subscribePattern": "x"}, "batch", "subscribePattern"),
    ({"bootstrap": "h:1", "subscribePattern": "("}, "batch", "subscribePattern"),
    ({**BASE, "subscribe": " , "}, "batch", "subscribe"),
    ({**BASE, "startingOffsets": "latest"}, "batch", "startingOffsets"),
    ({**BASE, "endingOffsets": "earliest"}, "batch", "endingOffsets"),
    ({**BASE, "endingOffsets": "latest"}, "stream", "endingOffsets"),
    ({**BASE, "startingOffsets": '{"t": {"0": -1}}'}, "batch", "startingOffsets"),
    ({**BASE, "endingOffsets": '{"t": {"0": -2}}'}, "batch", "endingOffsets"),
    ({**BASE, "startingOffsets": "{not json"}, "stream", "startingOffsets"),
    ({**BASE, "startingOffsets": '{"t": {"x": 1}}'}, "stream", "startingOffsets"),
    ({**BASE, "startingOffsets": '{"t": {"0": -3}}'}, "stream", "startingOffsets"),
    ({**BASE, "startingOffsets": '{"t": {"0": 1.5}}'}, "stream", "startingOffsets"),
    ({**BASE, "startingOffsets": "[]"}, "stream", "startingOffsets"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, "stream", "maxOffsetsPerTrigger"),
    ({**BASE, "maxOffsetsPerTrigger": "ten"}, "stream", "maxOffsetsPerTrigger"),
    ({**BASE, "minPartitions": "-1"}, "batch", "minPartitions"),
    ({**BASE, "failOnDataLoss": "yes"}, "batch", "failOnDataLoss"),
])
def test_bad_options_fail_naming_the_option(options: dict[str, str], mode: str,
                                             named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_source_options(options, mode)  # type: ignore[arg-type]


def test_sink_options() -> None:
    opts = parse_sink_options({"bootstrap": "h:1", "topic": " out ", "lingerms": "0",
                               "checkpointLocation": "/tmp/x"})
    assert (opts.topic, opts.linger_ms) == ("out", 0)
    assert parse_sink_options({"bootstrap": "h:1"}).topic is None
    for bad, named in (({"bootstrap": "h:1", "subscribe": "t"}, "subscribe"),
                       ({"bootstrap": "h:1", "lingerMs": "-1"}, "lingerMs"),
                       ({"topic": "t"}, "bootstrap")):
        with pytest.raises(OptionError, match=named):
            parse_sink_options(bad)


def test_json_spec_resolves_special_offsets_and_must_name_every_partition() -> None:
    spec = parse_offset_spec("startingOffsets", '{"t": {"0": 23, "1": -2}, "u": {"0": -1}}',
                             default="latest")
    earliest, latest = {T0: 5, T1: 7, U0: 0}, {T0: 50, T1: 70, U0: 9}
    assert resolve_spec("startingOffsets", spec, [T0, T1, U0], earliest, latest) == {
        T0: 23, T1: 7, U0: 9}
    with pytest.raises(OffsetSpecError, match=r"missing: u\[0\]"):
        resolve_spec("startingOffsets", {"t": {0: 1, 1: 1}}, [T0, T1, U0], earliest, latest)
    with pytest.raises(OffsetSpecError, match=r"not subscribed or do not exist: t\[5\]"):
        resolve_spec("endingOffsets", {"t": {0: 1, 1: 1, 5: 1}, "u": {0: 1}}, [T0, T1, U0],
                     earliest, latest)
    assert resolve_spec("x", "earliest", [T1, T0], earliest, latest) == {T0: 5, T1: 7}


def test_offset_json_has_string_keys_in_one_stable_order() -> None:
    positions = {TopicPartition("b", 10): 1, TopicPartition("b", 2): 2,
                 TopicPartition("a", 0): 3}
    shuffled = dict(reversed(list(positions.items())))
    assert canonical_text(positions) == canonical_text(shuffled)
    text = canonical_text(positions)
    assert text == json.dumps(json.loads(text), sort_keys=True)
    assert json.dumps(to_json(from_json(json.loads(text)))) == text  # checkpoint round trip
    assert to_json(positions) == {"a": {"0": 3}, "b": {"10": 1, "2": 2}}


def test_ranges_start_new_partitions_at_zero_and_skip_empty_ones() -> None:
    assert ranges_between({T0: 5, T1: 9}, {T0: 8, T1: 9, U0: 4}) == [
        OffsetRange("t", 0, 5, 8), OffsetRange("u", 0, 0, 4)]
    assert ranges_between({T0: 9}, {T0: 3}) == []  # reset after data loss: nothing to read


def test_min_partitions_splits_large_ranges_into_contiguous_pieces() -> None:
    ranges = [OffsetRange("t", 0, 100, 1100), OffsetRange("t", 1, 0, 10)]
    pieces = split_ranges(ranges, 8)
    assert len(pieces) >= 8
    big = [r for r in pieces if r.partition == 0]
    assert big[0].start == 100 and big[-1].end == 1100
    assert all(a.end == b.start for a, b in itertools.pairwise(big))
    assert max(r.size for r in big) - min(r.size for r in big) <= 1
    assert split_ranges(ranges, 2) == ranges and split_ranges(ranges, None) == ranges
    tiny = split_ranges([OffsetRange("t", 0, 0, 3)], 10)
    assert [r.size for r in tiny] == [1, 1, 1]


def test_rate_limit_shares_max_rows_in_proportion_and_never_exceeds_it() -> None:
    start = {T0: 0, T1: 100}
    latest = {T0: 300, T1: 200, U0: 0}
    end = rate_limit(start, latest, 40)
    read = sum(end[tp] - start.get(tp, 0) for tp in end)
    assert read == 40
    assert end[T0] - 0 > end[T1] - 100 > 0  # 300 waiting vs 100 waiting
    assert end[U0] == 0
    assert rate_limit(start, latest, 1000) == latest
    assert rate_limit(start, latest, 40) == end  # deterministic
    one = rate_limit({T0: 0, T1: 0}, {T0: 5, T1: 5}, 1)
    assert sum(one.values()) == 1  # progress even below one per partition


def test_available_now_cap_holds_end_to_target_and_never_moves_back() -> None:
    start = {T0: 10, T1: 20}
    end = {T0: 50, T1: 60, U0: 5}
    target = {T0: 30, T1: 10}
    assert cap(start, end, target) == {T0: 30, T1: 20}  # U0 appeared after the target
    assert cap({}, {U0: 5}, {U0: 9}) == {U0: 5}
