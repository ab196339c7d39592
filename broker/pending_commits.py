"""Commits the coordinator has applied but whose records are not stored yet.

The coordinator updates its offset cache when an OffsetCommit arrives; the shell answers
it once the records are durable (and, in a cluster, in the ISR), and puts the old values
back if they never get there. Until then the new value must not be read: an OffsetFetch
in that window would hand a consumer an offset that a coordinator failover then loses,
and the group would see its committed offset go backwards. Kafka keeps such commits out
of its cache until their append completes; here they stay in the cache (the coordinator
checks later commits against them) and OffsetFetch answers are shown what was there
before them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from groupwire.broker.coordinator.offsets import CommittedOffset
from groupwire.protocol.messages import OffsetFetchResponse, Response

TP = tuple[str, int]
Snapshot = dict[TP, CommittedOffset | None]


class _Entry:
    __slots__ = ("before",)

    def __init__(self, before: CommittedOffset | None) -> None:
        self.before = before


class PendingCommits:
    def __init__(self) -> None:
        self._by_group: dict[str, dict[TP, list[_Entry]]] = {}

    def add(self, group_id: str, before: Snapshot, after: Snapshot) -> Callable[[], None]:
        """A commit changed ``before`` into ``after``; call what is returned once its
        records are stored or given up on (either way it is pending no more)."""
        changed = [tp for tp, value in after.items() if before.get(tp) != value]
        if not changed:
            return _nothing
        pending = self._by_group.setdefault(group_id, {})
        mine: list[tuple[TP, _Entry]] = []
        for tp in changed:
            entry = _Entry(before.get(tp))
            pending.setdefault(tp, []).append(entry)
            mine.append((tp, entry))

        def settled() -> None:
            group = self._by_group.get(group_id)
            if group is None:
                return
            for tp, entry in mine:
                entries = group.get(tp)
                if entries is None:
                    continue
                if entry in entries:
                    entries.remove(entry)
                if not entries:
                    del group[tp]
            if not group:
                del self._by_group[group_id]
        return settled

    def pending(self, group_id: str) -> bool:
        return group_id in self._by_group

    def masker(self, group_id: str) -> Callable[[Response], Response]:
        """Rewrite an OffsetFetch answer of ``group_id``: a partition with commits
        pending shows the value from before the oldest of them (read when the answer
        is sent)."""
        def mask(response: Response) -> Response:
            group = self._by_group.get(group_id)
            if not group or not isinstance(response, OffsetFetchResponse):
                return response
            topics = []
            for t in response.topics:
                parts = []
                for p in t.partitions:
                    entries = group.get((t.name, p.partition_index))
                    if entries and p.error_code == 0:
                        before = entries[0].before
                        p = replace(p, committed_offset=-1 if before is None else before.offset,
                                    metadata="" if before is None else before.metadata)
                    parts.append(p)
                topics.append(replace(t, partitions=parts))
            return replace(response, topics=topics)
        return mask


def _nothing() -> None:
    return None
