"""One client connection: frames in, requests to the broker, responses out in any order.

An ``asyncio.Protocol`` rather than streams: no task per connection, no buffering copies
beyond the frame decoder. Backpressure: at most ``max_in_flight`` requests are taken
ahead of their answers; beyond that decoded frames wait and the transport stops reading.

Heartbeats the coordinator settles on its fast path (``Coordinator.renew``) are answered
with a pre-packed NONE body; like every request they are in flight until answered, and
each one's latency is its own. A failure there is logged and answered as on the full path.

Security (docs/design/security.md): on a TLS listener the principal is the client certificate's
CN; on a SASL listener the connection answers SaslHandshake and SaslAuthenticate itself
and takes nothing but those and ApiVersions until authenticated (the heartbeat fast path
included), closing the connection on anything else, on a failed authentication and at
``--authentication-timeout-ms``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar, cast

from groupwire.broker.budget import DEFAULT_ALLOWANCE, Verdict
from groupwire.broker.host import ConnectionHost
from groupwire.broker.logs import get_logger
from groupwire.broker.security.listeners import Listener, plaintext
from groupwire.broker.security.tls import principal_of
from groupwire.protocol.codec import (
    RequestFrame,
    decode_heartbeat,
    decode_request,
    encode_response,
    frame_response_packed,
    pack_body,
)
from groupwire.protocol.errors import BodyError, ErrorCode, FrameError, ProtocolError
from groupwire.protocol.framing import FrameDecoder, Payload, frame
from groupwire.protocol.kafka.sniff import DECIDING_BYTES, is_kafka_frame, refused_by_length
from groupwire.protocol.limits import SCAN_ABOVE_BYTES
from groupwire.protocol.messages import (
    RESPONSE_TYPES,
    SUPPORTED_VERSIONS,
    ApiKey,
    HeartbeatResponse,
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from groupwire.protocol.security import ANONYMOUS

if TYPE_CHECKING:
    from groupwire.broker.security.sasl import SaslServer, SaslStep

log = get_logger("groupwire.connection")
T = TypeVar("T")

_ORDINARY_CLOSES = frozenset({"broker-shutdown", "idle"})
_API_VERSIONS_SERVED = range(SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][0],
                             SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1] + 1)
_HEARTBEAT_NONE: Final = pack_body(HeartbeatResponse())
_HEARTBEAT: Final = ApiKey.HEARTBEAT
_NONE: Final = int(ErrorCode.NONE)
_BEFORE_AUTHENTICATION: Final = frozenset({
    ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
"""What a connection on a SASL listener may send until it has authenticated."""
_SASL_APIS: Final = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_DEFAULT_LISTENER: Final = plaintext("", 0)
MAX_UNAUTHENTICATED_FRAME: Final = 512 * 1024
"""Largest frame taken before SASL authentication, Kafka's sasl.server.max.receive.size:
SASL requests are small, and nobody unknown gets a large one decoded."""


def _decode(payload: Payload) -> RequestFrame | ProtocolError:
    """``decode_request`` for a worker thread: the refusal is returned, not raised."""
    try:
        return decode_request(payload)
    except ProtocolError as exc:
        return exc


def _encode(correlation_id: int, response: Response) -> bytes:
    return frame(encode_response(correlation_id, response))


class ClientConnection(asyncio.Protocol):
    kafka = False
    """The msgpack door (``Peer.kafka``)."""
    heartbeat_fast_path = True
    """Heartbeat frames are tried on the coordinator's fast path before full decoding
    (the Kafka door's connection, whose frames are Kafka's, turns it off)."""

    def __init__(self, broker: ConnectionHost, conn_id: int,
                 listener: Listener = _DEFAULT_LISTENER, *,
                 other_door: Callable[[], ClientConnection] | None = None) -> None:
        self.broker = broker
        self._other_door = other_door
        """A listener serving both doors (docs/protocol.md §13.1): the connection to hand
        over to if the first bytes are a Kafka request."""
        self._first = b""
        self.conn_id = conn_id
        self.listener = listener
        self.client_host = ""
        self.principal = ANONYMOUS
        """``User:name`` once authenticated (broker.security); ANONYMOUS until then."""
        self._gated = listener.uses_sasl
        """A SASL listener's connection not yet authenticated: only ApiVersions and the
        SASL requests are taken (``_BEFORE_AUTHENTICATION``)."""
        self._sasl: SaslServer | None = None
        """The exchange under way, from SaslHandshake on."""
        self._authenticated = False
        self._auth_handle: asyncio.TimerHandle | None = None
        self._decoder = FrameDecoder(
            min(broker.settings.max_frame_bytes, MAX_UNAUTHENTICATED_FRAME) if self._gated
            else broker.settings.max_frame_bytes)
        """Until authenticated, a larger frame is refused from its header alone, before
        its body is read (``data_received``): Kafka's sasl.server.max.receive.size."""
        self._transport: asyncio.Transport | None = None
        self._backlog: deque[Payload] = deque()
        self._in_flight: dict[int, tuple[ApiKey, float]] = {}
        self._paused = False
        self._write_paused = False
        """The transport's send buffer is over its high-water mark: the client is not
        reading its answers, so no further request of it is read or taken."""
        self._holds = 0
        """Requests answered later that the next ones wait for (``hold``)."""
        self._memory_wait = False
        """Not read until the request memory budget covers the partial frame."""
        self._claimed = False
        """The budget holds (or is asked for) memory for this connection."""
        self._draining = False
        self._out: list[bytes] = []
        self._closed = False
        self._last_active = time.monotonic()
        self._idle_handle: asyncio.TimerHandle | None = None
        self._partial_since: float | None = None
        """When the decoder last started holding a partial frame (None: it holds none)."""
        self._partial_handle: asyncio.TimerHandle | None = None
        self.close_reason = "client"
        self._refused = ""
        self._finishers: dict[int, Callable[[Response], Response]] = {}
        """Answers to rewrite before they are sent (``finish_answer``)."""
        self._long: set[int] = set()
        """Correlation ids whose answers are encoded off the loop (``answer_is_long``)."""

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = self._transport.get_extra_info("peername")
        self.client_host = f"/{peer[0]}" if peer else ""
        self.broker.connection_made(self)
        if self._refused:
            self.abort(self._refused)
            return
        self._opened()

    def _opened(self) -> None:
        """The connection counts: its principal, authentication deadline and idle timer."""
        assert self._transport is not None
        if self.listener.uses_tls and not self.listener.uses_sasl:
            # asyncio and uvloop call this once the handshake is done
            self.principal = principal_of(
                self._transport.get_extra_info("peercert")) or ANONYMOUS
        if self._gated:
            timeout_s = self.broker.settings.authentication_timeout_ms / 1000
            self._auth_handle = asyncio.get_running_loop().call_later(
                timeout_s, self._authentication_expired)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self._other_door is not None:  # the first bytes choose the door
            self._first += data
            if len(self._first) < DECIDING_BYTES and not refused_by_length(
                    self._first, self._decoder.max_frame_bytes):
                self._note_partial(False)  # a slow first frame times out as any other
                return
            data, self._first = self._first, b""
            other, self._other_door = self._other_door, None
            if is_kafka_frame(data):
                self._hand_over(other(), data)
                return
        self.broker.metrics.bytes_in += len(data)
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            if self._gated:
                self.abort("unauthenticated", f"{exc} before SASL authentication")
            else:
                self.abort("bad-frame", str(exc))
            return
        if self._decoder.buffered:
            self._note_partial(bool(frames))
        else:
            self._partial_since = None
        if frames:
            self._last_active = time.monotonic()  # requests arrived
            self._backlog.extend(frames)
            self._drain_backlog()
        if self._decoder.buffered or self._claimed:
            self._account_memory()

    def _hand_over(self, other: ClientConnection, first: bytes) -> None:
        """The client speaks the other door's protocol: ``other`` takes the connection
        over, under the same number, already counted; this object is done with it."""
        for handle in (self._idle_handle, self._auth_handle, self._partial_handle):
            if handle is not None:
                handle.cancel()
        self._closed = True
        transport = self._transport
        assert transport is not None
        other._transport, other.client_host = transport, self.client_host
        self.broker.connection_switched(self, other)
        transport.set_protocol(other)
        other._opened()
        other.data_received(first)

    def pause_writing(self) -> None:
        """Answers pile up unsent: read no more requests until they drain (as Kafka mutes
        a channel), so what a client that never reads can make the broker hold is its
        answers already in flight, not one per request it sends."""
        self._write_paused = True
        self.broker.metrics.write_paused.inc()
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._backlog and not self._closed:
            self._drain_backlog()
        else:
            self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        if self._partial_handle is not None:
            self._partial_handle.cancel()
        if self._auth_handle is not None:
            self._auth_handle.cancel()
        self.broker.connection_lost(self)

    # --- requests and responses ---------------------------------------------------------

    def _drain_backlog(self) -> None:
        if self._draining:  # a reply sent while handling a frame: the loop below goes on
            return
        broker = self.broker
        limit = broker.settings.max_in_flight_requests
        self._draining = True
        # the heartbeat fast path, inlined: this loop runs once per request
        renew, conn_id, now_ms = broker.renew_heartbeat, self.conn_id, broker.monotonic()
        # Not authenticated (yet): every frame takes the full path, where the gate is. An
        # authentication finished in this drain sends the rest there too, which is safe.
        fast = self.heartbeat_fast_path and not self._gated
        backlog, in_flight, out = self._backlog, self._in_flight, self._out
        clock = time.perf_counter
        # Heartbeats the fast path answers back to back form a run; each one's latency is
        # the time since the previous one's answer, and the clock is read only at the
        # run's ends (RequestStats.answered_run: exact while the run fits the first
        # latency bucket, as runs of heartbeats do).
        run, run_started = 0, clock()
        turn_ends = run_started + broker.settings.loop_slice_ms / 1000
        try:
            while (backlog and len(in_flight) < limit and not self._holds
                   and not self._write_paused):
                payload = backlog.popleft()
                heartbeat = decode_heartbeat(payload) if fast else None
                full_path = True
                if heartbeat is not None and heartbeat[0] not in in_flight:
                    # Taken within the in-flight bound (the loop's condition), its id checked
                    # against those in flight, and answered before the next frame is taken:
                    # an entry in in_flight for the call's duration would change nothing but
                    # cost (measured ~2% of benchmark 1), so only a failure enters it, for
                    # reply() to account for it as for any request.
                    cid = heartbeat[0]
                    try:
                        renewal = renew(conn_id, heartbeat, now_ms)
                    except Exception as exc:
                        in_flight[cid] = (_HEARTBEAT, run_started)
                        self._renew_failed(cid, exc)  # answered, as dispatch would
                        full_path = False
                    else:
                        if renewal is not None:
                            out.append(frame_response_packed(cid, _HEARTBEAT_NONE))
                            run += 1
                            continue
                if run:
                    broker.metrics.answered_run(_HEARTBEAT, _NONE, run, clock() - run_started)
                    run = 0
                if full_path:
                    self._handle_frame(payload)
                if self._closed:
                    break
                run_started = clock()
                if run_started >= turn_ends and backlog:
                    # the rest in a later turn: other connections read meanwhile
                    asyncio.get_running_loop().call_soon(self._drain_later)
                    break
        finally:
            self._draining = False
            if run:
                self._last_active = time.monotonic()
                broker.metrics.answered_run(_HEARTBEAT, _NONE, run, clock() - run_started)
            if out:  # answers given while draining leave in one write
                self._out = []
                if not self._closed and self._transport is not None:
                    data = b"".join(out)
                    self._transport.write(data)
                    broker.metrics.bytes_out += len(data)
        if self._claimed or self._backlog:
            self._account_memory()  # queued frames count; answers free what they held
        self._update_reading()

    def _drain_later(self) -> None:
        if not self._closed:
            self._drain_backlog()

    def _update_reading(self) -> None:
        """Read while nothing waits for the in-flight bound or for request memory."""
        should_pause = bool(self._backlog) or self._memory_wait or self._write_paused
        if should_pause != self._paused and self._transport is not None and not self._closed:
            self._paused = should_pause
            if should_pause:
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()

    def _renew_failed(self, correlation_id: int, exc: Exception) -> None:
        """The fast path raised: logged and answered as ``Broker.dispatch`` does."""
        log.exception("request_failed", api="HeartbeatRequest", conn=self.conn_id)
        self.reply(correlation_id, HeartbeatResponse(
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            error_message=f"{type(exc).__name__}: {exc}"))

    def _handle_frame(self, payload: Payload) -> None:
        if self._gated and len(payload) > MAX_UNAUTHENTICATED_FRAME:
            self.abort("unauthenticated",
                       f"frame of {len(payload)} bytes before SASL authentication")
            return
        if len(payload) > SCAN_ABOVE_BYTES:
            self._decode_off_loop(payload)
            return
        try:
            decoded: RequestFrame | ProtocolError = decode_request(payload)
        except ProtocolError as exc:
            decoded = exc
        self._handle_decoded(decoded)

    def _refuse_body(self, exc: BodyError) -> None:
        """A request the envelope names but the broker refuses: answered, connection kept."""
        log.info("bad_request", conn=self.conn_id, error=ErrorCode.name_of(exc.code),
                 reason=exc.message)
        try:
            key = ApiKey(exc.api_key)
            body: Response = RESPONSE_TYPES[key](error_code=exc.code, error_message=exc.message)
        except ValueError:
            key = ApiKey.API_VERSIONS
            body = Response(error_code=exc.code, error_message=exc.message)
        self._in_flight[exc.correlation_id] = (key, time.perf_counter())
        self.reply(exc.correlation_id, body)

    def _decode_off_loop(self, payload: Payload) -> None:
        """Decode a large frame on a worker thread, taking no later request meanwhile.

        Its cost follows its item count: a 10 000-partition request takes ~20-30 ms to
        walk (``protocol.limits``) and build, which would hold every other connection up.
        """
        self._off_loop(_decode, payload, self._handle_decoded)

    def _off_loop(self, work: Callable[[Payload], T], payload: Payload,
                  then: Callable[[T], None]) -> None:
        """``then(work(payload))``, ``work`` on a worker thread; no later request of the
        connection is taken meanwhile, and nothing is done if it closes first."""
        release = self.hold()

        def done(future: asyncio.Future[T]) -> None:
            try:
                if not future.cancelled() and not self._closed:
                    then(future.result())
            finally:
                release()

        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, work, payload).add_done_callback(done)

    def _handle_decoded(self, req: RequestFrame | ProtocolError) -> None:
        if isinstance(req, BodyError):
            self._refuse_body(req)
            return
        if isinstance(req, ProtocolError):
            self.abort("bad-envelope", str(req))
            return
        cid = req.correlation_id
        if cid in self._in_flight:
            self.abort("duplicate-correlation-id", f"correlation id {cid} already in flight")
            return
        key = ApiKey(req.api_key)
        if self._gated and key not in _BEFORE_AUTHENTICATION:
            name = type(req.request).__name__.removesuffix("Request")
            self.abort("unauthenticated", f"{name} before SASL authentication")
            return
        self._in_flight[cid] = (key, time.perf_counter())
        if key in _SASL_APIS:
            self._sasl_request(cid, req.request)
            return
        if key == ApiKey.API_VERSIONS and req.api_version not in _API_VERSIONS_SERVED:
            # docs/protocol.md §3: answered in v0 whatever the version, flagged unsupported
            self.reply(req.correlation_id, self.broker.unsupported_api_versions(req.api_version))
            return
        self.broker.dispatch(self, req.correlation_id, req.client_id or "", req.request)

    # --- SASL (docs/design/security.md) ----------------------------------------------------

    def _sasl_request(self, cid: int, request: Request) -> None:
        """SaslHandshake and SaslAuthenticate, in Kafka's order; out of it, or on a
        listener without SASL, ILLEGAL_SASL_STATE (closing a SASL listener's connection)."""
        handshake = isinstance(request, SaslHandshakeRequest)
        response_type = SaslHandshakeResponse if handshake else SaslAuthenticateResponse
        if not self.listener.uses_sasl:
            self.reply(cid, response_type(
                error_code=ErrorCode.ILLEGAL_SASL_STATE,
                error_message=f"listener {self.listener.name} does not use SASL"))
            return
        if handshake != (self._sasl is None) or self._authenticated:
            expected = "SaslHandshake" if self._sasl is None else "SaslAuthenticate"
            if self._authenticated:
                expected = "nothing more: already authenticated"
            self._reply_and_close(cid, response_type(
                error_code=ErrorCode.ILLEGAL_SASL_STATE,
                error_message=f"unexpected {response_type.__name__.removesuffix('Response')}"
                              f"; expected {expected}"), "illegal-sasl-state")
            return
        if isinstance(request, SaslHandshakeRequest):
            self._sasl_handshake(cid, request)
        else:
            assert isinstance(request, SaslAuthenticateRequest)
            self._sasl_authenticate(cid, request)

    def _sasl_handshake(self, cid: int, request: SaslHandshakeRequest) -> None:
        server = self.broker.security.sasl_server()
        code, message = server.handshake(request.mechanism)
        enabled = list(server.enabled)
        if code != ErrorCode.NONE:
            self._count_authentication(request.mechanism, "failure")
            self._reply_and_close(cid, SaslHandshakeResponse(
                error_code=code, error_message=message, mechanisms=enabled),
                "sasl-handshake-failed", message or "")
            return
        self._sasl = server
        self.reply(cid, SaslHandshakeResponse(mechanisms=enabled))

    def _sasl_authenticate(self, cid: int, request: SaslAuthenticateRequest) -> None:
        server = self._sasl
        assert server is not None
        if server.mechanism == "PLAIN":
            # PLAIN hashes the password (one PBKDF2, ~1 ms): on a worker thread, where
            # hashlib lets go of the GIL, so a flood of logins does not stall the loop
            release = self.hold()

            def done(future: asyncio.Future[SaslStep]) -> None:
                try:
                    if not future.cancelled() and not self._closed:
                        self._sasl_step(cid, server, future.result())
                finally:
                    release()

            loop = asyncio.get_running_loop()
            loop.run_in_executor(None, server.authenticate, request.auth_bytes
                                 ).add_done_callback(done)
            return
        self._sasl_step(cid, server, server.authenticate(request.auth_bytes))

    def _sasl_step(self, cid: int, server: SaslServer, step: SaslStep) -> None:
        if step.error is not None and step.error != ErrorCode.NONE:
            self._count_authentication(server.mechanism, "failure")
            log.warning("authentication_failed", conn=self.conn_id, client=self.client_host,
                        listener=self.listener.name, mechanism=server.mechanism,
                        reason=step.message)
            self._reply_and_close(cid, SaslAuthenticateResponse(
                error_code=step.error, error_message=step.message),
                "authentication-failed", step.message or "")
            return
        if step.done:
            self._authenticated = True
            self._gated = False
            self._decoder.max_frame_bytes = self.broker.settings.max_frame_bytes
            if step.principal is not None:
                self.principal = step.principal
            if self._auth_handle is not None:
                self._auth_handle.cancel()
                self._auth_handle = None
            self._count_authentication(server.mechanism, "success")
            log.debug("authenticated", conn=self.conn_id, client=self.client_host,
                     listener=self.listener.name, mechanism=server.mechanism,
                     principal=self.principal)
        self.reply(cid, SaslAuthenticateResponse(auth_bytes=step.reply))

    def _count_authentication(self, mechanism: str | None, result: str) -> None:
        """Labelled by mechanism only when it is an enabled one: the label values stay
        few whatever names clients send."""
        known = (mechanism if mechanism in self.broker.settings.sasl_mechanisms()
                 else "other")
        self.broker.metrics.sasl_authentications.labels(known, result).inc()

    def _reply_and_close(self, cid: int, response: Response, reason: str,
                         detail: str = "") -> None:
        """Answer, then close once the answer is written (closing flushes it)."""
        self.reply(cid, response)
        if self._out and self._transport is not None and not self._closed:
            data = b"".join(self._out)
            self._out = []
            self._transport.write(data)
            self.broker.metrics.bytes_out += len(data)
        self.abort(reason, detail)

    def _authentication_expired(self) -> None:
        self._auth_handle = None
        if self._gated and not self._closed:
            timeout_ms = self.broker.settings.authentication_timeout_ms
            self.abort("authentication-timeout",
                       f"not authenticated within {timeout_ms} ms")

    def finish_answer(self, correlation_id: int,
                      finish: Callable[[Response], Response]) -> None:
        if correlation_id in self._in_flight:
            first = self._finishers.get(correlation_id)
            self._finishers[correlation_id] = finish if first is None else (
                lambda response: finish(first(response)))

    def reply(self, correlation_id: int, response: Response) -> None:
        """Send the answer to an in-flight request (dropped if the connection is gone)."""
        if self._finishers:
            finish = self._finishers.pop(correlation_id, None)
            if finish is not None:
                response = finish(response)
        if correlation_id in self._long:
            self._long.discard(correlation_id)
            if not self._closed:
                self._reply_off_loop(correlation_id, response)
                return
        started = self._in_flight.pop(correlation_id, None)
        if self._closed or self._transport is None:
            return
        self._send(frame(encode_response(correlation_id, response)), started,
                   response.error_code)

    def answer_is_long(self, correlation_id: int) -> None:
        """The request's work ran over several loop turns: its answer is as large, so it
        is encoded on a worker thread too (``reply``)."""
        if correlation_id in self._in_flight:
            self._long.add(correlation_id)

    def _reply_off_loop(self, correlation_id: int, response: Response) -> None:
        def encoded(future: asyncio.Future[bytes]) -> None:
            started = self._in_flight.pop(correlation_id, None)
            if future.cancelled() or self._closed or self._transport is None:
                return
            code = response.error_code
            try:
                data = future.result()
            except Exception as exc:  # as Broker.dispatch answers an unexpected failure
                log.error("response_encode_failed", conn=self.conn_id,
                          api=type(response).__name__, error=f"{type(exc).__name__}: {exc}")
                code = ErrorCode.UNKNOWN_SERVER_ERROR
                data = frame(encode_response(correlation_id, type(response)(
                    error_code=code, error_message=f"{type(exc).__name__}: {exc}")))
            self._send(data, started, code)

        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, _encode, correlation_id, response).add_done_callback(encoded)

    def _send(self, data: bytes, started: tuple[ApiKey, float] | None, error_code: int,
              ) -> None:
        assert self._transport is not None
        metrics = self.broker.metrics
        if self._draining:
            self._out.append(data)  # counted in bytes_out when the drain writes
        else:
            self._transport.write(data)
            metrics.bytes_out += len(data)
        self._last_active = time.monotonic()
        if started is not None:
            key, t0 = started
            metrics.answered(key, error_code, time.perf_counter() - t0)
        if self._backlog and not self._draining:
            self._drain_backlog()

    def hold(self) -> Callable[[], None]:
        """Take no further request until the returned function is called (once)."""
        self._holds += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._holds -= 1
            if not self._holds and self._backlog and not self._closed:
                self._drain_backlog()

        return release

    # --- request memory budget (broker.budget) -------------------------------------------

    def _account_memory(self) -> None:
        """Reserve what the partial frame will need once its header is in, plus queued
        frames; stop reading while the budget cannot cover it (docs/protocol.md §2)."""
        if self._closed:
            return
        decoder = self._decoder
        held, wanted = decoder.buffered, decoder.frame_bytes
        if self._backlog:
            queued = sum(map(len, self._backlog))
            held += queued
            wanted += queued
        if wanted <= DEFAULT_ALLOWANCE and not self._claimed:
            return  # within the allowance every connection has without asking
        verdict = self.broker.request_memory(self.conn_id, held, wanted)
        if verdict is Verdict.CLOSE:
            self._claimed = False
            self.abort("memory-pressure",
                       f"request memory exhausted: {held} bytes held, frame needs {wanted}")
            return
        self._claimed = wanted > DEFAULT_ALLOWANCE
        self._set_memory_wait(verdict is Verdict.WAIT)

    def _set_memory_wait(self, wait: bool) -> None:
        if wait == self._memory_wait:
            return
        self._memory_wait = wait
        if wait:
            self.broker.metrics.memory_paused.inc()
        self._update_reading()

    def memory_granted(self) -> None:
        """The budget now covers the partial frame: read on."""
        self._set_memory_wait(False)

    # --- closing ------------------------------------------------------------------------

    def abort(self, reason: str, detail: str = "") -> None:
        if self._closed:
            return
        emit = log.info if reason in _ORDINARY_CLOSES else log.warning
        emit("connection_closed", conn=self.conn_id, client=self.client_host, reason=reason,
             detail=detail)
        self.close_reason = reason
        self._closed = True
        if self._transport is not None:
            self._transport.close()

    def refuse(self, reason: str) -> None:
        """Close once ``connection_made`` has the transport (``ConnectionHost``)."""
        self._refused = reason

    def close(self) -> None:
        self.abort("broker-shutdown")

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def _arm_idle(self) -> None:
        idle_s = self.broker.settings.connections_max_idle_ms / 1000
        loop = asyncio.get_running_loop()
        self._idle_handle = loop.call_later(idle_s, self._check_idle)

    def _check_idle(self) -> None:
        if self._closed:
            return
        idle_s = self.broker.settings.connections_max_idle_ms / 1000
        quiet = time.monotonic() - self._last_active
        if quiet >= idle_s and not self._in_flight:
            self.abort("idle", f"no request for {quiet:.0f}s")
            return
        wait = idle_s if self._in_flight else idle_s - quiet
        self._idle_handle = asyncio.get_running_loop().call_later(wait, self._check_idle)

    # --- half-frame (slowloris) timeout ---------------------------------------------------

    def _note_partial(self, new_frame_started: bool) -> None:
        """A partial frame is buffered: start its clock, and one timer if none is pending.

        The timer is never cancelled when the frame completes; on firing it looks at
        ``_partial_since`` and re-arms for what is left, so a busy connection costs one
        comparison per read rather than timer churn.
        """
        if self._partial_since is None or new_frame_started:
            self._partial_since = time.monotonic()
        if self._partial_handle is None:
            timeout_s = self.broker.settings.frame_read_timeout_ms / 1000
            self._partial_handle = asyncio.get_running_loop().call_later(
                timeout_s, self._check_partial)

    def _check_partial(self) -> None:
        self._partial_handle = None
        if self._closed or self._partial_since is None:
            return
        timeout_s = self.broker.settings.frame_read_timeout_ms / 1000
        if self._paused:  # the broker stopped reading: the client is not the slow one
            self._partial_since = time.monotonic()
        held = time.monotonic() - self._partial_since
        if held >= timeout_s:
            self.abort("frame-read-timeout",
                       f"partial frame of {self._decoder.buffered} bytes held {held:.1f}s")
            return
        self._partial_handle = asyncio.get_running_loop().call_later(
            timeout_s - held, self._check_partial)
