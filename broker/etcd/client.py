"""A small etcd v3 client over its JSON gateway (HTTP/1.1 on asyncio streams, framed by
h11), so the broker needs no gRPC stack: a few kept-alive connections for requests, one
streaming connection per watch, failover to the next endpoint when one stops answering.

A watch never waits forever (docs/design/cluster.md, "Liveness and fencing"): it asks
for etcd's progress notifications, and a stream that brings nothing for
``watch_timeout_s`` is checked with one read-only txn (has any key under the prefix
changed, or gone, since the last revision delivered?). Caught up: the watch yields an
empty batch, which tells its reader the image is current as of now. Behind, or the
check fails: the stream is treated as dead (a half-open connection, a stalled gateway)
and the watch resumes from its last revision on the next endpoint.

``https://`` endpoints speak TLS: the server's certificate is checked (against the CA
file given, else the system's) with its host name, and with a client certificate the
client authenticates too, as etcd's ``--client-cert-auth`` requires (mutual TLS)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import h11

from groupwire.broker.cluster.txn import (
    Compare,
    KeyValue,
    Operation,
    Put,
    Txn,
    TxnResult,
    WatchEvent,
)
from groupwire.broker.etcd.store import (
    EtcdError,
    EtcdUnavailableError,
    WatchCompactedError,
    prefix_end,
)
from groupwire.broker.logs import get_logger

log = get_logger("groupwire.etcd")

MAX_IDLE: Final = 4
"""Kept-alive connections per client: the shells issue few requests at a time."""
LEASE_NOT_FOUND: Final = 5
READ_SIZE: Final = 65536
DEFAULT_WATCH_TIMEOUT_S: Final = 3.0
"""How long a watch stream may bring nothing before it is checked (the broker passes
half its lease TTL)."""

_TARGETS: Final = {"create": ("CREATE", "create_revision"), "mod": ("MOD", "mod_revision"),
                   "version": ("VERSION", "version"), "lease": ("LEASE", "lease")}
_RESULTS: Final = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}

Json = dict[str, Any]


class _BrokenConnection(Exception):
    """The endpoint went away or spoke something that is not HTTP."""


class _StalledWatch(Exception):
    """The watch stream brought nothing in time and etcd has changes it did not bring."""


class EtcdTlsError(ValueError):
    """The CA, certificate or key file cannot be used: one line naming the file."""


def tls_context(cafile: str = "", certfile: str = "", keyfile: str = "") -> ssl.SSLContext:
    """The client side of TLS to etcd: TLS 1.2 or later, the server's certificate and
    host name checked against ``cafile`` (the system's CAs without one), and with
    ``certfile`` (and ``keyfile``, if the key is not in it) a client certificate."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile or None)
    except (OSError, ssl.SSLError) as exc:
        raise EtcdTlsError(f"etcd CA file {cafile}: cannot load: {_reason(exc)}") from exc
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile:
        try:
            ctx.load_cert_chain(certfile, keyfile or None)
        except (OSError, ssl.SSLError) as exc:
            raise EtcdTlsError(f"etcd client certificate {certfile} / key "
                               f"{keyfile or certfile}: cannot load: {_reason(exc)}"
                               ) from exc
    elif keyfile:
        raise EtcdTlsError(f"etcd client key {keyfile} given without its certificate")
    return ctx


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


@dataclass(frozen=True, slots=True)
class _Endpoint:
    host: str
    port: int
    tls: bool = False

    @classmethod
    def parse(cls, text: str) -> _Endpoint:
        parts = urlsplit(text if "//" in text else f"http://{text}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"etcd endpoint {text!r}: expected http://host:port or https://host:port")
        return cls(parts.hostname, parts.port or 2379, parts.scheme == "https")

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class _Connection:
    """One HTTP/1.1 connection: h11 frames the requests and responses, this class only
    moves bytes between it and the socket."""

    def __init__(self, endpoint: _Endpoint, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.endpoint = endpoint
        self.reader = reader
        self.writer = writer
        self.http = h11.Connection(our_role=h11.CLIENT)

    @classmethod
    async def open(cls, endpoint: _Endpoint, tls: ssl.SSLContext | None) -> _Connection:
        if endpoint.tls:
            reader, writer = await asyncio.open_connection(
                endpoint.host, endpoint.port, ssl=tls, server_hostname=endpoint.host)
        else:
            reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
        return cls(endpoint, reader, writer)

    def close(self) -> None:
        self.writer.close()

    async def send(self, path: str, body: bytes) -> None:
        try:
            data = self.http.send(h11.Request(
                method="POST", target=path,
                headers=[("Host", str(self.endpoint)), ("Content-Type", "application/json"),
                         ("Content-Length", str(len(body)))]))
            data += self.http.send(h11.Data(data=body)) or b""
            data += self.http.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise _BrokenConnection(f"cannot send on this connection: {exc}") from exc
        self.writer.write(data or b"")
        await self.writer.drain()

    async def next_event(self) -> h11.Response | h11.Data | h11.EndOfMessage:
        """The next piece of the response; reading from the socket only when h11 needs
        more (cancelling the wait loses nothing: no byte was taken yet)."""
        while True:
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as exc:
                raise _BrokenConnection(f"not a valid HTTP response: {exc}") from exc
            if event is h11.NEED_DATA:
                self.http.receive_data(await self.reader.read(READ_SIZE))  # b"": EOF
                continue
            if isinstance(event, (h11.Response, h11.Data, h11.EndOfMessage)):
                return event
            if isinstance(event, h11.InformationalResponse):
                continue
            raise _BrokenConnection("connection closed before the response ended")

    async def read_head(self) -> int:
        """The response's status (h11 keeps the headers it needs for the framing)."""
        event = await self.next_event()
        if not isinstance(event, h11.Response):
            raise _BrokenConnection(f"expected a response head, got {type(event).__name__}")
        return event.status_code

    async def read_body(self) -> bytes:
        parts: list[bytes] = []
        while True:
            event = await self.next_event()
            if isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            if isinstance(event, h11.Data):
                parts.append(bytes(event.data))

    def reusable(self) -> bool:
        """Ready for the next request (both sides done, neither asked to close)."""
        if self.http.our_state is h11.DONE and self.http.their_state is h11.DONE:
            self.http.start_next_cycle()
            return True
        return False


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _key(key: str) -> str:
    return _b64(key.encode())


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _kv(obj: Json) -> KeyValue:
    """Zero fields are left out of the gateway's JSON; int64s come as strings."""
    return KeyValue(
        key=_unb64(obj.get("key")).decode(), value=_unb64(obj.get("value")),
        create_revision=int(obj.get("create_revision", 0)),
        mod_revision=int(obj.get("mod_revision", 0)), version=int(obj.get("version", 0)),
        lease=int(obj.get("lease", 0)))


def _compare(compare: Compare) -> Json:
    target, field = _TARGETS[compare.target]
    return {"key": _key(compare.key), "target": target, "result": _RESULTS[compare.op],
            field: str(compare.value)}


def _operation(op: Operation) -> Json:
    if isinstance(op, Put):
        return {"request_put": {"key": _key(op.key), "value": _b64(op.value),
                                "lease": str(op.lease)}}
    request: Json = {"key": _key(op.key)}
    if op.prefix:
        request = _range(op.key)
    return {"request_delete_range": request}


def _range(prefix: str) -> Json:
    key = prefix.encode() or b"\0"  # the empty prefix: every key
    return {"key": _b64(key), "range_end": _b64(prefix_end(prefix))}


def _error(status: int, body: bytes) -> EtcdError:
    try:
        obj = json.loads(body)
        return EtcdError(str(obj.get("message") or obj.get("error")), int(obj.get("code", 0)))
    except (ValueError, AttributeError):
        return EtcdError(f"HTTP {status}: {body[:200]!r}")


class EtcdClient:
    """A MetadataStore on etcd. Reads and lease calls move on to the next endpoint when
    one fails; a txn does too if it could not be sent, but one whose connection broke
    after sending raises EtcdUnavailableError: it may have been applied, and only a
    re-read can tell."""

    def __init__(self, endpoints: list[str], *, timeout_s: float = 5.0,
                 tls: ssl.SSLContext | None = None,
                 watch_timeout_s: float = DEFAULT_WATCH_TIMEOUT_S) -> None:
        """``tls``: the context for ``https://`` endpoints (:func:`tls_context`); without
        one they check the server against the system's CAs and send no certificate.
        ``watch_timeout_s``: how long a watch stream may bring nothing before it is
        checked against a read (see the module docstring)."""
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self._endpoints = [_Endpoint.parse(text) for text in endpoints]
        self._tls = tls if tls is not None or not any(e.tls for e in self._endpoints) \
            else tls_context()
        self._current = 0
        self._timeout_s = timeout_s
        self._watch_timeout_s = watch_timeout_s
        self._idle: list[_Connection] = []
        self._streams: set[_Connection] = set()
        self._closed = False

    # --- MetadataStore ------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        reply = await self._call("/v3/kv/range", {"key": _key(key)}, idempotent=True)
        kvs = reply.get("kvs", [])
        return _kv(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        reply = await self._call("/v3/kv/range", _range(prefix), idempotent=True)
        return ([_kv(obj) for obj in reply.get("kvs", [])],
                int(reply["header"]["revision"]))

    async def txn(self, txn: Txn) -> TxnResult:
        payload = {"compare": [_compare(c) for c in txn.compares],
                   "success": [_operation(op) for op in txn.success],
                   "failure": [_operation(op) for op in txn.failure]}
        reply = await self._call("/v3/kv/txn", payload, idempotent=False)
        return TxnResult(succeeded=bool(reply.get("succeeded", False)),
                         revision=int(reply["header"]["revision"]))

    async def grant_lease(self, ttl_s: int) -> int:
        # Granting twice after a lost answer only leaves a lease nobody keeps alive.
        reply = await self._call("/v3/lease/grant", {"TTL": ttl_s}, idempotent=True)
        return int(reply["ID"])

    async def keep_alive(self, lease: int) -> int:
        # A stream on the gateway; one request per POST is one refresh, one answer.
        reply = await self._call("/v3/lease/keepalive", {"ID": str(lease)}, idempotent=True)
        return int(reply.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)}, idempotent=True)
        except EtcdError as exc:
            if exc.code != LEASE_NOT_FOUND:
                raise

    async def compact(self, revision: int) -> None:
        await self._call("/v3/kv/compaction", {"revision": str(revision)}, idempotent=True)

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        """Batches of events; an empty batch when etcd confirms the watch is current (a
        progress notification, or a check after ``watch_timeout_s`` of silence)."""
        following = start_revision
        while True:
            conn = await self._open_stream(prefix, following)
            buffer = b""
            try:
                while True:
                    try:
                        async with asyncio.timeout(self._watch_timeout_s):
                            event = await conn.next_event()
                    except TimeoutError:
                        if await self._caught_up(prefix, following):
                            yield []
                            continue
                        raise _StalledWatch(
                            f"nothing for {self._watch_timeout_s} s while etcd has changes "
                            f"under {prefix!r} from revision {following}") from None
                    if isinstance(event, h11.EndOfMessage):
                        raise _BrokenConnection("watch stream ended")
                    if not isinstance(event, h11.Data):
                        continue
                    buffer += bytes(event.data)
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        result = self._watch_result(json.loads(line))
                        if result.get("created") and following == 0:
                            following = int(result["header"]["revision"]) + 1
                        events = [self._event(obj) for obj in result.get("events", [])]
                        if events:
                            following = events[-1].kv.mod_revision + 1
                            yield events
                        elif not result.get("created") and following > 0:
                            # A progress notification: everything up to its header
                            # revision has been sent.
                            following = max(following, int(result["header"]["revision"]) + 1)
                            yield []
            except (OSError, ValueError, _BrokenConnection, _StalledWatch) as exc:
                if not self._closed:
                    log.warning("etcd_watch_lost", endpoint=str(conn.endpoint), prefix=prefix,
                                resume_from=following, error=f"{type(exc).__name__}: {exc}",
                                next=str(self._next_endpoint(conn.endpoint)))
            finally:
                self._streams.discard(conn)
                conn.close()
            if self._closed:
                return
            self._failover(conn.endpoint)

    @staticmethod
    def _watch_result(reply: Json) -> Json:
        if "error" in reply:
            error = reply["error"]
            raise EtcdError(str(error.get("message")), int(error.get("code", 0)))
        result: Json = reply.get("result", {})
        if int(result.get("compact_revision", 0)):
            raise WatchCompactedError(int(result["compact_revision"]))
        if result.get("canceled"):
            raise EtcdError(f"watch canceled: {result.get('cancel_reason', '')}")
        return result

    async def _caught_up(self, prefix: str, following: int) -> bool:
        """Whether nothing under ``prefix`` changed from revision ``following`` on: no
        key has a newer mod_revision, and as many keys exist as did before it (a delete
        alone leaves no key to see, but makes the count drop). One read-only txn, so
        both reads are at the same revision; False if etcd cannot say."""
        if following <= 0:
            return False
        keys = _range(prefix)
        reads: list[Json] = [
            {"request_range": {**keys, "keys_only": True, "limit": "1",
                               "min_mod_revision": str(following)}},
            {"request_range": {**keys, "count_only": True}}]
        if following > 1:
            reads.append({"request_range": {**keys, "count_only": True,
                                            "revision": str(following - 1)}})
        try:
            reply = await self._call("/v3/kv/txn", {"success": reads}, idempotent=True)
        except EtcdError as exc:
            log.warning("etcd_watch_check_failed", prefix=prefix, error=str(exc))
            return False
        answers = [r.get("response_range", {}) for r in reply.get("responses", [])]
        if len(answers) != len(reads) or answers[0].get("kvs"):
            return False
        before = int(answers[2].get("count", 0)) if following > 1 else 0
        return int(answers[1].get("count", 0)) == before

    async def close(self) -> None:
        self._closed = True
        for conn in [*self._idle, *self._streams]:
            conn.close()
        self._idle.clear()

    # --- plumbing -----------------------------------------------------------

    @staticmethod
    def _event(obj: Json) -> WatchEvent:
        return WatchEvent("delete" if obj.get("type") == "DELETE" else "put", _kv(obj["kv"]))

    async def _open_stream(self, prefix: str, start_revision: int) -> _Connection:
        payload = {"create_request": {**_range(prefix), "start_revision": str(start_revision),
                                      "progress_notify": True}}
        body = json.dumps(payload).encode()
        failures: list[str] = []
        for _ in self._endpoints:
            endpoint = self._endpoints[self._current]
            try:
                async with asyncio.timeout(self._timeout_s):
                    conn = await _Connection.open(endpoint, self._tls)
                    try:
                        await conn.send("/v3/watch", body)
                        status = await conn.read_head()
                        if status != 200:
                            raise _error(status, await conn.read_body())
                    except BaseException:
                        conn.close()
                        raise
            except (OSError, TimeoutError, _BrokenConnection) as exc:
                failures.append(f"{endpoint}: {exc!r}")
                self._failover(endpoint)
                continue
            if self._closed:
                conn.close()
                raise EtcdUnavailableError("client closed")
            self._streams.add(conn)
            return conn
        raise EtcdUnavailableError(f"no etcd endpoint answered: {'; '.join(failures)}")

    def _next_endpoint(self, failed: _Endpoint) -> _Endpoint:
        i = self._endpoints.index(failed) if failed in self._endpoints else self._current
        return self._endpoints[(i + 1) % len(self._endpoints)]

    def _failover(self, failed: _Endpoint) -> None:
        """Move on from ``failed`` (unless another caller already did) and drop the
        connections kept to it."""
        if self._endpoints[self._current] == failed:
            self._current = (self._current + 1) % len(self._endpoints)
        for conn in [c for c in self._idle if c.endpoint == failed]:
            self._idle.remove(conn)
            conn.close()

    async def _call(self, path: str, payload: Json, *, idempotent: bool) -> Json:
        if self._closed:
            raise EtcdUnavailableError("client closed")
        body = json.dumps(payload).encode()
        failures: list[str] = []
        attempts = len(self._endpoints) + 1  # one more for a kept connection gone stale
        for _ in range(attempts):
            endpoint = self._endpoints[self._current]
            conn = self._idle.pop() if self._idle else None
            reused = conn is not None
            sent = answered = False
            try:
                async with asyncio.timeout(self._timeout_s):
                    if conn is None:
                        conn = await _Connection.open(endpoint, self._tls)
                    await conn.send(path, body)
                    sent = True
                    status = await conn.read_head()
                    answered = True
                    data = await conn.read_body()
            except (OSError, TimeoutError, _BrokenConnection) as exc:
                if conn is not None:
                    conn.close()
                stale = reused and not answered and not isinstance(exc, TimeoutError)
                if sent and not idempotent and not stale:
                    raise EtcdUnavailableError(
                        f"{endpoint}: {exc!r} after sending {path}; outcome unknown") from exc
                failures.append(f"{endpoint}: {exc!r}")
                if not stale:
                    self._failover(endpoint)
                continue
            except BaseException:
                if conn is not None:
                    conn.close()  # cancelled mid-request: the connection is in an unknown state
                raise
            if conn.reusable() and len(self._idle) < MAX_IDLE and not self._closed:
                self._idle.append(conn)
            else:
                conn.close()
            if status != 200:
                raise _error(status, data)
            reply: Json = json.loads(data)
            return reply
        raise EtcdUnavailableError(f"no etcd endpoint answered: {'; '.join(failures)}")
