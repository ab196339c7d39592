"""Ownership fencing (docs/protocol.md §7.2): who owns which partition in ``"consumer"`` groups.

``owned(M)`` comes from the assignments a leader's SyncGroup installs; ``releasing(M)`` is
what M owned before an install that nobody owns after (cooperative withheld partitions).
Only ``"consumer"`` groups are decoded; an undecodable non-empty assignment makes its
member opaque (``owned is None``): checks skip it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import Owners
from groupwire.broker.coordinator.member import NO_PARTITIONS, TP, Member
from groupwire.broker.coordinator.sharing import Sharing


def install_ownership(group: Group, shared: Sharing) -> None:
    """Called when a leader's assignments are applied: every member's ``owned`` becomes its
    decoded assignment, ``releasing`` what it owned before and nobody owns now."""
    if not group.is_consumer:
        return
    before: list[tuple[Member, frozenset[TP] | None]] = []
    owned_after: set[TP] = set()
    for member in group.members.values():
        before.append((member, member.owned))
        member.owned = shared.assignment(member.assignment)[1]
        if member.owned:
            owned_after.update(member.owned)
    for member, previous in before:
        member.releasing = (previous - owned_after) if previous else NO_PARTITIONS


def restore_ownership(group: Group, shared: Sharing) -> None:
    """After a restart only the persisted assignment bytes are known: ``owned`` is them."""
    consumer = group.is_consumer
    for member in group.members.values():
        member.owned = shared.assignment(member.assignment)[1] if consumer else NO_PARTITIONS
        member.releasing = NO_PARTITIONS


def owner_map(group: Group) -> Owners:
    """partition -> owner key, for moved_partitions; empty outside consumer groups."""
    owners: Owners = {}
    if not group.is_consumer:
        return owners
    for member in group.members.values():
        if member.owned:
            key = member.owner_key
            for tp in member.owned:
                previous = owners.get(tp)
                if previous is None or key < previous:
                    owners[tp] = key
    return owners


_ALL_OWNED: Final[frozenset[TP]] = frozenset()


def not_owned(member: Member, partitions: Iterable[TP], *, releasing: bool) -> frozenset[TP]:
    """The requested partitions the member may not touch (fetch: owned; commit: owned or
    releasing). Opaque members are never refused."""
    owned = member.owned
    if owned is None:
        return _ALL_OWNED
    if releasing and member.releasing:
        refused = [tp for tp in partitions if tp not in owned and tp not in member.releasing]
    else:
        refused = [tp for tp in partitions if tp not in owned]
    return frozenset(refused) if refused else _ALL_OWNED
