"""The etcd client's TLS: https:// endpoints, the context built from CA, certificate and
key files, and a real handshake against a local TLS server that answers like etcd's
gateway and requires a client certificate (etcd's --client-cert-auth)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from groupwire.broker.config import BrokerSettings, SettingsError, validate
from groupwire.broker.etcd.client import EtcdClient, EtcdTlsError, _Endpoint, tls_context
from groupwire.broker.etcd.store import EtcdUnavailableError

BOUND_S = 5.0


@dataclass
class Files:
    ca: trustme.CA
    cafile: str
    certfile: str
    keyfile: str
    bundle: str
    """Certificate and key in one file."""


@pytest.fixture
def files(tmp_path: Path) -> Files:
    ca = trustme.CA()
    leaf = ca.issue_cert("broker-0", common_name="broker-0")
    found = Files(ca, str(tmp_path / "ca.pem"), str(tmp_path / "client.pem"),
                  str(tmp_path / "client.key"), str(tmp_path / "bundle.pem"))
    ca.cert_pem.write_to_path(found.cafile)
    leaf.cert_chain_pems[0].write_to_path(found.certfile)
    leaf.private_key_pem.write_to_path(found.keyfile)
    leaf.private_key_and_cert_chain_pem.write_to_path(found.bundle)
    return found


def test_https_endpoints_parse_as_tls_and_http_ones_do_not() -> None:
    assert _Endpoint.parse("https://etcd-0:2379") == _Endpoint("etcd-0", 2379, True)
    assert _Endpoint.parse("https://etcd-0") == _Endpoint("etcd-0", 2379, True)
    assert _Endpoint.parse("http://127.0.0.1:2380") == _Endpoint("127.0.0.1", 2380, False)
    with pytest.raises(ValueError, match="https://host:port"):
        _Endpoint.parse("unix:///run/etcd.sock")


def test_the_context_checks_the_server_and_carries_the_client_certificate(
        files: Files) -> None:
    ctx = tls_context(files.cafile, files.certfile, files.keyfile)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert len(ctx.get_ca_certs()) == 1  # that CA only, not the system's as well
    tls_context(files.cafile, files.bundle)  # the key inside the certificate's file


def test_unusable_files_are_one_line_naming_them(files: Files, tmp_path: Path) -> None:
    with pytest.raises(EtcdTlsError, match=r"etcd CA file .*missing\.pem"):
        tls_context(str(tmp_path / "missing.pem"))
    with pytest.raises(EtcdTlsError, match=r"client certificate .*client\.key"):
        tls_context(files.cafile, files.keyfile, files.keyfile)  # a key is no certificate
    with pytest.raises(EtcdTlsError, match="without its certificate"):
        tls_context(files.cafile, "", files.keyfile)


def test_an_https_client_without_a_context_verifies_with_the_systems_cas() -> None:
    client = EtcdClient(["https://127.0.0.1:2379"])
    assert client._tls is not None and client._tls.verify_mode == ssl.CERT_REQUIRED
    assert EtcdClient(["http://127.0.0.1:2379"])._tls is None


def test_settings_take_https_endpoints_and_etcd_tls_files(files: Files) -> None:
    validate(BrokerSettings(etcd_endpoints="https://a:2379,https://b:2379",
                            etcd_cafile=files.cafile, etcd_certfile=files.certfile,
                            etcd_keyfile=files.keyfile))
    refused = {
        "all http:// or all https://": {"etcd_endpoints": "https://a:2379,http://b:2379"},
        "--etcd-cafile: given, but": {"etcd_endpoints": "http://a:2379",
                                      "etcd_cafile": files.cafile},
        "--etcd-certfile: no such file": {"etcd_endpoints": "https://a:2379",
                                          "etcd_certfile": "/nonexistent.pem"},
        "--etcd-keyfile: needs --etcd-certfile": {"etcd_endpoints": "https://a:2379",
                                                  "etcd_keyfile": files.keyfile},
        "expected http://HOST:PORT or https://": {"etcd_endpoints": "grpc://a:2379"},
    }
    for message, values in refused.items():
        with pytest.raises(SettingsError, match=message):
            validate(BrokerSettings(**values))  # type: ignore[arg-type]


# --- a handshake ---------------------------------------------------------------------------


@dataclass
class Gateway:
    port: int
    peers: list[str]
    """The client certificate's common name, per request answered."""


@pytest.fixture
async def gateway(files: Files) -> AsyncIterator[Gateway]:
    """TLS on 127.0.0.1 with a certificate for it, client certificates required;
    answers every POST with one key-value, as etcd's /v3/kv/range does."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    files.ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    files.ca.configure_trust(server_ctx)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    peers: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                cert = writer.get_extra_info("peercert")
                peers.append(dict(x[0] for x in cert["subject"]).get("commonName", ""))
                body = json.dumps({"header": {"revision": "7"}, "kvs": [{
                    "key": base64.b64encode(b"/k").decode(),
                    "value": base64.b64encode(b"v").decode(),
                    "mod_revision": "7", "create_revision": "7", "version": "1"}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
    yield Gateway(server.sockets[0].getsockname()[1], peers)
    server.close()
    await server.wait_closed()


async def test_mutual_tls_round_trip(files: Files, gateway: Gateway) -> None:
    client = EtcdClient([f"https://127.0.0.1:{gateway.port}"], timeout_s=BOUND_S,
                        tls=tls_context(files.cafile, files.certfile, files.keyfile))
    try:
        kv = await client.get("/k")
        assert kv is not None and kv.value == b"v" and kv.mod_revision == 7
        assert gateway.peers == ["broker-0"]
    finally:
        await client.close()


async def test_without_a_client_certificate_the_server_refuses(
        files: Files, gateway: Gateway) -> None:
    client = EtcdClient([f"https://127.0.0.1:{gateway.port}"], timeout_s=BOUND_S,
                        tls=tls_context(files.cafile))
    try:
        with pytest.raises(EtcdUnavailableError):
            await client.get("/k")
        assert gateway.peers == []
    finally:
        await client.close()


async def test_a_server_from_another_ca_is_refused(gateway: Gateway, files: Files,
                                                   tmp_path: Path) -> None:
    other = trustme.CA()
    other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    client = EtcdClient([f"https://127.0.0.1:{gateway.port}"], timeout_s=BOUND_S,
                        tls=tls_context(str(tmp_path / "other.pem"), files.certfile,
                                        files.keyfile))
    try:
        with pytest.raises(EtcdUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get("/k")
    finally:
        await client.close()
