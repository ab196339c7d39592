"""A load generator in its own process: the same code drives the echo server and the broker.

It reads members (group id, member id, generation, and optionally the port of the
broker coordinating them: a cluster's) from a JSON file, pre-encodes one
Heartbeat frame per member and correlation id, and keeps ``--depth`` requests in flight on
each of ``--connections`` connections (closed loop), or sends at a fixed ``--rate``
(open loop). Answers are counted, not decoded: a reply is good when it ends with
``{"error_code": 0}``. Sent to the echo server or to the broker, the bytes are identical;
only the server differs.

Protocol on stdout: ``measure-start`` and ``measure-end`` around the measured window (the
parent samples the server's CPU between them), then one JSON line of results.

``--security-protocol`` SSL or SASL_SSL wraps the connections in TLS, SASL_* authenticates
each one first (the SDK's own exchange, password from ``$LOADGEN_SASL_PASSWORD``); the
load itself is the same frames through the same protocol object (bench/security.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import struct
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import msgpack

from groupwire.protocol.codec import (
    decode_response_body,
    decode_response_envelope,
    encode_request,
)
from groupwire.protocol.framing import FrameDecoder, frame
from groupwire.protocol.messages import HeartbeatRequest, Request, Response

R = TypeVar("R", bound=Response)
SASL_PASSWORD_ENV = "LOADGEN_SASL_PASSWORD"
AUTH_TIMEOUT_S = 30.0

OK_SUFFIX = b"\x81\xaaerror_code\x00"
OK_LEN = len(OK_SUFFIX)
_HEADER = struct.Struct(">I")
MIN_FRAMES_PER_CONN = 256


class Stats:
    __slots__ = ("bad", "first_bad", "good", "sent")

    def __init__(self) -> None:
        self.first_bad = b""
        self.good = 0
        self.bad = 0
        self.sent = 0


class LoadConnection(asyncio.Protocol):
    """Sends pre-encoded frames in a cycle; each answer (closed loop) releases the next."""

    def __init__(self, frames: Sequence[bytes], depth: int, stats: Stats, closed_loop: bool,
                 ) -> None:
        self.frames = frames
        self.depth = depth
        self.stats = stats
        self.closed_loop = closed_loop
        self.next = 0
        self.in_flight = 0
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if self.closed_loop:
            self.send(self.depth)

    def send(self, count: int) -> None:
        """Send ``count`` more frames, never more in flight than distinct correlation ids."""
        frames = self.frames
        count = min(count, len(frames) - 1 - self.in_flight)
        if count <= 0 or self.transport is None:
            return
        i = self.next
        end = i + count
        wrapped = max(0, end - len(frames))
        chunk = [*frames[i:end], *frames[:wrapped]]
        self.next = end % len(frames)
        self.in_flight += count
        self.stats.sent += count
        self.transport.write(b"".join(chunk))

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        end = len(buf)
        off = 0
        good = bad = 0
        while end - off >= 4:
            (n,) = _HEADER.unpack_from(buf, off)
            stop = off + 4 + n
            if stop > end:
                break
            if buf[stop - OK_LEN:stop] == OK_SUFFIX:
                good += 1
            else:
                bad += 1
                if not self.stats.first_bad:
                    self.stats.first_bad = bytes(buf[off + 4:stop])
            off = stop
        self.buf = buf[off:]
        done = good + bad
        self.in_flight -= done
        self.stats.good += good
        self.stats.bad += bad
        if self.closed_loop and done:
            self.send(done)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


def build_frames(members: Sequence[Sequence[Any]], depth: int) -> list[bytes]:
    """One connection's frames: its members in turn, each frame with its own correlation
    id, at least enough of them that no id is reused while in flight."""
    reps = max(1, math.ceil(max(MIN_FRAMES_PER_CONN, 4 * depth) / len(members)))
    out = []
    for cid in range(reps * len(members)):
        group_id, member_id, generation = members[cid % len(members)][:3]
        out.append(frame(encode_request(cid, HeartbeatRequest(
            group_id=group_id, generation_id=generation, member_id=member_id), "loadgen")))
    return out


def by_port(members: Sequence[Sequence[Any]], default_port: int,
            ) -> dict[int, list[Sequence[Any]]]:
    """Members by the port they are sent to: a row's optional fourth item, else
    ``--port``."""
    out: dict[int, list[Sequence[Any]]] = {}
    for m in members:
        out.setdefault(int(m[3]) if len(m) > 3 else default_port, []).append(m)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    members = json.loads(open(args.members).read())  # noqa: SIM115 (read once, small)
    stats = Stats()
    closed_loop = args.rate <= 0
    conns: list[LoadConnection] = []
    for port, ms_port in by_port(members, args.port).items():
        # a cluster's members go to their coordinators: connections shared out by members
        n_conns = max(1, round(args.connections * len(ms_port) / len(members)))
        per_conn = [m for m in (ms_port[i::n_conns] for i in range(n_conns)) if m]
        for ms in per_conn:
            frames = build_frames(ms, args.depth)
            conns.append(await open_load_connection(
                lambda f=frames: LoadConnection(f, args.depth, stats, closed_loop),  # type: ignore[misc]
                port, args))
    pacer = None if closed_loop else asyncio.create_task(pace(conns, args.rate))
    await asyncio.sleep(args.warmup_s)
    good0, bad0, t0, cpu0 = stats.good, stats.bad, time.perf_counter(), time.process_time()
    print("measure-start", flush=True)
    await asyncio.sleep(args.seconds)
    good1, bad1, t1, cpu1 = stats.good, stats.bad, time.perf_counter(), time.process_time()
    print("measure-end", flush=True)
    if pacer is not None:
        pacer.cancel()
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    seconds = t1 - t0
    return {"good": good1 - good0, "bad": bad1 - bad0, "seconds": seconds,
            "per_second": (good1 - good0) / seconds,
            "loadgen_cpu_percent": 100.0 * (cpu1 - cpu0) / seconds,
            "connections": len(conns), "depth": args.depth, "rate": args.rate,
            "first_bad": _describe(stats.first_bad)}


def _describe(payload: bytes) -> str | None:
    """A bad answer, decoded for the error message (only ever the first one)."""
    if not payload:
        return None
    try:
        return repr(msgpack.unpackb(payload, raw=False))
    except ValueError:
        return repr(payload[:200])


class Prelude(asyncio.Protocol):
    """Request/response on a fresh connection, enough for the SDK's SASL exchange; the
    transport is then handed to the load protocol, so the measured path has no branch."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder()
        self.waiting: dict[int, tuple[asyncio.Future[Response], type[Response]]] = {}
        self.next_id = 1
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    def data_received(self, data: bytes) -> None:
        for payload in self.decoder.feed(data):
            cid, body = decode_response_envelope(payload)
            future, rtype = self.waiting.pop(cid)
            future.set_result(decode_response_body(body, rtype, cid))

    def connection_lost(self, exc: Exception | None) -> None:
        for future, _ in self.waiting.values():
            if not future.done():
                future.set_exception(ConnectionError(f"{self.peer} closed: {exc}"))

    async def send(self, request: Request, *, response_type: type[R]) -> R:
        assert self.transport is not None
        cid, self.next_id = self.next_id, self.next_id + 1
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self.waiting[cid] = (future, response_type)
        self.transport.write(frame(encode_request(cid, request, "loadgen")))
        return cast(R, await future)


async def open_load_connection(factory: Callable[[], LoadConnection], port: int,
                               args: argparse.Namespace) -> LoadConnection:
    """A load connection to ``port``, over TLS and authenticated as ``args`` say."""
    loop = asyncio.get_running_loop()
    protocol = getattr(args, "security_protocol", "PLAINTEXT")
    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        from groupwire.client.security import create_ssl_context

        ssl_context = create_ssl_context(cafile=args.ssl_cafile)
    if not protocol.startswith("SASL_"):
        _, proto = await loop.create_connection(factory, "127.0.0.1", port, ssl=ssl_context)
        return proto
    from groupwire.client.connection import Connection
    from groupwire.client.sasl import authenticate
    from groupwire.client.security import SecurityConfig

    transport, prelude = await loop.create_connection(Prelude, "127.0.0.1", port,
                                                      ssl=ssl_context)
    config = SecurityConfig(security_protocol=protocol, ssl_context=ssl_context,
                            sasl_mechanism=args.sasl_mechanism,
                            sasl_plain_username=args.sasl_username,
                            sasl_plain_password=os.environ.get(SASL_PASSWORD_ENV, ""))
    await authenticate(cast(Connection, prelude), config, AUTH_TIMEOUT_S)
    proto = factory()
    transport.set_protocol(proto)
    proto.connection_made(transport)
    return proto


async def pace(conns: Sequence[LoadConnection], rate: float, tick_s: float = 0.01) -> None:
    """Open loop: ``rate`` requests/s in total, spread over the connections every tick."""
    t0 = time.perf_counter()
    sent = 0
    while True:
        await asyncio.sleep(tick_s)
        due = int(rate * (time.perf_counter() - t0)) - sent
        if due <= 0:
            continue
        share, extra = divmod(due, len(conns))
        for i, c in enumerate(conns):
            c.send(share + (1 if i < extra else 0))
        sent += due


def main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument("--port", type=int, required=True,
                        help="the broker, for members whose row names no port")
    parser.add_argument("--members", required=True, help="JSON file of [group, member, gen]")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--depth", type=int, default=16, help="in flight per connection")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="requests/s in total (open loop); 0: closed loop at --depth")
    parser.add_argument("--warmup-s", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--security-protocol", default="PLAINTEXT",
                        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))
    parser.add_argument("--ssl-cafile", help="CA the broker's certificate is checked against")
    parser.add_argument("--sasl-mechanism", default="SCRAM-SHA-256")
    parser.add_argument("--sasl-username", default="")
    args = parser.parse_args(argv)
    from bench.echo import run_loop

    result: dict[str, Any] = {}

    async def go() -> None:
        result.update(await run(args))

    run_loop(go())
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(None))
