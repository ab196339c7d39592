"""A read-only window on the coordinator's state, for tests, tools and invariant checks.

It hands out the live metadata objects (groups, members): read them, never change them;
every change goes through the coordinator's inputs and shows in their results.
"""

from __future__ import annotations

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.parking import Kind
from groupwire.broker.coordinator.timers import TimerKey


class CoreView:
    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def group(self, group_id: str) -> Group | None:
        return self._engine.groups.get(group_id)

    def groups(self) -> list[Group]:
        return list(self._engine.groups.values())

    def parked(self, kind: Kind, group_id: str) -> list[str]:
        """Members of the group with a request of ``kind`` parked."""
        return self._engine.parking.members(kind, group_id)

    def parked_total(self) -> int:
        """Requests parked across all groups and kinds."""
        return len(self._engine.parking)

    def long_poll_timers(self) -> frozenset[TimerKey]:
        return self._engine.parking.long_poll_timers()

    def is_awaiting_join(self, group_id: str, member_id: str) -> bool:
        group = self._engine.groups.get(group_id)
        return group is not None and self._engine.is_awaiting_join(group, member_id)

    def is_satisfied(self, group_id: str, member_id: str) -> bool:
        """Kafka's ``hasSatisfiedHeartbeat``: parked in Join or Sync, so no session timer."""
        group = self._engine.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        return member is not None and self._engine.is_satisfied(group, member)  # type: ignore[arg-type]
