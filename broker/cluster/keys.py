"""Where cluster metadata lives in etcd and how its values read: every key sits under
``/groupwire/<cluster>/`` and every value is JSON, so ``etcdctl get --prefix`` stays
readable (docs/design/cluster.md, "What etcd holds")."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ROOT = "/groupwire/"


def prefix(cluster: str) -> str:
    return f"{ROOT}{cluster}/"


def broker_key(cluster: str, node_id: int) -> str:
    return f"{prefix(cluster)}brokers/{node_id}"


def controller_key(cluster: str) -> str:
    return f"{prefix(cluster)}controller"


def topic_key(cluster: str, name: str) -> str:
    return f"{prefix(cluster)}topics/{name}"


def partition_key(cluster: str, topic: str, partition: int) -> str:
    return f"{prefix(cluster)}partitions/{topic}/{partition}"


def partitions_prefix(cluster: str, topic: str) -> str:
    """Every partition state of ``topic`` (names hold no ``/``, so no other topic's)."""
    return f"{prefix(cluster)}partitions/{topic}/"


def producer_ids_key(cluster: str) -> str:
    """The first producer id no broker has claimed (``broker.clustering.producer_ids``);
    the image ignores it."""
    return f"{prefix(cluster)}producer-ids"


def security_prefix(cluster: str) -> str:
    """ACLs and SCRAM credentials (``broker.security.cluster_store``); the image ignores
    them: :func:`parse_key` answers None."""
    return f"{prefix(cluster)}security/"


def acl_key(cluster: str, binding_id: str) -> str:
    return f"{security_prefix(cluster)}acls/{binding_id}"


def user_key(cluster: str, user: str) -> str:
    return f"{security_prefix(cluster)}users/{user}"


@dataclass(frozen=True, slots=True)
class BrokerKey:
    node_id: int


@dataclass(frozen=True, slots=True)
class ControllerKey:
    pass


@dataclass(frozen=True, slots=True)
class TopicKey:
    name: str


@dataclass(frozen=True, slots=True)
class PartitionKey:
    topic: str
    partition: int


ParsedKey = BrokerKey | ControllerKey | TopicKey | PartitionKey


def _non_negative_int(text: str) -> int | None:
    # isdecimal() alone would accept other scripts' digits; keep the ASCII form etcdctl shows.
    if not text or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def parse_key(cluster: str, key: str) -> ParsedKey | None:
    """What a key under the cluster's prefix is; None for anything else, so a newer
    broker's keys (or a stray one) never break an older one's image."""
    base = prefix(cluster)
    if not key.startswith(base):
        return None
    rest = key[len(base):]
    if rest == "controller":
        return ControllerKey()
    kind, sep, tail = rest.partition("/")
    if not sep or not tail:
        return None
    if kind == "brokers":
        node_id = _non_negative_int(tail)
        return None if node_id is None else BrokerKey(node_id)
    if kind == "topics":
        # Kafka topic names hold no "/", so a deeper key is not a topic.
        return None if "/" in tail else TopicKey(tail)
    if kind == "partitions":
        topic, sep, number = tail.rpartition("/")
        p = _non_negative_int(number)
        if not sep or not topic or "/" in topic or p is None:
            return None
        return PartitionKey(topic, p)
    return None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a broker as clients of that listener are told to reach it."""

    listener: str
    host: str
    port: int


IMPLICIT_LISTENER = "PLAINTEXT"
"""What a registration without endpoints (a broker from before listeners) serves."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    """With ``port``: the inter-broker listener's address, where peers fetch from."""
    port: int
    rack: str | None
    incarnation: str
    """Differs on every registration, so a restarted broker is told from its old self."""
    endpoints: tuple[Endpoint, ...] = ()
    """Every listener's advertised address, so Metadata can answer a client with the
    addresses of the listener it came in on (Kafka's rule); empty: an older
    registration, which serves PLAINTEXT at ``host:port`` only. Kept in name order,
    as etcd's JSON holds them, so a registration equals itself read back."""
    storage_id: str | None = None
    """The identity of the data dir this broker runs on (``broker.storage.storage_id``):
    a new one means its logs are not the ones the ISR recorded. None: a broker from
    before storage identities (unknown, trusted as before)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "endpoints",
                           tuple(sorted(self.endpoints, key=lambda e: e.listener)))

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where a client of ``listener`` reaches this broker; None: it has no such
        listener."""
        if not self.endpoints:
            return (self.host, self.port) if listener == IMPLICIT_LISTENER else None
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None

    def listener_names(self) -> list[str]:
        return ([e.listener for e in self.endpoints] if self.endpoints
                else [IMPLICIT_LISTENER])


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    node_id: int
    incarnation: str


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    name: str
    topic_id: str
    internal: bool
    replicas: tuple[tuple[int, ...], ...]
    """Per partition, its replicas' node ids; the first is the preferred leader."""


NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    """``NO_LEADER`` (-1) when no eligible ISR replica is alive."""
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    isr_storage: tuple[str | None, ...] = ()
    """Per ISR member, in ``isr``'s order, the storage id its log had when the entry
    was written (KIP-858's directory ids): a member that registers with another one
    has lost that log and is never elected from this entry. None: unknown (a value
    from before storage identities, trusted as before); empty: all unknown."""

    def __post_init__(self) -> None:
        if self.isr_storage and len(self.isr_storage) != len(self.isr):
            raise ValueError(f"isr_storage {list(self.isr_storage)} does not match the "
                             f"ISR {list(self.isr)}")
        if all(s is None for s in self.isr_storage):
            object.__setattr__(self, "isr_storage", ())

    def storage_of(self, node_id: int) -> str | None:
        """The storage id the ISR recorded for ``node_id``; None: unknown or not in it."""
        if not self.isr_storage or node_id not in self.isr:
            return None
        return self.isr_storage[self.isr.index(node_id)]

    def storage_for(self, isr: Iterable[int], brokers: Mapping[int, BrokerInfo],
                    ) -> tuple[str | None, ...]:
        """The storage ids an ISR of ``isr`` records: a member's recorded id where this
        state has one (a member that lost its log stays marked so), else the id its
        live registration carries (a member joining, or one recorded before storage
        identities)."""
        out: list[str | None] = []
        for node in isr:
            recorded = self.storage_of(node)
            info = brokers.get(node)
            out.append(recorded if recorded is not None
                       else None if info is None else info.storage_id)
        return tuple(out)

    def lost_storage(self, node_id: int, brokers: Mapping[int, BrokerInfo]) -> bool:
        """``node_id`` is in the ISR and live with another storage id than the ISR
        recorded: its log is gone (a wiped or replaced data dir)."""
        recorded = self.storage_of(node_id)
        info = brokers.get(node_id)
        return (recorded is not None and info is not None and info.storage_id is not None
                and info.storage_id != recorded)


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def encode_broker(info: BrokerInfo) -> bytes:
    obj: dict[str, Any] = {"node_id": info.node_id, "host": info.host, "port": info.port,
                           "rack": info.rack, "incarnation": info.incarnation}
    if info.endpoints:
        obj["endpoints"] = {e.listener: [e.host, e.port] for e in info.endpoints}
    if info.storage_id is not None:
        obj["storage_id"] = info.storage_id
    return _dump(obj)


def encode_controller(info: ControllerInfo) -> bytes:
    return _dump({"node_id": info.node_id, "incarnation": info.incarnation})


def encode_topic(topic: TopicAssignment) -> bytes:
    # The name is the key's; the value does not repeat it (the design's value layout).
    return _dump({"topic_id": topic.topic_id, "internal": topic.internal,
                  "replicas": [list(r) for r in topic.replicas]})


def encode_partition(state: PartitionState) -> bytes:
    obj: dict[str, Any] = {"leader": state.leader, "leader_epoch": state.leader_epoch,
                           "isr": list(state.isr), "partition_epoch": state.partition_epoch}
    if state.isr_storage:
        obj["isr_storage"] = list(state.isr_storage)
    return _dump(obj)


class _Reader:
    """Field access that turns any malformed value into one ValueError naming the key,
    so an operator can find and fix it with etcdctl."""

    def __init__(self, key: str, value: bytes) -> None:
        self.key = key
        try:
            obj = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self.error(f"not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise self.error("not a JSON object")
        self.obj: dict[str, Any] = obj

    def error(self, why: str) -> ValueError:
        return ValueError(f"etcd key {self.key!r}: {why}")

    def get(self, field: str) -> Any:
        if field not in self.obj:
            raise self.error(f"missing {field!r}")
        return self.obj[field]

    def integer(self, field: str) -> int:
        v = self.get(field)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(f"{field!r} is not an integer: {v!r}")
        return v

    def string(self, field: str) -> str:
        v = self.get(field)
        if not isinstance(v, str):
            raise self.error(f"{field!r} is not a string: {v!r}")
        return v

    def opt_str(self, field: str) -> str | None:
        v = self.obj.get(field)
        if v is not None and not isinstance(v, str):
            raise self.error(f"{field!r} is not a string or null: {v!r}")
        return v

    def boolean(self, field: str) -> bool:
        v = self.get(field)
        if not isinstance(v, bool):
            raise self.error(f"{field!r} is not a boolean: {v!r}")
        return v

    def ints(self, field: str) -> tuple[int, ...]:
        return self.int_list(field, self.get(field))

    def int_list(self, field: str, v: Any) -> tuple[int, ...]:
        if not isinstance(v, list) or any(
                isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise self.error(f"{field!r} is not a list of integers: {v!r}")
        return tuple(v)


def decode_broker(key: str, value: bytes) -> BrokerInfo:
    r = _Reader(key, value)
    return BrokerInfo(node_id=r.integer("node_id"), host=r.string("host"), port=r.integer("port"),
                      rack=r.opt_str("rack"), incarnation=r.string("incarnation"),
                      endpoints=_endpoints(r), storage_id=r.opt_str("storage_id"))


def _endpoints(r: _Reader) -> tuple[Endpoint, ...]:
    """``{"NAME": [host, port], ...}``, optional: older brokers registered none."""
    raw = r.obj.get("endpoints")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise r.error(f"'endpoints' is not an object: {raw!r}")
    found = []
    for name, address in raw.items():
        if (not isinstance(address, list) or len(address) != 2
                or not isinstance(address[0], str) or isinstance(address[1], bool)
                or not isinstance(address[1], int)):
            raise r.error(f"'endpoints' {name!r} is not [host, port]: {address!r}")
        found.append(Endpoint(name, address[0], address[1]))
    return tuple(found)


def decode_controller(key: str, value: bytes) -> ControllerInfo:
    r = _Reader(key, value)
    return ControllerInfo(node_id=r.integer("node_id"), incarnation=r.string("incarnation"))


def decode_topic(key: str, name: str, value: bytes) -> TopicAssignment:
    r = _Reader(key, value)
    replicas = r.get("replicas")
    if not isinstance(replicas, list):
        raise r.error(f"'replicas' is not a list: {replicas!r}")
    return TopicAssignment(name=name, topic_id=r.string("topic_id"), internal=r.boolean("internal"),
                           replicas=tuple(r.int_list("replicas", p) for p in replicas))


def decode_partition(key: str, value: bytes) -> PartitionState:
    r = _Reader(key, value)
    isr = r.ints("isr")
    # Optional: a value from before storage identities has none (all unknown).
    storage = r.obj.get("isr_storage")
    if storage is None:
        storage = []
    if not isinstance(storage, list) or any(
            s is not None and not isinstance(s, str) for s in storage):
        raise r.error(f"'isr_storage' is not a list of strings or nulls: {storage!r}")
    if storage and len(storage) != len(isr):
        raise r.error(f"'isr_storage' {storage!r} does not match 'isr' {list(isr)!r}")
    return PartitionState(leader=r.integer("leader"), leader_epoch=r.integer("leader_epoch"),
                          isr=isr, partition_epoch=r.integer("partition_epoch"),
                          isr_storage=tuple(storage))
