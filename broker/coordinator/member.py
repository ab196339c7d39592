"""One group member's metadata (docs/design/kafka.md §1 "Member"), kept small: many are idle."""

from __future__ import annotations

from typing import Final

from groupwire.broker.coordinator.timers import TimerKey, session_key

Protocols = tuple[tuple[str, bytes], ...]
"""``((name, metadata), ...)`` in the member's order of preference."""

TP = tuple[str, int]
NO_PARTITIONS: Final[frozenset[TP]] = frozenset()


class Member:
    """Metadata only: where its parked requests are is the coordinator's business.

    ``owned`` is the member's partitions from the last applied assignment (docs/protocol.md
    §7.2), ``None`` when its assignment could not be decoded (an *opaque* member).
    ``principal`` is who created it, "" for nobody (an unowned member: §7.5).
    ``session_deadline`` is when its session ends, ``None`` while it has none (a member
    parked in JoinGroup/SyncGroup whose timer fired is "satisfied" and waits without one).
    While it is set, a session timer is armed for it or earlier: a heartbeat only moves
    the deadline later, and the timer, firing early, re-arms itself for it. That keeps
    timer operations off the heartbeat path.
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
        "last_conn",
        "extra_conns",
        "connection_lost",
        "owned",
        "releasing",
        "principal",
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
        principal: str = "",
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
        self.last_heartbeat_ms: int | None = None  # monotonic; DescribeGroups shows wall
        self.poll_age_ms: int | None = None
        self.last_conn = -1
        """The connection last attached (-1: none): the heartbeat path compares one int.
        Almost every member has exactly one connection, so the others, if any, live in
        ``extra_conns`` (None when there are none: a set per member is 216 bytes)."""
        self.extra_conns: set[int] | None = None
        self.connection_lost = False
        self.owned: frozenset[TP] | None = NO_PARTITIONS
        self.releasing: frozenset[TP] = NO_PARTITIONS
        self.principal = principal

    # --- connections the member is attached to ----------------------------------------

    @property
    def conns(self) -> frozenset[int]:
        extra = self.extra_conns
        if self.last_conn == -1:
            return frozenset()
        return frozenset((self.last_conn, *extra)) if extra else frozenset((self.last_conn,))

    def has_conn(self, conn_id: int) -> bool:
        return conn_id == self.last_conn or (
            self.extra_conns is not None and conn_id in self.extra_conns)

    def add_conn(self, conn_id: int) -> bool:
        """Attach ``conn_id`` as the last connection; False if it was attached already."""
        last = self.last_conn
        if conn_id == last:
            return False
        self.last_conn = conn_id
        if last == -1:
            return True
        extra = self.extra_conns
        if extra is None:
            extra = self.extra_conns = set()
        known = conn_id in extra
        extra.discard(conn_id)
        extra.add(last)
        return not known

    def remove_conn(self, conn_id: int) -> None:
        extra = self.extra_conns
        if conn_id == self.last_conn:
            self.last_conn = extra.pop() if extra else -1
        elif extra is not None:
            extra.discard(conn_id)
        if extra is not None and not extra:
            self.extra_conns = None

    def clear_conns(self) -> None:
        self.last_conn = -1
        self.extra_conns = None

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
