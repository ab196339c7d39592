"""The chaos fault ``etcd-half-open``: one broker reaches etcd through this TCP proxy,
and the fault turns every connection open through it half-open.

A half-open connection is what a network partition or a dead NAT entry leaves behind:
the broker's side stays open, its writes are taken, and nothing ever comes back, nor
does a FIN or a reset. Connections opened during the fault are just as silent; after
:meth:`EtcdProxy.heal` new connections work again, while the ones the fault caught stay
silent until the proxy closes (as they would until TCP gave up, many minutes later).
The broker must notice on its own, by its deadlines, that its watch and its kept-alive
connections are dead (docs/design/cluster.md, "Liveness and fencing").
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

READ_SIZE = 65536


@dataclass(eq=False)
class _Pipe:
    """One proxied connection: the broker's side and etcd's."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    silent: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class EtcdProxy:
    """Listens on 127.0.0.1 and forwards each connection to ``target``."""

    def __init__(self, target_host: str, target_port: int, *, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._port = port
        self._server: asyncio.Server | None = None
        self._pipes: set[_Pipe] = set()
        self._half_open = False
        self.caught = 0
        """Connections the fault left half-open (for the run's log)."""

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port)

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        return len(self._pipes)

    def go_half_open(self) -> None:
        """Every open connection, and each one opened until :meth:`heal`, goes silent."""
        self._half_open = True
        for pipe in self._pipes:
            if not pipe.silent:
                pipe.silent = True
                self.caught += 1

    def heal(self) -> None:
        """New connections work again; the silent ones stay silent."""
        self._half_open = False

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            self._drop(pipe)
        tasks = [t for pipe in self._pipes for t in pipe.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pipes.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        pipe = _Pipe(writer, up_writer, silent=self._half_open)
        if pipe.silent:
            self.caught += 1
        self._pipes.add(pipe)
        pipe.tasks = [asyncio.ensure_future(self._pump(pipe, reader, up_writer)),
                      asyncio.ensure_future(self._pump(pipe, up_reader, writer))]

    async def _pump(self, pipe: _Pipe, source: asyncio.StreamReader,
                    sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(READ_SIZE):
                if pipe.silent:
                    continue  # taken, never delivered: the far side has vanished
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        if pipe.silent:
            return  # a half-open connection is never closed from this side
        self._drop(pipe)

    def _drop(self, pipe: _Pipe) -> None:
        for w in (pipe.client, pipe.upstream):
            with contextlib.suppress(Exception):
                w.close()
        for task in pipe.tasks:
            if task is not asyncio.current_task():
                task.cancel()

