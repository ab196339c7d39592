"""The SDK against the real broker's SASL listener: SCRAM and PLAIN with the right
password, AuthenticationFailedError (once, at start) with a wrong one, over TLS too."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme

from groupwire import Admin, Producer
from groupwire.broker.security.credentials import ScramMechanism, credential_from_password
from groupwire.broker.security.store import offline_upsert
from groupwire.broker.server import Broker
from groupwire.errors import AuthenticationFailedError


def _add_user(data_dir: Path, user: str, password: str) -> None:
    offline_upsert(data_dir, user, [credential_from_password(m, password)
                                    for m in (ScramMechanism.SCRAM_SHA_256,
                                                          ScramMechanism.SCRAM_SHA_512)])


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_plaintext_listener(start_broker: Callable[..., Awaitable[Broker]],
                                       tmp_path: Path, mechanism: str) -> None:
    data = tmp_path / "data"
    _add_user(data, "alice", "alice-secret")
    broker = await start_broker(data_dir=data, listeners="SASL_PLAINTEXT://127.0.0.1:0",
                                sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")
    address = f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}"
    opts: dict[str, Any] = dict(security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism=mechanism, sasl_plain_username="alice")
    async with Admin(address, sasl_plain_password="alice-secret", **opts) as admin:
        await admin.create_topics("t", 1)
    async with Producer(address, sasl_plain_password="alice-secret", **opts) as producer:
        await producer.send_and_wait("t", b"v", partition=0)
    admin = Admin(address, sasl_plain_password="wrong", request_timeout_ms=30000, **opts)
    try:
        with pytest.raises(AuthenticationFailedError, match=mechanism):
            await admin.start()
    finally:
        await admin.close()


async def test_sasl_ssl_listener(start_broker: Callable[..., Awaitable[Broker]],
                                 tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    for extra in leaf.cert_chain_pems[1:]:
        extra.write_to_path(str(tmp_path / "cert.pem"), append=True)
    leaf.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    data = tmp_path / "data"
    _add_user(data, "bob", "b0b")
    broker = await start_broker(data_dir=data, listeners="SASL_SSL://127.0.0.1:0",
                                ssl_certfile=str(tmp_path / "cert.pem"),
                                ssl_keyfile=str(tmp_path / "key.pem"))
    address = f"127.0.0.1:{broker.listener_ports['SASL_SSL']}"
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    async with Admin(address, security_protocol="SASL_SSL", ssl_context=ctx,
                     sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                     sasl_plain_password="b0b") as admin:
        await admin.create_topics("t", 1)
        assert "t" in await admin.list_topics()
