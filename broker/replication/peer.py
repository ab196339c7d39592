"""A broker's connection to another broker: one request at a time, which is all a
replica fetcher needs (the SDK's multiplexed connection lives in the client layer,
which the broker does not import). It goes to the peer's inter-broker listener, over
TLS and SASL when that listener asks for them (``peer_auth``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from typing import Final, TypeVar

from groupwire.broker.cluster.keys import BrokerInfo
from groupwire.broker.logs import get_logger
from groupwire.broker.replication.peer_auth import PeerAuthFailed, PeerSecurity, authenticate
from groupwire.protocol.envelope import decode_response, encode_request
from groupwire.protocol.errors import ProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, frame
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    Request,
    Response,
)

log = get_logger("groupwire.cluster")

R = TypeVar("R", bound=Response)
READ_CHUNK = 1 << 16
REFUSED_BACKOFF_S: Final = 1.0
"""Wait before trying a peer that refused this broker's credentials again (each try
costs both sides a PBKDF2); a fixed credential is picked up within it."""


class PeerError(Exception):
    """The peer could not be reached, closed the connection or answered nonsense; the
    caller drops this connection and opens another."""


class PeerAuthError(PeerError):
    """The peer refused this broker's credentials or certificate (or this broker cannot
    use its own TLS files): already logged once, retried after ``REFUSED_BACKOFF_S``."""


class PeerConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 client_id: str, max_frame_bytes: int) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._decoder = FrameDecoder(max_frame_bytes)
        self._ids = itertools.count(1)
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout_s: float,
                   max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                   ssl_context: ssl.SSLContext | None = None) -> PeerConnection:
        """Connect, over TLS with ``ssl_context`` (the certificate checked against
        ``host``)."""
        try:
            async with asyncio.timeout(timeout_s):
                if ssl_context is None:
                    reader, writer = await asyncio.open_connection(host, port)
                else:
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=ssl_context, server_hostname=host,
                        ssl_handshake_timeout=timeout_s)
        except (OSError, TimeoutError) as exc:
            raise PeerError(f"cannot connect to {host}:{port}: {exc}") from exc
        return cls(reader, writer, client_id, max_frame_bytes)

    async def request(self, request: Request, response_type: type[R], *,
                      timeout_s: float) -> R:
        if self.closed:
            raise PeerError("connection closed")
        cid = next(self._ids) & 0x7FFFFFFF
        try:
            async with asyncio.timeout(timeout_s):
                self._writer.write(frame(encode_request(cid, request, self._client_id)))
                await self._writer.drain()
                while True:
                    data = await self._reader.read(READ_CHUNK)
                    if not data:
                        raise PeerError("closed by the peer")
                    for payload in self._decoder.feed(data):
                        got, response = decode_response(payload, response_type)
                        if got == cid:
                            return response
        except (OSError, TimeoutError, ProtocolError) as exc:
            await self.close()
            raise PeerError(f"{type(exc).__name__}: {exc}") from exc
        except PeerError:
            await self.close()
            raise

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


class PeerDialer:
    """How this broker reaches the others, shared by its fetchers and its events
    forwarder: each peer's endpoint for the inter-broker listener, secured as that
    listener asks. A refusal is logged once per peer registration (one clear line, not
    one per retry) and that peer is tried again only after ``REFUSED_BACKOFF_S``."""

    def __init__(self, security: PeerSecurity | None = None) -> None:
        self.security = PeerSecurity() if security is None else security
        self._refused: dict[tuple[int, str], float] = {}
        """Peer registrations that refused this broker, and when (loop time)."""
        self.refusals = 0
        """Refusals seen, logged or not (tests and metrics read it)."""

    async def open(self, broker: BrokerInfo, client_id: str, timeout_s: float,
                   ) -> PeerConnection:
        """A connection to ``broker`` ready for requests (TLS up, SASL done). Raises
        :class:`PeerAuthError` if it refused this broker, :class:`PeerError` otherwise."""
        key = (broker.node_id, broker.incarnation)
        refused_at = self._refused.get(key)
        if refused_at is not None:
            wait = refused_at + REFUSED_BACKOFF_S - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
        security = self.security
        address = broker.address(security.listener)
        if address is None:
            raise PeerError(
                f"broker {broker.node_id} registers no {security.listener} listener (it has "
                f"{', '.join(broker.listener_names())}): every broker needs it for "
                f"--inter-broker-listener-name {security.listener}")
        host, port = address
        peer = f"broker {broker.node_id} at {host}:{port} ({security.listener})"
        try:
            context = security.ssl_context()
        except (OSError, ssl.SSLError) as exc:
            raise self._refusal(key, f"cannot load this broker's TLS files for {peer} "
                                     f"(--ssl-cafile, --ssl-certfile, --ssl-keyfile): {exc}",
                                ) from exc
        try:
            conn = await PeerConnection.open(host, port, client_id=client_id,
                                             timeout_s=timeout_s, ssl_context=context)
        except PeerError as exc:
            if isinstance(exc.__cause__, ssl.SSLCertVerificationError):
                raise self._refusal(key, f"{peer}: its certificate does not verify against "
                                         f"--ssl-cafile: {exc.__cause__}") from exc
            raise
        try:
            await self._prove(conn, peer, timeout_s)
        except PeerAuthFailed as exc:
            await conn.close()
            raise self._refusal(key, str(exc)) from None
        except PeerError as exc:
            if isinstance(exc.__cause__, ssl.SSLError):  # TLS 1.3: refused on first read
                raise self._refusal(key, f"{peer} refused this broker's TLS certificate "
                                         f"(--ssl-certfile): {exc.__cause__}") from exc
            raise
        if self._refused.pop(key, None) is not None:
            log.info("inter_broker_authenticated", peer=broker.node_id, listener=security.listener,
                     user=security.username or None)
        return conn

    async def _prove(self, conn: PeerConnection, peer: str, timeout_s: float) -> None:
        """SASL when the listener asks for it; over TLS alone, one ApiVersions round trip,
        so that a refused certificate shows here rather than in the first fetch."""
        if self.security.uses_sasl:
            async with asyncio.timeout(timeout_s):
                await authenticate(conn, self.security, peer, timeout_s)
        elif self.security.uses_tls:
            await conn.request(ApiVersionsRequest(), ApiVersionsResponse, timeout_s=timeout_s)

    def _refusal(self, key: tuple[int, str], why: str) -> PeerAuthError:
        self.refusals += 1
        first = key not in self._refused
        self._refused[key] = asyncio.get_running_loop().time()
        if first:
            log.error("inter_broker_authentication_failed", peer=key[0],
                      listener=self.security.listener, user=self.security.username or None,
                      error=why)
        return PeerAuthError(why)


class PeerLink:
    """One connection to whichever broker is wanted now: kept while that broker is the
    same registration and the connection is open, opened again otherwise."""

    def __init__(self, client_id: str, timeout_s: float,
                 dialer: PeerDialer | None = None) -> None:
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._dialer = PeerDialer() if dialer is None else dialer
        self._conn: PeerConnection | None = None
        self._to: BrokerInfo | None = None

    async def to(self, broker: BrokerInfo) -> PeerConnection:
        if self._conn is None or self._conn.closed or self._to != broker:
            await self.close()
            self._conn = await self._dialer.open(broker, self._client_id, self._timeout_s)
            self._to = broker
        return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
