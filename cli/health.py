"""``groupwire health``: does a broker answer? One ApiVersions round trip, exit 0 if so.

:func:`check_health` is also what ``groupwire report`` asks before it starts Spark.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from groupwire.cli.arguments import (
    DEFAULT_BOOTSTRAP,
    add_security_flags,
    parse_address,
    positive_int,
    security_from_args,
)
from groupwire.cli.errors import EXIT_FAILURE
from groupwire.cli.running import run_loop
from groupwire.client.cluster import Cluster
from groupwire.client.errors import (
    AuthenticationFailedError,
    BrokerResponseError,
    ConnectionClosedError,
    IncompatibleBrokerError,
)
from groupwire.client.security import SecurityConfig

CLIENT_ID = "groupwire-health"


def register(subparsers: Any) -> None:
    """Add ``health`` to the ``groupwire`` subparsers."""
    p = subparsers.add_parser("health", help="check that a broker answers (exit 0 if healthy)")
    p.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                   help=f"broker address HOST:PORT (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=positive_int, default=5000,
                   help="give up after this long (default 5000)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_security_flags(p)
    p.set_defaults(func=_cmd_health)


def _cmd_health(args: argparse.Namespace) -> int:
    host, port = parse_address(args.bootstrap)
    security = security_from_args(args)
    result = run_loop(lambda: check_health(host, port, args.timeout_ms / 1000,
                                           security=security))
    if args.json:
        print(json.dumps(result))
    elif result["ok"]:
        print(f"ok: {host}:{port} answers ({result['apis']} APIs, "
              f"{result['latency_ms']} ms)")
    else:
        print(f"unhealthy: {host}:{port}: {result['error']}", file=sys.stderr)
    return 0 if result["ok"] else EXIT_FAILURE


async def check_health(host: str, port: int, timeout: float, *,
                       security: SecurityConfig | None = None) -> dict[str, object]:
    """``{"ok": True, "address", "apis", "latency_ms", "max_frame_bytes"}`` or
    ``{"ok": False, "address", "error"}``.

    The check is the SDK's own (one ApiVersions round trip, the versions compared), tried
    once; the error names the cause: nothing listening, no answer in time, or a peer that
    answers something other than groupwire's protocol. With ``security``, over TLS and
    authenticated as it says (a SASL listener answers ApiVersions before authentication,
    so ``SSL`` alone checks a SASL_SSL listener without credentials).
    """
    cluster = Cluster(f"{host}:{port}", client_id=CLIENT_ID, security=security)
    t0 = time.perf_counter()
    try:
        conn = await cluster.open_one(host, port, timeout)
    except IncompatibleBrokerError as exc:
        return _unhealthy(host, port, exc.reason)
    except ConnectionClosedError as exc:
        return _unhealthy(host, port, f"not a groupwire broker: it {exc}")
    except AuthenticationFailedError as exc:
        return _unhealthy(host, port, str(exc))
    except BrokerResponseError as exc:
        return _unhealthy(host, port, f"ApiVersions answered {exc}")
    except TimeoutError as exc:
        return _unhealthy(host, port, str(exc))
    except ConnectionRefusedError:
        return _unhealthy(host, port, "connection refused (is a broker running there?)")
    except OSError as exc:
        return _unhealthy(host, port, exc.strerror or str(exc))
    latency = round((time.perf_counter() - t0) * 1000, 1)
    await conn.close()
    resp = cluster.broker_versions
    assert resp is not None  # open_one returned: the broker answered ApiVersions
    return {"ok": True, "address": f"{host}:{port}", "apis": len(resp.api_keys),
            "latency_ms": latency, "max_frame_bytes": resp.max_frame_bytes}


def _unhealthy(host: str, port: int, cause: str) -> dict[str, object]:
    return {"ok": False, "address": f"{host}:{port}", "error": cause}
