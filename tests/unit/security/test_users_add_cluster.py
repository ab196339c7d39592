"""``groupwire users add NAME --etcd-endpoints URL``: the first super user written straight
into a cluster's metadata (an in-memory etcd stands in for the client here; the real
one, over mutual TLS, is in tests/integration/cluster/test_cluster_security_etcd.py)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.cluster.keys import security_prefix, user_key
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.security.cluster_store import ClusterSecurity
from groupwire.broker.security.credentials import CredentialTable, password_matches
from groupwire.broker.security.state import SecurityState
from groupwire.cli.main import build_parser, main
from groupwire.protocol.acls import ScramMechanism


class Etcd:
    """The client the command builds: which endpoints and TLS, and the store behind it."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.made: list[tuple[list[str], Any]] = []

    def client(self, endpoints: list[str], *, tls: Any = None, timeout_s: float = 5.0,
               ) -> MemoryStore:
        self.made.append((endpoints, tls))
        return _Unclosed(self.store)  # type: ignore[return-value]


class _Unclosed:
    """The shared store, whose close() the command's is not (the test reads it after)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def close(self) -> None:
        pass


@pytest.fixture
def etcd(monkeypatch: pytest.MonkeyPatch) -> Etcd:
    found = Etcd()
    monkeypatch.setattr("groupwire.broker.etcd.client.EtcdClient", found.client)
    for env in ("GROUPWIRE_CLUSTER_NAME", "GROUPWIRE_ETCD_CAFILE", "GROUPWIRE_ETCD_CERTFILE",
                "GROUPWIRE_ETCD_KEYFILE"):
        monkeypatch.delenv(env, raising=False)
    return found


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, password: str,
        *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def credentials_in(store: MemoryStore, cluster: str) -> CredentialTable:
    state = SecurityState((), CredentialTable(), (), ())
    asyncio.run(ClusterSecurity(store, cluster, state).load())
    return state.credentials


def keys_in(store: MemoryStore, cluster: str) -> dict[str, bytes]:
    kvs, _ = asyncio.run(store.get_prefix(security_prefix(cluster)))
    return {kv.key: kv.value for kv in kvs}


def test_users_add_writes_the_clusters_metadata(
        etcd: Etcd, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run(capsys, monkeypatch, "admin-secret", "users", "add", "admin",
                         "--etcd-endpoints", "http://127.0.0.1:2379", "--cluster-name", "c")
    assert code == 0, err
    assert "of cluster 'c'" in out
    assert etcd.made == [(["http://127.0.0.1:2379"], None)]
    keys = keys_in(etcd.store, "c")
    assert list(keys) == [user_key("c", "admin")]
    assert b"admin-secret" not in keys[user_key("c", "admin")]
    table = credentials_in(etcd.store, "c")
    creds = table.mechanisms_of("admin")
    assert [c.mechanism for c in creds] == [ScramMechanism.SCRAM_SHA_256,
                                            ScramMechanism.SCRAM_SHA_512]
    assert all(password_matches(c, "admin-secret") for c in creds)
    # one mechanism again, with --json: the other one stays
    code, out, _ = run(capsys, monkeypatch, "new-secret", "users", "add", "admin",
                       "--etcd-endpoints", "http://127.0.0.1:2379", "--cluster-name", "c",
                       "--mechanism", "SCRAM-SHA-512", "--json")
    assert code == 0
    assert json.loads(out) == {"user": "admin", "mechanisms": ["SCRAM-SHA-512"],
                               "iterations": 4096, "offline": True, "data_dir": None,
                               "cluster": "c"}
    sha256, sha512 = credentials_in(etcd.store, "c").mechanisms_of("admin")
    assert password_matches(sha256, "admin-secret") and password_matches(sha512, "new-secret")


def test_the_default_cluster_name_is_the_brokers(
        etcd: Etcd, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, _ = run(capsys, monkeypatch, "pw", "users", "add", "admin",
                     "--etcd-endpoints", "http://127.0.0.1:2379")
    assert code == 0
    assert credentials_in(etcd.store, "groupwire").users() == ["admin"]


def test_bad_etcd_settings_are_one_line_and_ask_no_password(
        etcd: Etcd, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    for argv, message in (
            (["--etcd-endpoints", "http://a:2379", "--etcd-cafile", str(ca)],
             "--etcd-cafile: given, but --etcd-endpoints are not https://"),
            (["--etcd-endpoints", "https://a:2379", "--etcd-cafile", str(ca)],
             "etcd CA file"),
            (["--etcd-endpoints", "tcp://a:2379"], "expected http://HOST:PORT"),
            (["--etcd-endpoints", "http://a:2379", "--cluster-name", "a/b"],
             "--cluster-name: expected a name without '/'")):
        code, _, err = run(capsys, monkeypatch, "pw", "users", "add", "admin", *argv)
        assert code == 1 and err.count("\n") == 1 and message in err, err
    assert etcd.made == []


def test_etcd_endpoints_and_a_data_dir_are_one_or_the_other(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["users", "add", "a", "--data-dir", "d",
                                   "--etcd-endpoints", "http://a:2379"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
