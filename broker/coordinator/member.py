"""One group member's metadata (reference §1 "Member"), kept small: many are idle."""

from __future__ import annotations

from typing import Final

from broker.coordinator.timers import TimerKey, session_key

Protocols = tuple[tuple[str, bytes], ...]
"""``((name, metadata), ...)`` in the member's order of preference."""

TP = tuple[str, int]
NO_PARTITIONS: Final[frozenset[TP]] = frozenset()


class Member:
    """Metadata only: where its parked requests are is the coordinator's business.

    ``owned`` is the member's partitions from the last applied assignment (PROTOCOL.md
    §7.2), ``None`` when its assignment could not be decoded (an *opaque* member).
    ``session_deadline`` is ``None`` while no session timer runs (a member parked in
    JoinGroup/SyncGroup whose timer fired is "satisfied" and waits without one).
    """

    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "is_new",
        "session_key",
        "session_deadline",
        "last_heartbeat_ms",
        "poll_age_ms",
        "conns",
        "connection_lost",
        "owned",
        "releasing",
    )

    def __init__(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.is_new = False
        self.session_key: TimerKey = session_key(group_id, member_id)
        self.session_deadline: int | None = None
        self.last_heartbeat_ms: int | None = None
        self.poll_age_ms: int | None = None
        self.conns: set[int] = set()
        self.connection_lost = False
        self.owned: frozenset[TP] | None = NO_PARTITIONS
        self.releasing: frozenset[TP] = NO_PARTITIONS

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def owner_key(self) -> str:
        """Who owns a partition, for moved_partitions: instance id if static (§7.4)."""
        return self.group_instance_id if self.group_instance_id is not None else self.member_id

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def matches(self, protocols: Protocols) -> bool:
        """Same names, same metadata bytes, same order (Kafka's ``matches``)."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def __repr__(self) -> str:
        return f"Member({self.member_id!r}, instance={self.group_instance_id!r})"
