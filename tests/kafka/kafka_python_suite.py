"""Run kafka-python's own integration tests against a groupwire broker.

kafka-python's PyPI sdist carries its test suite; ``test/integration`` runs against an
external broker when ``KAFKA_URI`` (``kafka://host:port``) is set, with ``KAFKA_VERSION``
telling it which broker release to expect (its tests skip what that release lacks). The
sdist leaves out two modules that suite imports, so this script writes its own small
stand-ins for them (``_SHIMS``), and points ``KAFKA_ROOT`` (a Kafka install the fixtures
check for, never used for an external broker) at the sdist; nothing of the suite itself
is changed. The suite imports the sdist's own copy of kafka-python, the pinned version.

    groupwire broker --port 0 --data-dir /tmp/gw-kp ...SUITE_BROKER_FLAGS...
    python -m tests.kafka.kafka_python_suite --bootstrap 127.0.0.1:PORT [pytest args...]

prints the suite's outcome and exits 0 only when nothing failed. ``DESELECTED`` lists
the tests not run, each with the Kafka feature groupwire does not serve.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

KAFKA_PYTHON: Final = "3.0.12"
SUITE_TIMEOUT_S: Final = 600

_ADMIN: Final = "test/integration/test_admin_integration.py"
_PRODUCER: Final = "test/integration/test_producer_integration.py"

SUITE_BROKER_FLAGS: Final = (
    # its brokers have an authorizer that lets everyone through where no ACL is found
    # (allow.everyone.if.no.acl.found); here the anonymous principal is a super user,
    # which lets the suite's PLAINTEXT clients through alike
    "--authorizer", "acl", "--super-users", "User:ANONYMOUS",
    # auto.create.topics.enable (Kafka's default: some tests produce to topics nobody
    # made) and num.partitions=4 (its fixture's default)
    "--auto-create-topics", "--num-partitions", "4",
    # its brokers' group settings: sessions down to 1 s (test_group asks for 3 s, under
    # Kafka's default 6 s floor) and no initial rebalance delay
    "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0",
)
"""``groupwire broker`` flags that make it the broker the suite expects."""

DESELECTED: Final[dict[str, str]] = {
    # SASL and TLS: these start brokers of their own (SASL listeners with SCRAM users made
    # through Kafka's scripts; a JKS keystore made with keytool); an external broker cannot
    # be asked for that. groupwire's SASL and TLS are tested by tests/integration/security.
    "test/integration/test_sasl_integration.py":
        "spawns its own Kafka broker (SASL listener, SCRAM users via kafka-configs.sh)",
    "test/integration/test_ssl_integration.py":
        "spawns its own Kafka broker (JKS keystore via keytool)",
    # DeleteRecords (API 21): groupwire trims a log by retention only
    f"{_ADMIN}::test_delete_records": "DeleteRecords (API 21) is not served",
    f"{_ADMIN}::test_delete_records_with_errors": "DeleteRecords (API 21) is not served",
    # log directories: a groupwire broker has one data directory and no API over it
    f"{_ADMIN}::test_describe_log_dirs": "DescribeLogDirs (API 35) is not served",
    f"{_ADMIN}::test_alter_replica_log_dirs": "AlterReplicaLogDirs (API 34) is not served",
    # groupwire places replicas itself (its controller), nobody reassigns them by hand
    f"{_ADMIN}::test_alter_partition_reassignments":
        "AlterPartitionReassignments (API 45) is not served",
    f"{_ADMIN}::test_list_partition_reassignments":
        "ListPartitionReassignments (API 46) is not served",
    # every topic takes the broker's settings: DescribeConfigs says read_only=true for a
    # topic's retention.bytes, where Kafka says false (alterable per topic)
    f"{_ADMIN}::test_describe_configs_topic_resource_returns_configs":
        "per-topic configs (AlterConfigs on a TOPIC resource) are not served",
    # likewise for the broker: every config is read_only=true, where Kafka before 4.0 says
    # false for advertised.listeners (alterable per broker at run time). That the entry
    # is there at all is asked by tests/kafka/test_kafka_python.py.
    f"{_ADMIN}::test_describe_configs_broker_resource_returns_configs":
        "dynamic broker configs (AlterConfigs on a BROKER resource) are not served",
    # its transaction passes; its last check reads the committed offset's leader epoch
    # back, which no commit keeps (OffsetCommit's neither): OffsetFetch answers -1
    f"{_PRODUCER}::test_transactional_producer_offsets":
        "committed leader epochs (KIP-320) are not stored",
}
"""Test id (file, or file::test) -> why it is not run against groupwire."""


_SERVICE_SHIM: Final = '''"""Written by groupwire's kafka_python_suite: the sdist lacks this
module. Only the external-broker path is supported; spawning a Kafka broker is not."""


class ExternalService:
    def __init__(self, host, port):
        self.host = host
        self.port = port

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("kafka_python_suite runs against an external broker only")
'''

_SHIMS: Final = {
    "test/__init__.py": "",  # makes `test` this suite's package, not the stdlib's
    "test/service.py": _SERVICE_SHIM,
}


def fetch_sdist(work: Path, version: str = KAFKA_PYTHON) -> Path:
    """kafka-python's sdist unpacked under ``work`` (downloaded once), with the shims."""
    root = work / f"kafka_python-{version}"
    if not (root / "test" / "integration").is_dir():
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary",
                        ":all:", "--no-deps", f"kafka-python=={version}", "-d", str(work)],
                       check=True, timeout=300)
        [archive] = work.glob(f"kafka_python-{version}.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
    for relative, text in _SHIMS.items():
        path = root / relative
        if not path.exists():
            path.write_text(text)
    return root


def broker_version(bootstrap: str) -> str:
    """The Kafka release kafka-python infers from the broker's ApiVersions ("2.4.0")."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        version = admin._manager.broker_version  # what every client of the suite will see
    finally:
        admin.close()
    return ".".join(str(part) for part in (*version, 0, 0)[:3])


@dataclass
class Outcome:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    returncode: int = 0

    @property
    def ok(self) -> bool:
        """pytest exited 0 (no failure, no collection or usage error) having passed some."""
        return self.returncode == 0 and not self.failed and bool(self.passed)

    def summary(self) -> str:
        return (f"{len(self.passed)} passed, {len(self.failed)} failed, "
                f"{len(self.skipped)} skipped")


def run_suite(root: Path, bootstrap: str, *pytest_args: str,
              kafka_version: str | None = None) -> Outcome:
    """Run ``test/integration`` of the unpacked sdist at ``root`` against ``bootstrap``."""
    version = kafka_version or broker_version(bootstrap)
    junit = root / "groupwire-junit.xml"
    junit.unlink(missing_ok=True)
    env = {**os.environ, "KAFKA_URI": f"kafka://{bootstrap}", "KAFKA_VERSION": version,
           "KAFKA_ROOT": str(root)}
    deselect = [arg for test_id in DESELECTED for arg in ("--deselect", test_id)]
    cmd = [sys.executable, "-m", "pytest", "test/integration", "-p", "no:cacheprovider",
           # the sdist's addopts need pytest-timeout; the whole run is bounded here instead
           "-o", "addopts=", "-o", "log_level=WARNING", "-q", "-rfE",
           f"--junitxml={junit}", *deselect, *pytest_args]
    done = subprocess.run(cmd, cwd=root, env=env, timeout=SUITE_TIMEOUT_S, check=False)
    outcome = Outcome(returncode=done.returncode)
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            test_id = f"{case.get('classname')}::{case.get('name')}"
            if case.find("failure") is not None or case.find("error") is not None:
                outcome.failed.append(test_id)
            elif case.find("skipped") is not None:
                outcome.skipped.append(test_id)
            else:
                outcome.passed.append(test_id)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="host:port of a groupwire broker")
    parser.add_argument("--work", type=Path, default=Path("/tmp/kafka-python-suite"),
                        help="where the sdist is downloaded and unpacked")
    parser.add_argument("--kafka-version", help="KAFKA_VERSION (default: as inferred)")
    args, pytest_args = parser.parse_known_args(argv)
    root = fetch_sdist(args.work)
    outcome = run_suite(root, args.bootstrap, *pytest_args, kafka_version=args.kafka_version)
    print(f"kafka-python {KAFKA_PYTHON} integration suite: {outcome.summary()}")
    for test_id in outcome.failed:
        print(f"  FAILED {test_id}")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
