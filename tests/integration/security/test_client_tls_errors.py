"""What the SDK says when a TLS listener refuses it: one clear sentence naming the
address and the cause, for each way the issue lists, raised at start."""

from __future__ import annotations

import datetime
import ssl

import pytest
import trustme

from groupwire.client.admin import Admin
from groupwire.client.errors import GroupwireError
from groupwire.client.security import SecurityConfig

from .conftest import Pki, StartBroker

SSL_ONLY = "SSL://127.0.0.1:0"


async def _refusal(port: int, security: SecurityConfig) -> str:
    admin = Admin(f"127.0.0.1:{port}", request_timeout_ms=3000, security=security)
    with pytest.raises(GroupwireError) as info:
        async with admin:
            await admin.list_topics()
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "\n" not in text
    return text


def _tls(pki: Pki, cert: trustme.LeafCert | None = None) -> SecurityConfig:
    return SecurityConfig(security_protocol="SSL", ssl_context=pki.client(cert))


async def test_refused_client_certificates_say_why(pki: Pki,
                                                   start_broker: StartBroker) -> None:
    broker = await start_broker(listeners=SSL_ONLY, **pki.settings(ssl_client_auth="required"))
    now = datetime.datetime.now(datetime.UTC)
    expired = pki.ca.issue_cert("bob", common_name="bob",
                                not_before=now - datetime.timedelta(days=2),
                                not_after=now - datetime.timedelta(days=1))
    foreign = trustme.CA().issue_cert("mallory", common_name="mallory")
    missing = await _refusal(broker.port, _tls(pki))
    assert "client certificate" in missing
    for cert in (foreign, expired):
        text = await _refusal(broker.port, _tls(pki, cert))
        assert "TLS" in text and ("certificate" in text or "alert" in text), text


async def test_a_broker_certificate_from_another_ca_is_refused(
        pki: Pki, start_broker: StartBroker) -> None:
    broker = await start_broker(listeners=SSL_ONLY, **pki.settings())
    ctx = ssl.create_default_context()
    trustme.CA().configure_trust(ctx)
    text = await _refusal(broker.port, SecurityConfig(security_protocol="SSL",
                                                      ssl_context=ctx))
    assert "certificate verify failed" in text


async def test_a_plaintext_client_on_a_tls_listener_is_told_to_use_tls(
        pki: Pki, start_broker: StartBroker) -> None:
    broker = await start_broker(listeners=SSL_ONLY, **pki.settings())
    text = await _refusal(broker.port, SecurityConfig())
    assert "SSL" in text
