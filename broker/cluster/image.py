"""The broker's copy of the cluster metadata, kept from one etcd read plus its watch.

It remembers each partition state's mod_revision and the controller key's
create_revision because every write the core decides is guarded by them: the image is
also the record of what a guarded write last read."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from groupwire.broker.cluster.keys import (
    BrokerInfo,
    BrokerKey,
    ControllerInfo,
    ControllerKey,
    PartitionKey,
    PartitionState,
    TopicAssignment,
    TopicKey,
    decode_broker,
    decode_controller,
    decode_partition,
    decode_topic,
    parse_key,
)
from groupwire.broker.cluster.txn import KeyValue, WatchEvent

TopicPartition = tuple[str, int]
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class ImageChange:
    """What one batch of watch events changed, for the shells to act on (reconnect to
    a new leader, re-run the controller, answer Metadata afresh)."""

    brokers_added: frozenset[int] = frozenset()
    brokers_removed: frozenset[int] = frozenset()
    brokers_updated: frozenset[int] = frozenset()
    """Still registered, with a new value (a new incarnation, host or rack)."""
    controller_changed: bool = False
    topics_changed: frozenset[str] = frozenset()
    """Created or re-assigned."""
    topics_removed: frozenset[str] = frozenset()
    partitions_changed: frozenset[TopicPartition] = frozenset()
    partitions_removed: frozenset[TopicPartition] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.brokers_added or self.brokers_removed or self.brokers_updated
                    or self.controller_changed or self.topics_changed or self.topics_removed
                    or self.partitions_changed or self.partitions_removed)


@dataclass(slots=True)
class _Pending:
    """One batch, decoded before anything is changed: a bad value leaves the image as
    it was."""

    kind: str
    key: BrokerKey | ControllerKey | TopicKey | PartitionKey
    kv: KeyValue
    value: BrokerInfo | ControllerInfo | TopicAssignment | PartitionState | None


@dataclass(slots=True)
class ClusterImage:
    cluster: str
    revision: int = 0
    """The etcd revision the image reflects: events at or below it are already in."""
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    """The live brokers: a broker's key lives as long as its lease."""
    broker_epochs: dict[int, int] = field(default_factory=dict)
    """Each live broker's epoch: its key's create_revision, new at every registration
    (Kafka's broker epoch, KIP-903). A follower's fetch must carry it."""
    controller: ControllerInfo | None = None
    controller_epoch: int = 0
    """The controller key's create_revision; 0 while there is no controller."""
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    partition_revisions: dict[TopicPartition, int] = field(default_factory=dict)
    """Each partition state's mod_revision, for the compare of the next write to it."""
    malformed: tuple[str, ...] = ()
    """Why each value the last read or batch held could not be decoded (one line per
    key, naming it). Such a value is skipped, the key keeping what it had: one bad
    write under the prefix must not stop every broker's image (the shell logs these)."""

    @classmethod
    def from_kvs(cls, cluster: str, kvs: Iterable[KeyValue], revision: int) -> ClusterImage:
        """From a range read of the prefix at ``revision`` (the read's header revision,
        where the watch then starts at revision + 1)."""
        image = cls(cluster)
        image._apply(image._decode([WatchEvent("put", kv) for kv in kvs]))
        image.revision = revision
        return image

    @property
    def controller_id(self) -> int | None:
        return None if self.controller is None else self.controller.node_id

    def is_live(self, node_id: int) -> bool:
        return node_id in self.brokers

    def apply(self, events: Sequence[WatchEvent], revision: int | None = None) -> ImageChange:
        """Apply one watch response; ``revision`` is its header revision, if known.

        Events at or below the image's revision are skipped so a replayed response (a
        watch restarted from an older revision) changes nothing. The batch is compared
        with the revision before it, not event by event: etcd delivers all of one
        txn's events, which share a revision, in one response."""
        fresh = [e for e in events if e.kv.mod_revision > self.revision]
        change = self._apply(self._decode(fresh))
        top = max((e.kv.mod_revision for e in fresh), default=self.revision)
        self.revision = max(self.revision, top, revision or 0)
        return change

    def _decode(self, events: Sequence[WatchEvent]) -> list[_Pending]:
        pending: list[_Pending] = []
        malformed: list[str] = []
        for event in events:
            parsed = parse_key(self.cluster, event.kv.key)
            if parsed is None:
                continue
            value: BrokerInfo | ControllerInfo | TopicAssignment | PartitionState | None
            try:
                if event.kind == "delete":
                    value = None
                elif isinstance(parsed, BrokerKey):
                    value = decode_broker(event.kv.key, event.kv.value)
                elif isinstance(parsed, ControllerKey):
                    value = decode_controller(event.kv.key, event.kv.value)
                elif isinstance(parsed, TopicKey):
                    value = decode_topic(event.kv.key, parsed.name, event.kv.value)
                else:
                    value = decode_partition(event.kv.key, event.kv.value)
            except ValueError as exc:
                malformed.append(str(exc))
                continue
            pending.append(_Pending(event.kind, parsed, event.kv, value))
        self.malformed = tuple(malformed)
        return pending

    def _apply(self, pending: Sequence[_Pending]) -> ImageChange:
        # Diff each touched key's value before and after the whole batch, so a key put
        # and deleted within one batch reports what it ends as, not its path there.
        brokers: dict[int, BrokerInfo | None] = {}
        topics: dict[str, TopicAssignment | None] = {}
        parts: dict[TopicPartition, PartitionState | None] = {}
        controller_before = (self.controller, self.controller_epoch)
        for p in pending:
            key, value = p.key, p.value
            if isinstance(key, BrokerKey):
                brokers.setdefault(key.node_id, self.brokers.get(key.node_id))
                if isinstance(value, BrokerInfo):
                    self.brokers[key.node_id] = value
                    self.broker_epochs[key.node_id] = p.kv.create_revision
                else:
                    self.brokers.pop(key.node_id, None)
                    self.broker_epochs.pop(key.node_id, None)
            elif isinstance(key, ControllerKey):
                if isinstance(value, ControllerInfo):
                    self.controller, self.controller_epoch = value, p.kv.create_revision
                else:
                    self.controller, self.controller_epoch = None, 0
            elif isinstance(key, TopicKey):
                topics.setdefault(key.name, self.topics.get(key.name))
                if isinstance(value, TopicAssignment):
                    self.topics[key.name] = value
                else:
                    self.topics.pop(key.name, None)
            else:
                tp = (key.topic, key.partition)
                parts.setdefault(tp, self.partitions.get(tp))
                if isinstance(value, PartitionState):
                    self.partitions[tp] = value
                    self.partition_revisions[tp] = p.kv.mod_revision
                else:
                    self.partitions.pop(tp, None)
                    self.partition_revisions.pop(tp, None)
        b_added, b_removed, b_updated = _diff(brokers, self.brokers)
        t_added, t_removed, t_updated = _diff(topics, self.topics)
        p_added, p_removed, p_updated = _diff(parts, self.partitions)
        return ImageChange(
            brokers_added=b_added, brokers_removed=b_removed, brokers_updated=b_updated,
            controller_changed=controller_before != (self.controller, self.controller_epoch),
            topics_changed=t_added | t_updated, topics_removed=t_removed,
            partitions_changed=p_added | p_updated, partitions_removed=p_removed,
        )


def _diff(before: dict[K, V | None], now: dict[K, V]
                ) -> tuple[frozenset[K], frozenset[K], frozenset[K]]:
    """Added, removed and updated among the touched keys ``before`` holds."""
    added = frozenset(k for k, v in before.items() if v is None and k in now)
    removed = frozenset(k for k, v in before.items() if v is not None and k not in now)
    updated = frozenset(k for k, v in before.items()
                        if v is not None and k in now and now[k] != v)
    return added, removed, updated
