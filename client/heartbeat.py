"""The heartbeat thread: its own event loop, its own connection, independent of the app.

An application that blocks its loop (CPU work, ``time.sleep`` in a handler) keeps its
membership because heartbeats leave from here. Each Heartbeat reports ``poll_age_ms`` and
long-polls (``wait_ms``, docs/protocol.md §7.3) so a rebalance or removal is known at once.
Outcomes go into the shared :class:`~client.membership.Membership` (under its lock) and
``notify()`` wakes the app's loop; the app's next poll acts on them (rejoin, lost).
When the app has not polled within ``max_poll_interval_ms`` this thread leaves the group
(LeaveGroup for dynamic members, nothing for static ones) and marks membership lost.
After NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a lost connection it finds the
coordinator again itself (asking the broker it reached, else the bootstrap list), so a
moved coordinator gets this member's heartbeats, same member id and generation, without
waiting for the app's loop. Its connection is made as the app's are (TLS, SASL): the
broker authenticates each connection; credentials or ACLs it refuses end the thread and
the app's next poll raises that refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from groupwire.client.clock import Clock
from groupwire.client.connection import Connection
from groupwire.client.errors import BrokerResponseError
from groupwire.client.link import COORDINATOR_RETRY_MAX_MS, backoff_ms, find_coordinator_on
from groupwire.client.membership import Action, Membership
from groupwire.client.sasl import authenticate
from groupwire.client.security import SecurityConfig
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
)

__all__ = ["HeartbeatThread"]

log = logging.getLogger("groupwire.consumer.heartbeat")


class HeartbeatThread(threading.Thread):
    def __init__(self, *, membership: Membership, lock: threading.Lock, group_id: str,
                 address: Callable[[], tuple[str, int] | None], client_id: str,
                 heartbeat_interval_ms: int, session_timeout_ms: int,
                 request_timeout_ms: int, retry_backoff_ms: int,
                 notify: Callable[[], None], clock: Clock,
                 bootstrap: list[tuple[str, int]] | None = None,
                 security: SecurityConfig | None = None) -> None:
        super().__init__(name=f"groupwire-heartbeat-{group_id}", daemon=True)
        self._m = membership
        self._lock = lock
        self._group_id = group_id
        self._address = address
        self._bootstrap_list = list(bootstrap or [])
        self._found: tuple[str, int] | None = None  # the coordinator this thread found
        self._find_again = False
        self._client_id = client_id
        self._security = security or SecurityConfig()
        self._interval_ms = heartbeat_interval_ms
        self._session_ms = session_timeout_ms
        self._request_timeout = request_timeout_ms / 1000
        self._backoff_ms = retry_backoff_ms
        self._notify = notify
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._main_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._conn: Connection | None = None
        self._started = threading.Event()
        self.error: BaseException | None = None   # set if the thread crashed
        self.last_send_ms: int | None = None
        self.sent = 0

    # --- called from the app side ----------------------------------------------------

    def wake(self) -> None:
        """Membership changed (new generation): heartbeat now rather than at the next tick."""
        loop, ev = self._loop, self._wake
        if loop is not None and ev is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(ev.set)

    def stop(self, timeout: float) -> None:
        self._stopping = True
        self._started.wait(timeout)
        loop, task = self._loop, self._main_task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        self.join(timeout)

    # --- the thread ----------------------------------------------------------------------

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._run())
        except asyncio.CancelledError:
            pass  # stop() cancelled the main task: the thread's normal end
        except BrokerResponseError as exc:  # credentials or ACLs refused: not a bug
            log.error("heartbeat connection refused: %s", exc)
            self.error = exc
            self._notify()
        except Exception as exc:  # a bug: reported to the app, not lost with the thread
            log.exception("heartbeat thread crashed")
            self.error = exc
            self._notify()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _run(self) -> None:
        self._wake = asyncio.Event()
        self._main_task = asyncio.current_task()
        self._started.set()
        if self._stopping:
            return
        failures = 0
        try:
            while not self._stopping:
                try:
                    await self._step()
                    failures = 0
                except (ConnectionError, OSError, TimeoutError) as exc:
                    failures += 1
                    log.debug("heartbeat connection failed: %s", exc)
                    await self._close_conn()
                    self._find_again = True
                    delay = backoff_ms(failures, self._backoff_ms, COORDINATOR_RETRY_MAX_MS)
                    await self._idle(delay)
        finally:
            await self._close_conn()

    async def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _idle(self, ms: float) -> None:
        assert self._wake is not None
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ms / 1000):
                await self._wake.wait()

    async def _connect(self) -> Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if self._find_again and self._bootstrap_list:
            self._conn = await self._locate()
            self._find_again = False
            return self._conn
        addr = self._found or self._address()
        if addr is None:
            raise ConnectionError("coordinator unknown")
        self._conn = await self._open(addr)
        return self._conn

    async def _open(self, addr: tuple[str, int]) -> Connection:
        """A connection made as the app's are: over TLS and authenticated when the
        client's security settings say so (the broker authenticates each connection)."""
        conn = await Connection.open(addr[0], addr[1], client_id=self._client_id,
                                     connect_timeout=self._request_timeout,
                                     ssl_context=self._security.tls_context())
        try:
            await authenticate(conn, self._security, self._request_timeout)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _locate(self) -> Connection:
        """A connection to the coordinator as a live broker names it: the one this thread
        last reached first, then the bootstrap list in turn."""
        group = self._group_id
        last = self._found or self._address()
        candidates = ([last] if last is not None else []) + [
            a for a in self._bootstrap_list if a != last]
        failures: list[str] = []
        for here in candidates:
            try:
                conn = await self._open(here)
            except (OSError, TimeoutError) as exc:
                failures.append(f"{here[0]}:{here[1]}: {exc}")
                continue
            try:
                found = await find_coordinator_on(conn, group, here, self._request_timeout)
            except (ConnectionError, OSError, TimeoutError) as exc:
                await conn.close()
                failures.append(f"{here[0]}:{here[1]}: {exc}")
                continue
            if found is None:
                await conn.close()
                failures.append(f"{here[0]}:{here[1]}: no coordinator for {group!r} yet")
                continue
            self._found = found
            if found == here:
                return conn
            await conn.close()
            return await self._open(found)
        raise ConnectionError("coordinator not found: " + "; ".join(failures))

    async def _step(self) -> None:
        now = self._clock()
        with self._lock:
            leave = self._m.expire_poll(now) if self._m.poll_expired(now) else None
            target = self._m.heartbeat_target()
            poll_age = self._m.poll_age_ms(now)
        if leave is not None:
            log.warning("poll interval expired: leaving group %s", self._group_id)
            self._notify()
            conn = await self._connect()
            with contextlib.suppress(Exception):
                await conn.send(LeaveGroupRequest(group_id=self._group_id, members=[
                    MemberIdentity(member_id=leave.member_id,
                                   reason="consumer poll timeout has expired")]),
                    timeout=self._request_timeout, response_type=LeaveGroupResponse)
            return
        if target is None:
            await self._idle(self._interval_ms)
            return
        conn = await self._connect()
        sent_at = self._clock()
        self.last_send_ms = sent_at
        self.sent += 1
        resp = await conn.send(HeartbeatRequest(
            group_id=self._group_id, generation_id=target.generation_id,
            member_id=target.member_id, group_instance_id=self._m.group_instance_id,
            poll_age_ms=min(poll_age, 2**31 - 1), wait_ms=self._interval_ms),
            timeout=self._request_timeout + self._interval_ms / 1000,
            response_type=HeartbeatResponse)
        now = self._clock()
        with self._lock:
            action = self._m.on_heartbeat_response(resp.error_code, target, now)
        if action not in (Action.OK, Action.IGNORE):
            log.info("heartbeat: %s -> %s", ErrorCode.name_of(resp.error_code), action.value)
            self._notify()
        if action == Action.FIND_COORDINATOR:
            await self._close_conn()
            self._find_again = True
            await self._idle(self._backoff_ms)
            return
        if action == Action.RETRY or action == Action.REJOIN:
            await self._idle(self._backoff_ms)
        elif action == Action.OK:
            # A NONE answer normally arrived after the long poll; never spin faster than
            # the interval if the broker answered at once.
            left = self._interval_ms - (now - sent_at)
            if left > 0:
                await self._idle(left)
