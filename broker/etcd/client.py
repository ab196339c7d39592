"""A small etcd v3 client over its JSON gateway (HTTP/1.1 on asyncio streams), so the
broker needs no gRPC stack: a few kept-alive connections for requests, one streaming
connection per watch, failover to the next endpoint when one stops answering.

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

MAX_IDLE: Final = 4
"""Kept-alive connections per client: the shells issue few requests at a time."""
LEASE_NOT_FOUND: Final = 5

_TARGETS: Final = {"create": ("CREATE", "create_revision"), "mod": ("MOD", "mod_revision"),
                   "version": ("VERSION", "version"), "lease": ("LEASE", "lease")}
_RESULTS: Final = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}

Json = dict[str, Any]


class _BrokenConnection(Exception):
    """The endpoint went away or spoke something that is not HTTP."""


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
    def __init__(self, endpoint: _Endpoint, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.endpoint = endpoint
        self.reader = reader
        self.writer = writer

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
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.endpoint}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        await self.writer.drain()

    async def read_head(self) -> tuple[int, dict[str, str]]:
        status_line = await self.reader.readline()
        if not status_line:
            raise _BrokenConnection("connection closed before a response")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise _BrokenConnection(f"not an HTTP response: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    async def read_body(self, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return b"".join([chunk async for chunk in self.chunks()])
        return await self.reader.readexactly(int(headers.get("content-length", "0")))

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            size_line = await self.reader.readline()
            if not size_line:
                raise _BrokenConnection("connection closed inside a chunked response")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()  # no trailers from the gateway
                return
            chunk = await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            yield chunk


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
                 tls: ssl.SSLContext | None = None) -> None:
        """``tls``: the context for ``https://`` endpoints (:func:`tls_context`); without
        one they check the server against the system's CAs and send no certificate."""
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self._endpoints = [_Endpoint.parse(text) for text in endpoints]
        self._tls = tls if tls is not None or not any(e.tls for e in self._endpoints) \
            else tls_context()
        self._current = 0
        self._timeout_s = timeout_s
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
        following = start_revision
        while True:
            conn = await self._open_stream(prefix, following)
            try:
                async for reply in self._replies(conn):
                    if "error" in reply:
                        error = reply["error"]
                        raise EtcdError(str(error.get("message")), int(error.get("code", 0)))
                    result: Json = reply.get("result", {})
                    if int(result.get("compact_revision", 0)):
                        raise WatchCompactedError(int(result["compact_revision"]))
                    if result.get("canceled"):
                        raise EtcdError(f"watch canceled: {result.get('cancel_reason', '')}")
                    if result.get("created") and following == 0:
                        following = int(result["header"]["revision"]) + 1
                    events = [self._event(obj) for obj in result.get("events", [])]
                    if events:
                        following = events[-1].kv.mod_revision + 1
                        yield events
            except (OSError, asyncio.IncompleteReadError, _BrokenConnection):
                pass  # resumed below from the revision after the last one delivered
            finally:
                self._streams.discard(conn)
                conn.close()
            if self._closed:
                return
            self._failover(conn.endpoint)

    async def close(self) -> None:
        self._closed = True
        for conn in [*self._idle, *self._streams]:
            conn.close()
        self._idle.clear()

    # --- plumbing -----------------------------------------------------------

    @staticmethod
    def _event(obj: Json) -> WatchEvent:
        return WatchEvent("delete" if obj.get("type") == "DELETE" else "put", _kv(obj["kv"]))

    async def _replies(self, conn: _Connection) -> AsyncIterator[Json]:
        """The watch stream's JSON objects, one per line, however the chunks split them."""
        buffer = b""
        async for chunk in conn.chunks():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
        if self._closed:
            return
        raise _BrokenConnection("watch stream ended")

    async def _open_stream(self, prefix: str, start_revision: int) -> _Connection:
        payload = {"create_request": {**_range(prefix), "start_revision": str(start_revision)}}
        body = json.dumps(payload).encode()
        failures: list[str] = []
        for _ in self._endpoints:
            endpoint = self._endpoints[self._current]
            try:
                async with asyncio.timeout(self._timeout_s):
                    conn = await _Connection.open(endpoint, self._tls)
                    try:
                        await conn.send("/v3/watch", body)
                        status, headers = await conn.read_head()
                        if status != 200:
                            raise _error(status, await conn.read_body(headers))
                    except BaseException:
                        conn.close()
                        raise
            except (OSError, TimeoutError, asyncio.IncompleteReadError, _BrokenConnection) as exc:
                failures.append(f"{endpoint}: {exc!r}")
                self._failover(endpoint)
                continue
            if self._closed:
                conn.close()
                raise EtcdUnavailableError("client closed")
            self._streams.add(conn)
            return conn
        raise EtcdUnavailableError(f"no etcd endpoint answered: {'; '.join(failures)}")

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
                    status, headers = await conn.read_head()
                    answered = True
                    data = await conn.read_body(headers)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, _BrokenConnection) as exc:
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
            if headers.get("connection", "").lower() != "close" and len(self._idle) < MAX_IDLE \
                    and not self._closed:
                self._idle.append(conn)
            else:
                conn.close()
            if status != 200:
                raise _error(status, data)
            reply: Json = json.loads(data)
            return reply
        raise EtcdUnavailableError(f"no etcd endpoint answered: {'; '.join(failures)}")
