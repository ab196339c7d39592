"""Offset commits for the consumer: explicit commits, their retries, and auto-commit.

A commit is checked against the member's generation first (no commit while rebalancing or
after the membership was lost), resent with backoff while the broker answers a retriable
error (coordinator moving, timeouts) until the request timeout, and a group error it meets
(the generation moved on, fenced) is fed back into the membership so the next poll
rejoins.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping

from groupwire.client.clock import Clock
from groupwire.client.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    GroupwireError,
    IllegalStateError,
    RebalanceInProgressError,
    error_for,
)
from groupwire.client.link import CoordinatorLink, backoff_ms
from groupwire.client.membership import CommitCheck, Generation, Membership, MemberState
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import OffsetAndMetadata, TopicPartition
from groupwire.protocol.errors import ErrorCode, ProtocolError
from groupwire.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)

__all__ = ["Committer"]

log = logging.getLogger("groupwire.consumer")

GROUP_ERRORS = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                          ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID})
"""Answers meaning this member's generation is gone: never retried, fed to membership."""


class Committer:
    def __init__(self, *, group_id: str | None, group_instance_id: str | None,
                 membership: Membership, lock: threading.Lock, subs: SubscriptionState,
                 link: CoordinatorLink, clock: Clock, auto_commit: bool,
                 auto_commit_interval_ms: int, request_timeout_ms: int, retry_backoff_ms: int,
                 check_open: Callable[[], None], wake: Callable[[], None]) -> None:
        self._group_id = group_id
        self._instance_id = group_instance_id
        self._m = membership
        self._lock = lock
        self._subs = subs
        self._link = link
        self._clock = clock
        self.auto_commit = auto_commit
        self._interval_ms = auto_commit_interval_ms
        self._timeout_ms = request_timeout_ms
        self._backoff_ms = retry_backoff_ms
        self._check_open = check_open
        self._wake = wake
        self._next_autocommit_ms = 0

    def start(self) -> None:
        """The first auto-commit is one interval after the consumer starts."""
        self._next_autocommit_ms = self._clock() + self._interval_ms

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                     | None = None) -> None:
        """Commit ``offsets`` (default: positions of every assigned partition)."""
        self._check_open()
        if self._group_id is None:
            raise IllegalStateError("commit() needs a group_id")
        if offsets is None:
            chosen: dict[TopicPartition, OffsetAndMetadata] = {
                tp: OffsetAndMetadata(st.position)
                for tp, st in self._subs.partitions.items() if st.position is not None}
        else:
            chosen = {TopicPartition(*tp): (o if isinstance(o, OffsetAndMetadata)
                                            else OffsetAndMetadata(o))
                      for tp, o in offsets.items()}
        if not chosen:
            return
        sent: Generation | None = None
        if self._subs.manual:
            generation, member_id = -1, ""
        else:
            with self._lock:
                check = self._m.commit_check()
                sent = self._m.generation
            if check == CommitCheck.REBALANCING:
                raise RebalanceInProgressError("the group is rebalancing; commit after it")
            if check == CommitCheck.FAILED:
                raise CommitFailedError(
                    "this member is no longer in the group (poll interval expired, "
                    "removed or fenced): its partitions may belong to others now")
            generation, member_id = sent.generation_id, sent.member_id
        request = self._request(self._group_id, chosen, generation, member_id)
        code, topic = await self._send_with_retries(request)
        if code == ErrorCode.NONE:
            return
        if code in GROUP_ERRORS and generation >= 0:
            assert sent is not None
            with self._lock:
                self._m.on_commit_error(code, sent, self._clock())
            self._wake()
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                raise RebalanceInProgressError("the group began rebalancing; commit after it")
            if code == ErrorCode.FENCED_INSTANCE_ID:
                raise FencedInstanceIdError("another consumer took this group_instance_id")
            raise CommitFailedError(f"commit refused ({ErrorCode.name_of(code)}): the group "
                                    "moved to a new generation without this member")
        if code == ErrorCode.PARTITION_NOT_OWNED:
            raise CommitFailedError("commit refused: partitions not owned by this member")
        raise error_for(code, "commit failed", topic=topic, group_id=self._group_id)

    def _request(self, group_id: str, chosen: dict[TopicPartition, OffsetAndMetadata],
                 generation: int, member_id: str) -> OffsetCommitRequest:
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, om in chosen.items():
            by_topic.setdefault(tp.topic, []).append(OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=om.offset,
                committed_metadata=om.metadata or None))
        return OffsetCommitRequest(
            group_id=group_id, generation_id=generation, member_id=member_id,
            group_instance_id=self._instance_id if generation >= 0 else None,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])

    async def _send_with_retries(self, request: OffsetCommitRequest,
                                 ) -> tuple[int, str | None]:
        """The answer's deciding error code (NONE when every offset was stored) and the
        first topic answered with it, after resending while it is retriable and the
        request timeout has not passed."""
        deadline = self._clock() + self._timeout_ms
        attempt = 0
        while True:
            resp: OffsetCommitResponse = await self._link.send(
                request, response_type=OffsetCommitResponse)
            codes = {p.error_code for t in resp.topics for p in t.partitions}
            codes = (codes | {resp.error_code}) - {ErrorCode.NONE}
            if not codes:
                return ErrorCode.NONE, None
            code: int = min(codes, key=lambda c: (c not in GROUP_ERRORS, c))
            if (code in GROUP_ERRORS or code == ErrorCode.PARTITION_NOT_OWNED
                    or not error_for(code).retriable or self._clock() >= deadline):
                return code, next((t.name for t in resp.topics for p in t.partitions
                                   if p.error_code == code), None)
            attempt += 1  # retriable (coordinator moving, timeouts): back off and resend
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                await self._link.drop()
            await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)

    async def commit_quietly(self, only: set[TopicPartition] | None = None) -> None:
        """Commit current positions (of ``only``), logging a failure instead of raising."""
        offsets = {tp: st.position for tp, st in self._subs.partitions.items()
                   if st.position is not None and (only is None or tp in only)}
        if not offsets:
            return
        try:
            await self.commit(dict(offsets))
        except Exception as exc:  # auto-commit failures are logged
            log.warning("auto-commit failed: %s", exc)

    async def commit_on_close(self) -> None:
        """The last auto-commit, as the consumer closes. A failure the broker or the
        network caused is logged at warning, as aiokafka logs its own (the group resumes
        from the offsets committed before: records after them are delivered again);
        anything else (a bug) is raised."""
        if not self.auto_commit:
            return
        try:
            await self.commit()
        except (GroupwireError, ProtocolError, OSError) as exc:
            log.warning("auto-commit on close failed: %s (the group will resume from "
                        "the offsets committed before)", str(exc) or repr(exc))

    async def before_revoke(self, partitions: set[TopicPartition] | None = None) -> None:
        """Auto-commit what is about to be given up (nothing without auto-commit)."""
        if self.auto_commit:
            await self.commit_quietly(partitions)

    async def maybe_autocommit(self) -> None:
        """Commit every position when an auto-commit interval has passed."""
        if not self.auto_commit:
            return
        now = self._clock()
        if now < self._next_autocommit_ms:
            return
        self._next_autocommit_ms = now + self._interval_ms
        if self._subs.manual or self._m.state == MemberState.STABLE:
            await self.commit_quietly()
