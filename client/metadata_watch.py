"""The consumer's metadata checks: rejoin when what it subscribed to changed, and say
when a subscribed topic does not exist.

Every ``metadata_max_age_ms`` a stable member reads Metadata; it asks for a rebalance
when a pattern now matches other topics, or (as the leader, who assigned from partition
counts) when a subscribed topic's partition count moved, or it appeared or was deleted.

A subscription to a topic that does not exist used to wait without a word for it to be
created. Now the topics of each new subscription are read at once (a task, so no poll
waits on it), and every periodic read looks again: a topic found missing is logged at
warning once, naming it and the group, and again only if it comes back and goes again,
as Kafka's clients warn after a metadata refresh. With ``missing_topics="fail"`` (the
command line's refusal, in the SDK) every poll raises
:class:`~groupwire.client.errors.UnknownTopicOrPartitionError` while the latest read
says a subscribed topic is missing, from the first answer on; such polls read again, at
most once per ``retry_backoff_ms``, so a topic created meanwhile ends the failures.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal

from groupwire.client.clock import Clock
from groupwire.client.cluster import Cluster, ClusterMetadata
from groupwire.client.errors import ClientClosedError, GroupwireError, UnknownTopicOrPartitionError
from groupwire.client.joiner import Joiner
from groupwire.client.membership import Membership, MemberState
from groupwire.client.subscription import SubscriptionState
from groupwire.protocol.errors import ErrorCode, ProtocolError

__all__ = ["MISSING_TOPICS", "MetadataWatch", "MissingTopics"]

log = logging.getLogger("groupwire.consumer")

MissingTopics = Literal["wait", "fail"]
MISSING_TOPICS: Final = ("wait", "fail")
"""The consumer's ``missing_topics`` choices: wait (warning once per topic) or fail."""

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class MetadataWatch:
    def __init__(self, *, joiner: Joiner, membership: Membership, lock: threading.Lock,
                 subs: SubscriptionState, clock: Clock, max_age_ms: int,
                 is_joining: Callable[[], bool], cluster: Cluster,
                 group_id: str | None = None, missing_topics: MissingTopics = "wait",
                 retry_backoff_ms: int = 100, spawn: Spawn | None = None,
                 wake: Callable[[], None] | None = None) -> None:
        if missing_topics not in MISSING_TOPICS:
            raise ValueError(f"missing_topics must be 'wait' or 'fail', not {missing_topics!r}")
        self._joiner = joiner
        self._m = membership
        self._lock = lock
        self._subs = subs
        self._clock = clock
        self._max_age_ms = max_age_ms
        self._is_joining = is_joining
        self._cluster = cluster
        self._group_id = group_id
        self._fail = missing_topics == "fail"
        self._backoff_ms = retry_backoff_ms
        self._spawn = spawn
        self._wake = wake
        self._next_check_ms = 0
        self.missing: frozenset[str] = frozenset()
        """Subscribed topics the latest read found missing (each warned once)."""
        self._probe_due = False       # a subscription whose topics were not read yet
        self._probe: asyncio.Task[None] | None = None
        self._read_at_ms: int | None = None

    def postpone(self) -> None:
        """Fresh metadata was just read (start, a new assignment): next check one age on."""
        self._next_check_ms = self._clock() + self._max_age_ms

    def subscribed(self) -> None:
        """The subscription changed: its topics are read at the next poll; topics no
        longer subscribed are forgotten (warned again if subscribed again and missing)."""
        self.missing &= self._subs.topics
        self._probe_due = bool(self._subs.topics) and self._subs.pattern is None

    # --- missing topics -----------------------------------------------------------------

    def poll(self) -> None:
        """At each poll: start the read a new subscription is owed, and (``"fail"``) raise
        while a subscribed topic is missing, asking again once a backoff has passed."""
        if self._fail and self.missing:
            read_at = self._read_at_ms
            if read_at is None or self._clock() - read_at >= self._backoff_ms:
                self._probe_due = True
        if self._probe_due and self._spawn is not None and (self._probe is None
                                                            or self._probe.done()):
            self._probe_due = False
            self._probe = self._spawn(self._read_subscribed(), "groupwire-topics-check")
        if self._fail and self.missing:
            raise self._missing_error()

    def _missing_error(self) -> UnknownTopicOrPartitionError:
        names = ", ".join(repr(t) for t in sorted(self.missing))
        return UnknownTopicOrPartitionError(
            f"subscribed topic(s) {names} of group {self._group_id!r} do not exist "
            f"(missing_topics='fail'; 'wait' waits for them to be created)")

    async def _read_subscribed(self) -> None:
        """Read the subscribed topics until an answer comes (backing off after a
        failure); the next poll is woken to act on it."""
        while True:
            asked = self._subs.topics
            if not asked or self._subs.pattern is not None:
                return
            try:
                md = await self._cluster.metadata(sorted(asked))
            except ClientClosedError:
                return
            except (GroupwireError, ProtocolError, OSError) as exc:
                log.debug("reading the subscribed topics failed (retrying): %s", exc)
                await asyncio.sleep(self._backoff_ms / 1000)
                continue
            if self._subs.topics == asked:
                self._note(asked, md)
                if self._wake is not None:
                    self._wake()
                return

    def _note(self, asked: frozenset[str], md: ClusterMetadata) -> None:
        """Warn of each asked topic that is newly missing; forget the ones that exist."""
        self._read_at_ms = self._clock()
        gone = frozenset(t for t in asked
                         if md.errors.get(t) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        new = sorted(gone - self.missing)
        back = sorted((self.missing & asked) - gone)
        self.missing = ((self.missing - asked) | gone) & self._subs.topics
        if new:
            names = ", ".join(repr(t) for t in new)
            then = ("every poll raises UnknownTopicOrPartitionError (missing_topics="
                    "'fail')" if self._fail else
                    "the consumer reads nothing from it until it is created")
            log.warning("consumer of group %r: subscribed topic(s) %s do not exist "
                        "(UNKNOWN_TOPIC_OR_PARTITION); %s", self._group_id, names, then)
        if back:
            log.info("consumer of group %r: subscribed topic(s) %s exist now",
                     self._group_id, ", ".join(repr(t) for t in back))

    # --- the periodic check ---------------------------------------------------------------

    async def maybe_check(self) -> None:
        """Rejoin when a pattern matches new topics or (leader) partition counts changed;
        note subscribed topics gone or back."""
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
        asked = self._subs.topics
        try:
            md = await self._cluster.metadata(
                None if self._subs.pattern is not None else sorted(asked))
        except Exception as exc:  # try again next time
            log.debug("metadata check failed: %s", exc)
            return
        counts = {t: n for t, n in md.partitions.items() if t not in md.internal}
        if self._subs.pattern is None and self._subs.topics == asked:
            self._note(asked, md)
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
