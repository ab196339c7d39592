"""Random SaslAuthenticate bytes against a running broker: each is refused on its own
connection, none crashes the broker or authenticates anyone."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from groupwire.broker.server import Broker
from tests.conformance.wire import Api

from .conftest import Open, StartBroker, call, closed, principals, scram_auth, write_user

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture
async def sasl_broker(start_broker: StartBroker, tmp_path: Path) -> Broker:
    write_user(tmp_path / "fuzz")
    return await start_broker(data_dir=tmp_path / "fuzz",
                              listeners="SASL_PLAINTEXT://127.0.0.1:0",
                              sasl_enabled_mechanisms=",".join(MECHANISMS))


def _payloads(rng: random.Random) -> list[bytes]:
    """Random bytes, and near misses of each mechanism's real first message."""
    near = [b"n,,n=alice,r=" + bytes(rng.randrange(256) for _ in range(24)),
            b"\x00alice\x00" + bytes(rng.randrange(256) for _ in range(12)),
            b"p=tls-unique,,n=alice,r=abc", b"n,a=bob,n=alice,r=x", b"y,,n=,r=", b"\x00" * 3]
    noise = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
             for _ in range(20)]
    return near + noise


async def test_fuzzed_auth_bytes_are_refused_and_the_broker_serves_on(
        sasl_broker: Broker, open_conn: Open) -> None:
    port = sasl_broker.listener_ports["SASL_PLAINTEXT"]
    rng = random.Random(16)
    for payload in _payloads(rng):
        mechanism = rng.choice(MECHANISMS)
        conn = await open_conn(port)
        assert (await call(conn, Api.SASL_HANDSHAKE, {"mechanism": mechanism})
                )["error_code"] == 0
        body = await call(conn, Api.SASL_AUTHENTICATE, {"auth_bytes": payload})
        if body["error_code"] == 0:  # a SCRAM first message that parsed: the final fails
            body = await call(conn, Api.SASL_AUTHENTICATE, {"auth_bytes": payload})
        assert body["error_code"] in (58, 34), (mechanism, payload, body)
        await closed(conn)
    assert principals(sasl_broker) == []
    conn = await open_conn(port)
    assert (await scram_auth(conn))["error_code"] == 0  # still serving, still right
