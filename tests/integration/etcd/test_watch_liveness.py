"""A real etcd that stops answering: frozen (SIGSTOP), or reached through a proxy whose
connections go half-open. The broker's watch never hangs on it: a silent stream is
checked, dropped and resumed on the next endpoint, and while the image cannot be
confirmed current the broker is fenced (issue 24)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from groupwire.broker.cluster.keys import BrokerInfo, broker_key, encode_broker
from groupwire.broker.cluster.txn import Put, Txn, WatchEvent
from groupwire.broker.clustering import ImageWatcher, Registration
from groupwire.broker.etcd import EtcdClient
from groupwire.cli.chaos.etcd_proxy import EtcdProxy
from tests.integration.etcd.conftest import _free_port, running_etcd

WATCH_TIMEOUT_S = 0.3
REQUEST_TIMEOUT_S = 0.5
TTL_S = 2
BOUND_S = 20.0
"""Bounds each wait so a regression fails rather than hangs; never asserted."""


def _etcd() -> str:
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd is not on PATH (Debian's etcd-server package)")
    return etcd


def info(node_id: int) -> BrokerInfo:
    return BrokerInfo(node_id, "127.0.0.1", 9000 + node_id, None, "a")


async def _next_events(stream: AsyncIterator[list[WatchEvent]]) -> list[WatchEvent]:
    async with asyncio.timeout(BOUND_S):
        async for events in stream:
            if events:
                return events
    raise AssertionError("the watch ended")


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(BOUND_S):
        while not predicate():
            await asyncio.sleep(0.05)  # polls state other tasks change


async def test_a_watch_through_half_open_connections_fails_over(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with running_etcd(_etcd(), tmp_path, url):
        proxy = EtcdProxy("127.0.0.1", int(url.rsplit(":", 1)[1]))
        await proxy.start()
        client = EtcdClient([proxy.url, url], timeout_s=REQUEST_TIMEOUT_S,
                            watch_timeout_s=WATCH_TIMEOUT_S)
        direct = EtcdClient([url])
        try:
            await client.txn(Txn((), (Put("/t/a", b"1"),)))  # a kept connection via the proxy
            _, revision = await client.get_prefix("/t/")
            stream = client.watch("/t/", revision + 1)
            first = asyncio.ensure_future(_next_events(stream))
            # the kept request connection and the watch's stream both go through it
            await _until(lambda: proxy.connections >= 2)
            proxy.go_half_open()
            await direct.txn(Txn((), (Put("/t/b", b"2"),)))
            events = await first
            assert [(e.kv.key, e.kv.value) for e in events] == [("/t/b", b"2")]
            assert proxy.caught >= 1
            # Requests move on too: the kept connection through the proxy is silent.
            kv = await client.get("/t/b")
            assert kv is not None and kv.value == b"2"
            await stream.aclose()  # type: ignore[attr-defined]
        finally:
            await client.close()
            await direct.close()
            await proxy.close()


async def test_a_frozen_etcd_fences_the_broker_until_it_answers_again(
        tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with running_etcd(_etcd(), tmp_path, url) as proc:
        client = EtcdClient([url], timeout_s=REQUEST_TIMEOUT_S,
                            watch_timeout_s=WATCH_TIMEOUT_S)
        watcher = ImageWatcher(client, "c")
        membership = Registration(client, "c", info(1), TTL_S, image=watcher)
        membership.on_registered.append(watcher.resync)
        watcher.on_confirmed.append(membership.image_confirmed)
        fences: list[bool] = []
        membership.on_fenced.append(lambda: fences.append(True))
        membership.on_unfenced.append(lambda: fences.append(False))
        try:
            await membership.start()
            watcher.start()
            async with asyncio.timeout(BOUND_S):
                await watcher.ready
            await _until(lambda: not membership.fenced)
            fences.clear()

            os.kill(proc.pid, signal.SIGSTOP)
            try:
                await _until(lambda: membership.fenced and fences[:1] == [True])
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            # etcd answers again: the broker catches up (registering again if its lease
            # went) and sees what was written since.
            other = EtcdClient([url])
            await other.txn(Txn((), (Put(broker_key("c", 2), encode_broker(info(2))),)))
            await other.close()
            async with asyncio.timeout(BOUND_S):
                await watcher.until(lambda im: 2 in im.brokers)
            await _until(lambda: not membership.fenced)
            assert fences[-1] is False
        finally:
            await watcher.close()
            await membership.close()
            await client.close()
