"""SCRAM credentials: RFC 7677's example, PLAIN's password check, KIP-554's bounds, the table."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from groupwire.broker.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    CredentialTable,
    credential_from_password,
    credential_from_salted,
    password_matches,
    salted_password,
    upsertion_problem,
)
from groupwire.protocol.acls import ScramMechanism
from groupwire.protocol.errors import ErrorCode

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512

# RFC 7677 §3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST_BARE = "n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = ("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    "s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL_NO_PROOF = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC_SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector() -> None:
    """The RFC's proof and server signature follow from our credential alone."""
    cred = credential_from_password(SHA256, "pencil", 4096, salt=RFC_SALT)
    auth_message = ",".join([RFC_CLIENT_FIRST_BARE, RFC_SERVER_FIRST,
                             RFC_CLIENT_FINAL_NO_PROOF]).encode()
    server_signature = hmac.digest(cred.server_key, auth_message, "sha256")
    assert base64.b64encode(server_signature).decode() == RFC_SERVER_SIGNATURE
    # the client's proof is ClientKey XOR ClientSignature; H(ClientKey) is the stored key
    client_signature = hmac.digest(cred.stored_key, auth_message, "sha256")
    proof = base64.b64decode(RFC_PROOF)
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == cred.stored_key
    assert password_matches(cred, "pencil")
    assert not password_matches(cred, "pencil ")


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_from_salted_equals_from_password(mechanism: ScramMechanism) -> None:
    salt = b"s" * 16
    salted = salted_password(mechanism, "pässword", salt, 4096)
    assert len(salted) == (32 if mechanism is SHA256 else 64)
    assert credential_from_salted(mechanism, salt, salted, 4096) == \
        credential_from_password(mechanism, "pässword", 4096, salt=salt)


def test_random_salt_and_repr_hides_keys() -> None:
    a = credential_from_password(SHA256, "pw")
    b = credential_from_password(SHA256, "pw")
    assert len(a.salt) == 32
    assert a.salt != b.salt and a.stored_key != b.stored_key
    assert a.stored_key.hex() not in repr(a) and "SCRAM-SHA-256" in repr(a)
    assert password_matches(a, "pw") and password_matches(b, "pw")
    assert not password_matches(a, "Pw")


def _upsertion(**kw: object) -> tuple[ErrorCode, str] | None:
    args: dict[str, object] = {"name": "alice", "mechanism": SHA256,
                               "iterations": MIN_ITERATIONS, "salt": b"x" * 16,
                               "salted": b"y" * 32}
    args.update(kw)
    return upsertion_problem(**args)  # type: ignore[arg-type]


def test_upsertion_bounds() -> None:
    assert _upsertion() is None
    assert _upsertion(iterations=MAX_ITERATIONS) is None
    assert _upsertion(mechanism=2, salted=b"y" * 64) is None  # a wire int is fine
    unsupported = _upsertion(mechanism=ScramMechanism.UNKNOWN)
    assert unsupported is not None and unsupported[0] is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert _upsertion(mechanism=7) is not None
    for bad in ({"name": ""}, {"iterations": MIN_ITERATIONS - 1},
                {"iterations": MAX_ITERATIONS + 1}, {"salt": b""}, {"salt": b"x" * 11},
                {"salted": b"y" * 64}, {"salted": b""},
                {"mechanism": SHA512, "salted": b"y" * 32}):
        problem = _upsertion(**bad)
        assert problem is not None and problem[0] is ErrorCode.UNACCEPTABLE_CREDENTIAL, bad
        assert problem[1]


def test_table() -> None:
    table = CredentialTable()
    assert table.get("alice", SHA256) is None and table.any_of("alice") is None
    c512 = credential_from_salted(SHA512, b"s" * 16, b"p" * 64, 4096)
    c256 = credential_from_salted(SHA256, b"s" * 16, b"p" * 32, 4096)
    v0 = table.version
    table.upsert("alice", c512)
    assert table.any_of("alice") == c512
    table.upsert("alice", c256)
    table.upsert("bob", c512)
    assert table.version == v0 + 3
    assert table.any_of("alice") == c256  # SHA-256 first
    assert table.mechanisms_of("alice") == [c256, c512]
    assert table.users() == ["alice", "bob"]
    assert list(table.items()) == [("alice", c256), ("alice", c512), ("bob", c512)]
    assert not table.delete("bob", SHA256)
    assert table.delete("bob", SHA512)
    assert table.users() == ["alice"] and "bob" not in table
    v = table.version
    table.replace_all([("carol", c256)])
    assert table.version > v and table.users() == ["carol"]
    copy = CredentialTable()
    copy.replace_all(table)
    assert list(copy.items()) == [("carol", c256)]
