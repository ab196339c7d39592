"""The etcd client's watch against fake JSON gateways that misbehave the ways a network
does: silent after ``created``, reset, half-closed. A watch never hangs on them: it
checks a silent stream against a read and moves to the next endpoint, resuming from the
last revision it delivered."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import h11
import pytest

from groupwire.broker.cluster.txn import WatchEvent
from groupwire.broker.etcd.client import EtcdClient

WATCH_TIMEOUT_S = 0.2
TEST_BOUND_S = 10.0
"""Bounds each wait so a regression fails rather than hangs; never asserted."""

Json = dict[str, object]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _put(key: str, value: str, revision: int) -> Json:
    return {"type": "PUT", "kv": {"key": _b64(key), "value": _b64(value),
                                  "create_revision": str(revision),
                                  "mod_revision": str(revision), "version": "1"}}


def _line(obj: Json) -> bytes:
    return json.dumps(obj).encode() + b"\n"


@dataclass
class Gateway:
    """One fake endpoint. ``watch`` scripts what a /v3/watch stream does after its head
    (given the create request); ``txn`` answers the client's check."""

    watch: Callable[[Json, asyncio.StreamWriter, h11.Connection], object]
    changed: bool = True
    """What the check reads: True means etcd has changes the stream did not bring."""
    watches: list[Json] = field(default_factory=list)
    checks: int = 0
    port: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        http = h11.Connection(our_role=h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                body = b""
                while True:
                    event = http.next_event()
                    if event is h11.NEED_DATA:
                        data = await reader.read(65536)
                        if not data:
                            return
                        http.receive_data(data)
                    elif isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += bytes(event.data)
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                assert request is not None
                payload = json.loads(body)
                if request.target == b"/v3/watch":
                    self.watches.append(payload["create_request"])
                    writer.write(http.send(h11.Response(
                        status_code=200, headers=[("Content-Type", "application/json")])) or b"")
                    result = self.watch(payload["create_request"], writer, http)
                    if asyncio.iscoroutine(result):
                        await result
                    return
                self.checks += 1
                reply = {"header": {"revision": "9"}, "succeeded": True, "responses": [
                    {"response_range": {"kvs": [{"key": _b64("p/a")}]} if self.changed
                     else {}},
                    {"response_range": {"count": "1"}},
                    {"response_range": {"count": "1"}}]}
                raw = json.dumps(reply).encode()
                writer.write((http.send(h11.Response(
                    status_code=200, headers=[("Content-Length", str(len(raw)))])) or b"")
                    + (http.send(h11.Data(data=raw)) or b"")
                    + (http.send(h11.EndOfMessage()) or b""))
                await writer.drain()
                http.start_next_cycle()
        except (ConnectionError, h11.ProtocolError):
            return
        finally:
            writer.close()


def _created(http: h11.Connection, revision: int = 5) -> bytes:
    return http.send(h11.Data(data=_line(
        {"result": {"header": {"revision": str(revision)}, "created": True}}))) or b""


def silent(create: Json, writer: asyncio.StreamWriter, http: h11.Connection) -> object:
    """Answers ``created`` and then nothing, keeping the connection open."""
    writer.write(_created(http))

    async def hold() -> None:
        await asyncio.Event().wait()
    return hold()


def resets(create: Json, writer: asyncio.StreamWriter, http: h11.Connection) -> None:
    writer.write(_created(http))
    writer.transport.abort()


def half_closes(create: Json, writer: asyncio.StreamWriter, http: h11.Connection) -> object:
    """``created``, then its side of the connection ends mid-stream (no last chunk)."""
    writer.write(_created(http))

    async def eof() -> None:
        await writer.drain()
        writer.write_eof()
        await asyncio.Event().wait()
    return eof()


def serves_event(create: Json, writer: asyncio.StreamWriter, http: h11.Connection) -> object:
    """``created``, then the event at the requested start revision, then silence."""
    start = int(str(create["start_revision"]))
    writer.write(_created(http, start + 1))
    writer.write(http.send(h11.Data(data=_line(
        {"result": {"header": {"revision": str(start)},
                    "events": [_put("p/a", "fresh", start)]}}))) or b"")

    async def hold() -> None:
        await asyncio.Event().wait()
    return hold()


@pytest.fixture
async def gateways() -> AsyncIterator[list[Gateway]]:
    made: list[Gateway] = []
    yield made
    for g in made:
        await g.stop()


async def _gateway(made: list[Gateway], watch: Callable[..., object],
                   changed: bool = True) -> Gateway:
    g = Gateway(watch, changed=changed)
    await g.start()
    made.append(g)
    return g


async def _first_events(client: EtcdClient, start: int) -> list[WatchEvent]:
    stream = client.watch("p/", start)
    try:
        async with asyncio.timeout(TEST_BOUND_S):
            async for events in stream:
                if events:
                    return events
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    raise AssertionError("the watch ended")


@pytest.mark.parametrize("fault", [silent, resets, half_closes],
                         ids=["silent-after-created", "reset", "half-closed"])
async def test_a_broken_stream_fails_over_and_resumes_from_its_revision(
        gateways: list[Gateway], fault: Callable[..., object]) -> None:
    bad = await _gateway(gateways, fault)
    good = await _gateway(gateways, serves_event)
    client = EtcdClient([bad.url, good.url], timeout_s=1.0, watch_timeout_s=WATCH_TIMEOUT_S)
    try:
        events = await _first_events(client, 7)
    finally:
        await client.close()
    assert [(e.kv.key, e.kv.value, e.kv.mod_revision) for e in events] == [("p/a", b"fresh", 7)]
    assert bad.watches[0]["progress_notify"] is True
    assert good.watches[0]["start_revision"] == "7"


async def test_a_silent_stream_that_is_caught_up_is_kept_and_reported_current(
        gateways: list[Gateway]) -> None:
    quiet = await _gateway(gateways, silent, changed=False)
    client = EtcdClient([quiet.url], timeout_s=1.0, watch_timeout_s=WATCH_TIMEOUT_S)
    stream = client.watch("p/", 7)
    try:
        async with asyncio.timeout(TEST_BOUND_S):
            first = await anext(stream)
            second = await anext(stream)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
        await client.close()
    assert (first, second) == ([], [])  # confirmations, not events
    assert len(quiet.watches) == 1  # the same stream all along
    assert quiet.checks >= 2


async def test_progress_notifications_are_empty_batches(gateways: list[Gateway]) -> None:
    def notifies(create: Json, writer: asyncio.StreamWriter, http: h11.Connection) -> object:
        writer.write(_created(http))
        writer.write(http.send(h11.Data(data=_line(
            {"result": {"header": {"revision": "12"}}}))) or b"")
        return silent(create, writer, http)

    g = await _gateway(gateways, notifies)
    client = EtcdClient([g.url], timeout_s=1.0, watch_timeout_s=TEST_BOUND_S)
    stream = client.watch("p/", 7)
    try:
        async with asyncio.timeout(TEST_BOUND_S):
            assert await anext(stream) == []
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
        await client.close()
    assert g.checks == 0


async def test_a_garbled_response_is_a_broken_endpoint_not_a_crash(
        gateways: list[Gateway]) -> None:
    def garbage(create: Json, writer: asyncio.StreamWriter, http: h11.Connection) -> None:
        writer.write(b"5\r\nnot a chunk size\r\n")
        writer.transport.abort()

    bad = await _gateway(gateways, garbage)
    good = await _gateway(gateways, serves_event)
    client = EtcdClient([bad.url, good.url], timeout_s=1.0, watch_timeout_s=WATCH_TIMEOUT_S)
    try:
        events = await _first_events(client, 3)
    finally:
        await client.close()
    assert events[0].kv.mod_revision == 3
