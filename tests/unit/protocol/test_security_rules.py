"""The security rules broker and SDK share (protocol.security): the SASL client
exchange against the broker's own SASL server, and the SCRAM salted password that a
KIP-554 upsertion carries, which must verify as the broker stores it."""

from __future__ import annotations

import pytest

from groupwire.broker.security.credentials import (
    CredentialTable,
    credential_from_password,
    credential_from_salted,
    password_matches,
)
from groupwire.broker.security.sasl import SaslServer
from groupwire.protocol.acls import ScramMechanism
from groupwire.protocol.sasl import SaslClient, SaslProofError, scram_salted_password
from groupwire.protocol.security import uses_sasl, uses_tls


def _table(mechanism: ScramMechanism, password: str) -> CredentialTable:
    table = CredentialTable()
    table.upsert("alice", credential_from_password(mechanism, password))
    return table


def _server(mechanism: str, table: CredentialTable) -> SaslServer:
    server = SaslServer([mechanism], table)
    assert server.handshake(mechanism)[0] == 0
    return server


def _exchange(client: SaslClient, server: SaslServer) -> bool:
    """Run the exchange to its end; whether the server authenticated the client."""
    message: bytes | None = client.first()
    while message is not None:
        step = server.authenticate(message)
        if step.error is not None:
            return False
        message = client.answer(step.reply)
    return server.principal == "User:alice"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_shared_client_authenticates_against_the_broker(mechanism: str) -> None:
    scram = ScramMechanism.SCRAM_SHA_512 if mechanism == "SCRAM-SHA-512" \
        else ScramMechanism.SCRAM_SHA_256
    server = _server(mechanism, _table(scram, "s3cret"))
    assert _exchange(SaslClient(mechanism, "alice", "s3cret"), server)


def test_a_wrong_password_is_refused() -> None:
    server = _server("SCRAM-SHA-256", _table(ScramMechanism.SCRAM_SHA_256, "s3cret"))
    assert not _exchange(SaslClient("SCRAM-SHA-256", "alice", "wrong"), server)


def test_a_server_without_the_credential_cannot_pass_for_the_broker() -> None:
    """The client checks the server's final signature: one made with another
    credential fails the exchange on the client's side."""
    real = _server("SCRAM-SHA-256", _table(ScramMechanism.SCRAM_SHA_256, "s3cret"))
    impostor = _server("SCRAM-SHA-256", _table(ScramMechanism.SCRAM_SHA_256, "other"))
    client = SaslClient("SCRAM-SHA-256", "alice", "s3cret")
    first = client.first()
    final = client.answer(real.authenticate(first).reply)
    assert final is not None
    impostor.authenticate(first)
    forged = impostor.authenticate(final)  # signed with another credential's key
    with pytest.raises(SaslProofError):
        client.answer(forged.reply or b"v=" + b"A" * 44)


def test_an_unknown_mechanism_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="SASL mechanism"):
        SaslClient("GSSAPI", "alice", "x")


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256,
                                       ScramMechanism.SCRAM_SHA_512])
@pytest.mark.parametrize("password", ["s3cret", "pässwörd", "I\u00adX"])
def test_an_upsertions_salted_password_verifies_as_stored(mechanism: ScramMechanism,
                                                          password: str) -> None:
    salt = b"0123456789abcdef"
    stored = credential_from_salted(
        mechanism, salt, scram_salted_password(mechanism, password, salt, 4096), 4096)
    assert password_matches(stored, password)
    assert not password_matches(stored, password + "x")


def test_security_protocol_names() -> None:
    assert [p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL") if uses_tls(p)] \
        == ["SSL", "SASL_SSL"]
    assert [p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL") if uses_sasl(p)] \
        == ["SASL_PLAINTEXT", "SASL_SSL"]


def test_a_salted_password_needs_a_scram_mechanism() -> None:
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        scram_salted_password(ScramMechanism.UNKNOWN, "x", b"salt" * 4, 4096)
