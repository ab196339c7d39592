"""Offsets per partition: option specs, stable JSON for Spark, ranges and their splitting.

Pure. Spark keeps streaming offsets as the JSON text of the dicts the reader returns
(``json.dumps`` with insertion order) and compares them as text, so every offset dict
leaves here with string keys inserted in sorted order: the same positions always give the
same text, or each trigger would see "new data" and run an empty batch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

EARLIEST: Final = -2
LATEST: Final = -1
"""Special offsets in JSON specs, as in Spark's Kafka source (and ListOffsets)."""

OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]
JsonOffsets = dict[str, dict[str, int]]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


Positions = dict[TopicPartition, int]


class OffsetSpecError(ValueError):
    """A bad offsets option; the message names the option."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: one Spark partition's share of a read."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def parse_offset_spec(name: str, text: str | None, *, default: str) -> OffsetSpec:
    """``earliest``, ``latest`` or ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest)."""
    raw = (default if text is None else str(text)).strip()
    if raw.lower() in ("earliest", "latest"):
        return "earliest" if raw.lower() == "earliest" else "latest"
    try:
        data = json.loads(raw)
    except ValueError:
        raise OffsetSpecError(
            f"option {name!r}: expected earliest, latest or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}') from None
    if not isinstance(data, dict) or not data:
        raise OffsetSpecError(f"option {name!r}: JSON must be a non-empty object of topics")
    spec: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise OffsetSpecError(
                f"option {name!r}: topic {topic!r} must map partitions to offsets")
        out: dict[int, int] = {}
        for part, off in parts.items():
            if not str(part).isdigit():
                raise OffsetSpecError(
                    f"option {name!r}: {topic!r} partition {part!r} is not a number")
            if type(off) is not int or off < EARLIEST:
                raise OffsetSpecError(
                    f"option {name!r}: {topic}[{part}] offset {off!r} must be an integer "
                    ">= 0, or -2 (earliest) or -1 (latest)")
            out[int(part)] = off
        spec[topic] = out
    return spec


def resolve_spec(name: str, spec: OffsetSpec, partitions: Iterable[TopicPartition],
                 earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
                 ) -> Positions:
    """Concrete offsets for every partition; a JSON spec must name each one (as Kafka)."""
    parts = sorted(partitions)
    if spec == "earliest":
        return {tp: earliest[tp] for tp in parts}
    if spec == "latest":
        return {tp: latest[tp] for tp in parts}
    assert isinstance(spec, dict)
    named = {TopicPartition(t, p) for t, ps in spec.items() for p in ps}
    unknown = sorted(named - set(parts))
    if unknown:
        raise OffsetSpecError(f"option {name!r} names partitions that are not subscribed "
                              f"or do not exist: {_names(unknown)}")
    missing = sorted(set(parts) - named)
    if missing:
        raise OffsetSpecError(f"option {name!r} must give every partition an offset "
                              f"(-2 earliest, -1 latest); missing: {_names(missing)}")
    out: Positions = {}
    for tp in parts:
        off = spec[tp.topic][tp.partition]
        out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
    return out


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in tps)


def to_json(positions: Mapping[TopicPartition, int]) -> JsonOffsets:
    """Spark's offset dict: topics, then partitions as strings, inserted in sorted order."""
    by_topic: dict[str, dict[str, int]] = {}
    for tp in sorted(positions, key=lambda t: (t.topic, str(t.partition))):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = int(positions[tp])
    return {topic: by_topic[topic] for topic in sorted(by_topic)}


def from_json(data: Mapping[str, Mapping[str, int]]) -> Positions:
    """Read back an offset dict from Spark (or a checkpoint)."""
    out: Positions = {}
    for topic, parts in data.items():
        for part, off in parts.items():
            out[TopicPartition(topic, int(part))] = int(off)
    return out


def canonical_text(positions: Mapping[TopicPartition, int]) -> str:
    """The exact text Spark stores for these positions."""
    return json.dumps(to_json(positions))


def ranges_between(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                   ) -> list[OffsetRange]:
    """Non-empty ranges from ``start`` to ``end``; a partition absent from ``start`` is new
    and starts at 0 (partitions are created empty, so this is where its data begins)."""
    out = []
    for tp in sorted(end):
        lo = start.get(tp, 0)
        if end[tp] > lo:
            out.append(OffsetRange(tp.topic, tp.partition, lo, end[tp]))
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """At least ``min_partitions`` ranges when there are that many records, larger ranges
    cut into more near-equal pieces (as Kafka's ``minPartitions``)."""
    total = sum(r.size for r in ranges)
    if not min_partitions or len(ranges) >= min_partitions or total == 0:
        return list(ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, math.ceil(r.size * min_partitions / total)))
        step, extra = divmod(r.size, pieces)
        lo = r.start
        for i in range(pieces):
            hi = lo + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
            lo = hi
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int) -> Positions:
    """End positions reading at most ``max_rows`` records past ``start``, shared in
    proportion to what each partition has waiting; deterministic for the same inputs."""
    avail = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in sorted(latest)}
    total = sum(avail.values())
    if total <= max_rows:
        return dict(latest)
    take = {tp: n * max_rows // total for tp, n in avail.items()}
    left = max_rows - sum(take.values())
    for tp in sorted(avail, key=lambda t: (-(avail[t] - take[t]), t)):
        if left <= 0:
            break
        if take[tp] < avail[tp]:
            take[tp] += 1
            left -= 1
    return {tp: (start.get(tp, 0) + take[tp] if avail[tp] else latest[tp]) for tp in avail}


def cap(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
        target: Mapping[TopicPartition, int]) -> Positions:
    """``end`` held to ``target`` (availableNow): no partition past its target, none that
    appeared after it, and none moved back before ``start`` by the cap."""
    out: Positions = {}
    for tp, off in end.items():
        lo = start.get(tp)
        if tp in target:
            capped = min(off, target[tp])
            out[tp] = max(capped, lo) if lo is not None and off >= lo else capped
        elif lo is not None:
            out[tp] = lo
    return out
