"""Scripted fake brokers on loopback, for SDK routing tests without a cluster.

Each :class:`ScriptedNode` answers ApiVersions and InitProducerId (a producer id of its
own, for an idempotent producer) as a real broker does and every other request from the
test's handler, ``handler(node, request) -> Response`` (may be async);
it records what it was sent. :func:`metadata` builds the Metadata answer a cluster of
such nodes would give.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from groupwire.protocol.codec import decode_request, encode_response
from groupwire.protocol.framing import FrameDecoder, frame
from groupwire.protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
    Request,
    Response,
)

Handler = Callable[["ScriptedNode", Request], "Response | Awaitable[Response]"]


@dataclass(eq=False)
class ScriptedNode:
    node_id: int
    handler: Handler
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def sent(self, kind: type[Request]) -> list[Request]:
        """What this node was sent of one request type, in order."""
        return [r for r in self.requests if isinstance(r, kind)]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    req = decode_request(payload)
                    asyncio.get_running_loop().create_task(
                        self._answer(req.correlation_id, req.request, writer))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _answer(self, cid: int, request: Request, writer: asyncio.StreamWriter) -> None:
        if isinstance(request, ApiVersionsRequest):
            resp: Response = ApiVersionsResponse(
                api_keys=[ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
                          for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
                max_frame_bytes=8 * 1024 * 1024)
        elif isinstance(request, InitProducerIdRequest):
            self.requests.append(request)
            resp = InitProducerIdResponse(producer_id=1000 * self.node_id, producer_epoch=0)
        else:
            self.requests.append(request)
            out = self.handler(self, request)
            resp = await out if inspect.isawaitable(out) else out  # type: ignore[assignment]
        if not writer.is_closing():
            writer.write(frame(encode_response(cid, resp)))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1):
                    await self.server.wait_closed()


def metadata(nodes: list[ScriptedNode], leaders: dict[str, list[int]], *,
             controller_id: int = -1, epochs: dict[tuple[str, int], int] | None = None,
             ) -> MetadataResponse:
    """A cluster's Metadata: ``leaders[topic][p]`` is partition p's leader node id."""
    return MetadataResponse(
        brokers=[MetadataBroker(node_id=n.node_id, host=n.host, port=n.port) for n in nodes],
        cluster_id="scripted", controller_id=controller_id,
        topics=[MetadataTopic(name=t, partitions=[
            MetadataPartition(partition_index=p, leader_id=ld,
                              leader_epoch=(epochs or {}).get((t, p), 0),
                              replica_nodes=[n.node_id for n in nodes],
                              isr_nodes=[n.node_id for n in nodes])
            for p, ld in enumerate(lds)]) for t, lds in leaders.items()])


@contextlib.asynccontextmanager
async def cluster_of(count: int, handler: Handler) -> AsyncIterator[list[ScriptedNode]]:
    """``count`` nodes, ids 1..count, all answering through ``handler``."""
    nodes = [ScriptedNode(i + 1, handler) for i in range(count)]
    try:
        for n in nodes:
            await n.start()
        yield nodes
    finally:
        for n in nodes:
            await n.close()
