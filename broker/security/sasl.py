"""One connection's SASL exchange (SaslHandshake, then SaslAuthenticate steps): PLAIN in one
step, SCRAM-SHA-256/512 in two (RFC 5802, through scramp).

Every failure looks the same from outside: one error code (SASL_AUTHENTICATION_FAILED),
one message, and for SCRAM at the same step. An unknown user gets a made-up credential
(deterministic per process, so asking twice gets the same salt) and fails where a wrong
password fails; for PLAIN an unknown user's check still runs one PBKDF2. Nothing the
client sends, however malformed, escapes as an exception. A failed step ends the
exchange: the caller answers it and closes the connection.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import scramp

from groupwire.broker.security.credentials import (
    DEFAULT_ITERATIONS,
    CredentialTable,
    ScramCredential,
    digest_size,
    password_matches,
)
from groupwire.protocol.acls import ScramMechanism
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.security import PLAIN, SASL_MECHANISMS, user_principal

__all__ = ["MECHANISMS", "PLAIN", "SaslServer", "SaslStep", "failure_message", "principal_of"]

MECHANISMS: Final = SASL_MECHANISMS

_SERVER_SECRET: Final = secrets.token_bytes(32)
"""Made once per process: the made-up credentials of unknown users derive from it."""

_DUMMY: Final = ScramCredential(ScramMechanism.SCRAM_SHA_256, b"\x00" * 32, b"\x00" * 32,
                                b"\x00" * 32, DEFAULT_ITERATIONS)
"""PLAIN's stand-in for an unknown user: costs the same PBKDF2, never matches."""


def failure_message(mechanism: str) -> str:
    """The one message of every failed authentication: it never says which part was
    wrong, nor whether the user exists."""
    return f"Authentication failed: invalid credentials with SASL mechanism {mechanism}"


principal_of = user_principal


@dataclass(frozen=True, slots=True)
class SaslStep:
    """The answer to one SaslAuthenticate: ``reply`` goes back as ``auth_bytes``; ``done``
    ends the exchange, authenticated as ``principal`` unless ``error`` is set."""

    reply: bytes
    done: bool
    principal: str | None
    error: ErrorCode | None
    message: str | None


class SaslServer:
    """The server side of one connection's SASL exchange; a new one per connection."""

    def __init__(self, enabled: Sequence[str], credentials: CredentialTable, *,
                 nonce: Callable[[], str] | None = None) -> None:
        unknown = [m for m in enabled if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms {', '.join(unknown)}; "
                             f"supported: {', '.join(MECHANISMS)}")
        self._enabled = tuple(enabled)
        self._credentials = credentials
        self._nonce = nonce
        self._mechanism: str | None = None
        self._principal: str | None = None
        self._finished = False
        self._scram: Any = None
        """scramp's ScramServer once the client's first message arrived (scramp is
        untyped)."""
        self._scram_user: str | None = None

    @property
    def enabled(self) -> tuple[str, ...]:
        return self._enabled

    @property
    def mechanism(self) -> str | None:
        """The mechanism the handshake chose; None before it."""
        return self._mechanism

    @property
    def principal(self) -> str | None:
        """``User:<name>`` once authenticated; None before, and after a failure."""
        return self._principal

    @property
    def finished(self) -> bool:
        """The exchange is over, authenticated or not."""
        return self._finished

    def handshake(self, mechanism: str) -> tuple[ErrorCode, str | None]:
        """SaslHandshake: the error code and, when not NONE, a message. An unsupported
        mechanism leaves the exchange where it was."""
        if self._mechanism is not None:
            return ErrorCode.ILLEGAL_SASL_STATE, \
                f"a SASL handshake ({self._mechanism}) already happened on this connection"
        if mechanism not in self._enabled:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, \
                f"SASL mechanism {mechanism!r} is not enabled; enabled: " \
                f"{', '.join(self._enabled) or 'none'}"
        self._mechanism = mechanism
        return ErrorCode.NONE, None

    def authenticate(self, auth_bytes: bytes) -> SaslStep:
        """One SaslAuthenticate step; never raises on what the client sent."""
        if self._mechanism is None:
            return self._illegal("SaslAuthenticate before SaslHandshake")
        if self._finished:
            return self._illegal("the SASL exchange on this connection is over")
        try:
            if self._mechanism == PLAIN:
                return self._plain(auth_bytes)
            return self._scram_step(auth_bytes)
        except Exception:  # scramp, decoding, anything the client's bytes provoke
            return self._failed()

    # --- PLAIN --------------------------------------------------------------------

    def _plain(self, auth_bytes: bytes) -> SaslStep:
        parts = bytes(auth_bytes).split(b"\x00")
        if len(parts) != 3:
            return self._failed()
        authzid, user, password = (p.decode("utf-8") for p in parts)
        if not user or (authzid and authzid != user):
            return self._failed()
        cred = self._credentials.any_of(user)
        if cred is None:
            password_matches(_DUMMY, password)  # the same cost as a known user's check
            return self._failed()
        if not password_matches(cred, password):
            return self._failed()
        return self._succeeded(b"", user)

    # --- SCRAM --------------------------------------------------------------------

    def _scram_step(self, auth_bytes: bytes) -> SaslStep:
        message = bytes(auth_bytes).decode("utf-8")
        assert self._mechanism is not None
        if self._scram is None:
            nonce = self._nonce() if self._nonce is not None else None
            server = scramp.ScramMechanism(self._mechanism).make_server(
                self._scram_lookup, s_nonce=nonce)
            self._scram = server
            server.set_client_first(message)
            if self._scram_user is None:
                return self._failed()
            return SaslStep(server.get_server_first().encode("utf-8"), False, None, None,
                            None)
        server = self._scram
        _accept_repeated_client_nonce(server, message)
        server.set_client_final(message)
        reply = server.get_server_final().encode("utf-8")
        user = self._scram_user
        if user is None or self._credentials.get(
                user, ScramMechanism.from_sasl_name(self._mechanism)) is None:
            return self._failed()  # a made-up credential can only fail, but be sure
        return self._succeeded(reply, user)

    def _scram_lookup(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's ``auth_fn``: also where the user name is learnt (scramp keeps it)."""
        assert self._mechanism is not None
        mechanism = ScramMechanism.from_sasl_name(self._mechanism)
        self._scram_user = user
        cred = self._credentials.get(user, mechanism)
        if cred is None:
            cred = _made_up(mechanism, user)
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    # --- endings ------------------------------------------------------------------

    def _succeeded(self, reply: bytes, user: str) -> SaslStep:
        self._finished = True
        self._principal = principal_of(user)
        self._scram = None
        return SaslStep(reply, True, self._principal, None, None)

    def _failed(self) -> SaslStep:
        self._finished = True
        self._principal = None
        self._scram = None
        return SaslStep(b"", True, None, ErrorCode.SASL_AUTHENTICATION_FAILED,
                        failure_message(self._mechanism or ""))

    @staticmethod
    def _illegal(why: str) -> SaslStep:
        """Out of order: the exchange is left as it was (the caller closes anyway)."""
        return SaslStep(b"", True, None, ErrorCode.ILLEGAL_SASL_STATE, why)


def _accept_repeated_client_nonce(server: Any, client_final: str) -> None:
    """Take librdkafka's client-final nonce as well as RFC 5802's.

    librdkafka before 2.6.1 (Debian 12's kcat links 2.0.2, Ubuntu 24.04 ships 2.3.0)
    puts its own nonce in front of the server's combined one, so its ``r=`` is
    client + client + server nonce rather than client + server. Kafka checked nothing
    there until 3.8.1, then accepted any ``r=`` ending with the right nonce; the form
    taken here is exactly the one librdkafka sends, which still carries this exchange's
    server nonce, so a replayed client-final still fails. The proof is checked over the
    message as sent, which is what librdkafka signs: only scramp's nonce comparison is
    widened (its ``nonce`` attribute, a str or scramp's own ``Nonce`` by version, is what
    it compares ``r=`` with)."""
    expected = server.nonce
    nonce = str(expected)
    client_nonce = nonce[:len(nonce) - len(str(server.s_nonce))]
    for attribute in client_final.split(","):
        if attribute.startswith("r="):
            if client_nonce and attribute[2:] == client_nonce + nonce:
                server.nonce = type(expected)(client_nonce + nonce)
            return


def _made_up(mechanism: ScramMechanism, user: str) -> ScramCredential:
    """An unknown user's credential: the same salt every time this process is asked (a
    changing one would tell the user does not exist), keys nobody can match."""
    size = digest_size(mechanism)

    def derive(label: str) -> bytes:
        data = f"{label}\x00{mechanism.sasl_name}\x00{user}".encode("utf-8", "replace")
        return hmac.digest(_SERVER_SECRET, data, hashlib.sha512)[:size]

    return ScramCredential(mechanism, derive("salt")[:32], derive("stored"),
                           derive("server"), DEFAULT_ITERATIONS)
