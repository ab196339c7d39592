"""The consumer's periodic metadata check: rejoin when what it subscribed to changed.

Every ``metadata_max_age_ms`` a stable member reads Metadata; it asks for a rebalance
when a pattern now matches other topics, or (as the leader, who assigned from partition
counts) when a subscribed topic's partition count moved, or it appeared or was deleted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from groupwire.client.clock import Clock
from groupwire.client.joiner import Joiner
from groupwire.client.membership import Membership, MemberState
from groupwire.client.subscription import SubscriptionState

__all__ = ["MetadataWatch"]

log = logging.getLogger("groupwire.consumer")


class MetadataWatch:
    def __init__(self, *, joiner: Joiner, membership: Membership, lock: threading.Lock,
                 subs: SubscriptionState, clock: Clock, max_age_ms: int,
                 is_joining: Callable[[], bool]) -> None:
        self._joiner = joiner
        self._m = membership
        self._lock = lock
        self._subs = subs
        self._clock = clock
        self._max_age_ms = max_age_ms
        self._is_joining = is_joining
        self._next_check_ms = 0

    def postpone(self) -> None:
        """Fresh metadata was just read (start, a new assignment): next check one age on."""
        self._next_check_ms = self._clock() + self._max_age_ms

    async def maybe_check(self) -> None:
        """Rejoin when a pattern matches new topics or (leader) partition counts changed."""
        now = self._clock()
        if now < self._next_check_ms:
            return
        self._next_check_ms = now + self._max_age_ms
        with self._lock:
            stable = self._m.state == MemberState.STABLE and not self._m.rejoin_needed
            leader = self._m.is_leader()
            generation = self._m.generation
        if not stable or self._is_joining():
            return
        try:
            counts = await self._joiner.partition_counts(
                None if self._subs.pattern is not None else sorted(self._subs.topics))
        except Exception as exc:  # try again next time
            log.debug("metadata check failed: %s", exc)
            return
        joined = self._joiner.joined_topics
        rejoin = self._subs.pattern is not None and self._subs.match(counts) != joined
        assigned = self._joiner.assigned_counts
        if leader and assigned is not None:
            current = self._joiner.current_topics()
            for topic, n in counts.items():
                known = assigned.get(topic)
                if (n != known) if known is not None else topic in current:
                    rejoin = True
            if any(t in current and t not in counts for t in assigned):
                rejoin = True  # deleted since: assign again without it (Kafka does)
        if rejoin:
            with self._lock:
                if self._is_joining() or self._m.generation != generation:
                    return  # a rebalance started meanwhile: it reads fresh metadata anyway
                self._m.request_rejoin()
            log.info("subscribed metadata changed: rejoining")
