"""Where a new topic's replicas go (docs/design/cluster.md, "The controller").

Kafka's scheme: the first replica of partition p is broker (start + p) mod n, so leaders
spread evenly from a random start; the followers follow it at a shift that grows by
one each time the partitions have gone once round the brokers, so two partitions that
share a leader do not also share their followers. With racks, the brokers are first
listed alternating racks, and followers skip racks that already hold a replica until
every rack does."""

from __future__ import annotations

from collections.abc import Sequence

from groupwire.broker.cluster.keys import BrokerInfo


class InvalidReplicationFactor(ValueError):
    """The caller answers INVALID_REPLICATION_FACTOR (38)."""


def _follower_index(first: int, shift: int, k: int, n: int) -> int:
    # Never ``first`` itself: an offset of 1..n-1 from it.
    return (first + 1 + (shift + k) % (n - 1)) % n


def _rack_alternated(brokers: Sequence[BrokerInfo]) -> list[BrokerInfo]:
    """One broker from each rack in turn (racks and brokers in order), so consecutive
    brokers in the list sit in different racks wherever possible."""
    by_rack: dict[str, list[BrokerInfo]] = {}
    for b in sorted(brokers, key=lambda b: b.node_id):
        by_rack.setdefault(b.rack or "", []).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[BrokerInfo] = []
    for i in range(max(len(q) for q in queues)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def assign_replicas(brokers: Sequence[BrokerInfo], partitions: int,
                    replication_factor: int, start: int,
                    shift: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Replicas of each of ``partitions`` partitions over the live ``brokers``.

    ``start`` (and ``shift``, by default ``start``) are the caller's random draw: the
    function is deterministic so tests can pin them. Racks are used when any broker has
    one; a broker without a rack then counts as a rack of its own kind ("")."""
    n = len(brokers)
    if replication_factor < 1:
        raise InvalidReplicationFactor(f"replication factor must be at least 1, "
                                       f"not {replication_factor}")
    if replication_factor > n:
        raise InvalidReplicationFactor(f"replication factor {replication_factor} is "
                                       f"larger than the {n} live brokers")
    if partitions < 0:
        raise ValueError(f"partitions must not be negative, not {partitions}")
    rack_aware = any(b.rack is not None for b in brokers)
    ordered = (_rack_alternated(brokers) if rack_aware
               else sorted(brokers, key=lambda b: b.node_id))
    ids = [b.node_id for b in ordered]
    racks = [b.rack or "" for b in ordered]
    rack_count = len(set(racks))
    start %= n
    step = start if shift is None else shift
    out: list[tuple[int, ...]] = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            step += 1
        first = (start + p) % n
        chosen = [first]
        if not rack_aware:
            chosen += [_follower_index(first, step, k, n)
                       for k in range(replication_factor - 1)]
        else:
            used_racks = {racks[first]}
            k = 0
            while len(chosen) < replication_factor:
                i = _follower_index(first, step * rack_count, k, n)
                k += 1
                if i in chosen:
                    continue
                # A new rack while one is missing; once all hold a replica, any broker.
                if racks[i] in used_racks and len(used_racks) < rack_count:
                    continue
                chosen.append(i)
                used_racks.add(racks[i])
        out.append(tuple(ids[i] for i in chosen))
    return tuple(out)
