"""A fake broker on loopback that authenticates as Kafka's SASL listeners do, for the SDK's
security tests while (or without) the real broker side.

It answers ApiVersions, SaslHandshake and SaslAuthenticate (PLAIN one round, SCRAM two,
with scramp's server side), optionally over TLS; a failed authentication is answered
with SASL_AUTHENTICATION_FAILED and the connection closed, as is any other request
before authentication. Authenticated requests go to ``handler``. It counts connections
and authentications so tests can assert that nothing was retried.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scramp import ScramException, ScramMechanism

from groupwire.protocol.codec import decode_request, encode_response
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.framing import FrameDecoder, frame
from groupwire.protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

Handler = Callable[[Request], Response]

ITERATIONS = 4096


@dataclass(eq=False)
class SaslFake:
    users: dict[str, str]
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    ssl_context: ssl.SSLContext | None = None
    handler: Handler | None = None
    sasl: bool = True
    tamper_server_final: bool = False
    host: str = "127.0.0.1"
    port: int = 0
    connections: int = 0
    authenticated: list[str] = field(default_factory=list)
    """The user of each connection that authenticated, in order."""
    failures: int = 0
    requests: list[tuple[str, Request]] = field(default_factory=list)
    """Requests after authentication, with the connection's user."""
    received: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.Server | None = None
    _auth: dict[str, dict[str, tuple[bytes, bytes, bytes, int]]] = field(
        default_factory=dict)

    async def start(self) -> None:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            m = ScramMechanism(mech)
            self._auth[mech] = {u: m.make_auth_info(p, iteration_count=ITERATIONS)
                                for u, p in self.users.items()}
        self.server = await asyncio.start_server(self._serve, self.host, 0,
                                                 ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1):
                    await self.server.wait_closed()

    async def __aenter__(self) -> SaslFake:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        decoder = FrameDecoder()
        state = _Conn()
        try:
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    req = decode_request(payload)
                    resp = self._answer(req.request, state)
                    if resp is not None:
                        writer.write(frame(encode_response(req.correlation_id, resp)))
                        await writer.drain()
                    if state.close:
                        return
        except (ConnectionError, ssl.SSLError, asyncio.CancelledError):
            pass
        except Exception:  # a peer sending junk (a TLS hello): hang up, as a broker does
            pass
        finally:
            writer.close()

    def _answer(self, request: Request, st: _Conn) -> Response | None:
        if isinstance(request, ApiVersionsRequest):
            return ApiVersionsResponse(
                api_keys=[ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
                          for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
                max_frame_bytes=8 * 1024 * 1024)
        if isinstance(request, SaslHandshakeRequest):
            if not self.sasl or st.mechanism is not None:
                st.close = True
                return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE)
            if request.mechanism not in self.mechanisms:
                return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                             mechanisms=list(self.mechanisms))
            st.mechanism = request.mechanism
            return SaslHandshakeResponse(mechanisms=list(self.mechanisms))
        if isinstance(request, SaslAuthenticateRequest):
            return self._authenticate(request.auth_bytes, st)
        if self.sasl and st.user is None:
            st.close = True  # Kafka: anything else before authentication closes
            return None
        self.requests.append((st.user or "", request))
        self.received.set()
        assert self.handler is not None, f"unexpected {request!r}"
        return self.handler(request)

    def _authenticate(self, data: bytes, st: _Conn) -> SaslAuthenticateResponse:
        try:
            if st.mechanism is None or st.user is not None:
                raise ValueError("out of turn")
            if st.mechanism == "PLAIN":
                _authzid, user, password = data.decode().split("\0")
                if self.users.get(user) != password:
                    raise ValueError("bad password")
                return self._done(st, user, b"")
            if st.scram is None:
                infos = self._auth[st.mechanism]

                def lookup(user: str) -> tuple[bytes, bytes, bytes, int]:
                    st.scram_user = user
                    return infos[user]

                st.scram = ScramMechanism(st.mechanism).make_server(lookup)
                st.scram.set_client_first(data.decode())
                return SaslAuthenticateResponse(auth_bytes=st.scram.get_server_first().encode())
            st.scram.set_client_final(data.decode())
            final = st.scram.get_server_final()
            if self.tamper_server_final:
                final = "v=" + base64.b64encode(b"\0" * 32).decode()
            return self._done(st, st.scram_user or "", final.encode())
        except (ScramException, ValueError, KeyError, UnicodeDecodeError):
            self.failures += 1
            st.close = True
            return SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message=f"Authentication failed during authentication due to invalid "
                              f"credentials with SASL mechanism {st.mechanism}")

    def _done(self, st: _Conn, user: str, data: bytes) -> SaslAuthenticateResponse:
        st.user = user
        self.authenticated.append(user)
        return SaslAuthenticateResponse(auth_bytes=data, session_lifetime_ms=0)


@dataclass
class _Conn:
    mechanism: str | None = None
    user: str | None = None
    scram: Any = None  # scramp's ScramServer, once the client-first came
    scram_user: str | None = None
    close: bool = False
