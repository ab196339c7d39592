"""Requests held open (parked) by the coordinator, by group and member.

Kafka keeps response futures on its member objects; here a parked request is only a reply
address (connection, correlation id) kept beside the group metadata, indexed by
connection so that a closed connection drops its parked requests in one step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from groupwire.broker.coordinator.timers import TimerKey

Kind = Literal["join", "sync", "heartbeat"]
JOIN: Final = "join"
SYNC: Final = "sync"
HEARTBEAT: Final = "heartbeat"


@dataclass(frozen=True, slots=True)
class Address:
    """Where a parked request's reply goes. ``timer`` is a long-poll heartbeat's key."""

    conn_id: int
    correlation_id: int
    timer: TimerKey | None = None


@dataclass(frozen=True, slots=True)
class Dropped:
    kind: Kind
    group_id: str
    member_id: str
    address: Address


_NO_WAITERS: Final[frozenset[str]] = frozenset()
"""The members parked in a group with none: immutable, and ``in`` on it (once per
heartbeat) costs what it does on a dict."""


class Parking:
    """Per group: member -> address, one table per kind (at most one request each)."""

    __slots__ = ("_tables", "_by_conn", "_by_timer")

    def __init__(self) -> None:
        self._tables: dict[Kind, dict[str, dict[str, Address]]] = {
            JOIN: {}, SYNC: {}, HEARTBEAT: {}}
        self._by_conn: dict[int, set[tuple[Kind, str, str]]] = {}
        self._by_timer: dict[TimerKey, tuple[str, str]] = {}

    def park(self, kind: Kind, group_id: str, member_id: str, address: Address) -> Address | None:
        """Hold a request; returns the member's previous one of this kind, displaced."""
        waiters = self._tables[kind].setdefault(group_id, {})
        old = waiters.get(member_id)
        if old is not None:
            self._unindex(kind, group_id, member_id, old)
        waiters[member_id] = address
        self._by_conn.setdefault(address.conn_id, set()).add((kind, group_id, member_id))
        if address.timer is not None:
            self._by_timer[address.timer] = (group_id, member_id)
        return old

    def take(self, kind: Kind, group_id: str, member_id: str) -> Address | None:
        waiters = self._tables[kind].get(group_id)
        if not waiters:
            return None
        address = waiters.pop(member_id, None)
        if address is not None:
            self._unindex(kind, group_id, member_id, address)
            if not waiters:
                del self._tables[kind][group_id]
        return address

    def take_all(self, kind: Kind, group_id: str) -> list[tuple[str, Address]]:
        waiters = self._tables[kind].pop(group_id, None)
        if not waiters:
            return []
        for member_id, address in waiters.items():
            self._unindex(kind, group_id, member_id, address)
        return list(waiters.items())

    def is_parked(self, kind: Kind, group_id: str, member_id: str) -> bool:
        return member_id in self._tables[kind].get(group_id, _NO_WAITERS)

    def table(self, kind: Kind) -> Mapping[str, Mapping[str, object]]:
        """Group id -> the members with a request of ``kind`` parked: the live table (it
        changes as requests are parked and taken), for a caller that asks once per
        heartbeat and cannot afford :meth:`is_parked`'s call."""
        return self._tables[kind]

    def count(self, kind: Kind, group_id: str) -> int:
        return len(self._tables[kind].get(group_id, _NO_WAITERS))

    def members(self, kind: Kind, group_id: str) -> list[str]:
        return list(self._tables[kind].get(group_id, _NO_WAITERS))

    def long_poll_timers(self) -> frozenset[TimerKey]:
        """The timer keys of every parked long poll."""
        return frozenset(self._by_timer)

    def heartbeat_for_timer(self, key: TimerKey) -> tuple[str, str] | None:
        return self._by_timer.get(key)

    def drop_conn(self, conn_id: int) -> list[Dropped]:
        """Forget every request parked on a closed connection (they get no reply)."""
        entries = self._by_conn.pop(conn_id, None)
        if not entries:
            return []
        dropped: list[Dropped] = []
        for kind, group_id, member_id in sorted(entries):
            waiters = self._tables[kind].get(group_id)
            if not waiters:
                continue
            address = waiters.get(member_id)
            if address is None or address.conn_id != conn_id:
                continue
            del waiters[member_id]
            if not waiters:
                del self._tables[kind][group_id]
            if address.timer is not None:
                self._by_timer.pop(address.timer, None)
            dropped.append(Dropped(kind, group_id, member_id, address))
        return dropped

    def __len__(self) -> int:
        return sum(len(w) for table in self._tables.values() for w in table.values())

    def _unindex(self, kind: Kind, group_id: str, member_id: str, address: Address) -> None:
        entries = self._by_conn.get(address.conn_id)
        if entries is not None:
            entries.discard((kind, group_id, member_id))
            if not entries:
                del self._by_conn[address.conn_id]
        if address.timer is not None:
            self._by_timer.pop(address.timer, None)
