"""kafka-python's ACL admin calls against a broker that checks ACLs.

A broker of its own for this module: ``--authorizer acl``, with the anonymous principal
a super user so that the test's own PLAINTEXT clients are let through, as Kafka's
``super.users=User:ANONYMOUS`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.brokerproc import BrokerProcess
from tests.kafka.conftest import FAST_GROUPS

kafka = pytest.importorskip("kafka", reason="kafka-python is in the dev extra")

from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import (  # noqa: E402
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import NoError  # noqa: E402


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("kafka-acl-broker")
    broker = BrokerProcess(data_dir, *FAST_GROUPS, "--authorizer", "acl",
                           "--super-users", "User:ANONYMOUS", "--log-level", "info").start()
    yield broker
    broker.kill()


@pytest.fixture
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def _filter(resource_type: ResourceType, resource: str,
            pattern: ACLResourcePatternType = ACLResourcePatternType.ANY) -> ACLFilter:
    return ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                     permission_type=ACLPermissionType.ANY,
                     resource_pattern=ResourcePatternFilter(resource_type, resource, pattern))


def _key(acl: ACL) -> tuple[object, ...]:
    pattern = acl.resource_pattern
    return (acl.principal, acl.host, acl.operation, acl.permission_type,
            pattern.resource_type, pattern.resource_name, pattern.pattern_type)


def test_acls_are_created_described_and_deleted(admin: KafkaAdminClient, name: str) -> None:
    acls, error = admin.describe_acls(_filter(ResourceType.TOPIC, name))
    assert (acls, error) == ([], NoError)

    read = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
               permission_type=ACLPermissionType.ALLOW,
               resource_pattern=ResourcePattern(ResourceType.TOPIC, name))
    deny = ACL(principal="User:mallory", host="10.0.0.1", operation=ACLOperation.WRITE,
               permission_type=ACLPermissionType.DENY,
               resource_pattern=ResourcePattern(ResourceType.TOPIC, name))
    group = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
                permission_type=ACLPermissionType.ALLOW,
                resource_pattern=ResourcePattern(ResourceType.GROUP, f"g-{name}",
                                                 ACLResourcePatternType.PREFIXED))
    created = admin.create_acls([read, deny, group])
    assert created["failed"] == []
    assert len(created["succeeded"]) == 3

    acls, error = admin.describe_acls(_filter(ResourceType.TOPIC, name))
    assert error is NoError
    assert sorted(map(_key, acls)) == sorted(map(_key, [read, deny]))
    acls, error = admin.describe_acls(
        _filter(ResourceType.GROUP, f"g-{name}", ACLResourcePatternType.PREFIXED))
    assert [_key(a) for a in acls] == [_key(group)]

    # a filter naming one principal removes only that principal's bindings
    only_alice = ACLFilter(principal="User:alice", host=None, operation=ACLOperation.ANY,
                           permission_type=ACLPermissionType.ANY,
                           resource_pattern=ResourcePatternFilter(
                               ResourceType.TOPIC, name, ACLResourcePatternType.LITERAL))
    [(_, matched, error)] = admin.delete_acls([only_alice])
    assert error is NoError
    assert [_key(a) for a in matched] == [_key(read)]
    acls, _ = admin.describe_acls(_filter(ResourceType.TOPIC, name))
    assert [_key(a) for a in acls] == [_key(deny)]

    results = admin.delete_acls([_filter(ResourceType.TOPIC, name),
                                 _filter(ResourceType.GROUP, f"g-{name}")])
    assert [sorted(map(_key, matched)) for _, matched, _ in results] == [
        [_key(deny)], [_key(group)]]
    assert admin.describe_acls(_filter(ResourceType.ANY, name))[0] == []
