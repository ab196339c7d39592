"""SSL listeners: who gets in, which principal they get, and certificates renewed on
SIGHUP (``Broker.reload_tls``) without dropping connections, on asyncio and uvloop."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import trustme
import uvloop

from groupwire.broker.config import BrokerSettings
from groupwire.broker.server import Broker
from tests.conformance.wire import Api, ConnectionClosed, WireConn
from tests.integration.conftest import FAST

from .conftest import (
    TIMEOUT,
    Open,
    Pki,
    StartBroker,
    call,
    principals,
    refused_at_first_read,
)

SSL_ONLY = "SSL://127.0.0.1:0"


async def test_a_plaintext_client_on_a_tls_listener_is_closed(
        pki: Pki, start_broker: StartBroker, open_conn: Open) -> None:
    broker = await start_broker(listeners=SSL_ONLY, **pki.settings())
    conn = await open_conn(broker.port)  # no TLS
    with pytest.raises(ConnectionClosed):
        await call(conn, Api.API_VERSIONS, {})
    assert conn.frames_received == 0


async def test_required_client_auth_refuses_missing_foreign_and_expired_certificates(
        pki: Pki, start_broker: StartBroker) -> None:
    broker = await start_broker(listeners=SSL_ONLY, **pki.settings(ssl_client_auth="required"))
    now = datetime.datetime.now(datetime.UTC)
    expired = pki.ca.issue_cert("bob", common_name="bob",
                                not_before=now - datetime.timedelta(days=2),
                                not_after=now - datetime.timedelta(days=1))
    foreign = trustme.CA().issue_cert("mallory", common_name="mallory")
    for cert in (None, foreign, expired):
        error = await refused_at_first_read(broker.port, pki.client(cert))
        assert isinstance(error, ssl.SSLError | ConnectionError | asyncio.IncompleteReadError)
    # and a good certificate gets in, as its CN
    good = pki.ca.issue_cert("carol", common_name="carol")
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port,
                                                   ssl=pki.client(good))
    conn = WireConn(reader, writer, "tls")
    try:
        assert (await call(conn, Api.API_VERSIONS, {}))["error_code"] == 0
        assert principals(broker) == ["User:carol"]
    finally:
        await conn.close()


async def test_requested_client_auth_names_the_principal_only_with_a_certificate(
        pki: Pki, start_broker: StartBroker, open_conn: Open) -> None:
    broker = await start_broker(listeners=SSL_ONLY,
                                **pki.settings(ssl_client_auth="requested"))
    anonymous = await open_conn(broker.port, ssl=pki.client())
    assert (await call(anonymous, Api.API_VERSIONS, {}))["error_code"] == 0
    assert principals(broker) == ["User:ANONYMOUS"]
    alice = await open_conn(broker.port,
                            ssl=pki.client(pki.ca.issue_cert("a", common_name="alice")))
    assert (await call(alice, Api.METADATA, {"topics": None}))["error_code"] == 0
    assert sorted(principals(broker)) == ["User:ANONYMOUS", "User:alice"]


async def test_without_client_auth_a_presented_certificate_is_ignored(
        pki: Pki, start_broker: StartBroker, open_conn: Open) -> None:
    broker = await start_broker(listeners=SSL_ONLY, **pki.settings(ssl_cafile=""))
    conn = await open_conn(broker.port,
                           ssl=pki.client(pki.ca.issue_cert("a", common_name="alice")))
    assert (await call(conn, Api.API_VERSIONS, {}))["error_code"] == 0
    assert principals(broker) == ["User:ANONYMOUS"]  # not verified: not trusted


def _run(loop_kind: str, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if loop_kind == "uvloop":
        uvloop.run(scenario())
    else:
        asyncio.run(scenario())


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_reload_swaps_the_certificate_for_new_connections_and_keeps_open_ones(
        pki: Pki, tmp_path: Path, loop_kind: str) -> None:
    async def scenario() -> None:
        settings = BrokerSettings(data_dir=tmp_path / "data", listeners=SSL_ONLY,
                                  **{**FAST, **pki.settings(ssl_client_auth="requested")})
        broker = Broker(settings)
        await broker.start()
        try:
            async with asyncio.timeout(TIMEOUT):
                await _reload(broker, pki)
        finally:
            await broker.close()

    _run(loop_kind, scenario)


async def _reload(broker: Broker, pki: Pki) -> None:
    old_trust = pki.client()
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port, ssl=old_trust)
    before = WireConn(reader, writer, "before")
    try:
        assert (await before.send(Api.API_VERSIONS, {}))["error_code"] == 0
        renewed = trustme.CA()
        pki.write_server_cert(renewed)
        renewed.cert_pem.write_to_path(pki.cafile)
        broker.reload_tls()

        # new handshakes present the new certificate...
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", broker.port, ssl=old_trust)
        client = renewed.issue_cert("d", common_name="dave")
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", broker.port, ssl=pki.client(client, trust=renewed))
        after = WireConn(reader, writer, "after")
        try:
            assert (await after.send(Api.API_VERSIONS, {}))["error_code"] == 0
            # ...and check client certificates against the new CA file
            assert "User:dave" in principals(broker)
            # the connection opened before the reload goes on
            assert (await before.send(Api.METADATA, {"topics": None}))["error_code"] == 0

            # files that do not load: logged, the current certificate kept
            Path(pki.certfile).write_text("not a certificate\n")
            broker.reload_tls()
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", broker.port, ssl=pki.client(trust=renewed))
            kept = WireConn(reader, writer, "kept")
            try:
                assert (await kept.send(Api.API_VERSIONS, {}))["error_code"] == 0
            finally:
                await kept.close()
        finally:
            await after.close()
    finally:
        await before.close()
