"""The client's side of SASL (Kafka's SaslHandshake + SaslAuthenticate, API 17 and 36).

Each connection authenticates once, right after ApiVersions: the handshake names the
mechanism, then PLAIN sends one message and SCRAM-SHA-256/512 two (RFC 5802: client-first,
client-final), checking the broker's final signature so that a peer which does not hold
the credential cannot pass for the broker. A refusal raises
:class:`AuthenticationFailedError`, which callers never retry; the message names the user
and mechanism, never the password.
"""

from __future__ import annotations

import asyncio

from groupwire.client.connection import Connection
from groupwire.client.errors import (
    AuthenticationFailedError,
    UnsupportedSaslMechanismError,
    error_for,
)
from groupwire.client.security import SASL_MECHANISMS, SecurityConfig
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from groupwire.protocol.sasl import SaslClient, SaslProofError

__all__ = ["authenticate"]


async def authenticate(conn: Connection, config: SecurityConfig, timeout: float) -> None:
    """Authenticate ``conn`` as ``config`` says, within ``timeout`` s in all (TimeoutError
    otherwise); nothing to do without SASL. Raises :class:`AuthenticationFailedError` for
    refused credentials (or a broker whose SCRAM proof is wrong),
    :class:`UnsupportedSaslMechanismError` when the broker does not enable the mechanism,
    ``ConnectionClosedError`` when the connection is lost meanwhile."""
    if not config.uses_sasl:
        return
    mechanism = config.sasl_mechanism
    user = config.sasl_plain_username or ""
    exchange = SaslClient(mechanism, user, config.sasl_plain_password or "")
    async with asyncio.timeout(timeout):
        shake = await conn.send(SaslHandshakeRequest(mechanism=mechanism),
                                response_type=SaslHandshakeResponse)
        if shake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise UnsupportedSaslMechanismError(_mismatch(conn.peer, mechanism,
                                                          shake.mechanisms),
                                                code=shake.error_code)
        if shake.error_code != ErrorCode.NONE:
            raise error_for(shake.error_code, shake.error_message
                            or f"SaslHandshake to {conn.peer}")
        message: bytes | None = exchange.first()
        try:
            while message is not None:
                message = exchange.answer(await _round(conn, message, user, mechanism))
        except SaslProofError as exc:
            raise AuthenticationFailedError(
                f"{conn.peer} failed the {mechanism} exchange for user {user!r}: its "
                f"answer is not a valid proof ({exc}); it may not be the broker holding "
                f"this user's credential") from None


def _mismatch(peer: str, mechanism: str, enabled: list[str]) -> str:
    """Both sides of a mechanism mismatch, and the way out: the broker's list alone left
    users guessing which setting of theirs was compared with it."""
    if not enabled:
        return (f"{peer} enables no SASL mechanism on this listener; this client's "
                f"sasl_mechanism is {mechanism}")
    usable = [m for m in enabled if m in SASL_MECHANISMS]
    fix = (f": set sasl_mechanism (--sasl-mechanism, sasl.mechanism) to "
           f"{' or '.join(usable)}" if usable else "")
    return (f"the broker at {peer} enables {', '.join(enabled)}; this client's "
            f"sasl_mechanism is {mechanism}{fix}")


async def _round(conn: Connection, data: bytes, user: str, mechanism: str) -> bytes:
    resp = await conn.send(SaslAuthenticateRequest(auth_bytes=data),
                           response_type=SaslAuthenticateResponse)
    if resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED:
        said = f": {resp.error_message}" if resp.error_message else ""
        raise AuthenticationFailedError(
            f"{conn.peer} refused the credentials of user {user!r} with {mechanism}{said}",
            code=resp.error_code)
    if resp.error_code != ErrorCode.NONE:
        raise error_for(resp.error_code, resp.error_message
                        or f"SaslAuthenticate to {conn.peer}")
    return resp.auth_bytes

