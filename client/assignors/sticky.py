"""Kafka's eager StickyAssignor, and the user data that carries its memory.

Eager members revoke everything before they join, so their subscriptions report nothing
owned. Like Kafka's, this assignor asks each member to send its last assignment and
generation in the subscription's ``user_data`` (:meth:`StickyAssignor.metadata_user_data`)
and reads them back when it runs on the leader.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, ClassVar, Final

import msgpack

from groupwire.client.assignors.base import (
    EAGER,
    NO_GENERATION,
    Assignment,
    RebalanceProtocol,
    Subscription,
)
from groupwire.client.assignors.ownership import Claim
from groupwire.client.assignors.sticky_core import sticky_assign
from groupwire.client.types import TopicPartition

__all__ = ["StickyAssignor", "decode_sticky_user_data", "encode_sticky_user_data"]


class StickyAssignor:
    """Balanced, and moves as few partitions as balance allows; eager protocol only."""

    name: Final = "sticky"
    rebalance_protocol: Final[RebalanceProtocol] = EAGER
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (EAGER,)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        claims = {m: _claim(s) for m, s in subscriptions.items()}
        assignment, _ = sticky_assign(partitions_per_topic, subscriptions, claims)
        return assignment

    def metadata_user_data(
        self, assigned: Collection[TopicPartition], generation: int
    ) -> bytes | None:
        """What a member puts in its subscription so the next leader knows its history."""
        return encode_sticky_user_data(assigned, generation)

    def __repr__(self) -> str:
        return "StickyAssignor()"


def _claim(subscription: Subscription) -> Claim:
    """From user data when it decodes; else from the subscription's own fields (a
    cooperative-style member, or a caller feeding ownership directly)."""
    if subscription.user_data:
        decoded = decode_sticky_user_data(subscription.user_data)
        if decoded is not None:
            return decoded
    return Claim(tuple(subscription.owned_partitions), subscription.generation)


def encode_sticky_user_data(assigned: Collection[TopicPartition], generation: int) -> bytes:
    """``{"owned_partitions": [[topic, [int]]], "generation_id": int}`` as msgpack."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(assigned):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    data: bytes = msgpack.packb(
        {"owned_partitions": [[t, ps] for t, ps in by_topic.items()], "generation_id": generation},
        use_bin_type=True,
    )
    return data


def decode_sticky_user_data(data: bytes) -> Claim | None:
    """The claim in a member's user data, or None when it is not ours (then it is ignored,
    as Kafka ignores user data it cannot read: the member simply owns nothing)."""
    try:
        obj: Any = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception:  # msgpack raises several unrelated types on garbage
        return None
    if not isinstance(obj, dict):
        return None
    generation = obj.get("generation_id", NO_GENERATION)
    entries = obj.get("owned_partitions")
    if type(generation) is not int or not isinstance(entries, list):
        return None
    partitions: list[TopicPartition] = []
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2):
            return None
        topic, numbers = entry
        if type(topic) is not str or not isinstance(numbers, list):
            return None
        if not all(type(p) is int for p in numbers):
            return None
        partitions.extend(TopicPartition(topic, p) for p in numbers)
    return Claim(tuple(partitions), generation)
