"""The SDK's SASL and TLS connections against a fake Kafka-style SASL listener (sasl_fake):
PLAIN and SCRAM succeed, refused credentials raise AuthenticationFailedError once and
are never retried, a broker whose SCRAM proof is wrong is refused, TLS failures read as
one clear sentence."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import AsyncIterator

import pytest
import trustme

from groupwire import Admin, Consumer, Producer, SecurityConfig, create_ssl_context
from groupwire.client.cluster import Cluster
from groupwire.client.connection import Connection
from groupwire.client.heartbeat import HeartbeatThread
from groupwire.client.membership import Membership
from groupwire.client.sasl import authenticate
from groupwire.errors import (
    AuthenticationFailedError,
    IncompatibleBrokerError,
    TlsHandshakeError,
    UnsupportedSaslMechanismError,
)
from groupwire.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
    Request,
    Response,
)
from tests.unit.client.sasl_fake import SaslFake

USERS = {"alice": "alice-secret", "bob": "b0b"}


def _answer(request: Request) -> Response:
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResponse()
    assert isinstance(request, MetadataRequest), request
    return MetadataResponse(cluster_id="fake", controller_id=-1)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def _server_ctx(ca: trustme.CA, name: str = "127.0.0.1") -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(ctx)
    return ctx


def _client_ctx(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.fixture
async def fake() -> AsyncIterator[SaslFake]:
    async with SaslFake(USERS, handler=_answer) as f:
        yield f


def _cluster(fake: SaslFake, **security: object) -> Cluster:
    return Cluster(fake.address, request_timeout_ms=5000, retry_backoff_ms=10,
                   security=SecurityConfig(**security))  # type: ignore[arg-type]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_right_password_authenticates_then_requests_pass(fake: SaslFake,
                                                               mechanism: str) -> None:
    cluster = _cluster(fake, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                       sasl_plain_username="alice", sasl_plain_password="alice-secret")
    try:
        md = await cluster.metadata([])
    finally:
        await cluster.close()
    assert md.cluster_id == "fake"
    assert fake.authenticated == ["alice"]
    assert [u for u, _ in fake.requests] == ["alice"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "nobody"])
async def test_refused_credentials_raise_once_and_are_not_retried(
        fake: SaslFake, mechanism: str, user: str) -> None:
    # a second address in the bootstrap list, and a long timeout: neither may be tried
    cluster = Cluster([fake.address, fake.address], request_timeout_ms=30000,
                      retry_backoff_ms=10, security=SecurityConfig(
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                          sasl_plain_username=user, sasl_plain_password="wrong-password"))
    try:
        with pytest.raises(AuthenticationFailedError) as info:
            await cluster.connection()
    finally:
        await cluster.close()
    assert fake.connections == 1 and fake.failures == 1
    text = str(info.value)
    assert "SASL_AUTHENTICATION_FAILED" in text and mechanism in text and repr(user) in text
    assert "wrong-password" not in text
    assert not info.value.retriable


async def test_client_constructors_take_aiokafkas_names_and_fail_at_start(
        fake: SaslFake) -> None:
    opts = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="bob", sasl_plain_password="nope")
    for client in (Admin(fake.address, **opts), Producer(fake.address, **opts),  # type: ignore[arg-type]
                   Consumer(fake.address, **opts)):  # type: ignore[arg-type]
        with pytest.raises(AuthenticationFailedError, match="'bob'"):
            await client.start()
        await client.close()
    assert fake.failures == 3 and fake.connections == 3
    good = SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                          sasl_plain_username="bob", sasl_plain_password="b0b")
    async with Admin(fake.address, security=good):
        pass
    assert fake.authenticated == ["bob"]


def test_bad_option_combinations_are_value_errors() -> None:
    with pytest.raises(ValueError, match="sasl_plain_username"):
        Admin("127.0.0.1:1", security_protocol="SASL_SSL")
    with pytest.raises(ValueError, match="sasl_mechanism"):
        Producer("127.0.0.1:1", security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI",
                 sasl_plain_username="a", sasl_plain_password="b")
    with pytest.raises(ValueError, match="security_protocol"):
        Consumer("127.0.0.1:1", security_protocol="TLS")


async def test_server_final_with_a_bad_signature_is_refused(fake: SaslFake) -> None:
    fake.tamper_server_final = True
    cluster = _cluster(fake, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                       sasl_plain_password="alice-secret")
    try:
        with pytest.raises(AuthenticationFailedError, match="not a valid proof"):
            await cluster.connection()
    finally:
        await cluster.close()
    assert fake.connections == 1


async def test_a_mechanism_the_broker_does_not_enable_names_the_ones_it_does() -> None:
    async with SaslFake(USERS, mechanisms=("SCRAM-SHA-512",)) as fake:
        cluster = _cluster(fake, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                           sasl_plain_username="alice", sasl_plain_password="alice-secret")
        try:
            with pytest.raises(UnsupportedSaslMechanismError, match="enables SCRAM-SHA-512"):
                await cluster.connection()
        finally:
            await cluster.close()
        assert fake.connections == 1


async def test_a_plaintext_client_on_a_sasl_listener_is_closed_before_requests(
        fake: SaslFake) -> None:
    cluster = Cluster(fake.address, request_timeout_ms=300, retry_backoff_ms=10)
    try:
        with pytest.raises(ConnectionError):
            await cluster.send(MetadataRequest(topics=[]), timeout_ms=300)
    finally:
        await cluster.close()
    assert fake.requests == [] and fake.authenticated == []


# --- TLS ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_sasl_ssl_authenticates_over_tls(ca: trustme.CA, mechanism: str) -> None:
    async with SaslFake(USERS, ssl_context=_server_ctx(ca), handler=_answer) as fake:
        cluster = _cluster(fake, security_protocol="SASL_SSL", ssl_context=_client_ctx(ca),
                           sasl_mechanism=mechanism, sasl_plain_username="alice",
                           sasl_plain_password="alice-secret")
        try:
            conn = await cluster.connection()
            await cluster.metadata([])
            assert conn._writer.get_extra_info("ssl_object") is not None
        finally:
            await cluster.close()
        assert fake.authenticated == ["alice"]


async def test_ssl_without_sasl_sends_no_handshake(ca: trustme.CA) -> None:
    async with SaslFake({}, ssl_context=_server_ctx(ca), sasl=False, handler=_answer) as fake:
        cluster = _cluster(fake, security_protocol="SSL", ssl_context=_client_ctx(ca))
        try:
            await cluster.metadata([])
        finally:
            await cluster.close()
        assert fake.authenticated == [] and len(fake.requests) == 1


async def test_untrusted_certificate_is_one_clear_error_at_once(ca: trustme.CA) -> None:
    other = trustme.CA()
    async with SaslFake({}, ssl_context=_server_ctx(other), sasl=False) as fake:
        cluster = Cluster([fake.address, fake.address], request_timeout_ms=30000,
                          retry_backoff_ms=10,
                          security=SecurityConfig(security_protocol="SSL",
                                                  ssl_context=_client_ctx(ca)))
        try:
            with pytest.raises(TlsHandshakeError) as info:
                await cluster.connection()
        finally:
            await cluster.close()
    text = str(info.value)
    assert fake.address in text and "certificate verify failed" in text
    assert isinstance(info.value, ConnectionError)
    assert fake.connections <= 2  # one round of the bootstrap list, no more


async def test_certificate_for_another_name_is_refused(ca: trustme.CA) -> None:
    async with SaslFake({}, ssl_context=_server_ctx(ca, "broker.example"), sasl=False
                        ) as fake:
        with pytest.raises(TlsHandshakeError, match="certificate verify failed"):
            await Connection.open(fake.host, fake.port, ssl_context=_client_ctx(ca),
                                  connect_timeout=5)


async def test_a_tls_client_on_a_plaintext_port_gets_a_clear_error(ca: trustme.CA) -> None:
    async with SaslFake({}, sasl=False) as fake:
        cluster = Cluster(fake.address, request_timeout_ms=30000, retry_backoff_ms=10,
                          security=SecurityConfig(security_protocol="SSL",
                                                  ssl_context=_client_ctx(ca)))
        try:
            with pytest.raises(TlsHandshakeError) as info:
                await cluster.connection()
        finally:
            await cluster.close()
    assert fake.address in str(info.value)
    assert "TLS" in str(info.value)


async def test_a_plaintext_client_on_a_tls_port_is_told_so(ca: trustme.CA) -> None:
    async with SaslFake({}, ssl_context=_server_ctx(ca), sasl=False) as fake:
        cluster = Cluster(fake.address, request_timeout_ms=2000, retry_backoff_ms=10)
        try:
            with pytest.raises((IncompatibleBrokerError, ConnectionError)) as info:
                await cluster.connection()
        finally:
            await cluster.close()
    # OpenSSL may answer the stray bytes with an alert record (then: "speaks TLS") or
    # simply hang up; either way the client stops, naming the address
    assert fake.address in str(info.value)


def test_create_ssl_context_loads_the_ca_and_client_certificate(ca: trustme.CA,
                                                                tmp_path: object) -> None:
    from pathlib import Path
    base = Path(str(tmp_path))
    ca.cert_pem.write_to_path(str(base / "ca.pem"))
    leaf = ca.issue_cert("client")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(base / "client.pem"))
    ctx = create_ssl_context(cafile=base / "ca.pem", certfile=base / "client.pem")
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert len(ctx.get_ca_certs()) == 1


# --- the heartbeat thread's own connection ---------------------------------------------------


async def test_heartbeat_connection_authenticates_too(fake: SaslFake) -> None:
    m = Membership(group_instance_id=None, max_poll_interval_ms=60000, now_ms=0)
    m.join_sent(0)
    m.on_join_response(0, member_id="m-1", generation_id=1, protocol_name="range",
                       leader="m-1", now_ms=0)
    security = SecurityConfig(security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob",
                              sasl_plain_password="b0b")
    hb = HeartbeatThread(
        membership=m, lock=threading.Lock(), group_id="g", address=lambda: (fake.host,
                                                                            fake.port),
        client_id="t", heartbeat_interval_ms=50, session_timeout_ms=1000,
        request_timeout_ms=5000, retry_backoff_ms=10, notify=lambda: None,
        clock=lambda: 0, security=security)
    hb.start()
    try:
        async with asyncio.timeout(10):
            await fake.received.wait()
    finally:
        await asyncio.to_thread(hb.stop, 5)
    assert hb.error is None
    assert fake.authenticated[:1] == ["bob"]
    user, request = fake.requests[0]
    assert user == "bob" and isinstance(request, HeartbeatRequest)


async def test_heartbeat_thread_reports_refused_credentials(fake: SaslFake) -> None:
    m = Membership(group_instance_id=None, max_poll_interval_ms=60000, now_ms=0)
    m.join_sent(0)
    m.on_join_response(0, member_id="m-1", generation_id=1, protocol_name="range",
                       leader="m-1", now_ms=0)
    notified = threading.Event()
    hb = HeartbeatThread(
        membership=m, lock=threading.Lock(), group_id="g",
        address=lambda: (fake.host, fake.port), client_id="t", heartbeat_interval_ms=50,
        session_timeout_ms=1000, request_timeout_ms=5000, retry_backoff_ms=10,
        notify=notified.set, clock=lambda: 0,
        security=SecurityConfig(security_protocol="SASL_PLAINTEXT",
                                sasl_plain_username="bob", sasl_plain_password="x"))
    hb.start()
    try:
        assert await asyncio.to_thread(notified.wait, 10)
    finally:
        await asyncio.to_thread(hb.stop, 5)
    assert isinstance(hb.error, AuthenticationFailedError)
    assert fake.failures == 1


# --- cost -------------------------------------------------------------------------------------


async def test_measure_one_scram_exchange(fake: SaslFake, capsys: pytest.CaptureFixture[str],
                                          ) -> None:
    """Reported, not asserted: a SCRAM-SHA-256 exchange against the fake (4096
    iterations; both sides' PBKDF2 run in this one process)."""
    security = SecurityConfig(security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                              sasl_plain_password="alice-secret")
    costs = []
    for _ in range(5):
        conn = await Connection.open(fake.host, fake.port)
        try:
            started = time.perf_counter()
            await authenticate(conn, security, 5)
            costs.append(time.perf_counter() - started)
        finally:
            await conn.close()
    assert len(fake.authenticated) == 5
    with capsys.disabled():
        print(f"\nSCRAM-SHA-256 exchange: median {sorted(costs)[2] * 1000:.2f} ms "
              f"(min {min(costs) * 1000:.2f} ms)")
