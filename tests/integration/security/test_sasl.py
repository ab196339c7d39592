"""SASL listeners: the gate before authentication, PLAIN and SCRAM over raw frames, and
what a failure, a timeout and a misplaced SASL request get."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupwire.broker.server import Broker
from tests.conformance.wire import Api, ConnectionClosed, Member, assignment, create_topic

from .conftest import (
    PASSWORD,
    USER,
    Open,
    StartBroker,
    call,
    closed,
    plain_auth,
    principals,
    sample,
    scram_auth,
    write_user,
)

SASL = "SASL_PLAINTEXT://127.0.0.1:0"
AUTH_METRIC = "groupwire_sasl_authentications_total"
CLOSED_METRIC = "groupwire_connections_closed_total"


@pytest.fixture
async def sasl_broker(start_broker: StartBroker, tmp_path: Path) -> Broker:
    write_user(tmp_path / "sasl")
    return await start_broker(
        data_dir=tmp_path / "sasl", listeners=f"{SASL},PLAINTEXT://127.0.0.1:0",
        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")


def _port(broker: Broker, name: str = "SASL_PLAINTEXT") -> int:
    return broker.listener_ports[name]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
async def test_the_right_password_authenticates(sasl_broker: Broker, open_conn: Open,
                                                mechanism: str) -> None:
    conn = await open_conn(_port(sasl_broker))
    # ApiVersions is taken before authentication (clients ask it first)
    assert (await call(conn, Api.API_VERSIONS, {}))["error_code"] == 0
    if mechanism == "PLAIN":
        body = await plain_auth(conn)
    else:
        body = await scram_auth(conn, mechanism)
    assert body["error_code"] == 0, body
    assert principals(sasl_broker) == [f"User:{USER}"]
    assert (await call(conn, Api.METADATA, {"topics": None}))["error_code"] == 0
    assert sample(sasl_broker, AUTH_METRIC, mechanism=mechanism, result="success") == 1


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
@pytest.mark.parametrize("user", [USER, "nobody"])
async def test_a_wrong_password_or_unknown_user_gets_58_then_eof(
        sasl_broker: Broker, open_conn: Open, mechanism: str, user: str) -> None:
    conn = await open_conn(_port(sasl_broker))
    if mechanism == "PLAIN":
        body = await plain_auth(conn, user, PASSWORD + "x")
    else:
        body = await scram_auth(conn, mechanism, user, PASSWORD + "x")
    assert body["error_code"] == 58, body
    assert "Authentication failed" in body["error_message"]
    assert user not in body["error_message"]  # does not say whether the user exists
    await closed(conn)
    assert sample(sasl_broker, AUTH_METRIC, mechanism=mechanism, result="failure") == 1
    assert sample(sasl_broker, CLOSED_METRIC, reason="authentication-failed") == 1


async def test_a_request_before_authentication_closes_the_connection(
        sasl_broker: Broker, open_conn: Open) -> None:
    conn = await open_conn(_port(sasl_broker))
    with pytest.raises(ConnectionClosed):
        await call(conn, Api.METADATA, {"topics": None})
    assert conn.frames_received == 0
    assert sample(sasl_broker, CLOSED_METRIC, reason="unauthenticated") == 1


async def test_a_request_between_handshake_and_authentication_closes_too(
        sasl_broker: Broker, open_conn: Open) -> None:
    conn = await open_conn(_port(sasl_broker))
    body = await call(conn, Api.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"})
    assert body["error_code"] == 0 and "SCRAM-SHA-256" in body["mechanisms"], body
    with pytest.raises(ConnectionClosed):
        await call(conn, Api.LIST_GROUPS, {})


async def test_an_unauthenticated_heartbeat_closes_the_connection(
        sasl_broker: Broker, open_conn: Open) -> None:
    """A heartbeat the fast path would settle (a live member's) must meet the gate."""
    member_conn = await open_conn(_port(sasl_broker))
    assert (await scram_auth(member_conn))["error_code"] == 0
    await create_topic(member_conn, "t")
    member = Member(member_conn, "g", ["t"])
    await member.join()
    assert (await member.sync({member.member_id: assignment([("t", [0])])}))[
        "error_code"] == 0
    assert (await member.heartbeat())["error_code"] == 0  # the fast path, authenticated

    stranger = await open_conn(_port(sasl_broker))
    with pytest.raises(ConnectionClosed):
        await call(stranger, Api.HEARTBEAT, {
            "group_id": "g", "generation_id": member.generation_id,
            "member_id": member.member_id, "group_instance_id": None})
    assert stranger.frames_received == 0
    assert (await member.heartbeat())["error_code"] == 0


async def test_an_unsupported_mechanism_is_answered_33_then_closed(
        sasl_broker: Broker, open_conn: Open) -> None:
    conn = await open_conn(_port(sasl_broker))
    body = await call(conn, Api.SASL_HANDSHAKE, {"mechanism": "GSSAPI"})
    assert body["error_code"] == 33, body
    assert sorted(body["mechanisms"]) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    await closed(conn)


async def test_a_second_handshake_after_success_is_illegal_and_closes(
        sasl_broker: Broker, open_conn: Open) -> None:
    conn = await open_conn(_port(sasl_broker))
    assert (await plain_auth(conn))["error_code"] == 0
    body = await call(conn, Api.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
    assert body["error_code"] == 34, body
    await closed(conn)


async def test_authenticate_before_handshake_is_illegal_and_closes(
        sasl_broker: Broker, open_conn: Open) -> None:
    conn = await open_conn(_port(sasl_broker))
    body = await call(conn, Api.SASL_AUTHENTICATE, {"auth_bytes": b"\0alice\0x"})
    assert body["error_code"] == 34, body
    await closed(conn)


async def test_sasl_requests_on_a_plaintext_listener_are_illegal_but_kept(
        sasl_broker: Broker, open_conn: Open) -> None:
    conn = await open_conn(_port(sasl_broker, "PLAINTEXT"))
    body = await call(conn, Api.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
    assert body["error_code"] == 34, body
    body = await call(conn, Api.SASL_AUTHENTICATE, {"auth_bytes": b""})
    assert body["error_code"] == 34, body
    assert (await call(conn, Api.METADATA, {"topics": None}))["error_code"] == 0
    assert principals(sasl_broker) == ["User:ANONYMOUS"]


async def test_an_idle_unauthenticated_connection_is_closed_at_the_timeout(
        start_broker: StartBroker, open_conn: Open) -> None:
    broker = await start_broker(listeners=SASL, authentication_timeout_ms=20,
                                connections_max_idle_ms=600_000)
    conn = await open_conn(broker.port)
    await closed(conn)
    assert sample(broker, CLOSED_METRIC, reason="authentication-timeout") == 1


async def test_an_authenticated_connection_outlives_the_timeout(
        start_broker: StartBroker, open_conn: Open, tmp_path: Path) -> None:
    write_user(tmp_path / "d")
    broker = await start_broker(data_dir=tmp_path / "d", listeners=SASL,
                                authentication_timeout_ms=500)
    conn = await open_conn(broker.port)
    assert (await scram_auth(conn))["error_code"] == 0
    late = await open_conn(broker.port)  # closed by its own timeout, after the first's
    await closed(late)
    assert not conn.closed.is_set()
    assert (await call(conn, Api.METADATA, {"topics": None}))["error_code"] == 0


async def test_a_large_frame_before_authentication_closes_undecoded(
        sasl_broker: Broker, open_conn: Open) -> None:
    """Kafka's sasl.server.max.receive.size: 512 KiB before authentication."""
    conn = await open_conn(_port(sasl_broker))
    assert (await call(conn, Api.SASL_HANDSHAKE, {"mechanism": "PLAIN"}))["error_code"] == 0
    with pytest.raises(ConnectionClosed):
        await call(conn, Api.SASL_AUTHENTICATE, {"auth_bytes": b"\0" * (600 * 1024)})
    assert sample(sasl_broker, CLOSED_METRIC, reason="unauthenticated") == 1


async def test_a_large_frame_header_before_authentication_closes_at_once(
        sasl_broker: Broker, open_conn: Open) -> None:
    """The 512 KiB bound is checked on the header: a client announcing 8 MiB is closed
    before it has sent (and the broker buffered) any of it."""
    conn = await open_conn(_port(sasl_broker))
    conn.write_raw((8 * 1024 * 1024).to_bytes(4, "big") + b"\x93")
    await closed(conn)
    assert sample(sasl_broker, CLOSED_METRIC, reason="unauthenticated") == 1


async def test_a_large_frame_after_authentication_is_taken(
        sasl_broker: Broker, open_conn: Open) -> None:
    conn = await open_conn(_port(sasl_broker))
    assert (await plain_auth(conn))["error_code"] == 0
    body = await call(conn, Api.METADATA, {"topics": None, "pad": b"\0" * (600 * 1024)})
    assert body["error_code"] == 0
