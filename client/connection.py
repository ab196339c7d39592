"""An async connection to a broker: send any request, await its response.

Responses may arrive in any order (a parked JoinGroup must not hold up a Heartbeat), so
each request gets a correlation id and a future; one reader task matches answers to them.
A response with an unknown correlation id breaks the contract and closes the connection.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from typing import TypeVar

from groupwire.client.errors import ConnectionClosedError, TlsHandshakeError
from groupwire.client.supervisor import cancel_and_wait
from groupwire.protocol.codec import decode_response_body, decode_response_envelope, encode_request
from groupwire.protocol.errors import BodyError, ProtocolError, RemoteProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, Payload, frame
from groupwire.protocol.messages import Request, Response, response_type_for

R = TypeVar("R", bound=Response)

_READ_CHUNK = 256 * 1024
_HEAD_BYTES = 64
_MAX_ABANDONED = 4096
CLOSE_TIMEOUT_S = 1.0
"""The longest ``close()`` waits for each of the reader task and the socket."""


def show_answer(data: bytes) -> str:
    """The start of a peer's first line, quoted and printable: ``'HTTP/1.1 400 Bad
    Request'``; what a person needs to recognise what answered instead of a broker."""
    line = data.split(b"\n", 1)[0].rstrip(b"\r")
    text = "".join(c if c.isprintable() else "." for c in line[:40].decode("latin-1"))
    return repr(text + ("..." if len(line) > 40 or len(line) < len(data) - 2 else ""))


def tls_failure(address: str, exc: BaseException) -> str:
    """One sentence on a failed TLS handshake with ``address``: the reason OpenSSL gave,
    and what usually causes it."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or str(exc)
        return (f"TLS handshake with {address} failed: certificate verify failed: {why} "
                f"(the ssl_context does not trust the broker's certificate, or the "
                f"certificate does not name {address.rpartition(':')[0]})")
    reason = getattr(exc, "reason", None) or ""
    if isinstance(exc, ssl.SSLError) and reason and "EOF" not in reason.upper():
        hint = {
            "WRONG_VERSION_NUMBER": " (the port does not speak TLS: is it a PLAINTEXT "
                                    "or SASL_PLAINTEXT listener?)",
            "TLSV13_ALERT_CERTIFICATE_REQUIRED": " (the listener requires a client "
                                                 "certificate: load one into ssl_context)",
        }.get(reason, "")
        return f"TLS handshake with {address} failed: {reason}{hint}"
    return (f"TLS handshake with {address} failed: the peer closed the connection "
            f"(is it a TLS listener? security_protocol SSL and SASL_SSL need one)")


class Connection:
    """One TCP connection; ``send`` is safe to call from many tasks at once."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 client_id: str | None, max_frame_bytes: int) -> None:
        self._reader = reader
        self._writer = writer
        self.client_id = client_id
        self._decoder = FrameDecoder(max_frame_bytes)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Response], type[Response]]] = {}
        # Requests given up on (timeout, cancellation): their late answers are dropped, not
        # treated as unknown correlation ids (which would close a healthy connection).
        self._abandoned: set[int] = set()
        self._closed_exc: BaseException | None = None
        self._head = b""
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str | None = "groupwire",
                   max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                   connect_timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None,
                   server_hostname: str | None = None) -> Connection:
        """Connect (over TLS with ``ssl_context``, checking the certificate names
        ``server_hostname``, by default ``host``). A failed TLS handshake raises
        :class:`TlsHandshakeError` saying, in one sentence, what went wrong where."""
        # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that
        # lands as the connection completes, and the caller (Ctrl-C) would run on
        try:
            async with asyncio.timeout(connect_timeout):
                if ssl_context is None:
                    reader, writer = await asyncio.open_connection(
                        host, port, limit=_READ_CHUNK)
                else:
                    reader, writer = await asyncio.open_connection(
                        host, port, limit=_READ_CHUNK, ssl=ssl_context,
                        server_hostname=server_hostname or host,
                        ssl_handshake_timeout=connect_timeout)
        except (ssl.SSLError, ConnectionResetError, ConnectionAbortedError) as exc:
            if ssl_context is None:
                raise
            raise TlsHandshakeError(tls_failure(f"{host}:{port}", exc)) from exc
        except OSError as exc:
            # an EOF in the handshake (a plaintext peer hung up on our ClientHello)
            if ssl_context is None or isinstance(exc, ConnectionRefusedError | TimeoutError
                                                 ) or exc.errno is not None:
                raise
            raise TlsHandshakeError(tls_failure(f"{host}:{port}", exc)) from exc
        return cls(reader, writer, client_id=client_id, max_frame_bytes=max_frame_bytes)

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed_exc is not None

    @property
    def failure(self) -> BaseException | None:
        """Why the connection closed (None while open), e.g. a ProtocolError for a peer
        that answered something other than groupwire frames."""
        return self._closed_exc

    @property
    def received_head(self) -> bytes:
        """The first bytes the peer sent: what to quote when they were not groupwire's."""
        return self._head

    async def send(self, request: Request, *, timeout: float | None = None,
                   response_type: type[R] | None = None) -> R:
        """Send ``request`` and wait for its response (raises ConnectionClosedError)."""
        if self._closed_exc is not None:
            raise ConnectionClosedError(f"connection to {self.peer} is closed"
                                        ) from self._closed_exc
        rtype = response_type or response_type_for(request)
        cid = next(self._ids) & 0x7FFFFFFF
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[cid] = (future, rtype)
        try:
            self._writer.write(frame(encode_request(cid, request, self.client_id)))
            await self._writer.drain()
            # asyncio.wait neither cancels the future on timeout nor swallows a
            # cancellation of the caller (the finally below records the abandoned id)
            await asyncio.wait({future}, timeout=timeout)
            if not future.done():
                raise TimeoutError(f"no answer from {self.peer} within {timeout} s")
            response = future.result()
        except TimeoutError:
            # An OSError, but the connection is fine: it stays open and a late answer is
            # dropped as abandoned (the finally below).
            raise
        except (ConnectionError, OSError) as exc:
            self._fail(exc)
            if future.done() and not future.cancelled():
                future.exception()  # the reader failed it first: this raise says it all
            raise ConnectionClosedError(f"connection to {self.peer} failed: {exc}") from exc
        finally:
            if self._pending.pop(cid, None) is not None and (
                    not future.done() or future.cancelled()):
                if len(self._abandoned) >= _MAX_ABANDONED:
                    self._abandoned.clear()
                self._abandoned.add(cid)
        return response  # type: ignore[return-value]

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(_READ_CHUNK)
                if not data:
                    raise ConnectionClosedError(f"connection to {self.peer} closed by peer")
                if len(self._head) < _HEAD_BYTES:
                    self._head += data[:_HEAD_BYTES - len(self._head)]
                for payload in self._decoder.feed(data):
                    self._deliver(payload)
        except asyncio.CancelledError:
            self._fail(ConnectionClosedError("connection closed"))
            raise
        except (ConnectionError, OSError, ProtocolError) as exc:
            self._fail(exc)

    def _deliver(self, payload: Payload) -> None:
        cid, body = decode_response_envelope(payload)
        entry = self._pending.get(cid)
        if entry is None:
            if cid in self._abandoned:
                self._abandoned.discard(cid)
                return
            raise RemoteProtocolError(f"response with unknown correlation id {cid}")
        future, rtype = entry
        if future.done():
            return
        try:
            future.set_result(decode_response_body(body, rtype, cid))
        except BodyError as exc:  # one bad answer fails its request, not the connection
            future.set_exception(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._closed_exc is None:
            self._closed_exc = exc
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosedError(
                    f"connection to {self.peer} lost: {exc}"))
        self._pending.clear()
        self._writer.close()

    async def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Close and wait, at most ``timeout`` s per step, for the reader task and the
        socket to end; a peer that stopped reading (a paused broker) cannot hold it up,
        as the transport is aborted when the wait runs out."""
        self._fail(ConnectionClosedError("closed by client"))
        await cancel_and_wait([self._read_task], timeout)
        closing = asyncio.ensure_future(self._writer.wait_closed())
        done, _ = await asyncio.wait({closing}, timeout=timeout)
        if not done:
            self._writer.transport.abort()
            await cancel_and_wait([closing], timeout)
        elif not closing.cancelled():
            closing.exception()  # read (a reset while closing is no news), never raised

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

