"""Which handler answers a request, and how a request's work is run on the loop.

``Handlers`` maps a request type to a handler of that very type, so a handler's request
parameter is checked where it is registered. ``RequestRunner`` runs a request's work a
slice at a time or as a task that holds its connection (arrival order, docs/protocol.md
§2 rule 4), and keeps those tasks so that closing the broker can await them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from groupwire.broker.host import Peer
from groupwire.broker.logs import get_logger
from groupwire.broker.pacing import sliced
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import Request, Response, response_type_for
from groupwire.protocol.steps import Steps

log = get_logger("groupwire.broker")

R = TypeVar("R", bound=Request)
T = TypeVar("T")


class Handlers:
    """Handlers by request type; a type not here goes to the group coordinator."""

    def __init__(self) -> None:
        self._by_type: dict[type[Request], Callable[[Peer, int, Any], None]] = {}

    def add(self, kind: type[R], handler: Callable[[Peer, int, R], None]) -> None:
        """Register (or replace) the handler of ``kind``."""
        self._by_type[kind] = handler

    def get(self, kind: type[Request]) -> Callable[[Peer, int, Request], None] | None:
        return self._by_type.get(kind)

    def __contains__(self, kind: type[Request]) -> bool:
        return kind in self._by_type


class RequestRunner:
    """Runs request work that does not finish in one go; owns the tasks answering later."""

    def __init__(self, slice_s: float) -> None:
        self.slice_s = slice_s
        """How long one request's work runs before others get the loop (``sliced``)."""
        self.deferred: set[asyncio.Task[None]] = set()
        """Requests answered by a coroutine (topic creation): awaited at close."""

    def sliced(self, conn: Peer, cid: int, request: Request, steps: Steps[T],
               finish: Callable[[T], None]) -> None:
        """Run a request's steps a slice at a time (``broker.pacing``); ``finish`` gets the
        result, at once or, for long work, from a task that holds the connection."""
        sliced(steps, self.slice_s, finish,
               lambda work: self.defer_long(conn, cid, request, work))

    def defer_long(self, conn: Peer, cid: int, request: Request,
                   work: Coroutine[Any, Any, None]) -> None:
        """``defer`` for work that spans slices: its answer is as large, so it is encoded
        off the loop too."""
        conn.answer_is_long(cid)
        self.defer(conn, cid, request, work)

    def answer_sliced(self, conn: Peer, cid: int, request: Request,
                      steps: Steps[Response]) -> None:
        self.sliced(conn, cid, request, steps, lambda response: conn.reply(cid, response))

    def defer(self, conn: Peer, cid: int, request: Request,
              work: Coroutine[Any, Any, Any], *, reply: bool = False) -> None:
        """Run ``work`` as a task, holding the connection's later requests until it is
        done (they take effect in arrival order, docs/protocol.md §2 rule 4); with
        ``reply``, what it returns is the answer. Other connections go on meanwhile."""
        release = conn.hold()

        async def run() -> None:
            response: Response | None = None
            try:
                response = await work
            except Exception as exc:
                log.exception("request_failed", api=type(request).__name__,
                              conn=conn.conn_id)
                response = response_type_for(request)(
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                    error_message=f"{type(exc).__name__}: {exc}")
                reply_now = True
            else:
                reply_now = reply
            try:
                if reply_now and response is not None:
                    conn.reply(cid, response)
            finally:
                release()

        self.spawn(run())

    def answer_later(self, api: Callable[[Any], Coroutine[Any, Any, Response]],
                     ) -> Callable[[Peer, int, Request], None]:
        """A handler whose answer is what the coroutine ``api(request)`` returns."""
        def handle(conn: Peer, cid: int, request: Request) -> None:
            self.defer(conn, cid, request, api(request), reply=True)
        return handle

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """A task answering a request later: awaited at close (``deferred``)."""
        task = asyncio.get_running_loop().create_task(work)
        self.deferred.add(task)
        task.add_done_callback(self.deferred.discard)

    async def close(self) -> None:
        """Await the requests still being answered; a failed one was logged already."""
        for task in list(self.deferred):
            with contextlib.suppress(Exception):
                await task
