"""What the SDK says when the bootstrap address is no groupwire broker: a clear error naming
the address, raised at once, never a codec traceback or a wait for the request timeout.

Each test bounds its wait with ``asyncio.wait_for(..., 2)`` while the clients get a
request timeout of 30 s, so the old behaviour (retrying until the request timeout) fails.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from groupwire.cli.health import check_health
from groupwire.cli.main import main
from groupwire.client.admin import Admin
from groupwire.client.cluster import Cluster, NoApiVersionsAnswerError
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.client.errors import BrokerNotAvailableError, IncompatibleBrokerError
from groupwire.client.producer import Producer
from groupwire.protocol.messages import ApiVersionsRequest

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LONG_MS = 30000
BOUND_S = 2

CLIENTS: dict[str, Callable[[str], Any]] = {
    "admin": lambda b: Admin(b, request_timeout_ms=LONG_MS),
    "producer": lambda b: Producer(b, request_timeout_ms=LONG_MS),
    "consumer": lambda b: Consumer(b, group_id="g", request_timeout_ms=LONG_MS),
}


def refused_address() -> str:
    """A local port nothing listens on (bound, never listened: connecting is refused)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"127.0.0.1:{port}"


async def serve(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def _http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(100)
    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    writer.close()


async def _garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(100)
    writer.write(b"\x00\x00\x00\x05hello")  # a well-framed payload that is no msgpack
    await writer.drain()
    await reader.read(100)  # hold the connection open: the client must not wait on it


async def _close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def start(client: Any) -> None:
    try:
        await asyncio.wait_for(client.start(), BOUND_S)
    finally:
        await asyncio.wait_for(client.close(), BOUND_S)


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_connection_refused_fails_at_once_naming_the_address(kind: str) -> None:
    address = refused_address()
    with pytest.raises(BrokerNotAvailableError) as info:
        await start(CLIENTS[kind](address))
    assert str(info.value) == f"no broker reachable at {address}: connection refused"


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_host_name_that_does_not_resolve_fails_at_once(kind: str) -> None:
    """One failed lookup ends it, as in Kafka's clients, rather than retrying until the
    request timeout (30 s here; the bound leaves a slow resolver room for one lookup)."""
    address = "nosuchhost.invalid:9092"  # .invalid never resolves (RFC 2606)
    client = CLIENTS[kind](address)
    with pytest.raises(BrokerNotAvailableError,
                       match=f"^no broker reachable at {address}: host name not resolved"):
        await asyncio.wait_for(client.start(), LONG_MS / 1000 * 2 / 3)
    await asyncio.wait_for(client.close(), BOUND_S)


async def test_every_refused_bootstrap_address_is_named() -> None:
    a, b = refused_address(), refused_address()
    with pytest.raises(BrokerNotAvailableError, match=f"at {a}, {b}: connection refused$"):
        await start(Admin(f"{a},{b}", request_timeout_ms=LONG_MS))


@pytest.mark.parametrize("kind", sorted(CLIENTS))
@pytest.mark.parametrize("handler", [_http, _garbage], ids=["http", "garbage"])
async def test_a_peer_speaking_another_protocol_is_incompatible(kind: str,
                                                                handler: Handler) -> None:
    async for address in serve(handler):
        with pytest.raises(IncompatibleBrokerError,
                           match=f"^{address} is not a groupwire broker"):
            await start(CLIENTS[kind](address))


async def test_the_error_quotes_what_the_peer_answered() -> None:
    async for address in serve(_http):
        with pytest.raises(IncompatibleBrokerError) as info:
            await start(Admin(address, request_timeout_ms=LONG_MS))
    assert "it answered 'HTTP/1.1 400 Bad Request...'" in str(info.value)


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # reads, never answers (an HTTP server waiting for a line end)


SHORT_PROBE_MS = 200
SILENT_CLIENTS: dict[str, Callable[[str], Any]] = {
    "admin": lambda b: Admin(b, request_timeout_ms=LONG_MS,
                             api_version_request_timeout_ms=SHORT_PROBE_MS),
    "producer": lambda b: Producer(b, request_timeout_ms=LONG_MS,
                                   api_version_request_timeout_ms=SHORT_PROBE_MS),
    "consumer": lambda b: Consumer(b, group_id="g", request_timeout_ms=LONG_MS,
                                   api_version_request_timeout_ms=SHORT_PROBE_MS),
}


@pytest.mark.parametrize("kind", sorted(SILENT_CLIENTS))
async def test_a_silent_peer_is_given_up_on_after_the_api_versions_probe(kind: str) -> None:
    """A peer that accepts and never answers fails after one ApiVersions probe
    (``api_version_request_timeout_ms``), not after the 30 s request timeout, naming the
    address and saying it does not speak groupwire."""
    async for address in serve(_silent):
        with pytest.raises(BrokerNotAvailableError,
                           match=f"^no broker reachable at {address}: connected, but no "
                           f"answer to ApiVersions within {SHORT_PROBE_MS} ms: it does not "
                           "speak groupwire"):
            await start(SILENT_CLIENTS[kind](address))


async def test_a_connected_client_waits_for_a_silent_broker() -> None:
    """Once connected, a broker that stops answering may be paused, not foreign: the
    client retries until its request timeout (and says what it saw)."""
    async for address in serve(_silent):
        cluster = Cluster(address, request_timeout_ms=300,
                          api_version_request_timeout_ms=100)
        cluster._connected_once = True  # as after a first connection to the broker
        with pytest.raises(BrokerNotAvailableError) as info:
            await asyncio.wait_for(cluster.connection(), BOUND_S)
        await cluster.close()
    assert "no answer to ApiVersions within" in str(info.value)
    assert isinstance(info.value.__cause__, NoApiVersionsAnswerError)


def test_the_api_versions_probe_defaults_to_two_seconds() -> None:
    assert Cluster("127.0.0.1:1").api_version_request_timeout_ms == 2000
    with pytest.raises(ValueError, match="api_version_request_timeout_ms"):
        Cluster("127.0.0.1:1", api_version_request_timeout_ms=0)


async def test_health_of_a_silent_peer_is_said_within_the_probe() -> None:
    async for address in serve(_silent):
        host, port = address.split(":")
        result = await asyncio.wait_for(check_health(host, int(port), LONG_MS / 1000),
                                        BOUND_S + 1)
    assert result["ok"] is False
    assert "no answer to ApiVersions within 2000 ms: it does not speak groupwire" in str(
        result["error"])


async def test_a_cli_command_against_a_silent_peer_is_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    async for address in serve(_silent):
        capsys.readouterr()
        code = await asyncio.wait_for(asyncio.to_thread(
            main, ["topics", "list", "--bootstrap", address, "--timeout-ms", str(LONG_MS)]),
            BOUND_S + 3)
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("groupwire ")]
    assert len(lines) == 1, err
    assert address in lines[0] and "does not speak groupwire" in lines[0]


async def test_a_request_timeout_leaves_the_connection_open() -> None:
    """A timeout is the request's, not the connection's: the connection stays usable and
    it is a TimeoutError (an OSError, once taken for a failed connection)."""
    async for address in serve(_silent):
        host, port = address.split(":")
        conn = await Connection.open(host, int(port))
        try:
            with pytest.raises(TimeoutError, match="no answer from"):
                await conn.send(ApiVersionsRequest(), timeout=0.05)
            assert not conn.closed
        finally:
            await conn.close()


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_peer_that_closes_at_once_is_given_up_on(kind: str) -> None:
    async for address in serve(_close_at_once):
        with pytest.raises(BrokerNotAvailableError,
                           # a close racing our first write may arrive as a reset
                           match=f"at {address}: (closed|reset) the connection without "
                           "answering "
                           r"\(is it a groupwire broker\?\)"):
            await start(CLIENTS[kind](address))
