"""The Consumer: aiokafka's shape, Kafka Java's membership (reference §15).

What runs where:

* The application's loop runs every poll (``getmany``/``getone``/iteration). Joins and
  syncs are driven from polls: the JoinGroup/SyncGroup exchange runs as a task on this loop
  and its outcome (listener callbacks, new positions) is applied inside a later poll, so
  callbacks run on the app's loop, inside its poll. Fetches run here too, one in flight.
* The heartbeat thread (:mod:`client.heartbeat`) runs its own loop and connection, reports
  poll age, and leaves the group when the app stops polling.
* :class:`~client.membership.Membership` (pure) is shared by both under a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from groupwire.client.assignors import (
    PartitionAssignor,
    get_assignor,
    rebalance_protocol_for,
)
from groupwire.client.errors import (
    ClientClosedError,
    CommitFailedError,
    FencedInstanceIdError,
    IllegalStateError,
    ListenerError,
    RebalanceInProgressError,
    error_for,
)
from groupwire.client.fetcher import EARLIEST, LATEST, Fetcher
from groupwire.client.heartbeat import HeartbeatThread, monotonic_ms
from groupwire.client.joiner import Joiner
from groupwire.client.link import CoordinatorLink, backoff_ms
from groupwire.client.listener import RebalanceListener, invoke
from groupwire.client.membership import CommitCheck, Generation, Membership, MemberState
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import OffsetAndMetadata, Record, TopicPartition, parse_bootstrap
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchGroup,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)

__all__ = ["Consumer"]

log = logging.getLogger("groupwire.consumer")

_GROUP_ERRORS = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                           ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID})


class Consumer:
    """An async consumer; ``async with Consumer(...) as c:`` starts and closes it."""

    def __init__(self, bootstrap: str | list[str], *, group_id: str | None = None,
                 client_id: str = "groupwire", group_instance_id: str | None = None,
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, rebalance_timeout_ms: int | None = None,
                 partition_assignment_strategy: Iterable[str | PartitionAssignor] = ("range",),
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 auto_offset_reset: str = "latest", max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52428800, max_partition_fetch_bytes: int = 1048576,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 metadata_max_age_ms: int = 30000, close_timeout_ms: int = 5000) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        if max_poll_records < 1:
            raise ValueError("max_poll_records must be >= 1")
        self._bootstrap = parse_bootstrap(bootstrap)
        self.group_id = group_id
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        self._session_ms = session_timeout_ms
        self._heartbeat_ms = heartbeat_interval_ms
        self._max_poll_ms = max_poll_interval_ms
        self._rebalance_ms = rebalance_timeout_ms or max_poll_interval_ms
        self._assignors = [get_assignor(a) for a in partition_assignment_strategy]
        self._protocol = rebalance_protocol_for(self._assignors)
        self._auto_commit = enable_auto_commit and group_id is not None
        self._auto_commit_ms = auto_commit_interval_ms
        self._max_poll_records = max_poll_records
        self._request_timeout = request_timeout_ms / 1000
        self._backoff_ms = retry_backoff_ms
        self._metadata_age_ms = metadata_max_age_ms
        self._close_timeout = close_timeout_ms / 1000
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._lock = threading.Lock()
        self._m = Membership(group_instance_id=group_instance_id,
                             max_poll_interval_ms=max_poll_interval_ms, now_ms=monotonic_ms())
        self._subs = SubscriptionState()
        self._link = CoordinatorLink(
            self._bootstrap, group_id=group_id, client_id=client_id,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self._fetcher = Fetcher(
            self._subs, self._link.send, auto_offset_reset=auto_offset_reset,
            fetch_max_wait_ms=fetch_max_wait_ms, fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes, max_partition_fetch_bytes=max_partition_fetch_bytes,
            retry_backoff_ms=retry_backoff_ms)
        self._listener: RebalanceListener | None = None
        self._listener_error: ListenerError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._hb: HeartbeatThread | None = None
        self._join_task: asyncio.Task[list[TopicPartition] | None] | None = None
        self._leave_task: asyncio.Task[None] | None = None
        self._started = False
        self._closing = False   # close() running: listeners may still commit
        self._closed = False
        self._next_autocommit_ms = 0
        self._next_metadata_ms = 0
        self._joiner = Joiner(
            link=self._link, membership=self._m, lock=self._lock, subs=self._subs,
            group_id=group_id or "", group_instance_id=group_instance_id,
            assignors=self._assignors, protocol=self._protocol,
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=self._rebalance_ms,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            wake_heartbeat=self._wake_heartbeat, is_closed=lambda: self._closed)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._changed = asyncio.Event()
        self._fetcher.on_done = self._wake
        await self._link.connection()
        if self.group_id is not None:
            self._hb = HeartbeatThread(
                membership=self._m, lock=self._lock, group_id=self.group_id,
                address=lambda: self._link.coordinator, client_id=self.client_id,
                heartbeat_interval_ms=self._heartbeat_ms, session_timeout_ms=self._session_ms,
                request_timeout_ms=int(self._request_timeout * 1000),
                retry_backoff_ms=self._backoff_ms, notify=self._notify_threadsafe)
            self._hb.start()
        self._next_autocommit_ms = monotonic_ms() + self._auto_commit_ms
        self._next_metadata_ms = monotonic_ms() + self._metadata_age_ms
        self._started = True

    async def close(self) -> None:
        """Commit (auto-commit), revoke, leave (dynamic members), stop; bounded in time."""
        if self._closed or self._closing:
            return
        self._closing = True
        if not self._started:
            self._closed = True
            return
        try:
            await asyncio.wait_for(self._close_group(), self._close_timeout)
        except Exception as exc:  # close must finish whatever happens
            log.warning("consumer close: %s", exc)
        finally:
            self._closed = True
            tasks = [t for t in (self._join_task, self._fetcher.cancel()) if t is not None]
            for task in tasks:
                task.cancel()
            if self._leave_task is not None:
                tasks.append(self._leave_task)  # let an unsubscribe's LeaveGroup finish
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True),
                                       self._close_timeout)
            if self._hb is not None:
                await asyncio.to_thread(self._hb.stop, self._close_timeout)
            await self._link.close()
            with self._lock:
                self._m.close()

    async def _close_group(self) -> None:
        if self.group_id is None:
            return
        if self._subs.manual:
            if self._auto_commit:
                with contextlib.suppress(Exception):
                    await self.commit()
            return
        with self._lock:
            lost = self._m.take_lost()
            state = self._m.state
            member = self._m.generation
        owned = self._subs.assigned()
        if owned:
            if lost or state != MemberState.STABLE:
                await self._call_listener("on_partitions_lost", owned)
            else:
                if self._auto_commit:
                    with contextlib.suppress(Exception):
                        await self.commit()
                await self._call_listener("on_partitions_revoked", owned)
        self._subs.set_assignment(())
        if self._hb is not None:
            await asyncio.to_thread(self._hb.stop, self._close_timeout)
        if self.group_instance_id is None and member.member_id:
            with contextlib.suppress(Exception):
                await self._link.send(LeaveGroupRequest(group_id=self.group_id, members=[
                    MemberIdentity(member_id=member.member_id,
                                   reason="the consumer is being closed")]), retry=False)

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                  listener: RebalanceListener | None = None) -> None:
        if self.group_id is None:
            raise IllegalStateError("subscribe() needs a group_id; use assign() without one")
        if isinstance(topics, str):
            topics = [topics]
        self._subs.subscribe(topics, pattern)
        self._listener = listener
        with self._lock:
            self._m.request_rejoin()
        self._wake()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._subs.assign_manual(TopicPartition(*tp) for tp in partitions)

    def unsubscribe(self) -> None:
        """Stop consuming; a group member revokes its partitions and leaves the group
        (LeaveGroup for dynamic members) in the background, on this loop."""
        owned = self._subs.assigned()
        was_member = self._subs.subscribed and self.group_id is not None
        self._subs.unsubscribe()
        if not was_member or not self._started:
            return
        if self._join_task is not None:
            self._join_task.cancel()
            self._join_task = None
        with self._lock:
            stable = self._m.state == MemberState.STABLE
            leave = self._m.leave()
        self._leave_task = asyncio.get_running_loop().create_task(
            self._after_unsubscribe(owned, stable, leave), name="groupwire-unsubscribe")

    async def _after_unsubscribe(self, owned: set[TopicPartition], stable: bool,
                                 leave: Generation | None) -> None:
        if owned:
            await self._call_listener(
                "on_partitions_revoked" if stable else "on_partitions_lost", owned)
        if leave is not None and self.group_id is not None:
            with contextlib.suppress(Exception):
                await self._link.send(LeaveGroupRequest(group_id=self.group_id, members=[
                    MemberIdentity(member_id=leave.member_id,
                                   reason="the consumer unsubscribed")]), retry=False)

    def assignment(self) -> set[TopicPartition]:
        return self._subs.assigned()

    def subscription(self) -> frozenset[str]:
        return self._subs.topics

    @property
    def member_id(self) -> str:
        return self._m.member_id

    @property
    def generation_id(self) -> int:
        return self._m.generation_id

    # --- positions ---------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._subs.state(tp).seek(offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions, EARLIEST)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions, LATEST)

    async def _seek_to(self, partitions: tuple[TopicPartition, ...], ts: int) -> None:
        tps = list(partitions) or list(self._subs.partitions)
        for tp in tps:
            self._subs.state(tp)
        offsets = await self._fetcher.list_offsets(tps, ts)
        for tp, off in offsets.items():
            if tp in self._subs.partitions and off >= 0:
                self._subs.partitions[tp].seek(off)

    async def position(self, tp: TopicPartition) -> int:
        st = self._subs.state(tp)
        if st.position is None or st.reset_needed:
            await self._fetcher.update_positions(self.group_id)
        if st.position is None:
            raise IllegalStateError(f"no position for {tp}")
        return st.position

    async def committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        if self.group_id is None:
            raise IllegalStateError("committed() needs a group_id")
        got = await self._fetcher.fetch_committed(self.group_id, [tp])
        off = got.get(tp, -1)
        return OffsetAndMetadata(off) if off >= 0 else None

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._subs.state(tp).highwater

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self.highwater(tp)

    def lag(self, tp: TopicPartition) -> int | None:
        st = self._subs.state(tp)
        if st.highwater is None or st.position is None:
            return None
        return max(0, st.highwater - st.position)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = False
        self._wake()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._subs.partitions.items() if st.paused}

    # --- polling ---------------------------------------------------------------------------

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        """Records by partition, waiting up to ``timeout_ms`` for some (a poll)."""
        self._check_open()
        with self._lock:
            self._m.poll_started(monotonic_ms())
        try:
            return await self._poll(timeout_ms, max_records or self._max_poll_records,
                                    set(partitions))
        finally:
            with self._lock:
                self._m.poll_ended(monotonic_ms())

    async def getone(self, *partitions: TopicPartition) -> Record:
        while True:
            got = await self.getmany(*partitions, timeout_ms=self._fetch_max_wait_ms,
                                     max_records=1)
            for records in got.values():
                return records[0]

    def __aiter__(self) -> AsyncIterator[Record]:
        return self

    async def __anext__(self) -> Record:
        if self._closed or self._closing:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except ClientClosedError:
            raise StopAsyncIteration from None

    async def _poll(self, timeout_ms: int, max_records: int, only: set[TopicPartition],
                    ) -> dict[TopicPartition, list[Record]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        assert self._wakeup is not None
        while True:
            self._wakeup.clear()
            self._raise_pending()
            await self._coordinator_poll()
            self._raise_pending()
            if self._subs.missing_positions():
                await self._fetcher.update_positions(self.group_id)
            if self._fetcher.error is not None:
                err, self._fetcher.error = self._fetcher.error, None
                raise err
            records = self._drain(max_records, only)
            self._fetcher.maybe_fetch(self._fetch_group())
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0 or self._closed:
                return {}
            if not self._wakeup.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), remaining)

    def _drain(self, max_records: int, only: set[TopicPartition],
               ) -> dict[TopicPartition, list[Record]]:
        if not only:
            return self._fetcher.drain(max_records)
        paused = [tp for tp in self._subs.partitions if tp not in only
                  and not self._subs.partitions[tp].paused]
        for tp in paused:
            self._subs.partitions[tp].paused = True
        try:
            return self._fetcher.drain(max_records)
        finally:
            for tp in paused:
                if tp in self._subs.partitions:
                    self._subs.partitions[tp].paused = False

    def _fetch_group(self) -> FetchGroup | None:
        if self.group_id is None or self._subs.manual:
            return None
        with self._lock:
            return FetchGroup(group_id=self.group_id, member_id=self._m.member_id,
                              generation_id=self._m.generation_id,
                              group_instance_id=self.group_instance_id)

    def _raise_pending(self) -> None:
        if self._closed or self._closing:
            raise ClientClosedError("consumer is closed")
        if self._listener_error is not None:
            err, self._listener_error = self._listener_error, None
            raise err
        if self._m.fatal_code is not None:
            raise error_for(self._m.fatal_code, "this member was fenced or cannot join")

    # --- membership, driven by polls ---------------------------------------------------

    async def _coordinator_poll(self) -> None:
        if self.group_id is None or not self._subs.subscribed:
            await self._maybe_autocommit()
            return
        with self._lock:
            if self._m.check_session(monotonic_ms(), self._session_ms):
                log.warning("no heartbeat answer for a session timeout: partitions of "
                            "group %s presumed lost, buffered records dropped", self.group_id)
            lost = self._m.take_lost()
        if lost:
            owned = self._subs.assigned()
            self._subs.set_assignment(())
            if owned:
                await self._call_listener("on_partitions_lost", owned)
        task = self._join_task
        if task is not None and task.done():
            self._join_task = None
            try:
                assigned = task.result()
            except Exception:
                # e.g. an assignor or a malformed assignment: surface it, rejoin next poll
                with self._lock:
                    self._m.connection_failed()
                    self._m.request_rejoin()
                raise
            if assigned is not None:
                await self._apply_assignment(assigned)
        with self._lock:
            join = self._join_task is None and self._m.needs_join()
        if join:
            await self._on_join_prepare()
            self._join_task = asyncio.get_running_loop().create_task(
                self._joiner.join_and_sync(), name="groupwire-join")
            self._join_task.add_done_callback(lambda _t: self._wake())
            return
        await self._maybe_autocommit()
        await self._maybe_check_metadata()

    async def _on_join_prepare(self) -> None:
        """Eager: commit then revoke everything. Cooperative: revoke unsubscribed topics."""
        owned = self._subs.assigned()
        if not owned:
            return
        if self._protocol == "eager":
            if self._auto_commit:
                await self._commit_quietly()
            await self._call_listener("on_partitions_revoked", owned)
            self._subs.set_assignment(())
        else:
            gone = {tp for tp in owned if tp.topic not in self._current_topics()}
            if gone:
                if self._auto_commit:
                    await self._commit_quietly(gone)
                await self._call_listener("on_partitions_revoked", gone)
                self._subs.set_assignment(owned - gone)

    def _current_topics(self) -> frozenset[str]:
        return self._joiner.joined_topics if self._subs.pattern is not None else self._subs.topics

    async def _apply_assignment(self, assigned: list[TopicPartition]) -> None:
        new = set(assigned)
        old = self._subs.assigned()
        self._joiner.last_assignment = sorted(new)
        if self._protocol == "cooperative":
            revoked = old - new
            added = new - old
            if revoked:
                if self._auto_commit:
                    await self._commit_quietly(revoked)
                await self._call_listener("on_partitions_revoked", revoked)
                with self._lock:
                    self._m.request_rejoin()
            self._subs.set_assignment(new)
            await self._call_listener("on_partitions_assigned", added)
        else:
            self._subs.set_assignment(new)
            await self._call_listener("on_partitions_assigned", new)
        self._next_metadata_ms = monotonic_ms() + self._metadata_age_ms
        if self._hb is not None:
            self._hb.wake()

    async def _maybe_check_metadata(self) -> None:
        """Rejoin when a pattern matches new topics or (leader) partition counts changed."""
        now = monotonic_ms()
        if now < self._next_metadata_ms:
            return
        self._next_metadata_ms = now + self._metadata_age_ms
        with self._lock:
            stable = self._m.state == MemberState.STABLE and not self._m.rejoin_needed
            leader = self._m.is_leader()
            generation = self._m.generation
        if not stable or self._join_task is not None:
            return
        try:
            counts = await self._joiner.partition_counts(
                None if self._subs.pattern is not None else sorted(self._subs.topics))
        except Exception as exc:  # try again next time
            log.debug("metadata check failed: %s", exc)
            return
        rejoin = False
        joined = self._joiner.joined_topics
        if self._subs.pattern is not None and self._subs.match(counts) != joined:
            rejoin = True
        if leader and self._joiner.assigned_counts is not None:
            for topic, n in counts.items():
                known = self._joiner.assigned_counts.get(topic)
                if (n != known) if known is not None else topic in self._current_topics():
                    rejoin = True
        if rejoin:
            with self._lock:
                if self._join_task is not None or self._m.generation != generation:
                    return  # a rebalance started meanwhile: it reads fresh metadata anyway
                self._m.request_rejoin()
            log.info("subscribed metadata changed: rejoining")

    async def _call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        if self._listener is None:
            return
        try:
            await invoke(getattr(self._listener, name)(set(partitions)))
        except Exception as exc:  # surfaces on the next poll
            log.warning("rebalance listener %s raised: %r", name, exc)
            if self._listener_error is None:
                err = ListenerError(f"{name} raised {exc!r}")
                err.__cause__ = exc
                self._listener_error = err

    # --- commits -----------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                     | None = None) -> None:
        """Commit ``offsets`` (default: positions of every assigned partition)."""
        self._check_open()
        if self.group_id is None:
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
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, om in chosen.items():
            by_topic.setdefault(tp.topic, []).append(OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=om.offset,
                committed_metadata=om.metadata or None))
        request = OffsetCommitRequest(
            group_id=self.group_id, generation_id=generation, member_id=member_id,
            group_instance_id=self.group_instance_id if generation >= 0 else None,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._request_timeout
        attempt = 0
        while True:
            resp = await self._link.send(request, response_type=OffsetCommitResponse)
            codes = {p.error_code for t in resp.topics for p in t.partitions}
            codes = (codes | {resp.error_code}) - {ErrorCode.NONE}
            if not codes:
                return
            code = min(codes, key=lambda c: (c not in _GROUP_ERRORS, c))
            if (code in _GROUP_ERRORS or code == ErrorCode.PARTITION_NOT_OWNED
                    or not error_for(code).retriable or loop.time() >= deadline):
                break
            attempt += 1  # retriable (coordinator moving, timeouts): back off and resend
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                await self._link.drop()
            await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)
        if code in _GROUP_ERRORS and generation >= 0:
            with self._lock:
                self._m.on_commit_error(code, sent, monotonic_ms())
            self._wake()
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                raise RebalanceInProgressError("the group began rebalancing; commit after it")
            if code == ErrorCode.FENCED_INSTANCE_ID:
                raise FencedInstanceIdError("another consumer took this group_instance_id")
            raise CommitFailedError(f"commit refused ({ErrorCode.name_of(code)}): the group "
                                    "moved to a new generation without this member")
        if code == ErrorCode.PARTITION_NOT_OWNED:
            raise CommitFailedError("commit refused: partitions not owned by this member")
        raise error_for(code, "commit failed")

    async def _commit_quietly(self, only: set[TopicPartition] | None = None) -> None:
        offsets = {tp: st.position for tp, st in self._subs.partitions.items()
                   if st.position is not None and (only is None or tp in only)}
        if not offsets:
            return
        try:
            await self.commit(dict(offsets))
        except Exception as exc:  # auto-commit failures are logged
            log.warning("auto-commit failed: %s", exc)

    async def _maybe_autocommit(self) -> None:
        if not self._auto_commit:
            return
        now = monotonic_ms()
        if now < self._next_autocommit_ms:
            return
        self._next_autocommit_ms = now + self._auto_commit_ms
        if self._subs.manual or self._m.state == MemberState.STABLE:
            await self._commit_quietly()

    # --- observability -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        now = monotonic_ms()
        with self._lock:
            m = self._m
            if self._closed:
                state = "closed"
            elif m.state == MemberState.STABLE and not m.rejoin_needed:
                state = "stable"
            elif m.lost_pending or m.state == MemberState.FATAL:
                state = "lost"
            else:
                state = "rebalancing"
            last_hb = m.last_heartbeat_answer_ms
            return {
                "state": state, "member_state": m.state.value,
                "generation_id": m.generation_id, "member_id": m.member_id,
                "assignment": sorted(self._subs.assigned()),
                "ms_since_heartbeat_answer": None if last_hb is None else now - last_hb,
                "ms_since_poll": m.poll_age_ms(now),
            }

    def metrics(self) -> dict[str, Any]:
        lag = {tp: self.lag(tp) for tp in self._subs.partitions}
        return {"lag": lag, "rebalance_count": self._m.rebalance_count,
                "last_rebalance_duration_ms": self._m.last_rebalance_duration_ms,
                "poll_expired_count": self._m.poll_expired_count}

    # --- I/O ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if not self._started:
            raise IllegalStateError("call start() (or use `async with`) first")

    def _wake_heartbeat(self) -> None:
        if self._hb is not None:
            self._hb.wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _notify_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._on_notify)

    def _on_notify(self) -> None:
        self._wake()
        if self._changed is not None:
            self._changed.set()

    async def _wait_for_change(self) -> None:
        """Wait until the heartbeat thread reports something (tests and tools use it)."""
        assert self._changed is not None
        self._changed.clear()
        await self._changed.wait()

