"""``groupwire health``: does a broker answer? One ApiVersions round trip, exit 0 if so.

:func:`check_health` is also what ``groupwire report`` asks before it starts Spark.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

from groupwire.cli.arguments import DEFAULT_BOOTSTRAP, parse_address, positive_int
from groupwire.cli.errors import EXIT_FAILURE
from groupwire.cli.running import run_loop
from groupwire.protocol.codec import (
    decode_response_body,
    decode_response_envelope,
    encode_request,
)
from groupwire.protocol.errors import ProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, frame
from groupwire.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

CLIENT_ID = "groupwire-health"
_CORRELATION_ID = 1


def register(subparsers: Any) -> None:
    """Add ``health`` to the ``groupwire`` subparsers."""
    p = subparsers.add_parser("health", help="check that a broker answers (exit 0 if healthy)")
    p.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                   help=f"broker address HOST:PORT (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=positive_int, default=5000,
                   help="give up after this long (default 5000)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_health)


def _cmd_health(args: argparse.Namespace) -> int:
    host, port = parse_address(args.bootstrap)
    result = run_loop(lambda: check_health(host, port, args.timeout_ms / 1000))
    if args.json:
        print(json.dumps(result))
    elif result["ok"]:
        print(f"ok: {host}:{port} answers ({result['apis']} APIs, "
              f"{result['latency_ms']} ms)")
    else:
        print(f"unhealthy: {host}:{port}: {result['error']}", file=sys.stderr)
    return 0 if result["ok"] else EXIT_FAILURE


async def check_health(host: str, port: int, timeout: float) -> dict[str, object]:
    """``{"ok": True, "address", "apis", "latency_ms", "max_frame_bytes"}`` or
    ``{"ok": False, "address", "error"}``.

    The error names the address and the cause: nothing listening, no answer in time, or a
    peer that answers something other than groupwire's protocol.
    """
    t0 = time.perf_counter()
    try:
        resp = await asyncio.wait_for(_ask_api_versions(host, port), timeout)
    except TimeoutError:
        return _unhealthy(host, port, f"no answer within {timeout * 1000:.0f} ms "
                          "(a broker that hangs, or a peer that is not a groupwire broker)")
    except _NotGroupwire as exc:
        return _unhealthy(host, port, f"not a groupwire broker: {exc}")
    except ConnectionRefusedError:
        return _unhealthy(host, port, "connection refused (is a broker running there?)")
    except OSError as exc:
        return _unhealthy(host, port, exc.strerror or str(exc))
    latency = round((time.perf_counter() - t0) * 1000, 1)
    if resp.error_code != 0:
        return _unhealthy(host, port, f"ApiVersions answered error code {resp.error_code}")
    return {"ok": True, "address": f"{host}:{port}", "apis": len(resp.api_keys),
            "latency_ms": latency, "max_frame_bytes": resp.max_frame_bytes}


class _NotGroupwire(Exception):
    """The peer answered (or hung up) in a way no groupwire broker does."""


def _unhealthy(host: str, port: int, cause: str) -> dict[str, object]:
    return {"ok": False, "address": f"{host}:{port}", "error": cause}


async def _ask_api_versions(host: str, port: int) -> ApiVersionsResponse:
    """One ApiVersions round trip on a connection of its own, every byte checked."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(frame(encode_request(_CORRELATION_ID, ApiVersionsRequest(
            client_software_name=CLIENT_ID), CLIENT_ID)))
        await writer.drain()
        decoder = FrameDecoder(DEFAULT_MAX_FRAME_BYTES)
        received = b""
        while True:
            try:
                data = await reader.read(64 * 1024)
            except ConnectionResetError as exc:
                raise _NotGroupwire("it reset the connection without answering") from exc
            if not data:
                raise _NotGroupwire("it closed the connection without answering"
                                    if not received else
                                    f"it answered {_show(received)} and closed")
            received += data[:64]
            try:
                payloads = decoder.feed(data)
            except ProtocolError as exc:
                raise _NotGroupwire(f"it answered {_show(received)}") from exc
            if payloads:
                return _decode(payloads[0], received)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _decode(payload: bytes, received: bytes) -> ApiVersionsResponse:
    try:
        cid, body = decode_response_envelope(payload)
        if cid != _CORRELATION_ID:
            raise _NotGroupwire(f"it answered correlation id {cid}, not {_CORRELATION_ID}")
        return decode_response_body(body, ApiVersionsResponse, cid)
    except ProtocolError as exc:
        raise _NotGroupwire(f"it answered {_show(received)} ({exc})") from exc


def _show(data: bytes) -> str:
    """The start of an answer's first line, readable: ``'HTTP/1.1 400 Bad Request'``."""
    line = data.split(b"\n", 1)[0].rstrip(b"\r")
    text = "".join(c if c.isprintable() else "." for c in line[:40].decode("latin-1"))
    return repr(text + ("..." if len(line) > 40 or len(line) < len(data) - 2 else ""))
