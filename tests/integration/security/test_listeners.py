"""Several listeners on one broker: each answers Metadata and FindCoordinator with its
own advertised address (Kafka's rule), and a port that cannot be bound names its
listener."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from groupwire.broker.server import StartupError
from tests.conformance.wire import Api

from .conftest import Open, Pki, StartBroker, call, principals, scram_auth, write_user


async def test_each_listener_advertises_its_own_address(
        pki: Pki, start_broker: StartBroker, open_conn: Open, tmp_path: Path) -> None:
    write_user(tmp_path / "d")
    broker = await start_broker(
        data_dir=tmp_path / "d",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        advertised_listeners="SASL_SSL://secure.example:0", **pki.settings())
    plain_port, secure_port = (broker.listener_ports["PLAINTEXT"],
                               broker.listener_ports["SASL_SSL"])
    assert broker.port == plain_port != secure_port

    plain = await open_conn(plain_port)
    secure = await open_conn(secure_port, ssl=pki.client())
    assert (await scram_auth(secure, "SCRAM-SHA-512"))["error_code"] == 0
    assert sorted(principals(broker)) == ["User:ANONYMOUS", "User:alice"]

    expected = {plain: ("127.0.0.1", plain_port), secure: ("secure.example", secure_port)}
    for conn, (host, port) in expected.items():
        body = await call(conn, Api.METADATA, {"topics": None})
        assert [(b["host"], b["port"]) for b in body["brokers"]] == [(host, port)]
        body = await call(conn, Api.FIND_COORDINATOR, {"key": "g", "key_type": 0})
        assert body["error_code"] == 0 and (body["host"], body["port"]) == (host, port)


async def test_the_default_is_one_plaintext_listener_on_host_and_port(
        start_broker: StartBroker, open_conn: Open) -> None:
    broker = await start_broker(advertised_host="broker.example")
    assert broker.listener_ports == {"PLAINTEXT": broker.port}
    conn = await open_conn(broker.port)
    body = await call(conn, Api.METADATA, {"topics": None})
    assert [(b["host"], b["port"]) for b in body["brokers"]] == [
        ("broker.example", broker.port)]


async def test_a_port_in_use_names_the_listener(pki: Pki, start_broker: StartBroker) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match=rf"SSL://127\.0\.0\.1:{port}.*in use"):
            await start_broker(listeners=f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{port}",
                               **pki.settings())


@pytest.mark.parametrize(("settings", "says"), [
    ({"listeners": "SSL://127.0.0.1:0"}, "--ssl-certfile and --ssl-keyfile"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl_certfile": "/nonexistent.pem",
      "ssl_keyfile": "/nonexistent.key"}, "--ssl-certfile: no such file"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl_enabled_mechanisms": ""},
     "at least one mechanism"),
])
async def test_settings_that_cannot_work_stop_the_start(
        start_broker: StartBroker, settings: dict[str, str], says: str) -> None:
    with pytest.raises(StartupError, match=says):
        await start_broker(**settings)


async def test_a_key_that_does_not_load_stops_the_start(
        pki: Pki, start_broker: StartBroker) -> None:
    Path(pki.keyfile).write_text("not a key\n")
    with pytest.raises(StartupError, match=r"--ssl-keyfile .*cannot load"):
        await start_broker(listeners="SSL://127.0.0.1:0", **pki.settings())
