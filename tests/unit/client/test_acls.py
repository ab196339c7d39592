"""The SDK's ACL values: names parse as Kafka's tools take them, impossible bindings are
refused where they are made, and filters select as the broker does."""

from __future__ import annotations

import pytest

from groupwire.broker.security.credentials import credential_from_password, credential_from_salted
from groupwire.client.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
    ScramMechanism,
    binding_from_match,
    bindings_from_describe,
    creation,
    delete_filter,
    describe_request,
    parse_operation,
    parse_pattern_type,
    parse_permission,
    parse_resource_type,
    parse_scram_mechanism,
)
from groupwire.client.admin import scram_upsertion
from groupwire.protocol.errors import RemoteProtocolError
from groupwire.protocol.messages import (
    AclDescription,
    DeleteAclsMatchingAcl,
    DescribeAclsResource,
    DescribeAclsResponse,
)


@pytest.mark.parametrize("text", ["read", "Read", "READ", " read ", 3, AclOperation.READ])
def test_operation_names_in_any_case(text: str | int) -> None:
    assert parse_operation(text) is AclOperation.READ


@pytest.mark.parametrize("text", ["ClusterAction", "cluster-action", "CLUSTER_ACTION"])
def test_multi_word_operations_as_kafka_and_as_flags(text: str) -> None:
    assert parse_operation(text) is AclOperation.CLUSTER_ACTION


def test_other_enums_parse_and_concrete_leaves_out_any() -> None:
    assert parse_resource_type("Topic") is ResourceType.TOPIC
    assert parse_pattern_type("prefixed") is PatternType.PREFIXED
    assert parse_permission("deny") is AclPermission.DENY
    assert parse_scram_mechanism("scram-sha-512") is ScramMechanism.SCRAM_SHA_512
    assert parse_scram_mechanism(1) is ScramMechanism.SCRAM_SHA_256
    assert parse_resource_type("any") is ResourceType.ANY
    with pytest.raises(ValueError, match="resource type must be one of TOPIC, GROUP, CLUSTER"):
        parse_resource_type("any", concrete=True)
    with pytest.raises(ValueError, match="pattern type must be one of LITERAL, PREFIXED"):
        parse_pattern_type("match", concrete=True)
    with pytest.raises(ValueError, match="operation must be one of"):
        parse_operation("any", concrete=True)
    assert parse_operation("all", concrete=True) is AclOperation.ALL


@pytest.mark.parametrize("bad", ["reed", "", "unknown", 0, 99])
def test_unknown_names_are_refused_with_the_choices(bad: str | int) -> None:
    with pytest.raises(ValueError, match=r"operation must be one of ANY, ALL, READ"):
        parse_operation(bad)


def test_allow_reads_as_written() -> None:
    b = AclBinding.allow("User:alice", "read", "topic", "orders")
    assert b == AclBinding(ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL),
                           b.entry)
    assert (b.principal, b.host, b.operation, b.permission) == (
        "User:alice", "*", AclOperation.READ, AclPermission.ALLOW)
    assert (b.resource_type, b.resource_name, b.pattern_type) == (
        ResourceType.TOPIC, "orders", PatternType.LITERAL)
    d = AclBinding.deny("User:*", AclOperation.WRITE, ResourceType.GROUP, "team-",
                        pattern=PatternType.PREFIXED, host="10.0.0.1")
    assert d.permission is AclPermission.DENY and d.pattern == ResourcePattern.group(
        "team-", prefixed=True)
    assert str(d) == "User:* DENY WRITE from 10.0.0.1 on GROUP:PREFIXED:team-"
    c = AclBinding.allow("User:admin", "alter", "cluster")
    assert c.pattern == ResourcePattern.cluster() and c.resource_name == "kafka-cluster"


@pytest.mark.parametrize("text", ["transactional-id", "TransactionalId", "TRANSACTIONAL_ID",
                                  5, ResourceType.TRANSACTIONAL_ID])
def test_transactional_ids_are_a_resource_type(text: str | int) -> None:
    assert parse_resource_type(text, concrete=True) is ResourceType.TRANSACTIONAL_ID


def test_transactional_id_bindings_and_idempotent_write() -> None:
    b = AclBinding.allow("User:etl", "write", "transactional-id", "etl-", pattern="prefixed")
    assert b.pattern == ResourcePattern.transactional_id("etl-", prefixed=True)
    assert str(b) == "User:etl ALLOW WRITE from * on TRANSACTIONAL_ID:PREFIXED:etl-"
    assert creation(b).resource_type == 5
    i = AclBinding.allow("User:etl", "idempotent-write", "cluster")
    assert i.operation is AclOperation.IDEMPOTENT_WRITE and creation(i).operation == 12
    with pytest.raises(ValueError, match="needs a name"):
        ResourcePattern.transactional_id("")
    f = AclBindingFilter.of(resource_type="transactional-id", resource_name="etl-app",
                            pattern_type="match")
    assert f.matches(b) and not f.matches(i)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: AclBinding.allow("alice", "read", "topic", "t"), "principal must be TYPE:NAME"),
    (lambda: AclBinding.allow("User:", "read", "topic", "t"), "principal must be TYPE:NAME"),
    (lambda: AclBinding.allow("User:a", "any", "topic", "t"), "operation must be one of"),
    (lambda: AclBinding.allow("User:a", "read", "any", "t"), "resource type must be one of"),
    (lambda: AclBinding.allow("User:a", "read", "topic", ""), "needs a name"),
    (lambda: AclBinding.allow("User:a", "read", "topic"), "needs a resource name"),
    (lambda: AclBinding.allow("User:a", "read", "topic", "t", pattern="match"),
     "pattern type must be one of LITERAL, PREFIXED"),
    (lambda: AclBinding.allow("User:a", "read", "topic", "t", host=""), "host must be"),
    (lambda: AclBinding.allow("User:a", "alter", "cluster", "other"),
     "the cluster resource is LITERAL 'kafka-cluster'"),
    (lambda: ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.PREFIXED),
     "the cluster resource is LITERAL"),
])
def test_impossible_bindings_are_refused_where_made(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_bindings_sort_by_resource_and_are_hashable() -> None:
    a = AclBinding.allow("User:b", "write", "topic", "zeta")
    b = AclBinding.allow("User:a", "read", "topic", "alpha")
    c = AclBinding.allow("User:a", "read", "group", "g")
    assert sorted([a, b, c]) == [b, a, c]  # TOPIC (2) before GROUP (3), then by name
    assert len({a, b, AclBinding.allow("User:b", "write", "topic", "zeta")}) == 2


def test_filters_select_as_the_broker_does() -> None:
    literal = AclBinding.allow("User:a", "read", "topic", "orders")
    wildcard = AclBinding.allow("User:a", "read", "topic", "*")
    prefix = AclBinding.allow("User:a", "read", "topic", "ord", pattern="prefixed")
    other = AclBinding.deny("User:b", "write", "group", "orders", host="10.0.0.1")
    every = [literal, wildcard, prefix, other]

    def selected(f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in every if f.matches(b)]

    assert AclBindingFilter().matches_everything and selected(AclBindingFilter()) == every
    assert selected(AclBindingFilter.of(resource_name="orders")) == [literal, other]
    assert selected(AclBindingFilter.of(resource_type="topic", resource_name="orders",
                                        pattern_type="match")) == [literal, wildcard, prefix]
    assert selected(AclBindingFilter.of(pattern_type="prefixed")) == [prefix]
    assert selected(AclBindingFilter.of(principal="User:b")) == [other]
    assert selected(AclBindingFilter.of(host="10.0.0.1", permission="deny")) == [other]
    assert selected(AclBindingFilter.of(operation="READ", resource_type="GROUP")) == []
    for b in every:
        assert selected(b.to_filter()) == [b]
    with pytest.raises(ValueError, match="principal must be TYPE:NAME"):
        AclBindingFilter.of(principal="alice")
    assert str(AclBindingFilter.of(resource_type="topic", principal="User:a")) == (
        "resource-type=TOPIC principal=User:a")


def test_wire_round_trip() -> None:
    b = AclBinding.deny("User:a", "describe", "group", "g-", pattern="prefixed", host="h")
    c = creation(b)
    assert (c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
            c.operation, c.permission_type) == (3, "g-", 4, "User:a", "h", 8, 2)
    resp = DescribeAclsResponse(resources=[DescribeAclsResource(
        resource_type=3, resource_name="g-", pattern_type=4,
        acls=[AclDescription(principal="User:a", host="h", operation=8, permission_type=2)])])
    assert bindings_from_describe(resp) == [b]
    assert binding_from_match(DeleteAclsMatchingAcl(
        resource_type=3, resource_name="g-", pattern_type=4, principal="User:a", host="h",
        operation=8, permission_type=2)) == b
    f = AclBindingFilter.of(resource_type="topic", operation="read")
    r = describe_request(f)
    assert (r.resource_type_filter, r.resource_name_filter, r.pattern_type_filter,
            r.principal_filter, r.host_filter, r.operation, r.permission_type) == (
        2, None, 1, None, None, 3, 1)
    assert delete_filter(f).pattern_type_filter == 1
    with pytest.raises(RemoteProtocolError, match="impossible ACL binding"):
        binding_from_match(DeleteAclsMatchingAcl(resource_type=1, resource_name="x",
                                                 pattern_type=3, principal="User:a",
                                                 host="*", operation=3, permission_type=3))


@pytest.mark.parametrize("mechanism", list(ScramMechanism)[1:])
def test_upsertion_carries_what_the_broker_derives_from_the_password(
        mechanism: ScramMechanism) -> None:
    """The client's PBKDF2 is the broker's: a credential made from the upsertion is the
    one the broker would make from the password itself (which never travels)."""
    u = scram_upsertion("alice", "s3cret-ü-\ufb01", mechanism.sasl_name, 4096)
    assert u.mechanism == mechanism and u.iterations == 4096 and len(u.salt) == 32
    assert b"s3cret" not in u.salted_password
    ours = credential_from_salted(mechanism, u.salt, u.salted_password, 4096)
    theirs = credential_from_password(mechanism, "s3cret-ü-\ufb01", 4096, salt=u.salt)
    assert ours == theirs
    assert scram_upsertion("alice", "x", mechanism, 4096).salt != u.salt  # fresh salt
    with pytest.raises(ValueError, match="empty"):
        scram_upsertion("alice", "", mechanism, 4096)
