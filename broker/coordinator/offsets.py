"""Committed offsets per group, a transaction's pending ones (KIP-98), and the retention
rules that expire them (docs/design/kafka.md §10.3)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
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


@dataclass(frozen=True, slots=True)
class TxnOffset:
    """An offset a transaction commits if it commits (TxnOffsetCommit); ``commit_ms`` on
    the monotonic clock, as :class:`CommittedOffset`'s (it becomes that one's)."""

    producer_epoch: int
    offset: int
    metadata: str
    commit_ms: int


class _TxnSlot:
    """One (group, producer, partition)'s pending offset: what its latest stored record
    holds (``written``, by the write ``written_token``; 0: read from the log) and what
    its writes not settled yet hold (``writing``, by token, increasing). It is pending
    from the TxnOffsetCommit on, as in Kafka (``prepareTxnOffsetCommit``); a failed write
    takes back only its own value, so what stays is what the log holds."""

    __slots__ = ("written", "written_token", "writing")

    def __init__(self) -> None:
        self.written: TxnOffset | None = None
        self.written_token = 0
        self.writing: dict[int, TxnOffset] = {}

    def current(self) -> TxnOffset | None:
        """The value of its latest write, stored or not."""
        if self.writing:
            last = next(reversed(self.writing))
            if last > self.written_token:
                return self.writing[last]
        return self.written

    def empty(self) -> bool:
        return self.written is None and not self.writing


_TxnKey = tuple[str, int, TP, _TxnSlot]
"""(group, producer, partition, its slot when the write was made)."""


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
    remembered (``_overtaken``) only until it settles.

    Transactions' pending offsets (TxnOffsetCommit, txn_offsets.py) are kept apart, per
    group, producer and partition, from their TxnOffsetCommit until the write of their
    transaction's marker is stored; the marker's commit stages them as offsets of its
    own write."""

    __slots__ = ("_by_group", "_staged", "_groups_of", "_overtaken", "_txn", "_txn_groups",
                 "_txn_writes")

    def __init__(self) -> None:
        self._by_group: dict[str, dict[TP, CommittedOffset]] = {}
        self._staged: dict[str, dict[int, dict[TP, CommittedOffset]]] = {}
        """group -> token -> entries, tokens in increasing order."""
        self._groups_of: dict[int, list[str]] = {}
        """token -> the groups it staged entries of."""
        self._overtaken: dict[str, list[tuple[int, Collection[TP]]]] = {}
        """group -> (token, partitions) of writes stored while an earlier one pends."""
        self._txn: dict[str, dict[int, dict[TP, _TxnSlot]]] = {}
        """group -> producer -> partition -> its pending transactional offset."""
        self._txn_groups: dict[int, set[str]] = {}
        """producer -> the groups it has pending offsets in."""
        self._txn_writes: dict[int, tuple[bool, list[_TxnKey]]] = {}
        """token -> (whether it is a transaction marker's, what it wrote): a TxnOffsetCommit
        write's values stay pending once stored, a marker's end what it covered."""

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
        unless a later write of its partition was stored first; a TxnOffsetCommit's
        values are now in the log, a marker's pending offsets are gone."""
        if self._txn_writes:
            self._txn_outcome(token, stored=True)
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
        them, so there is nothing to put back); a TxnOffsetCommit's values are no longer
        pending, a marker's pending offsets still are."""
        if self._txn_writes:
            self._txn_outcome(token, stored=False)
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
        """The group's partitions with a commit pending, or a transaction's (retention
        leaves them alone, as Kafka's does)."""
        by_token = self._staged.get(group_id)
        tps: set[TP] = set().union(*by_token.values()) if by_token else set()
        producers = self._txn.get(group_id)
        if producers:
            for slots in producers.values():
                tps.update(slots)
        return tps

    def delete(self, group_id: str, tp: TP) -> None:
        offsets = self._by_group.get(group_id)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self._by_group[group_id]

    def forget(self, group_id: str, tps: Iterable[TP]) -> list[tuple[int, TP]]:
        """Forget these partitions' offsets, pending ones too (OffsetDelete: a commit
        still being written goes with them, as its record precedes the tombstone, so a
        later ``store`` of its write finds nothing), transactions' too, as Kafka's
        tombstone of the partition does; returns those, ``(producer, partition)``
        sorted: their keys need tombstones of their own."""
        stored = self._by_group.get(group_id)
        by_token = self._staged.get(group_id)
        producers = self._txn.get(group_id)
        dropped: list[tuple[int, TP]] = []
        for tp in tps:
            if stored is not None:
                stored.pop(tp, None)
            if by_token:
                for entries in by_token.values():
                    entries.pop(tp, None)
            if producers:
                dropped.extend((pid, tp) for pid, slots in producers.items() if tp in slots)
        if stored is not None and not stored:
            del self._by_group[group_id]
        for pid, tp in dropped:
            self._drop_slot(group_id, pid, tp)
        return sorted(set(dropped))

    def of(self, group_id: str) -> dict[TP, CommittedOffset]:
        """The group's stored offsets (none pending)."""
        return self._by_group.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        """Stored or pending ones (Kafka's ``hasOffsets`` counts pending commits, and
        transactions' pending ones)."""
        return group_id in self._by_group or group_id in self._staged or group_id in self._txn

    def group_ids(self) -> list[str]:
        """The groups with stored or pending offsets (transactions' too)."""
        ids = list(self._by_group)
        ids.extend(g for g in self._staged if g not in self._by_group)
        ids.extend(g for g in self._txn if g not in self._by_group and g not in self._staged)
        return ids

    def drop_group(self, group_id: str) -> list[TP]:
        """Forget the group's offsets, pending ones and transactions' too (a later
        ``store`` of their write finds nothing); returns the partitions it had stored or
        being written, sorted (:meth:`drop_txn` first for the transactions' ones)."""
        gone = set(self._by_group.pop(group_id, {}))
        by_token = self._staged.pop(group_id, None)
        if by_token is not None:
            self._overtaken.pop(group_id, None)
            for entries in by_token.values():
                gone.update(entries)
        self.drop_txn(group_id)
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
        """Every topic some group has a stored offset for, or a transaction's pending
        one (what a deletion of the topic tombstones)."""
        topics = {tp[0] for offsets in self._by_group.values() for tp in offsets}
        topics.update(tp[0] for producers in self._txn.values()
                      for slots in producers.values() for tp in slots)
        return topics

    # --- transactions' pending offsets (KIP-98, KIP-447) ----------------------------
    # Pending from the TxnOffsetCommit until the write of its transaction's marker is
    # stored; never read as committed (OffsetFetch, retention, metrics), only as
    # "unstable" (OffsetFetch's require_stable) and as offsets a group has.

    def stage_txn(self, token: int, group_id: str, producer_id: int, tp: TP,
                  value: TxnOffset) -> None:
        """A TxnOffsetCommit's ``value``, pending now, written by ``token``."""
        slot = self._slot(group_id, producer_id, tp)
        slot.writing[token] = value
        self._txn_key(token, False).append((group_id, producer_id, tp, slot))

    def load_txn(self, group_id: str, producer_id: int, tp: TP, value: TxnOffset) -> None:
        """Replaying the log: ``value`` is pending, its record stored already."""
        slot = self._slot(group_id, producer_id, tp)
        slot.written = value

    def unload_txn(self, group_id: str, producer_id: int, tp: TP) -> None:
        """Replaying the log: the key's tombstone."""
        self._drop_slot(group_id, producer_id, tp)

    def txn_partitions(self, group_id: str) -> set[TP]:
        """The group's partitions with a transaction's offset pending (of any producer)."""
        producers = self._txn.get(group_id)
        if not producers:
            return set()
        return set().union(*producers.values())

    def txn_pending(self, group_id: str) -> dict[TP, dict[int, TxnOffset]]:
        """The group's pending transactional offsets: partition -> producer -> value."""
        pending: dict[TP, dict[int, TxnOffset]] = {}
        for pid, slots in self._txn.get(group_id, {}).items():
            for tp, slot in slots.items():
                value = slot.current()
                if value is not None:
                    pending.setdefault(tp, {})[pid] = value
        return pending

    def producer_offsets(self, producer_id: int, holds: Callable[[str], bool],
                         ) -> list[tuple[str, TP, TxnOffset]]:
        """The producer's pending offsets in the groups ``holds`` accepts, sorted."""
        found: list[tuple[str, TP, TxnOffset]] = []
        for group_id in self._txn_groups.get(producer_id, ()):
            if holds(group_id):
                for tp, slot in self._txn[group_id][producer_id].items():
                    value = slot.current()
                    if value is not None:
                        found.append((group_id, tp, value))
        found.sort(key=lambda f: (f[0], f[1]))
        return found

    def end_txn(self, token: int, producer_id: int, ended: Iterable[tuple[str, TP]]) -> None:
        """The write ``token`` holds the producer's transaction marker for these
        (group, partition): once stored, what they hold so far is no longer pending;
        a write of them made after the marker's stays."""
        keys = self._txn_key(token, True)
        for group_id, tp in ended:
            slot = self._txn[group_id][producer_id][tp]
            keys.append((group_id, producer_id, tp, slot))

    def drop_txn(self, group_id: str) -> list[tuple[int, TP]]:
        """Forget the group's pending transactional offsets (its deletion); returns them,
        ``(producer, partition)`` sorted: their keys need tombstones."""
        producers = self._txn.pop(group_id, None)
        if producers is None:
            return []
        for pid in producers:
            self._unindex(pid, group_id)
        return sorted((pid, tp) for pid, slots in producers.items() for tp in slots)

    def drop_txn_topics(self, topics: Collection[str]) -> list[tuple[str, int, TP]]:
        """Forget every pending transactional offset of partitions of ``topics``;
        returns them, ``(group, producer, partition)`` sorted."""
        dropped = [(group_id, pid, tp) for group_id, producers in self._txn.items()
                   for pid, slots in producers.items() for tp in slots if tp[0] in topics]
        for group_id, pid, tp in dropped:
            self._drop_slot(group_id, pid, tp)
        dropped.sort()
        return dropped

    def _slot(self, group_id: str, producer_id: int, tp: TP) -> _TxnSlot:
        producers = self._txn.get(group_id)
        if producers is None:
            producers = self._txn[group_id] = {}
        slots = producers.get(producer_id)
        if slots is None:
            slots = producers[producer_id] = {}
            self._txn_groups.setdefault(producer_id, set()).add(group_id)
        slot = slots.get(tp)
        if slot is None:
            slot = slots[tp] = _TxnSlot()
        return slot

    def _drop_slot(self, group_id: str, producer_id: int, tp: TP) -> None:
        producers = self._txn.get(group_id)
        slots = producers.get(producer_id) if producers is not None else None
        if producers is None or slots is None or slots.pop(tp, None) is None:
            return
        if not slots:
            del producers[producer_id]
            self._unindex(producer_id, group_id)
            if not producers:
                del self._txn[group_id]

    def _unindex(self, producer_id: int, group_id: str) -> None:
        groups = self._txn_groups.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self._txn_groups[producer_id]

    def _txn_key(self, token: int, ends: bool) -> list[_TxnKey]:
        entry = self._txn_writes.get(token)
        if entry is None:
            entry = self._txn_writes[token] = (ends, [])
        return entry[1]

    def _txn_outcome(self, token: int, *, stored: bool) -> None:
        entry = self._txn_writes.pop(token, None)
        if entry is None:
            return
        ends, keys = entry
        if ends and not stored:
            return  # the marker is not written: still pending; the marker comes again
        for group_id, pid, tp, slot in keys:
            slots = self._txn.get(group_id, {}).get(pid)
            if slots is None or slots.get(tp) is not slot:
                continue  # dropped meanwhile (group, topic or partition deleted, unloaded)
            if ends:
                # what the log held before the marker ends; later writes stay pending
                if slot.written_token < token:
                    slot.written = None
                    slot.written_token = 0
                for earlier in [t for t in slot.writing if t < token]:
                    del slot.writing[earlier]
            else:
                value = slot.writing.pop(token, None)
                if stored and value is not None and token > slot.written_token:
                    slot.written = value
                    slot.written_token = token
            if slot.empty():
                self._drop_slot(group_id, pid, tp)


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
