"""Rebalance handling for the consumer, run inside the application's polls.

Each poll, before any record is handed out: a member that heard no heartbeat answer for a
session timeout (or was told it is gone) drops its partitions and reports them lost; a
finished join/sync is applied (revoked, assigned, with the listener's callbacks on the
app's loop); a needed join is started as a supervised task. Leaving (``unsubscribe()``,
``close()``) revokes or loses what is owned, then sends LeaveGroup for dynamic members.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from groupwire.client.assignors import RebalanceProtocol
from groupwire.client.clock import Clock
from groupwire.client.commits import Committer
from groupwire.client.errors import ListenerError
from groupwire.client.joiner import Joiner
from groupwire.client.link import CoordinatorLink
from groupwire.client.listener import RebalanceListener, invoke
from groupwire.client.membership import Generation, Membership, MemberState
from groupwire.client.subscription import SubscriptionState
from groupwire.client.supervisor import TaskSupervisor
from groupwire.client.types import TopicPartition
from groupwire.protocol.messages import LeaveGroupRequest, MemberIdentity

__all__ = ["Rebalancer"]

log = logging.getLogger("groupwire.consumer")


@dataclass(frozen=True, slots=True)
class _JoinOutcome:
    """What a join/sync task ended with: its partitions (None: gave up) or its error."""

    assigned: list[TopicPartition] | None
    error: Exception | None = None


class Rebalancer:
    def __init__(self, *, group_id: str | None, group_instance_id: str | None,
                 membership: Membership, lock: threading.Lock, subs: SubscriptionState,
                 link: CoordinatorLink, joiner: Joiner, committer: Committer,
                 protocol: RebalanceProtocol, clock: Clock, session_timeout_ms: int,
                 tasks: TaskSupervisor, wake: Callable[[], None],
                 on_assigned: Callable[[], None]) -> None:
        self._group_id = group_id
        self._instance_id = group_instance_id
        self._m = membership
        self._lock = lock
        self._subs = subs
        self._link = link
        self._joiner = joiner
        self._commits = committer
        self._protocol = protocol
        self._clock = clock
        self._session_ms = session_timeout_ms
        self._tasks = tasks
        self._wake = wake
        self._on_assigned = on_assigned
        self.listener: RebalanceListener | None = None
        self._listener_error: ListenerError | None = None
        self._join_task: asyncio.Task[_JoinOutcome] | None = None
        self._leave_task: asyncio.Task[None] | None = None

    @property
    def joining(self) -> bool:
        """A join/sync task is out (its outcome not applied yet)."""
        return self._join_task is not None

    def take_listener_error(self) -> ListenerError | None:
        """The first listener error since the last call (raised from the next poll)."""
        err, self._listener_error = self._listener_error, None
        return err

    # --- each poll -------------------------------------------------------------------------

    async def poll(self) -> bool:
        """Settle membership for this poll; True when a join was started (the poll then
        commits nothing and checks no metadata)."""
        with self._lock:
            if self._m.check_session(self._clock(), self._session_ms):
                log.warning("no heartbeat answer for a session timeout: partitions of "
                            "group %s presumed lost, buffered records dropped", self._group_id)
            lost = self._m.take_lost()
        if lost:
            owned = self._subs.assigned()
            self._subs.set_assignment(())
            if owned:
                await self.call_listener("on_partitions_lost", owned)
        task = self._join_task
        if task is not None and task.done():
            self._join_task = None
            outcome = task.result()
            if outcome.error is not None:
                # e.g. an assignor or a malformed assignment: surface it, rejoin next poll
                with self._lock:
                    self._m.connection_failed()
                    self._m.request_rejoin()
                raise outcome.error
            if outcome.assigned is not None:
                await self._apply_assignment(outcome.assigned)
        with self._lock:
            join = self._join_task is None and self._m.needs_join()
        if not join:
            return False
        await self._on_join_prepare()
        self._join_task = self._tasks.spawn(self._join(), name="groupwire-join")
        self._join_task.add_done_callback(lambda _t: self._wake())
        return True

    async def _join(self) -> _JoinOutcome:
        try:
            return _JoinOutcome(await self._joiner.join_and_sync())
        except Exception as exc:  # applied (raised) by the next poll, as every outcome
            return _JoinOutcome(None, exc)

    async def _on_join_prepare(self) -> None:
        """Eager: commit then revoke everything. Cooperative: revoke unsubscribed topics."""
        owned = self._subs.assigned()
        if not owned:
            return
        if self._protocol == "eager":
            await self._commits.before_revoke()
            await self.call_listener("on_partitions_revoked", owned)
            self._subs.set_assignment(())
        else:
            current = self._joiner.current_topics()
            gone = {tp for tp in owned if tp.topic not in current}
            if gone:
                await self._commits.before_revoke(gone)
                await self.call_listener("on_partitions_revoked", gone)
                self._subs.set_assignment(owned - gone)

    async def _apply_assignment(self, assigned: list[TopicPartition]) -> None:
        new = set(assigned)
        old = self._subs.assigned()
        self._joiner.last_assignment = sorted(new)
        if self._protocol == "cooperative":
            revoked = old - new
            added = new - old
            if revoked:
                await self._commits.before_revoke(revoked)
                await self.call_listener("on_partitions_revoked", revoked)
                with self._lock:
                    self._m.request_rejoin()
            self._subs.set_assignment(new)
            await self.call_listener("on_partitions_assigned", added)
        else:
            self._subs.set_assignment(new)
            await self.call_listener("on_partitions_assigned", new)
        self._on_assigned()

    async def call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        """Run one listener callback; its error is kept for the next poll to raise."""
        if self.listener is None:
            return
        try:
            await invoke(getattr(self.listener, name)(set(partitions)))
        except Exception as exc:  # surfaces on the next poll
            log.warning("rebalance listener %s raised: %r", name, exc)
            if self._listener_error is None:
                err = ListenerError(f"{name} raised {exc!r}")
                err.__cause__ = exc
                self._listener_error = err

    # --- leaving ---------------------------------------------------------------------------

    def unsubscribe(self, owned: set[TopicPartition]) -> None:
        """Stop any join, then revoke and leave in a supervised background task."""
        if self._join_task is not None:
            self._join_task.cancel()
            self._join_task = None
        with self._lock:
            stable = self._m.state == MemberState.STABLE
            leave = self._m.leave()
        self._leave_task = self._tasks.spawn(
            self._after_unsubscribe(owned, stable, leave), name="groupwire-unsubscribe")

    @property
    def leave_task(self) -> asyncio.Task[None] | None:
        """The revoke-and-leave after ``unsubscribe()``, while it may still be running."""
        return self._leave_task

    async def _after_unsubscribe(self, owned: set[TopicPartition], stable: bool,
                                 leave: Generation | None) -> None:
        if owned:
            await self.call_listener(
                "on_partitions_revoked" if stable else "on_partitions_lost", owned)
        if leave is not None:
            await self._send_leave(leave.member_id, "the consumer unsubscribed")

    async def close_group(self, stop_heartbeat: Callable[[], Awaitable[None]]) -> None:
        """On close: commit (auto-commit) and revoke, or report lost; then leave."""
        if self._group_id is None:
            return
        if self._subs.manual:
            await self._commits.commit_on_close()
            return
        with self._lock:
            lost = self._m.take_lost()
            state = self._m.state
            member = self._m.generation
        owned = self._subs.assigned()
        if owned:
            if lost or state != MemberState.STABLE:
                await self.call_listener("on_partitions_lost", owned)
            else:
                await self._commits.commit_on_close()
                await self.call_listener("on_partitions_revoked", owned)
        self._subs.set_assignment(())
        await stop_heartbeat()
        if self._instance_id is None and member.member_id:
            await self._send_leave(member.member_id, "the consumer is being closed")

    async def _send_leave(self, member_id: str, reason: str) -> None:
        """LeaveGroup, best effort: the session timeout removes the member anyway."""
        assert self._group_id is not None
        with contextlib.suppress(Exception):
            await self._link.send(LeaveGroupRequest(group_id=self._group_id, members=[
                MemberIdentity(member_id=member_id, reason=reason)]), retry=False)
