"""The client side of SASL and the SCRAM salted password, written once below both the
SDK and the broker (which dials other brokers): a difference between two copies would
be a login that fails.

The exchange is sans-I/O: :class:`SaslClient` turns the broker's answers into the next
message to send; the caller owns the connection, the time-outs and its own error type.

scramp (and the ASN.1 library it loads, 0.1 s) is imported by the SCRAM code when it
runs: a PLAIN login, and any program that only imports the SDK, go without it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from groupwire.protocol.acls import ScramMechanism
from groupwire.protocol.security import PLAIN, SASL_MECHANISMS

__all__ = ["MAX_ITERATIONS", "MIN_ITERATIONS", "SaslClient", "SaslProofError",
           "scram_salted_password"]

MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
"""Kafka's bounds on a SCRAM credential's iteration count (the CLI checks them before
it asks for a password, the broker when it stores one)."""

_DIGESTS: Final = {ScramMechanism.SCRAM_SHA_256: "sha256",
                   ScramMechanism.SCRAM_SHA_512: "sha512"}


def scram_salted_password(mechanism: ScramMechanism, password: str, salt: bytes,
                          iterations: int) -> bytes:
    """RFC 5802's ``Hi(Normalize(password), salt, i)``: PBKDF2-HMAC over the password's
    UTF-8 after SASLprep, as scramp's client normalises it, so that a credential stored
    from a KIP-554 upsertion is the one a SCRAM login proves and a PLAIN login checks.
    A password SASLprep refuses is hashed as it is (scramp's client would refuse it)."""
    from scramp.utils import saslprep

    try:
        normalised = saslprep(password)
    except Exception:  # prohibited characters
        normalised = password
    digest = _DIGESTS.get(mechanism)
    if digest is None:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
    return hashlib.pbkdf2_hmac(digest, normalised.encode("utf-8"), salt, iterations)


class SaslProofError(Exception):
    """The broker's SCRAM answer is not a valid proof: it may not hold the credential.
    The message quotes scramp's reason, never a secret."""


class SaslClient:
    """The client's messages of one SASL exchange (after SaslHandshake named
    ``mechanism``): PLAIN sends one, SCRAM-SHA-256/512 two, and SCRAM checks the broker's
    final signature so a peer without the credential cannot pass for the broker.

    ``first()`` is the first SaslAuthenticate's bytes; ``answer(server_bytes)`` takes
    each answer and gives the next message, or None once the exchange is complete.
    """

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(f"SASL mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                             f"not {mechanism!r}")
        self.mechanism = mechanism
        self.user = user
        self._password = password
        self._scram: Any = None  # a scramp ScramClient (untyped) for SCRAM
        if mechanism != PLAIN:
            from scramp import ScramClient

            self._scram = ScramClient([mechanism], user, password)
        self._step = 0

    def first(self) -> bytes:
        self._step = 1
        if self._scram is None:
            return b"\0" + self.user.encode() + b"\0" + self._password.encode()
        first: str = self._scram.get_client_first()  # scramp is untyped
        return first.encode()

    def answer(self, server_bytes: bytes) -> bytes | None:
        """The next message after the broker's ``server_bytes``; None: authenticated.
        Raises :class:`SaslProofError` if a SCRAM answer does not verify."""
        scram, step = self._scram, self._step
        if scram is None or step >= 3:
            return None
        self._step += 1
        from scramp import ScramException  # loaded already: self._scram is scramp's

        try:
            if step == 1:
                scram.set_server_first(bytes(server_bytes).decode())
                final: str = scram.get_client_final()
                return final.encode()
            scram.set_server_final(bytes(server_bytes).decode())
        except (ScramException, UnicodeDecodeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SaslProofError(reason) from None
        return None
