"""The server side of SASL: PLAIN and SCRAM-SHA-256/512 against scramp's client, and every
way an exchange can fail looking the same from outside."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable

import pytest
import scramp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.broker.security import sasl as sasl_module
from groupwire.broker.security.credentials import (
    CredentialTable,
    ScramCredential,
    credential_from_password,
)
from groupwire.broker.security.sasl import MECHANISMS, SaslServer, SaslStep, failure_message
from groupwire.broker.security.state import SecurityState
from groupwire.protocol.acls import ScramMechanism
from groupwire.protocol.errors import ErrorCode

SCRAMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED


def _table() -> CredentialTable:
    table = CredentialTable()
    for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        table.upsert("alice", credential_from_password(mech, "secret", 4096))
    table.upsert("only512", credential_from_password(ScramMechanism.SCRAM_SHA_512, "pw512"))
    return table


TABLE = _table()


def server(mechanism: str, *, nonce: Callable[[], str] | None = None,
           table: CredentialTable = TABLE) -> SaslServer:
    s = SaslServer(MECHANISMS, table, nonce=nonce)
    assert s.handshake(mechanism) == (ErrorCode.NONE, None)
    assert s.mechanism == mechanism
    return s


def scram(s: SaslServer, mechanism: str, user: str, password: str,
          ) -> tuple[SaslStep, SaslStep, scramp.ScramClient]:
    """Both steps of a SCRAM exchange; the second only if the first went on."""
    client = scramp.ScramClient([mechanism], user, password)
    first = s.authenticate(client.get_client_first().encode())
    if first.done:
        return first, first, client
    client.set_server_first(first.reply.decode())
    final = s.authenticate(client.get_client_final().encode())
    return first, final, client


def assert_failed(step: SaslStep, mechanism: str) -> None:
    assert step.done and step.principal is None and step.reply == b""
    assert step.error is FAILED
    assert step.message == failure_message(mechanism)
    assert step.message == f"Authentication failed: invalid credentials with SASL " \
                           f"mechanism {mechanism}"


# --- SCRAM --------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_succeeds_and_the_client_verifies_the_server(mechanism: str) -> None:
    s = server(mechanism)
    first, final, client = scram(s, mechanism, "alice", "secret")
    assert not first.done and first.error is None
    assert final.done and final.error is None and final.principal == "User:alice"
    client.set_server_final(final.reply.decode())  # raises if the server's proof is wrong
    assert s.principal == "User:alice" and s.finished


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_wrong_password_and_unknown_user_fail_alike(mechanism: str) -> None:
    s = server(mechanism)
    first, wrong, _ = scram(s, mechanism, "alice", "not-the-secret")
    assert not first.done
    assert_failed(wrong, mechanism)
    assert s.principal is None

    s = server(mechanism)
    first, unknown, _ = scram(s, mechanism, "mallory", "whatever")
    assert not first.done and first.error is None  # the first step goes on, as for alice
    assert_failed(unknown, mechanism)
    assert unknown == wrong


def test_scram_unknown_user_salt_is_stable_and_per_user() -> None:
    def server_first(user: str) -> dict[str, str]:
        s = server("SCRAM-SHA-256")
        client = scramp.ScramClient(["SCRAM-SHA-256"], user, "x")
        reply = s.authenticate(client.get_client_first().encode()).reply.decode()
        return dict(kv.split("=", 1) for kv in reply.split(","))

    a, again, b = server_first("mallory"), server_first("mallory"), server_first("eve")
    assert a["s"] == again["s"] and a["s"] != b["s"]
    assert a["i"] == "4096"


def test_scram_user_without_that_mechanism_fails_at_the_final_step() -> None:
    s = server("SCRAM-SHA-256")
    first, final, _ = scram(s, "SCRAM-SHA-256", "only512", "pw512")
    assert not first.done
    assert_failed(final, "SCRAM-SHA-256")


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_replayed_client_final_fails(mechanism: str) -> None:
    client = scramp.ScramClient([mechanism], "alice", "secret")
    client_first = client.get_client_first().encode()
    a = server(mechanism)
    client.set_server_first(a.authenticate(client_first).reply.decode())
    client_final = client.get_client_final().encode()
    assert a.authenticate(client_final).principal == "User:alice"

    b = server(mechanism)  # an eavesdropper replays both messages to another connection
    assert not b.authenticate(client_first).done
    assert_failed(b.authenticate(client_final), mechanism)


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_altered_proof_fails(mechanism: str) -> None:
    s = server(mechanism)
    client = scramp.ScramClient([mechanism], "alice", "secret")
    client.set_server_first(s.authenticate(client.get_client_first().encode()).reply.decode())
    head, proof = client.get_client_final().rsplit(",p=", 1)
    raw = bytearray(base64.b64decode(proof))
    raw[5] ^= 0x01
    altered = f"{head},p={base64.b64encode(bytes(raw)).decode()}"
    assert_failed(s.authenticate(altered.encode()), mechanism)


def _signed_final(mechanism: str, password: str, client_first_bare: str, server_first: str,
                  nonce: str) -> tuple[str, bytes]:
    """A client-final with ``r=nonce`` and a proof over the message as written (what
    librdkafka signs), and the server signature the client then expects."""
    hf = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    fields = dict(a.split("=", 1) for a in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(hf().name, password.encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", hf)
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hf(client_key).digest(), auth, hf)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.digest(salted, b"Server Key", hf)
    return (f"{without_proof},p={base64.b64encode(proof).decode()}",
            hmac.digest(server_key, auth, hf))


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_client_nonce_twice_as_librdkafka_sends_it(mechanism: str) -> None:
    """librdkafka before 2.6.1 writes r= as its nonce, then the server-first's whole
    nonce: that form is taken, with the proof checked over it."""
    s = server(mechanism, nonce=lambda: "SERVERNONCE")
    first = s.authenticate(b"n,,n=alice,r=CLIENT")
    server_first = first.reply.decode()
    assert server_first.startswith("r=CLIENTSERVERNONCE,")
    final, expected = _signed_final(mechanism, "secret", "n=alice,r=CLIENT", server_first,
                                    "CLIENTCLIENTSERVERNONCE")
    step = s.authenticate(final.encode())
    assert step.principal == "User:alice" and step.error is None
    assert step.reply == b"v=" + base64.b64encode(expected)


@pytest.mark.parametrize("nonce", ["CLIENT", "CLIENTSERVERNONCECLIENT", "XCLIENTSERVERNONCE",
                                   "CLIENTCLIENTOTHERNONCE", "SERVERNONCE",
                                   "CLIENTCLIENTCLIENTSERVERNONCE"])
def test_scram_any_other_client_final_nonce_fails(nonce: str) -> None:
    s = server("SCRAM-SHA-256", nonce=lambda: "SERVERNONCE")
    server_first = s.authenticate(b"n,,n=alice,r=CLIENT").reply.decode()
    final, _ = _signed_final("SCRAM-SHA-256", "secret", "n=alice,r=CLIENT", server_first,
                             nonce)
    assert_failed(s.authenticate(final.encode()), "SCRAM-SHA-256")


def test_scram_rfc7677_exchange_byte_for_byte() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    table = CredentialTable()
    table.upsert("user", credential_from_password(ScramMechanism.SCRAM_SHA_256, "pencil",
                                                  4096, salt=salt))
    s = server("SCRAM-SHA-256", nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", table=table)
    first = s.authenticate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first.reply == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                           b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = s.authenticate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                           b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final.reply == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert final.principal == "User:user"


def test_scram_malformed_first_message_fails_without_raising() -> None:
    s = server("SCRAM-SHA-512")
    assert_failed(s.authenticate(b"\xff\xfe not utf-8"), "SCRAM-SHA-512")
    s = server("SCRAM-SHA-512")
    assert_failed(s.authenticate(b"n,,n=alice"), "SCRAM-SHA-512")  # no nonce


# --- PLAIN --------------------------------------------------------------------------


@pytest.mark.parametrize("auth", [b"\x00alice\x00secret", b"alice\x00alice\x00secret",
                                  b"\x00only512\x00pw512"])
def test_plain_succeeds(auth: bytes) -> None:
    s = server("PLAIN")
    step = s.authenticate(auth)
    assert step == SaslStep(b"", True, step.principal, None, None)
    assert step.principal == s.principal
    assert s.principal in ("User:alice", "User:only512")


@pytest.mark.parametrize("auth", [
    b"\x00alice\x00wrong", b"\x00alice\x00", b"bob\x00alice\x00secret", b"\x00\x00secret",
    b"\x00alice", b"\x00alice\x00secret\x00", b"", b"\x00alice\x00\xff\xfe",
    b"\x00mallory\x00secret",
])
def test_plain_fails_alike(auth: bytes) -> None:
    step = server("PLAIN").authenticate(auth)
    assert_failed(step, "PLAIN")
    assert b"secret" not in (step.message or "").encode()


def test_plain_unknown_user_costs_one_pbkdf2_like_a_known_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[ScramCredential] = []
    real = sasl_module.password_matches

    def counting(cred: ScramCredential, password: str) -> bool:
        checked.append(cred)
        return real(cred, password)

    monkeypatch.setattr(sasl_module, "password_matches", counting)
    assert_failed(server("PLAIN").authenticate(b"\x00mallory\x00secret"), "PLAIN")
    assert_failed(server("PLAIN").authenticate(b"\x00alice\x00wrong"), "PLAIN")
    assert len(checked) == 2
    assert checked[0].iterations == checked[1].iterations


# --- the state machine --------------------------------------------------------------


def test_authenticate_before_handshake_is_illegal() -> None:
    s = SaslServer(MECHANISMS, TABLE)
    step = s.authenticate(b"\x00alice\x00secret")
    assert step.error is ErrorCode.ILLEGAL_SASL_STATE and step.principal is None
    assert s.principal is None


def test_handshake_twice_is_illegal() -> None:
    s = server("PLAIN")
    code, message = s.handshake("SCRAM-SHA-256")
    assert code is ErrorCode.ILLEGAL_SASL_STATE and message
    assert s.mechanism == "PLAIN"


def test_steps_after_the_end_are_illegal() -> None:
    s = server("PLAIN")
    assert s.authenticate(b"\x00alice\x00secret").principal == "User:alice"
    again = s.authenticate(b"\x00alice\x00secret")
    assert again.error is ErrorCode.ILLEGAL_SASL_STATE and again.principal is None
    assert s.principal == "User:alice"  # still authenticated; the caller decides

    s = server("SCRAM-SHA-256")
    _, final, _ = scram(s, "SCRAM-SHA-256", "alice", "wrong")
    assert final.error is FAILED
    assert s.authenticate(b"c=biws,r=x,p=AAAA").error is ErrorCode.ILLEGAL_SASL_STATE
    assert s.principal is None


def test_scram_out_of_order_client_final_first_fails() -> None:
    s = server("SCRAM-SHA-256")
    assert_failed(s.authenticate(b"c=biws,r=abc,p=AAAA"), "SCRAM-SHA-256")


def test_unsupported_mechanism_names_the_enabled_ones() -> None:
    s = SaslServer(["SCRAM-SHA-512", "PLAIN"], TABLE)
    for name in ("GSSAPI", "SCRAM-SHA-256", "plain"):
        code, message = s.handshake(name)
        assert code is ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert message is not None and "SCRAM-SHA-512, PLAIN" in message
    assert s.mechanism is None
    assert s.handshake("PLAIN") == (ErrorCode.NONE, None)


def test_enabling_an_unknown_mechanism_is_refused() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslServer(["PLAIN", "GSSAPI"], TABLE)
    with pytest.raises(ValueError):
        SecurityState([], TABLE, [], ["OAUTHBEARER"])


def test_security_state_gives_each_connection_its_own_exchange() -> None:
    state = SecurityState([], TABLE, ["User:admin"], ["PLAIN"])
    a, b = state.sasl_server(), state.sasl_server()
    assert a is not b
    assert a.handshake("PLAIN") == (ErrorCode.NONE, None)
    assert b.mechanism is None
    assert state.authorizer.is_super_user("User:admin")
    assert state.credentials is TABLE and state.enabled_mechanisms == ("PLAIN",)


# --- fuzz ---------------------------------------------------------------------------

_scramish = st.lists(
    st.sampled_from(["n", "y", "p=tls-unique", "", "a=alice", "n=alice", "n=mallory",
                     "r=abc", "r=", "s=AAAA", "i=4096", "c=biws", "p=AAAA", "m=x", "e=x",
                     "n=\x00", "=", ",", "n=a=2C", "t=1"]),
    max_size=8).map(lambda parts: ",".join(parts).encode())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mechanism=st.sampled_from(MECHANISMS),
       messages=st.lists(st.one_of(st.binary(max_size=200), _scramish), min_size=1,
                         max_size=3))
def test_fuzzed_auth_bytes_never_raise(mechanism: str, messages: list[bytes]) -> None:
    s = server(mechanism)
    for message in messages:
        step = s.authenticate(message)
        assert isinstance(step, SaslStep)
        assert step.principal is None  # nobody guesses their way in
        if step.error is FAILED:
            assert step.message == failure_message(mechanism)


@settings(max_examples=100, deadline=None)
@given(mechanism=st.sampled_from(SCRAMS),
       final=st.one_of(st.binary(max_size=200), _scramish))
def test_fuzzed_client_final_after_a_valid_first_never_raises(mechanism: str,
                                                              final: bytes) -> None:
    s = server(mechanism)
    client = scramp.ScramClient([mechanism], "alice", "secret")
    assert not s.authenticate(client.get_client_first().encode()).done
    step = s.authenticate(final)
    assert step.done and step.principal is None
    assert step.error is FAILED


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_a_password_saslprep_changes_works_for_scram_and_plain(mechanism: str) -> None:
    """scramp's client normalises the password (RFC 5802's SASLprep): the stored
    credential must be made from the same normalised form, or the login fails."""
    password = "\ufb01le-\u00a0key"  # the "fi" ligature and a no-break space both change
    table = CredentialTable()
    table.upsert("eve", credential_from_password(ScramMechanism.from_sasl_name(mechanism),
                                                 password))
    _, final, client = scram(server(mechanism, table=table), mechanism, "eve", password)
    assert final.principal == "User:eve"
    client.set_server_final(final.reply.decode())
    plain = server("PLAIN", table=table)
    assert plain.authenticate(b"\x00eve\x00" + password.encode()).principal == "User:eve"
