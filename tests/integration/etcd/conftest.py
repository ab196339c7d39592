"""A real etcd on free loopback ports, and the stores the contract tests run against:
the in-memory twin and the client on that etcd, behind one harness."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from groupwire.broker.etcd import EtcdClient, MemoryStore, MetadataStore

READY_WITHIN_S = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running_etcd(etcd: str, data_dir: Path, client: str, *extra: str,
                 context: ssl.SSLContext | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """An etcd serving ``client`` (its log in ``data_dir``), healthy within
    READY_WITHIN_S, killed and reaped on exit; its process, for tests that freeze it.
    ``extra``: more flags (TLS files); ``context``: what the health check connects with."""
    peer = f"http://127.0.0.1:{_free_port()}"
    log = (data_dir / "etcd.log").open("wb")
    proc = subprocess.Popen(
        [etcd, "--data-dir", str(data_dir / "data"), "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer,
         "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}",
         "--election-timeout", "500", "--heartbeat-interval", "50", *extra],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while True:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1,
                                            context=context) as answer:
                    if b'"true"' in answer.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"etcd did not become healthy; see {data_dir / 'etcd.log'}")
            time.sleep(0.05)  # readiness poll at start-up only
        yield proc
    finally:
        proc.kill()
        proc.wait()
        log.close()


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd is not on PATH (install etcd 3.4+ to run the etcd contract tests)")
    data_dir: Path = tmp_path_factory.mktemp("etcd")
    client = f"http://127.0.0.1:{_free_port()}"
    with running_etcd(etcd, data_dir, client):
        yield client


@dataclass
class Harness:
    store: MetadataStore
    prefix: str
    memory: MemoryStore | None

    def let_time_pass(self, seconds: float) -> None:
        """The twin's clock moves on; etcd's moves by itself while the test waits."""
        if self.memory is not None:
            self.memory.advance(seconds)


@pytest.fixture(params=["memory", "etcd"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    prefix = f"/test/{uuid.uuid4().hex[:8]}/"
    if request.param == "memory":
        memory = MemoryStore()
        yield Harness(memory, prefix, memory)
        await memory.close()
        return
    endpoint: str = request.getfixturevalue("etcd_endpoint")
    client = EtcdClient([endpoint], timeout_s=5.0)
    yield Harness(client, prefix, None)
    await client.close()
