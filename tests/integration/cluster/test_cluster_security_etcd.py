"""Against a real etcd that speaks only mutual TLS (``--client-cert-auth``, certificates
from trustme): the client's requests and watches over it, a client without a
certificate refused, and the whole first-user path: ``groupwire users add
--etcd-endpoints https://...`` before any broker runs, then a broker of that cluster,
talking TLS to etcd, logs the user in. Skipped without the ``etcd`` binary."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import scramp
import trustme

from groupwire.broker.cluster.keys import user_key
from groupwire.broker.cluster.txn import Put, Txn
from groupwire.broker.config import BrokerSettings
from groupwire.broker.etcd.client import EtcdClient, tls_context
from groupwire.broker.etcd.store import EtcdUnavailableError
from groupwire.broker.server import Broker, StartupError
from tests.conformance.wire import Api, WireConn
from tests.integration.etcd.conftest import _free_port, running_etcd

BOUND_S = 10.0


@dataclass
class TlsEtcd:
    url: str
    cafile: str
    certfile: str
    keyfile: str


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEtcd]:
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd is not on PATH (install etcd 3.4+ to run the etcd TLS tests)")
    d: Path = tmp_path_factory.mktemp("tls-etcd")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(d / "server.pem"))
    server.private_key_pem.write_to_path(str(d / "server.key"))
    client = ca.issue_cert("broker", common_name="broker")
    client.cert_chain_pems[0].write_to_path(str(d / "client.pem"))
    client.private_key_pem.write_to_path(str(d / "client.key"))
    found = TlsEtcd(f"https://127.0.0.1:{_free_port()}", str(d / "ca.pem"),
                    str(d / "client.pem"), str(d / "client.key"))
    with running_etcd(etcd, d, found.url, "--cert-file", str(d / "server.pem"),
                      "--key-file", str(d / "server.key"), "--trusted-ca-file",
                      found.cafile, "--client-cert-auth",
                      context=tls_context(found.cafile, found.certfile, found.keyfile)):
        yield found

def client_of(etcd: TlsEtcd, *, certificate: bool = True) -> EtcdClient:
    tls = tls_context(etcd.cafile, etcd.certfile if certificate else "",
                      etcd.keyfile if certificate else "")
    return EtcdClient([etcd.url], timeout_s=3.0, tls=tls)


async def test_requests_and_watches_over_mutual_tls(tls_etcd: TlsEtcd) -> None:
    client = client_of(tls_etcd)
    try:
        _, revision = await client.get_prefix("/mtls/")
        stream = client.watch("/mtls/", revision + 1)
        put = await client.txn(Txn((), (Put("/mtls/k", b"v"),)))
        assert put.succeeded
        async with asyncio.timeout(BOUND_S):
            events = await anext(stream)  # type: ignore[call-overload]
        assert [(e.kind, e.kv.key, e.kv.value) for e in events] == [("put", "/mtls/k", b"v")]
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await client.close()


async def test_a_client_without_a_certificate_is_refused(tls_etcd: TlsEtcd) -> None:
    client = client_of(tls_etcd, certificate=False)
    try:
        with pytest.raises(EtcdUnavailableError):
            await client.get("/mtls/k")
    finally:
        await client.close()


def broker_settings(etcd: TlsEtcd, data_dir: Path, cluster: str,
                    **more: object) -> BrokerSettings:
    values: dict[str, object] = {
        "port": 0, "metrics_port": -1, "data_dir": data_dir, "node_id": 0,
        "etcd_endpoints": etcd.url, "cluster_name": cluster, "etcd_lease_ttl_ms": 1000,
        "etcd_cafile": etcd.cafile, "etcd_certfile": etcd.certfile,
        "etcd_keyfile": etcd.keyfile, "fsync": "never", "log_format": "json",
        "log_level": "warning",
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "authorizer": "acl", "super_users": "User:admin"}
    values.update(more)
    return BrokerSettings(**values)  # type: ignore[arg-type]


async def scram_login(port: int, user: str, password: str) -> int:
    """The SaslAuthenticate error code of a SCRAM-SHA-512 exchange (0: logged in)."""
    async with asyncio.timeout(BOUND_S):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = WireConn(reader, writer, "mtls")
        try:
            body = await conn.send(Api.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-512"})
            assert body["error_code"] == 0, body
            client = scramp.ScramClient(["SCRAM-SHA-512"], user, password)
            body = await conn.send(Api.SASL_AUTHENTICATE,
                                   {"auth_bytes": client.get_client_first().encode()})
            if body["error_code"] == 0:
                client.set_server_first(body["auth_bytes"].decode())
                body = await conn.send(Api.SASL_AUTHENTICATE,
                                       {"auth_bytes": client.get_client_final().encode()})
            return int(body["error_code"])
        finally:
            await conn.close()


async def test_the_first_user_written_into_etcd_before_any_broker_logs_in(
        tls_etcd: TlsEtcd, tmp_path: Path) -> None:
    cluster = f"c{os.getpid()}"
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "groupwire", "users", "add", "admin", "--etcd-endpoints",
         tls_etcd.url, "--cluster-name", cluster, "--etcd-cafile", tls_etcd.cafile,
         "--etcd-certfile", tls_etcd.certfile, "--etcd-keyfile", tls_etcd.keyfile],
        input="admin-secret\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"of cluster '{cluster}'" in done.stdout
    reader = client_of(tls_etcd)
    try:
        stored = await reader.get(user_key(cluster, "admin"))
    finally:
        await reader.close()
    assert stored is not None and b"admin-secret" not in stored.value
    broker = Broker(broker_settings(tls_etcd, tmp_path / "b0", cluster))
    await broker.start()
    try:
        port = broker.listener_ports["SASL_PLAINTEXT"]
        assert await scram_login(port, "admin", "admin-secret") == 0
        assert await scram_login(port, "admin", "wrong") == 58  # SASL_AUTHENTICATION_FAILED
    finally:
        await broker.close()


async def test_a_broker_without_a_client_certificate_does_not_start(
        tls_etcd: TlsEtcd, tmp_path: Path) -> None:
    broker = Broker(broker_settings(tls_etcd, tmp_path / "b0", "refused", etcd_certfile="",
                                    etcd_keyfile=""))
    with pytest.raises(StartupError, match=r"etcd at https://127\.0\.0\.1"):
        await broker.start()
