"""``groupwire health``: does a broker answer? One ApiVersions round trip, exit 0 if so.

:func:`check_health` is also what ``groupwire report`` asks before it starts Spark.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from groupwire.cli.arguments import DEFAULT_BOOTSTRAP, parse_address
from groupwire.cli.errors import EXIT_FAILURE
from groupwire.cli.running import run_loop
from groupwire.client.connection import Connection
from groupwire.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

CLIENT_ID = "groupwire-health"


def register(subparsers: Any) -> None:
    """Add ``health`` to the ``groupwire`` subparsers."""
    p = subparsers.add_parser("health", help="check that a broker answers (exit 0 if healthy)")
    p.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                   help=f"broker address HOST:PORT (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=int, default=5000,
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
    """``{"ok": True, "apis", "latency_ms", "max_frame_bytes"}`` or ``{"ok": False, "error"}``."""
    t0 = time.perf_counter()
    try:
        conn = await Connection.open(host, port, client_id=CLIENT_ID, connect_timeout=timeout)
        try:
            resp = await conn.send(ApiVersionsRequest(client_software_name=CLIENT_ID),
                                   timeout=timeout, response_type=ApiVersionsResponse)
        finally:
            await conn.close()
    except (OSError, TimeoutError, ConnectionError) as exc:
        return {"ok": False, "error": str(exc) or type(exc).__name__}
    latency = round((time.perf_counter() - t0) * 1000, 1)
    if resp.error_code != 0:
        return {"ok": False, "error": f"error code {resp.error_code}"}
    return {"ok": True, "apis": len(resp.api_keys), "latency_ms": latency,
            "max_frame_bytes": resp.max_frame_bytes}
