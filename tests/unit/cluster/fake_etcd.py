"""A tiny stand-in for etcd's KV for the cluster core's tests: revisions, compares,
txns and the watch events they make. No leases or watches of its own: a test deletes a
broker's key to kill it, and feeds the returned events to an image."""

from __future__ import annotations

from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import (
    BrokerInfo,
    ControllerInfo,
    PartitionState,
    TopicAssignment,
    broker_key,
    controller_key,
    encode_broker,
    encode_controller,
    encode_partition,
    encode_topic,
    partition_key,
    topic_key,
)
from groupwire.broker.cluster.txn import Delete, KeyValue, Put, Txn, TxnResult, WatchEvent

CLUSTER = "test"


class FakeEtcd:
    def __init__(self) -> None:
        self.revision = 1
        self.kvs: dict[str, KeyValue] = {}
        self.txns = 0

    def txn(self, txn: Txn) -> tuple[TxnResult, list[WatchEvent]]:
        self.txns += 1
        ok = all(c.holds(self.kvs.get(c.key)) for c in txn.compares)
        ops = txn.success if ok else txn.failure
        if not ops:
            return TxnResult(ok, self.revision), []
        self.revision += 1
        events: list[WatchEvent] = []
        for op in ops:
            if isinstance(op, Put):
                old = self.kvs.get(op.key)
                kv = KeyValue(op.key, op.value,
                              create_revision=self.revision if old is None
                              else old.create_revision,
                              mod_revision=self.revision,
                              version=1 if old is None else old.version + 1, lease=op.lease)
                self.kvs[op.key] = kv
                events.append(WatchEvent("put", kv))
            else:
                doomed = [k for k in self.kvs
                          if (k.startswith(op.key) if op.prefix else k == op.key)]
                for k in doomed:
                    del self.kvs[k]
                    events.append(WatchEvent("delete", KeyValue(k, b"", 0, self.revision, 0)))
        return TxnResult(ok, self.revision), events

    def put(self, key: str, value: bytes) -> list[WatchEvent]:
        return self.txn(Txn((), (Put(key, value),)))[1]

    def delete(self, key: str) -> list[WatchEvent]:
        return self.txn(Txn((), (Delete(key),)))[1]

    def image(self) -> ClusterImage:
        return ClusterImage.from_kvs(CLUSTER, list(self.kvs.values()), self.revision)


def broker(node_id: int, rack: str | None = None, incarnation: str = "a") -> BrokerInfo:
    return BrokerInfo(node_id, f"host{node_id}", 9092, rack, incarnation)


def add_broker(etcd: FakeEtcd, node_id: int, rack: str | None = None) -> list[WatchEvent]:
    return etcd.put(broker_key(CLUSTER, node_id), encode_broker(broker(node_id, rack)))


def kill_broker(etcd: FakeEtcd, node_id: int) -> list[WatchEvent]:
    return etcd.delete(broker_key(CLUSTER, node_id))


def elect_controller(etcd: FakeEtcd, node_id: int) -> int:
    """The controller epoch: the key's create_revision."""
    etcd.put(controller_key(CLUSTER), encode_controller(ControllerInfo(node_id, "a")))
    return etcd.kvs[controller_key(CLUSTER)].create_revision


def add_topic(etcd: FakeEtcd, name: str, replicas: list[tuple[int, ...]],
              states: list[PartitionState] | None = None) -> None:
    """A topic and its partition states (by default leader = first replica, ISR = all)."""
    etcd.put(topic_key(CLUSTER, name),
             encode_topic(TopicAssignment(name, f"id-{name}", False, tuple(replicas))))
    for p, r in enumerate(replicas):
        state = states[p] if states else PartitionState(r[0], 0, r, 0)
        etcd.put(partition_key(CLUSTER, name, p), encode_partition(state))
