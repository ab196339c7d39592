"""Committed offsets per group and the retention rules that expire them (docs/design/kafka.md
§10.3)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.member import TP
from groupwire.broker.coordinator.transitions import Expire, Retain


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """``commit_ms`` is on the monotonic clock (retention counts from it); its record
    keeps the wall time, re-based onto the monotonic clock when loaded."""

    offset: int
    metadata: str
    commit_ms: int


class OffsetStore:
    """group -> partition -> committed offset, as stored; plus the offsets of commits
    whose write is pending, staged under its token until it is stored or failed.

    Only stored offsets are read (OffsetFetch, retention, metrics): a commit is not
    visible until its record is durable (and, in a cluster, in the ISR), as in Kafka's
    coordinator runtime, which keeps a write's changes uncommitted until its append is
    replicated and reverts them if it fails. Here the changes are kept aside instead, so
    nothing is ever reverted: a failed write's entries are dropped.

    Outcomes may arrive out of token order (a cluster settles each offsets partition on
    its own): an entry applies only if no later write of the same partition was stored
    before it. The later writes stored while an earlier one of the group is pending are
    remembered (``_overtaken``) only until it settles."""

    __slots__ = ("_by_group", "_staged", "_groups_of", "_overtaken")

    def __init__(self) -> None:
        self._by_group: dict[str, dict[TP, CommittedOffset]] = {}
        self._staged: dict[str, dict[int, dict[TP, CommittedOffset]]] = {}
        """group -> token -> entries, tokens in increasing order."""
        self._groups_of: dict[int, list[str]] = {}
        """token -> the groups it staged entries of."""
        self._overtaken: dict[str, list[tuple[int, Collection[TP]]]] = {}
        """group -> (token, partitions) of writes stored while an earlier one pends."""

    def commit(self, group_id: str, tp: TP, value: CommittedOffset) -> None:
        """Store ``value`` now (replaying the log: it is stored already)."""
        self._by_group.setdefault(group_id, {})[tp] = value

    def stage(self, token: int, group_id: str) -> dict[TP, CommittedOffset]:
        """The group's entries staged under ``token`` (created empty): a commit of many
        partitions stages each with one dict assignment, not a call."""
        by_token = self._staged.get(group_id)
        if by_token is None:
            by_token = self._staged[group_id] = {}
        entries = by_token.get(token)
        if entries is None:
            entries = by_token[token] = {}
            self._groups_of.setdefault(token, []).append(group_id)
        return entries

    def store(self, token: int) -> None:
        """The write ``token`` is stored: its entries become the stored offsets, each
        unless a later write of its partition was stored first."""
        for group_id in self._groups_of.pop(token, ()):
            by_token = self._staged.get(group_id)
            entries = by_token.pop(token, None) if by_token is not None else None
            if by_token is None or entries is None:
                continue  # dropped meanwhile (group deleted, topic deleted, unloaded)
            overtakes = bool(by_token) and next(iter(by_token)) < token
            written = frozenset(entries) if overtakes else frozenset()
            later = self._overtaken.get(group_id)
            if later:
                newer = [keys for t, keys in later if t > token]
                if newer:
                    entries = {tp: value for tp, value in entries.items()
                               if not any(tp in keys for keys in newer)}
            if entries:
                stored = self._by_group.get(group_id)
                if stored is None:
                    self._by_group[group_id] = entries
                else:
                    stored.update(entries)
            if overtakes:
                self._overtaken.setdefault(group_id, []).append((token, written))
            self._settled(group_id, by_token)

    def discard(self, token: int) -> None:
        """The write ``token`` failed: its entries are dropped (stored ones never held
        them, so there is nothing to put back)."""
        for group_id in self._groups_of.pop(token, ()):
            by_token = self._staged.get(group_id)
            if by_token is not None and by_token.pop(token, None) is not None:
                self._settled(group_id, by_token)

    def _settled(self, group_id: str, by_token: dict[int, dict[TP, CommittedOffset]],
                 ) -> None:
        if not by_token:
            del self._staged[group_id]
            self._overtaken.pop(group_id, None)
            return
        later = self._overtaken.get(group_id)
        if later:
            oldest = next(iter(by_token))  # only writes pending before a stored one matter
            kept = [(t, keys) for t, keys in later if t > oldest]
            if kept:
                self._overtaken[group_id] = kept
            else:
                del self._overtaken[group_id]

    def pending(self, group_id: str) -> set[TP]:
        """The group's partitions with a commit pending (retention leaves them alone,
        as Kafka's does)."""
        by_token = self._staged.get(group_id)
        if not by_token:
            return set()
        return set().union(*by_token.values())

    def delete(self, group_id: str, tp: TP) -> None:
        offsets = self._by_group.get(group_id)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self._by_group[group_id]

    def forget(self, group_id: str, tps: Iterable[TP]) -> None:
        """Forget these partitions' offsets, pending ones too (OffsetDelete: a commit
        still being written goes with them, as its record precedes the tombstone, so a
        later ``store`` of its write finds nothing)."""
        stored = self._by_group.get(group_id)
        by_token = self._staged.get(group_id)
        for tp in tps:
            if stored is not None:
                stored.pop(tp, None)
            if by_token:
                for entries in by_token.values():
                    entries.pop(tp, None)
        if stored is not None and not stored:
            del self._by_group[group_id]

    def of(self, group_id: str) -> dict[TP, CommittedOffset]:
        """The group's stored offsets (none pending)."""
        return self._by_group.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        """Stored or pending ones (Kafka's ``hasOffsets`` counts pending commits)."""
        return group_id in self._by_group or group_id in self._staged

    def group_ids(self) -> list[str]:
        """The groups with stored or pending offsets."""
        ids = list(self._by_group)
        ids.extend(g for g in self._staged if g not in self._by_group)
        return ids

    def drop_group(self, group_id: str) -> list[TP]:
        """Forget the group's offsets, pending ones too (a later ``store`` of their
        write finds nothing); returns the partitions it had, sorted."""
        gone = set(self._by_group.pop(group_id, {}))
        by_token = self._staged.pop(group_id, None)
        if by_token is not None:
            self._overtaken.pop(group_id, None)
            for entries in by_token.values():
                gone.update(entries)
        return sorted(gone)

    def drop_topics(self, topics: Collection[str]) -> list[tuple[str, TP]]:
        """Forget every group's offsets for partitions of ``topics``, pending ones too;
        returns what went, as ``(group, partition)`` sorted."""
        dropped: set[tuple[str, TP]] = set()
        for group_id, offsets in list(self._by_group.items()):
            gone = [tp for tp in offsets if tp[0] in topics]
            for tp in gone:
                del offsets[tp]
                dropped.add((group_id, tp))
            if not offsets:
                del self._by_group[group_id]
        for group_id, by_token in self._staged.items():
            for entries in by_token.values():
                gone = [tp for tp in entries if tp[0] in topics]
                for tp in gone:
                    del entries[tp]
                    dropped.add((group_id, tp))
        return sorted(dropped)

    def topics(self) -> set[str]:
        """Every topic some group has a stored offset for."""
        return {tp[0] for offsets in self._by_group.values() for tp in offsets}


def expired_offsets(group: Group, offsets: dict[TP, CommittedOffset], now_ms: int,
                    retention_ms: int) -> list[TP]:
    """Kafka's expiration condition for a classic group:

    * no protocol type (a "simple" group): ``now - commit time >= retention``;
    * otherwise as the state's retention cell says (:class:`Expire`): Empty, ``now - time
      it became Empty >= retention``; Stable "consumer" group with known subscriptions:
      unsubscribed topics' offsets by commit time;
    * anything else (rebalancing, other protocol types while not Empty): nothing.
    """
    if group.protocol_type is None:
        return [tp for tp, o in offsets.items() if now_ms - o.commit_ms >= retention_ms]
    cell = group.row.retention
    if not isinstance(cell, Retain):
        return []
    if cell.expires is Expire.ALL_AFTER_EMPTY:
        if now_ms - group.state_ms >= retention_ms:
            return list(offsets)
        return []
    if group.is_consumer and group.subscribed_topics is not None:
        subscribed = group.subscribed_topics
        return [tp for tp, o in offsets.items()
                if tp[0] not in subscribed and now_ms - o.commit_ms >= retention_ms]
    return []
