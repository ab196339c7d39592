"""How a broker proves itself to another one's inter-broker listener: TLS that checks the
peer against ``--ssl-cafile`` and presents this broker's own certificate (so a listener
requiring client certificates takes it, its CN the principal on a plain SSL listener),
then SASL PLAIN or SCRAM as ``--inter-broker-sasl-username``. The principal must hold
CLUSTER_ACTION on the cluster (or be a super user): replica fetches and forwarded group
events need it once ``--authorizer acl`` is on.

The exchange's messages come from ``protocol.security.SaslClient``, which the SDK uses
too; this module sends them over the broker's own peer connection.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from groupwire.broker.config import BrokerSettings
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from groupwire.protocol.sasl import SaslClient, SaslProofError
from groupwire.protocol.security import uses_sasl, uses_tls
from groupwire.protocol.tls import client_ssl_context

R = TypeVar("R", bound=Response)

class PeerAuthFailed(Exception):
    """The peer refused this broker's credentials or certificate, or could not prove it
    holds the credential: one line for the operator, never the password."""


class Requester(Protocol):
    async def request(self, request: Request, response_type: type[R], *,
                      timeout_s: float) -> R: ...


@dataclass(frozen=True, slots=True)
class PeerSecurity:
    """How this broker connects to the others; the default is plain TCP."""

    listener: str = "PLAINTEXT"
    """The inter-broker listener's name, which is its security protocol."""
    mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: str = field(default="", repr=False)
    cafile: str = ""
    certfile: str = ""
    keyfile: str = ""

    @classmethod
    def of(cls, settings: BrokerSettings) -> PeerSecurity:
        return cls(listener=settings.inter_broker_listener().name,
                   mechanism=settings.inter_broker_sasl_mechanism,
                   username=settings.inter_broker_sasl_username,
                   password=settings.inter_broker_sasl_password,
                   cafile=settings.ssl_cafile, certfile=settings.ssl_certfile,
                   keyfile=settings.ssl_keyfile)

    @property
    def uses_tls(self) -> bool:
        return uses_tls(self.listener)

    @property
    def uses_sasl(self) -> bool:
        return uses_sasl(self.listener)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context read from the files now, so a new peer connection uses
        renewed certificates without a restart; None without TLS. Raises OSError or
        ssl.SSLError if the files do not load."""
        if not self.uses_tls:
            return None
        return client_ssl_context(cafile=self.cafile, certfile=self.certfile,
                                  keyfile=self.keyfile)


async def authenticate(conn: Requester, security: PeerSecurity, peer: str,
                       timeout_s: float) -> None:
    """SaslHandshake, then PLAIN's one or SCRAM's two SaslAuthenticate rounds, checking
    the peer's SCRAM signature. Raises :class:`PeerAuthFailed` on a refusal; the
    connection's own errors pass through."""
    mechanism = security.mechanism
    exchange = SaslClient(mechanism, security.username, security.password)
    shake = await conn.request(SaslHandshakeRequest(mechanism=mechanism),
                               SaslHandshakeResponse, timeout_s=timeout_s)
    if shake.error_code != ErrorCode.NONE:
        raise PeerAuthFailed(
            f"{peer} does not take SASL mechanism {mechanism} (it enables "
            f"{', '.join(shake.mechanisms) or 'none'}): {shake.error_message or ''}")
    message: bytes | None = exchange.first()
    try:
        while message is not None:
            message = exchange.answer(await _round(conn, message, security, peer,
                                                   timeout_s))
    except SaslProofError as exc:
        raise PeerAuthFailed(
            f"{peer} failed the {mechanism} exchange for user {security.username!r}: its "
            f"answer is not a valid proof ({exc}); it may not hold this user's "
            f"credential") from None


async def _round(conn: Requester, data: bytes, security: PeerSecurity, peer: str,
                 timeout_s: float) -> bytes:
    answer = await conn.request(SaslAuthenticateRequest(auth_bytes=data),
                                SaslAuthenticateResponse, timeout_s=timeout_s)
    if answer.error_code != ErrorCode.NONE:
        raise PeerAuthFailed(
            f"{peer} refused user {security.username!r} with {security.mechanism} "
            f"({_code_name(answer.error_code)}: {answer.error_message or 'no message'}); "
            f"check "
            f"--inter-broker-sasl-username, its password and the user's credential")
    return bytes(answer.auth_bytes)


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
