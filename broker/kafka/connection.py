"""One Kafka client's connection: Kafka frames in, the broker's requests out, answers in order.

It is the msgpack door's connection (``broker.connection``) with another codec and two of
Kafka's rules: answers leave in the order their requests came (Kafka's clients match
them by position as much as by correlation id: aiokafka drops the connection on a
mismatch), and a request that expects no answer (Produce with acks=0) gets none. Every
limit of the msgpack door holds unchanged: frame size, requests in flight, the request
memory budget, the pre-authentication frame cap and deadline, idle and half-frame
timeouts, loop slicing.

SASL is the msgpack door's exchange (``_sasl_request``) with Kafka's framing around it: bare
tokens after SaslHandshake v0 (``_raw_token``), and a refusal's close delayed as Kafka's
broker delays it (``_reply_and_close``).

Inside, each request gets a connection-local number: the broker answers by that number
(``Peer.reply``), the connection turns the answer into the Kafka response its translator
(``broker.kafka.translate``) writes and sends it under the client's correlation id once
every earlier answer has gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from groupwire.broker.connection import MAX_UNAUTHENTICATED_FRAME, ClientConnection
from groupwire.broker.kafka.translate import Answer, Body, Dispatch, Silent, Step, kafka_code
from groupwire.broker.logs import get_logger
from groupwire.protocol.errors import ErrorCode, ProtocolError
from groupwire.protocol.framing import Payload
from groupwire.protocol.kafka.codec import (
    API_NAMES,
    KafkaCodecError,
    KafkaRequest,
    RequestHeader,
    UnsupportedKafkaVersion,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
    with_size,
)
from groupwire.protocol.limits import SCAN_ABOVE_BYTES
from groupwire.protocol.messages import (
    HeartbeatRequest,
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)

if TYPE_CHECKING:
    from groupwire.broker.host import ConnectionHost
    from groupwire.broker.kafka.door import KafkaDoor
    from groupwire.broker.kafka.translate import KafkaContext, Translator
    from groupwire.broker.security.listeners import Listener

log = get_logger("groupwire.kafka")

PRODUCE: Final = 0
PRODUCE_KEY: Final = b"\x00\x00"
"""A payload's first two bytes when it is a Produce (its int16 api key)."""
HEARTBEAT: Final = 12
API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
_READ_WHEN_NEXT: Final = frozenset({3, 10, 60})
"""Metadata, FindCoordinator, DescribeCluster: state a client acts on, so read when the
answer can go at once, as Kafka reads a connection's requests one at a time."""
_BEFORE_AUTHENTICATION: Final = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
FAILED_AUTHENTICATION_DELAY_S: Final = 0.1
"""How long a connection stays open after a SASL refusal was answered: Kafka's
``connection.failed.authentication.delay.ms`` default (``_reply_and_close``)."""
_SASL_REFUSALS: Final = frozenset({
    "authentication-failed", "sasl-handshake-failed", "illegal-sasl-state"})


@dataclass(slots=True)
class _Pending:
    """A request between arrival and answer."""

    header: RequestHeader
    body: Body
    translator: Translator | None
    ctx: KafkaContext | None
    answer: bytes | None = None
    error_code: int = 0
    silent: bool = False
    raw: bool = False
    deferred: Request | None = None
    """Dispatched once every earlier answer has gone (``_READ_WHEN_NEXT``)."""
    """A bare SASL token after SaslHandshake v0: answered with a bare token, no header."""


def _decode(payload: Payload) -> KafkaRequest | ProtocolError:
    """``decode_request`` for a worker thread: the refusal is returned, not raised."""
    try:
        return decode_request(payload)
    except ProtocolError as exc:
        return exc


class KafkaConnection(ClientConnection):
    """The Kafka door's connection (see the module docstring)."""

    kafka = True
    heartbeat_fast_path = False
    """Kafka's Heartbeat is not the msgpack fast path's frame: every request is decoded."""

    def __init__(self, broker: ConnectionHost, conn_id: int, listener: Listener,
                 door: KafkaDoor) -> None:
        super().__init__(broker, conn_id, listener)
        self.door = door
        self._pending: dict[int, _Pending] = {}
        """By connection-local number: what each request in flight needs for its answer."""
        self._order: deque[int] = deque()
        """Numbers of the requests whose answers are still to be sent, in arrival order."""
        self._next_number = 1
        self._raw_tokens = False
        """SaslHandshake v0 succeeded: until authenticated, every frame is a bare SASL
        token and every answer one too (``_raw_token``)."""
        self._sasl_refused = False
        """A SASL refusal was answered and the close is due: nothing more is taken."""
        self._held: tuple[int, HeartbeatRequest] | None = None
        """The Heartbeat the coordinator may be holding (``--kafka-heartbeat-hold-ms``),
        by number, until any later request releases it (``_release_heartbeat``)."""

    # --- requests -------------------------------------------------------------------------

    def _handle_frame(self, payload: Payload) -> None:
        if self._sasl_refused:
            return
        if self._gated and len(payload) > MAX_UNAUTHENTICATED_FRAME:
            self.abort("unauthenticated",
                       f"frame of {len(payload)} bytes before SASL authentication")
            return
        if self._raw_tokens and self._gated:
            self._raw_token(payload)
            return
        if (len(payload) > SCAN_ABOVE_BYTES and not self._gated
                and payload[:2] != PRODUCE_KEY):
            # 10,000 partitions cost milliseconds to decode; a Produce's records stay
            # one undecoded blob, so it is decoded here (the hop cost 7% under load)
            self._off_loop(_decode, payload, self._handle_kafka)
            return
        self._handle_kafka(_decode(payload))

    def _handle_kafka(self, decoded: KafkaRequest | ProtocolError) -> None:
        if isinstance(decoded, UnsupportedKafkaVersion):
            self._unsupported(decoded)
            return
        if isinstance(decoded, ProtocolError):
            header = decoded.header if isinstance(decoded, KafkaCodecError) else None
            what = (f"{API_NAMES.get(header.api_key, header.api_key)} v{header.api_version}"
                    if header is not None else "request")
            self.abort("bad-request", f"{what} does not decode: {decoded}")
            return
        header = decoded.header
        if self._gated and header.api_key not in _BEFORE_AUTHENTICATION:
            name = API_NAMES.get(header.api_key, str(header.api_key))
            self.abort("unauthenticated", f"{name} before SASL authentication")
            return
        if self._held is not None:
            self._release_heartbeat()
        number = self._next_number
        self._next_number += 1
        if header.api_key == API_VERSIONS:
            self._start(number, header, decoded.body, None, None)
            self._answer_body(number, self.door.api_versions(header.api_version))
            return
        translator = self.door.translators.get(header.api_key)
        if translator is None:  # served by the codec but by no translator: not advertised
            self._unsupported(UnsupportedKafkaVersion(
                f"{API_NAMES.get(header.api_key, header.api_key)} is not served",
                header=header))
            return
        ctx = self.door.context(self, header)
        self._start(number, header, decoded.body, translator, ctx)
        try:
            step = translator.request(ctx, decoded.body)
        except Exception as exc:
            self._failed(number, exc)
            return
        self._take(number, step)

    def _start(self, number: int, header: RequestHeader, body: Body,
               translator: Translator | None, ctx: KafkaContext | None) -> None:
        self._in_flight[number] = (header.api_key, time.perf_counter())  # type: ignore[assignment]
        self._pending[number] = _Pending(header, body, translator, ctx)
        self._order.append(number)

    def _take(self, number: int, step: Step) -> None:
        """Carry out what a translator made of a request (or of an answer)."""
        if isinstance(step, Answer):
            self._answer_body(number, step.body)
            return
        pending = self._pending[number]
        if isinstance(step, Silent):
            pending.silent = True
            self._order.remove(number)
        request = step.request
        if isinstance(request, SaslHandshakeRequest | SaslAuthenticateRequest):
            self._sasl_request(number, request)
            if (pending.header.api_key == SASL_HANDSHAKE and pending.header.api_version == 0
                    and self._sasl is not None):
                self._raw_tokens = True  # the handshake was taken: bare tokens follow
            return
        if (pending.header.api_key in _READ_WHEN_NEXT and self._order
                and self._order[0] != number):
            # answered only once every earlier answer has gone: read then, not now, or
            # a Metadata queued behind a slow acks=all Produce names yesterday's leaders
            pending.deferred = request
            return
        if isinstance(request, HeartbeatRequest) and request.wait_ms > 0:
            self._held = (number, request)
        self.broker.dispatch(self, number, pending.header.client_id or "", request)

    def _release_heartbeat(self) -> None:
        """A request arrived behind a Heartbeat the coordinator may be holding: its answer
        must not wait for the hold (answers leave in order, and a commit or a fetch on
        this connection would wait with it). The coordinator answers a held heartbeat
        when the member's next one arrives (docs/protocol.md §7.3), so one more is sent,
        unheld, and its own answer dropped: the held one is answered now, as it stands
        (NONE, or the rebalance that started meanwhile)."""
        assert self._held is not None
        (number, request), self._held = self._held, None
        pending = self._pending.get(number)
        if pending is None or pending.answer is not None:
            return  # answered already
        release = self._next_number
        self._next_number += 1
        # not in the answer order nor in flight: nobody waits for it, no metric counts it
        self._pending[release] = _Pending(pending.header, pending.body, pending.translator,
                                          pending.ctx, silent=True)
        self.broker.dispatch(self, release, pending.header.client_id or "",
                             dataclasses.replace(request, wait_ms=0))

    def _raw_token(self, payload: Payload) -> None:
        """A SASL token after SaslHandshake v0: the frame is the token itself, with no
        request header, as Kafka's protocol had it before SaslAuthenticate (KIP-152).
        Clients send v0 when they were told to expect a broker older than 1.0 (kafka-python
        with ``api_version=(0, 10, x)``, librdkafka with ``api.version.request=false``).
        The exchange is the same as SaslAuthenticate's (``_sasl_request``)."""
        number = self._next_number
        self._next_number += 1
        header = RequestHeader(SASL_AUTHENTICATE, 0, 0, None)
        self._start(number, header, {}, None, None)
        self._pending[number].raw = True
        self._sasl_request(number, SaslAuthenticateRequest(auth_bytes=bytes(payload)))

    def _raw_answer(self, number: int, response: Response) -> None:
        """The answer to a bare token is a bare token. A refusal has no way to say why
        in v0: nothing is sent and the connection closes (``_sasl_step`` logs the
        reason), as Kafka closes it."""
        assert isinstance(response, SaslAuthenticateResponse)
        if response.error_code:
            self._forget(number)
            return
        self._ready(number, with_size(response.auth_bytes))

    def _reply_and_close(self, cid: int, response: Response, reason: str,
                         detail: str = "") -> None:
        """A SASL refusal (a failed authentication, an unsupported mechanism, a step out
        of order) is answered at once and the connection closed
        ``FAILED_AUTHENTICATION_DELAY_S`` later, as Kafka's broker delays it: the client
        reads the answer before it sees the close (kafka-python, given both at once,
        reports the close rather than the refusal about half the time), and each guess
        of a password costs the guesser that long. Nothing it sends meanwhile is taken.
        Other closes are the msgpack door's: answer, then close."""
        if reason not in _SASL_REFUSALS or self._closed:
            super()._reply_and_close(cid, response, reason, detail)
            return
        self._sasl_refused = True
        self.reply(cid, response)  # written now, or by the drain this runs in
        asyncio.get_running_loop().call_later(
            FAILED_AUTHENTICATION_DELAY_S, self.abort, reason, detail)

    def _unsupported(self, exc: UnsupportedKafkaVersion) -> None:
        """An ApiVersions version not served is answered in v0's shape with
        UNSUPPORTED_VERSION and the served ranges, so the client retries with one it
        finds there (KIP-511). Any other request Kafka cannot parse closes its connection;
        so does this door, saying which API and version in the log (the client learnt
        what is served from ApiVersions, which always answers)."""
        header = exc.header
        if header.api_key == API_VERSIONS and not self._closed:
            number = self._next_number
            self._next_number += 1
            self._start(number, header, {}, None, None)
            self._pending[number].error_code = int(ErrorCode.UNSUPPORTED_VERSION)
            self._ready(number, with_size(encode_api_versions_fallback(
                header.correlation_id, self.door.advertised)))
            return
        name = API_NAMES.get(header.api_key, f"api key {header.api_key}")
        self.abort("unsupported-version", f"{name} v{header.api_version} is not served")

    def _failed(self, number: int, exc: Exception) -> None:
        """A translator raised: logged, and the request answered as the broker answers an
        unexpected failure (UNKNOWN_SERVER_ERROR where Kafka's response has a code)."""
        pending = self._pending[number]
        log.exception("request_failed", conn=self.conn_id,
                      api=API_NAMES.get(pending.header.api_key, pending.header.api_key))
        self.abort("internal-error", f"{type(exc).__name__}: {exc}")

    # --- answers --------------------------------------------------------------------------

    def reply(self, correlation_id: int, response: Response) -> None:
        """The broker's answer to request ``correlation_id`` (the connection's number)."""
        number = correlation_id
        if self._finishers:
            finish = self._finishers.pop(number, None)
            if finish is not None:
                response = finish(response)
        pending = self._pending.get(number)
        if pending is None or self._closed:
            self._forget(number)
            return
        if self._held is not None and self._held[0] == number:
            self._held = None
        if pending.raw:
            self._raw_answer(number, response)
            return
        if pending.silent:
            self._forget(number)
            started = self._in_flight.pop(number, None)
            if started is not None:
                self.broker.metrics.answered(started[0], response.error_code,
                                             time.perf_counter() - started[1])
            return
        translator, ctx = pending.translator, pending.ctx
        assert translator is not None and ctx is not None
        if number in self._long:
            self._long.discard(number)
            if pending.header.api_key != PRODUCE:  # a Produce's answer is a few bytes
                self._translate_off_loop(number, pending, response)
                return
        try:
            result = translator.response(ctx, pending.body, response)
        except Exception as exc:
            self._failed(number, exc)
            return
        if isinstance(result, Answer | Dispatch | Silent):
            self._take(number, result)
            return
        pending.error_code = kafka_code(response.error_code)
        self._answer_body(number, result)

    def _translate_off_loop(self, number: int, pending: _Pending, response: Response) -> None:
        """A long answer (a Fetch's megabytes) is translated and encoded on a worker
        thread, as the msgpack door encodes its long answers."""
        translator, ctx = pending.translator, pending.ctx
        assert translator is not None and ctx is not None

        def work() -> bytes | Step:
            result = translator.response(ctx, pending.body, response)
            if isinstance(result, Answer | Dispatch | Silent):
                return result
            return with_size(encode_response(pending.header, result))

        def done(future: asyncio.Future[bytes | Step]) -> None:
            if future.cancelled() or self._closed:
                self._forget(number)
                return
            try:
                result = future.result()
            except Exception as exc:
                self._failed(number, exc)
                return
            if isinstance(result, bytes):
                pending.error_code = kafka_code(response.error_code)
                self._ready(number, result)
            else:
                self._take(number, result)

        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, work).add_done_callback(done)

    def _answer_body(self, number: int, body: Body) -> None:
        pending = self._pending.get(number)
        if pending is None:
            return
        try:
            data = with_size(encode_response(pending.header, body))
        except Exception as exc:
            self._failed(number, exc)
            return
        self._ready(number, data)

    def _ready(self, number: int, data: bytes) -> None:
        """An answer is encoded: send it and every later one already waiting, once all
        before it have gone."""
        pending = self._pending.get(number)
        if pending is None:
            return
        pending.answer = data
        self._flush()

    def _flush(self) -> None:
        """Send the answers at the head of the line, then read the request now first in
        it if it waited (``_READ_WHEN_NEXT``)."""
        order = self._order
        while order:
            head = self._pending.get(order[0])
            if head is None:
                order.popleft()
                continue
            if head.answer is None:
                break
            first = order.popleft()
            del self._pending[first]
            started = self._in_flight.pop(first, None)
            if self._closed or self._transport is None:
                continue
            self._send(head.answer, started, head.error_code)  # type: ignore[arg-type]
        if order and not self._closed:
            self._dispatch_deferred(order[0])

    def _dispatch_deferred(self, number: int) -> None:
        """The request now first in line, if it waited to be read (``_READ_WHEN_NEXT``)."""
        head = self._pending.get(number)
        if head is not None and head.deferred is not None:
            request, head.deferred = head.deferred, None
            self.broker.dispatch(self, number, head.header.client_id or "", request)

    def _forget(self, number: int) -> None:
        self._pending.pop(number, None)
        self._in_flight.pop(number, None)
        if self._order and self._order[0] == number and not self._closed:
            self._flush()
