"""A broker process with one SASL_SSL listener and ACLs on, as an operator starts one:
certificates from trustme, users written into the data dir before it starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

from tests.integration.brokerproc import BrokerProcess

from .conftest import write_users


@dataclass(frozen=True)
class SecuredBroker:
    proc: BrokerProcess
    cafile: Path

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def flags(self, user: str, mechanism: str = "SCRAM-SHA-512") -> list[str]:
        """The CLI flags that reach it as ``user`` (the password: the environment)."""
        return ["--bootstrap", self.bootstrap, "--security-protocol", "SASL_SSL",
                "--sasl-mechanism", mechanism, "--sasl-username", user,
                "--ssl-cafile", str(self.cafile)]


def start_secured_broker(directory: Path, users: dict[str, str], super_user: str,
                         *flags: str) -> SecuredBroker:
    """Start it in ``directory``: ``users`` (name -> password) hold both SCRAM
    credentials, ``super_user`` bypasses the ACLs (there are none)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    (directory / "broker.pem").write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
    (directory / "broker.key").write_bytes(cert.private_key_pem.bytes())
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    data = directory / "data"
    write_users(data, users)
    proc = BrokerProcess(
        data, "--listeners", "SASL_SSL://127.0.0.1:0",
        "--ssl-certfile", str(directory / "broker.pem"),
        "--ssl-keyfile", str(directory / "broker.key"),
        "--authorizer", "acl", "--super-users", f"User:{super_user}", *flags).start()
    return SecuredBroker(proc, directory / "ca.pem")
