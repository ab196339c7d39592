"""The rebalance listener contract: callbacks may be plain or async functions.

Callbacks run on the application's event loop, inside its poll, so they may touch the
consumer (commit, seek). A callback that raises does not kill the consumer: the consumer
wraps the error in :class:`~client.errors.ListenerError` and raises it from the next poll.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any

from groupwire.client.types import TopicPartition

__all__ = ["RebalanceListener", "invoke"]


class RebalanceListener:
    """Subclass and override what you need; every method may be ``async def``."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Called before partitions are given up (commit here: the generation is valid)."""
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """Called after an assignment (cooperative: only what was added, maybe empty)."""
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Membership was lost: others may own these already, so do not commit for them.

        The default treats lost as revoked, as Kafka's does.
        """
        return self.on_partitions_revoked(lost)


async def invoke(result: Any) -> None:
    """Await a callback's result when it is awaitable (async callbacks)."""
    if inspect.isawaitable(result):
        await _as_awaitable(result)


def _as_awaitable(obj: Awaitable[Any]) -> Awaitable[Any]:
    return obj
