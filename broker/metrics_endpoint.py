"""``/metrics`` over HTTP on a thread of its own, with every figure read on the event loop.

The loop is the only thread that changes groups, offsets and logs. A scrape served by
prometheus-client's thread used to walk them there while the loop changed them (a scrape
during churn could fail, or mix two moments). Here the HTTP thread asks the loop for a
snapshot (``run_coroutine_threadsafe``), waits for it with a timeout, and only formats and
compresses it itself, so the loop spends no time on text. A loop that does not answer in
time gets a 503 rather than a stale or half-read answer: Prometheus marks the scrape failed
(``up`` 0), which is what a broker whose loop is stuck that long is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import make_wsgi_app
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

log = structlog.get_logger("groupwire.broker.metrics")

SCRAPE_TIMEOUT_S = 5.0
"""How long a scrape waits for the event loop's snapshot (Prometheus's own default
scrape timeout is 10 s)."""

Snapshot = Callable[[], Coroutine[Any, Any, list[Metric]]]
"""Makes, on the event loop, the families one scrape serves."""


class _Families(Collector):
    """One snapshot, as the registry prometheus-client's exposition formats."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)

    def restricted_registry(self, names: Iterable[str]) -> _Families:
        """Only the samples named (``/metrics?name[]=...``)."""
        wanted = set(names)
        kept = []
        for family in self._families:
            samples = [s for s in family.samples if s.name in wanted]
            if samples:
                part = Metric(family.name, family.documentation, family.type, family.unit)
                part.samples = samples
                kept.append(part)
        return _Families(kept)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    """A scrape still waiting for the loop does not hold up the process's exit."""

    def __init__(self, address: tuple[str, int], handler: type[WSGIRequestHandler]) -> None:
        infos = socket.getaddrinfo(address[0] or None, address[1], type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        self.address_family = infos[0][0]  # IPv6 for an IPv6 --host
        super().__init__(address, handler)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: Prometheus scrapes every few seconds."""


class ScrapeFailed(Exception):
    """The loop gave no snapshot: the broker is stopping, or its loop is stuck."""


class MetricsEndpoint:
    """Serves ``/metrics`` from snapshots the event loop makes; start it on the loop."""

    def __init__(self, snapshot: Snapshot, loop: asyncio.AbstractEventLoop, *,
                 timeout_s: float = SCRAPE_TIMEOUT_S) -> None:
        self._snapshot = snapshot
        self._loop = loop
        self._timeout_s = timeout_s
        self._httpd: _Server | None = None
        self.port: int | None = None

    def start(self, host: str, port: int) -> int:
        """Listen (``OSError`` if the port is taken) and serve; the port bound."""
        httpd = make_server(host, port, self._app, server_class=_Server,  # type: ignore[arg-type]
                            handler_class=_QuietHandler)
        self._httpd = httpd  # type: ignore[assignment]
        threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
        self.port = httpd.server_port
        return self.port

    def shutdown(self) -> None:
        """Stop serving and close the socket; blocks (call it off the loop)."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def families(self) -> list[Metric]:
        """A snapshot from the loop, for a thread other than the loop's."""
        coro = self._snapshot()
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError as exc:  # the loop is closed
            coro.close()
            raise ScrapeFailed("the broker is stopping") from exc
        try:
            return future.result(self._timeout_s)
        except TimeoutError as exc:
            future.cancel()
            log.warning("metrics_scrape_timeout", timeout_s=self._timeout_s)
            raise ScrapeFailed(
                f"the event loop gave no snapshot within {self._timeout_s}s") from exc
        except concurrent.futures.CancelledError as exc:
            raise ScrapeFailed("the broker is stopping") from exc

    def _app(self, environ: dict[str, Any],
             start_response: Callable[..., Any]) -> Iterable[bytes]:
        families: list[Metric] = []
        if environ["REQUEST_METHOD"] == "GET" and environ.get("PATH_INFO") != "/favicon.ico":
            try:
                families = self.families()
            except ScrapeFailed as exc:
                return _plain(start_response, "503 Service Unavailable", str(exc))
            except Exception:  # a fault in a collector: said once here, not on stderr
                log.exception("metrics_scrape_failed")
                return _plain(start_response, "500 Internal Server Error",
                              "the snapshot failed; the broker's log says why")
        app = make_wsgi_app(_Families(families))
        return app(environ, start_response)  # type: ignore[no-any-return]


def _plain(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [f"{text}\n".encode()]
