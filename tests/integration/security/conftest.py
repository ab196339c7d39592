"""Certificates from trustme, users written into the data dir, raw wire connections over
TCP or TLS: the broker's side of security seen through sockets only."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import scramp
import trustme

from groupwire.broker.security import CredentialTable, credential_from_password, save_security
from groupwire.broker.server import Broker
from groupwire.protocol.acls import ScramMechanism
from tests.conformance.wire import Api, WireConn, request_bytes

TIMEOUT = 5.0
USER, PASSWORD = "alice", "alice-secret"


@dataclass
class Pki:
    """A CA, the broker's certificate files signed by it, and client contexts."""

    ca: trustme.CA
    dir: Path
    certfile: str
    keyfile: str
    cafile: str

    def write_server_cert(self, ca: trustme.CA) -> None:
        """(Re)write the broker's certificate and key, signed by ``ca``."""
        cert = ca.issue_cert("127.0.0.1", "localhost")
        Path(self.certfile).write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
        Path(self.keyfile).write_bytes(cert.private_key_pem.bytes())

    def settings(self, **more: Any) -> dict[str, Any]:
        return {"ssl_certfile": self.certfile, "ssl_keyfile": self.keyfile,
                "ssl_cafile": self.cafile, **more}

    def client(self, cert: trustme.LeafCert | None = None,
               trust: trustme.CA | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        (trust or self.ca).configure_trust(ctx)
        if cert is not None:
            cert.configure_cert(ctx)
        return ctx


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = trustme.CA()
    d = tmp_path / "pki"
    d.mkdir()
    found = Pki(ca, d, str(d / "broker.pem"), str(d / "broker.key"), str(d / "ca.pem"))
    found.write_server_cert(ca)
    ca.cert_pem.write_to_path(found.cafile)
    return found


def write_users(data_dir: Path, users: dict[str, str]) -> None:
    """Users (name -> password) with both SCRAM credentials, stored before the broker
    starts, as ``groupwire users add --data-dir`` does."""
    data_dir.mkdir(parents=True, exist_ok=True)
    save_security(data_dir, [], CredentialTable([
        (user, credential_from_password(mechanism, password))
        for user, password in users.items()
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]))


def write_user(data_dir: Path, user: str = USER, password: str = PASSWORD) -> None:
    write_users(data_dir, {user: password})


StartBroker = Callable[..., Awaitable[Broker]]
Open = Callable[..., Awaitable[WireConn]]


@pytest.fixture
async def open_conn() -> AsyncIterator[Open]:
    """``await open_conn(port, ssl=ctx)``: a raw wire connection, closed at teardown."""
    opened: list[WireConn] = []

    async def open_one(port: int, ssl: ssl.SSLContext | None = None) -> WireConn:
        async with asyncio.timeout(TIMEOUT):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ssl)
        conn = WireConn(reader, writer, "security")
        opened.append(conn)
        return conn

    yield open_one
    for conn in opened:
        await conn.close()


async def call(conn: WireConn, api: int, body: dict[str, Any]) -> dict[str, Any]:
    async with asyncio.timeout(TIMEOUT):
        return await conn.send(api, body)


async def closed(conn: WireConn) -> None:
    """Returns once the broker has closed ``conn`` (fails after TIMEOUT)."""
    async with asyncio.timeout(TIMEOUT):
        await conn.closed.wait()


async def refused_at_first_read(port: int, ctx: ssl.SSLContext) -> BaseException:
    """Connect over TLS, send ApiVersions, read: the exception the client got (with TLS
    1.3 a refused client certificate shows at the first read, not at connect)."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(TIMEOUT):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            writer.write(request_bytes(Api.API_VERSIONS, {}, cid=1))
            await writer.drain()
            data = await reader.readexactly(4)
    except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError) as exc:
        return exc
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    raise AssertionError(f"the broker answered: {data!r}")


async def plain_auth(conn: WireConn, user: str = USER,
                     password: str = PASSWORD) -> dict[str, Any]:
    body = await call(conn, Api.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
    assert body["error_code"] == 0, body
    return await call(conn, Api.SASL_AUTHENTICATE,
                      {"auth_bytes": f"\0{user}\0{password}".encode()})


async def scram_auth(conn: WireConn, mechanism: str = "SCRAM-SHA-256", user: str = USER,
                     password: str = PASSWORD) -> dict[str, Any]:
    """The whole exchange; returns the last SaslAuthenticate answer (the failed one, if
    the broker refused)."""
    body = await call(conn, Api.SASL_HANDSHAKE, {"mechanism": mechanism})
    assert body["error_code"] == 0, body
    client = scramp.ScramClient([mechanism], user, password)
    body = await call(conn, Api.SASL_AUTHENTICATE,
                      {"auth_bytes": client.get_client_first().encode()})
    if body["error_code"] != 0:
        return body
    client.set_server_first(body["auth_bytes"].decode())
    body = await call(conn, Api.SASL_AUTHENTICATE,
                      {"auth_bytes": client.get_client_final().encode()})
    if body["error_code"] == 0:
        client.set_server_final(body["auth_bytes"].decode())  # the broker proved itself
    return body


def principals(broker: Broker) -> list[str]:
    return [c.principal for c in broker._connections.values()]


def sample(broker: Broker, name: str, **labels: str) -> float:
    value = broker.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
