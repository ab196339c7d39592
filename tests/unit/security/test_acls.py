"""The authorizer's decisions and the ACL filters, as Kafka's StandardAuthorizer has them."""

from __future__ import annotations

import pytest

from groupwire.broker.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Authorizer,
    ResourcePattern,
    binding_from_codes,
    binding_problem,
    filter_from_codes,
    filter_problem,
)
from groupwire.protocol.acls import (
    CLUSTER_NAME,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TX = ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
Op, Perm = AclOperation, AclPermission
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(rtype: ResourceType, name: str, op: AclOperation, *, principal: str = ALICE,
        host: str = "*", perm: AclPermission = Perm.ALLOW,
        pattern: PatternType = LIT) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern),
                      AccessControlEntry(principal, host, op, perm))


def flt(rtype: ResourceType = ResourceType.ANY, name: str | None = None,
        pattern: PatternType = PatternType.ANY, principal: str | None = None,
        host: str | None = None, op: AclOperation = Op.ANY,
        perm: AclPermission = Perm.ANY) -> AclBindingFilter:
    return AclBindingFilter(rtype, name, pattern, principal, host, op, perm)


# --- decisions ----------------------------------------------------------------------


def test_no_acl_means_deny() -> None:
    auth = Authorizer()
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    auth = Authorizer([acl(T, "other", Op.READ)])
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")


def test_literal_allow_is_exact_in_name_type_principal_and_operation() -> None:
    auth = Authorizer([acl(T, "orders", Op.READ)])
    assert auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "orders")
    assert not auth.authorize(BOB, HOST, Op.READ, T, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, G, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders2")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "order")


def test_deny_wins_over_allow() -> None:
    auth = Authorizer([acl(T, "orders", Op.READ),
                       acl(T, "orders", Op.READ, perm=Perm.DENY, host=HOST)])
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert auth.authorize(ALICE, "10.0.0.2", Op.READ, T, "orders")  # the deny is host-bound


def test_deny_all_denies_every_operation_but_deny_read_not_describe() -> None:
    auth = Authorizer([acl(T, "*", Op.ALL), acl(T, "secret", Op.ALL, perm=Perm.DENY)])
    assert auth.authorize(ALICE, HOST, Op.WRITE, T, "orders")
    for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE):
        assert not auth.authorize(ALICE, HOST, op, T, "secret")
    auth = Authorizer([acl(T, "orders", Op.ALL), acl(T, "orders", Op.READ, perm=Perm.DENY)])
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders")
    assert auth.authorize(ALICE, HOST, Op.WRITE, T, "orders")


def test_wildcard_principal_host_and_resource() -> None:
    auth = Authorizer([acl(G, "*", Op.READ, principal="User:*", host="*")])
    assert auth.authorize(ALICE, HOST, Op.READ, G, "any-group")
    assert auth.authorize(BOB, "192.168.1.1", Op.READ, G, "another")
    assert not auth.authorize(BOB, HOST, Op.READ, T, "any-group")
    host_bound = Authorizer([acl(G, "g", Op.READ, host=HOST)])
    assert host_bound.authorize(ALICE, HOST, Op.READ, G, "g")
    assert not host_bound.authorize(ALICE, "10.0.0.2", Op.READ, G, "g")


def test_wildcard_deny_applies_to_every_principal() -> None:
    auth = Authorizer([acl(T, "orders", Op.WRITE),
                       acl(T, "orders", Op.WRITE, principal="User:*", perm=Perm.DENY)])
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "orders")


def test_prefixed() -> None:
    auth = Authorizer([acl(T, "team-a.", Op.WRITE, pattern=PRE),
                       acl(T, "team-a.secret", Op.WRITE, pattern=PRE, perm=Perm.DENY),
                       acl(T, "t", Op.READ, pattern=PRE)])
    assert auth.authorize(ALICE, HOST, Op.WRITE, T, "team-a.orders")
    assert auth.authorize(ALICE, HOST, Op.WRITE, T, "team-a.")  # the prefix itself
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "team-a.secrets")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "team-b.orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "team-a")
    assert auth.authorize(ALICE, HOST, Op.READ, T, "team-b.orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, G, "team-a.orders")


def test_literal_star_is_not_a_prefix_and_prefixed_star_is_literal_text() -> None:
    auth = Authorizer([acl(T, "*", Op.READ, pattern=PRE)])
    assert auth.authorize(ALICE, HOST, Op.READ, T, "*x")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_alter_imply_describe(granted: AclOperation) -> None:
    auth = Authorizer([acl(T, "orders", granted)])
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders")


@pytest.mark.parametrize("granted", [Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS])
def test_other_operations_do_not_imply_describe(granted: AclOperation) -> None:
    auth = Authorizer([acl(T, "orders", granted)])
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders")


def test_describe_implies_nothing_and_alter_configs_implies_describe_configs() -> None:
    auth = Authorizer([acl(T, "orders", Op.DESCRIBE), acl(T, "orders", Op.ALTER_CONFIGS)])
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, T, "orders")


def test_implied_describe_is_denied_by_a_describe_deny() -> None:
    auth = Authorizer([acl(T, "orders", Op.READ),
                       acl(T, "orders", Op.DESCRIBE, perm=Perm.DENY)])
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders")
    assert auth.authorize(ALICE, HOST, Op.READ, T, "orders")


def test_all_allows_every_operation() -> None:
    auth = Authorizer([acl(C, CLUSTER_NAME, Op.ALL)])
    for op in (Op.CREATE, Op.DESCRIBE, Op.ALTER, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS):
        assert auth.authorize(ALICE, HOST, op, C, CLUSTER_NAME)


def test_super_users_bypass_everything_even_a_deny() -> None:
    auth = Authorizer([acl(T, "orders", Op.ALL, principal="User:admin", perm=Perm.DENY)],
                      super_users=frozenset({"User:admin"}))
    assert auth.is_super_user("User:admin")
    assert not auth.is_super_user(ALICE)
    assert auth.authorize("User:admin", HOST, Op.WRITE, T, "orders")
    assert auth.authorize("User:admin", HOST, Op.DELETE, G, "anything")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "orders")


def test_many_bindings_index() -> None:
    bindings = [acl(T, f"topic-{i}", Op.READ, principal=f"User:u{i}") for i in range(3000)]
    bindings += [acl(G, f"team-{i}.", Op.READ, principal=f"User:u{i}", pattern=PRE)
                 for i in range(3000)]
    auth = Authorizer(bindings)
    assert auth.authorize("User:u1234", HOST, Op.READ, T, "topic-1234")
    assert not auth.authorize("User:u1234", HOST, Op.READ, T, "topic-1235")
    assert auth.authorize("User:u77", HOST, Op.READ, G, "team-77.x")
    assert not auth.authorize("User:u77", HOST, Op.READ, G, "team-78.x")


def test_transactional_ids_match_like_the_other_resources() -> None:
    auth = Authorizer([acl(TX, "orders-app", Op.WRITE), acl(TX, "etl.", Op.DESCRIBE, pattern=PRE),
                       acl(TX, "etl.secret", Op.ALL, perm=Perm.DENY)])
    assert auth.authorize(ALICE, HOST, Op.WRITE, TX, "orders-app")
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, TX, "orders-app")  # WRITE implies it
    assert not auth.authorize(ALICE, HOST, Op.WRITE, TX, "orders-app-2")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "orders-app")  # another type
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, TX, "etl.daily")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, TX, "etl.daily")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, TX, "etl.secret")


ANY_CASES = [
    ([], False),
    ([acl(T, "orders", Op.WRITE)], True),
    ([acl(T, "ord", Op.WRITE, pattern=PRE)], True),
    ([acl(T, "*", Op.WRITE)], True),
    ([acl(T, "orders", Op.ALL)], True),
    ([acl(T, "orders", Op.WRITE, principal="User:*")], True),
    ([acl(T, "orders", Op.WRITE, host=HOST)], True),
    ([acl(T, "orders", Op.WRITE, host="10.9.9.9")], False),  # another host's
    ([acl(T, "orders", Op.WRITE, principal=BOB)], False),
    ([acl(T, "orders", Op.READ)], False),  # nothing implies WRITE
    ([acl(G, "orders", Op.WRITE)], False),  # another resource type
    ([acl(C, CLUSTER_NAME, Op.WRITE)], False),
    # a DENY that covers every ALLOW whole
    ([acl(T, "orders", Op.WRITE), acl(T, "orders", Op.WRITE, perm=Perm.DENY)], False),
    ([acl(T, "orders", Op.WRITE), acl(T, "or", Op.WRITE, perm=Perm.DENY, pattern=PRE)], False),
    ([acl(T, "ord", Op.WRITE, pattern=PRE), acl(T, "o", Op.ALL, perm=Perm.DENY, pattern=PRE)],
     False),
    ([acl(T, "orders", Op.WRITE), acl(T, "*", Op.WRITE, perm=Perm.DENY)], False),
    ([acl(T, "*", Op.WRITE), acl(T, "*", Op.WRITE, perm=Perm.DENY, principal="User:*")], False),
    # ... and DENYs that leave some name allowed
    ([acl(T, "orders", Op.WRITE), acl(T, "orders2", Op.WRITE, perm=Perm.DENY)], True),
    ([acl(T, "ord", Op.WRITE, pattern=PRE), acl(T, "ord", Op.WRITE, perm=Perm.DENY)], True),
    ([acl(T, "ord", Op.WRITE, pattern=PRE), acl(T, "orde", Op.WRITE, perm=Perm.DENY,
                                                 pattern=PRE)], True),
    ([acl(T, "*", Op.WRITE), acl(T, "o", Op.WRITE, perm=Perm.DENY, pattern=PRE)], True),
    ([acl(T, "orders", Op.WRITE), acl(T, "orders", Op.READ, perm=Perm.DENY)], True),
    ([acl(T, "orders", Op.WRITE), acl(T, "orders", Op.WRITE, perm=Perm.DENY, principal=BOB)],
     True),
    ([acl(T, "a", Op.WRITE), acl(T, "b", Op.WRITE), acl(T, "a", Op.WRITE, perm=Perm.DENY)], True),
]


@pytest.mark.parametrize(("bindings", "allowed"), ANY_CASES)
def test_authorize_any_is_kafkas_authorize_by_resource_type(
        bindings: list[AclBinding], allowed: bool) -> None:
    assert Authorizer(bindings).authorize_any(ALICE, HOST, Op.WRITE, T) is allowed


def test_authorize_any_super_users_and_operations_no_binding_holds() -> None:
    auth = Authorizer([acl(T, "*", Op.ALL, principal="User:admin", perm=Perm.DENY),
                       acl(T, "*", Op.ALL)], super_users=frozenset({"User:admin"}))
    assert auth.authorize_any("User:admin", HOST, Op.WRITE, TX)
    for op in (Op.ANY, Op.ALL, Op.UNKNOWN):
        assert not auth.authorize_any(ALICE, HOST, op, T)


# --- changes ------------------------------------------------------------------------


def test_add_is_idempotent_and_version_bumps_on_change_only() -> None:
    auth = Authorizer()
    v0 = auth.version
    b = acl(T, "orders", Op.READ)
    auth.add([b, b])
    assert auth.bindings() == [b]
    v1 = auth.version
    assert v1 > v0
    auth.add([b])
    assert auth.version == v1
    assert auth.remove([flt(name="nothing")]) == [[]]
    assert auth.version == v1
    auth.remove([flt()])
    assert auth.version > v1
    v2 = auth.version
    auth.replace_all([b])
    assert auth.version > v2
    assert auth.authorize(ALICE, HOST, Op.READ, T, "orders")


def test_remove_reports_per_filter_first_match_wins_and_unindexes() -> None:
    a = acl(T, "orders", Op.READ)
    b = acl(T, "orders", Op.WRITE)
    c = acl(G, "team.", Op.READ, pattern=PRE)
    auth = Authorizer([a, b, c])
    removed = auth.remove([flt(rtype=T, op=Op.READ), flt(rtype=T), flt(rtype=T)])
    assert removed == [[a], [b], []]
    assert auth.bindings() == [c]
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert auth.authorize(ALICE, HOST, Op.READ, G, "team.x")
    assert auth.remove([flt(pattern=PRE, name="team.")]) == [[c]]
    assert not auth.authorize(ALICE, HOST, Op.READ, G, "team.x")
    assert auth.bindings() == []


def test_replace_all_drops_the_old_index() -> None:
    auth = Authorizer([acl(T, "a", Op.READ, pattern=PRE)])
    auth.replace_all([acl(T, "b", Op.READ)])
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "a1")
    assert auth.authorize(ALICE, HOST, Op.READ, T, "b")


# --- filters ------------------------------------------------------------------------

LIT_ORDERS = acl(T, "orders", Op.READ)
LIT_STAR = acl(T, "*", Op.READ)
PRE_ORD = acl(T, "ord", Op.READ, pattern=PRE)
PRE_X = acl(T, "x", Op.READ, pattern=PRE)
GROUP_ORDERS = acl(G, "orders", Op.READ)
ALL_FIVE = [LIT_ORDERS, LIT_STAR, PRE_ORD, PRE_X, GROUP_ORDERS]


@pytest.mark.parametrize(("f", "expected"), [
    (flt(), ALL_FIVE),
    (flt(rtype=T), [LIT_ORDERS, LIT_STAR, PRE_ORD, PRE_X]),
    (flt(name="orders"), [LIT_ORDERS, GROUP_ORDERS]),  # ANY: exact name, either pattern
    (flt(name="ord"), [PRE_ORD]),
    (flt(rtype=T, name="orders", pattern=PatternType.MATCH), [LIT_ORDERS, LIT_STAR, PRE_ORD]),
    (flt(rtype=T, pattern=PatternType.MATCH), [LIT_ORDERS, LIT_STAR, PRE_ORD, PRE_X]),
    (flt(name="orders", pattern=LIT), [LIT_ORDERS, GROUP_ORDERS]),
    (flt(name="*", pattern=LIT), [LIT_STAR]),
    (flt(pattern=PRE), [PRE_ORD, PRE_X]),
    (flt(name="orders", pattern=PRE), []),
])
def test_filter_patterns(f: AclBindingFilter, expected: list[AclBinding]) -> None:
    assert Authorizer(ALL_FIVE).describe(f) == expected


def test_filter_entry_fields() -> None:
    bindings = [acl(T, "t", Op.READ, principal=ALICE, host="1.1.1.1"),
                acl(T, "t", Op.WRITE, principal=BOB, perm=Perm.DENY),
                acl(T, "t", Op.READ, principal="User:*")]
    auth = Authorizer(bindings)
    assert auth.describe(flt(principal=ALICE)) == bindings[:1]  # no wildcard expansion
    assert auth.describe(flt(principal="User:*")) == bindings[2:]
    assert auth.describe(flt(host="1.1.1.1")) == bindings[:1]
    assert auth.describe(flt(op=Op.WRITE)) == bindings[1:2]
    assert auth.describe(flt(perm=Perm.ALLOW)) == [bindings[0], bindings[2]]


def test_binding_problems() -> None:
    assert binding_problem(acl(T, "orders", Op.READ)) is None
    assert binding_problem(acl(T, "orders", Op.READ, principal="User:*")) is None
    assert binding_problem(acl(C, CLUSTER_NAME, Op.CREATE)) is None
    bad = [
        acl(ResourceType.ANY, "x", Op.READ),
        acl(ResourceType.UNKNOWN, "x", Op.READ),
        acl(T, "x", Op.READ, pattern=PatternType.MATCH),
        acl(T, "x", Op.READ, pattern=PatternType.ANY),
        acl(T, "x", Op.ANY),
        acl(T, "x", Op.UNKNOWN),
        acl(T, "x", Op.READ, perm=Perm.ANY),
        acl(T, "", Op.READ),
        acl(C, "my-cluster", Op.CREATE),
        acl(C, CLUSTER_NAME, Op.CREATE, pattern=PRE),
        acl(T, "x", Op.READ, principal="alice"),
        acl(T, "x", Op.READ, principal="User:"),
        acl(T, "x", Op.READ, host=""),
    ]
    for b in bad:
        problem = binding_problem(b)
        assert problem, b


def test_filter_problems_and_codes() -> None:
    assert filter_problem(flt()) is None
    assert filter_problem(filter_from_codes(2, None, 2, None, None, 1, 1)) is None
    unknown = [filter_from_codes(99, None, 1, None, None, 1, 1),
               filter_from_codes(1, None, 0, None, None, 1, 1),
               filter_from_codes(1, None, 1, None, None, 42, 1),
               filter_from_codes(1, None, 1, None, None, 1, -1)]
    for f in unknown:
        assert filter_problem(f), f
    created = binding_from_codes(2, "orders", 3, ALICE, "*", 3, 3)
    assert created == LIT_ORDERS
    assert binding_problem(binding_from_codes(7, "orders", 3, ALICE, "*", 3, 3))  # USER
    txn = binding_from_codes(5, "app", 4, ALICE, "*", 4, 3)
    assert txn == acl(TX, "app", Op.WRITE, pattern=PRE) and binding_problem(txn) is None
    idempotent = binding_from_codes(4, CLUSTER_NAME, 3, ALICE, "*", 12, 3)
    assert idempotent.entry.operation is Op.IDEMPOTENT_WRITE
    assert binding_problem(idempotent) is None
    assert filter_problem(filter_from_codes(5, None, 1, None, None, 12, 1)) is None
