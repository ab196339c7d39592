"""broker.authorization: which ACL each API asks for, and the answers of a refusal."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from groupwire.broker.security.authorization import Guarded, guard
from groupwire.protocol import messages as m
from groupwire.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from groupwire.protocol.errors import ErrorCode

Op, Rt = AclOperation, ResourceType


@dataclass
class Acl:
    """A caller allowed exactly ``grants``; records every question and its audit flag."""

    grants: set[tuple[Op, Rt, str]] = field(default_factory=set)
    asked: list[tuple[Op, Rt, str, bool]] = field(default_factory=list)

    def __call__(self, operation: Op, resource_type: Rt, name: str, audit: bool = True) -> bool:
        self.asked.append((operation, resource_type, name, audit))
        return (operation, resource_type, name) in self.grants

    def on_any(self, operation: Op, resource_type: Rt, audit: bool = True) -> bool:
        """Some grant of ``operation`` on a resource of the type (asked as name ``*any``)."""
        self.asked.append((operation, resource_type, "*any", audit))
        return any(g[:2] == (operation, resource_type) for g in self.grants)


def allow(*grants: tuple[Op, Rt, str]) -> Acl:
    return Acl(set(grants))


def answered(g: Guarded) -> m.Response:
    assert g.answer is not None and g.request is None
    return g.answer


GROUP_APIS = [
    m.HeartbeatRequest(group_id="g", generation_id=1, member_id="a"),
    m.JoinGroupRequest(group_id="g", member_id="", session_timeout_ms=10000,
                       rebalance_timeout_ms=10000, protocol_type="consumer", protocols=[]),
    m.SyncGroupRequest(group_id="g", generation_id=1, member_id="a"),
    m.LeaveGroupRequest(group_id="g", members=[m.MemberIdentity(member_id="a")]),
]


@pytest.mark.parametrize("request_", GROUP_APIS, ids=lambda r: type(r).__name__)
def test_group_apis_need_read_on_the_group(request_: m.Request) -> None:
    assert guard(request_, allow((Op.READ, Rt.GROUP, "g"))).request is request_
    refused = answered(guard(request_, allow((Op.DESCRIBE, Rt.GROUP, "g"))))
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert "'g'" in (refused.error_message or "")


def test_find_coordinator_needs_describe_on_the_group() -> None:
    req = m.FindCoordinatorRequest(key="g")
    assert guard(req, allow((Op.DESCRIBE, Rt.GROUP, "g"))).request is req
    assert answered(guard(req, allow())).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_produce_refuses_only_the_topics_without_write() -> None:
    req = m.ProduceRequest(topic_data=[
        m.TopicProduceData(name="ok", partition_data=[m.PartitionProduceData(index=0,
                                                                             records=b"x")]),
        m.TopicProduceData(name="no", partition_data=[
            m.PartitionProduceData(index=0, records=b"y"),
            m.PartitionProduceData(index=3, records=b"z")]),
    ])
    g = guard(req, allow((Op.WRITE, Rt.TOPIC, "ok")))
    assert isinstance(g.request, m.ProduceRequest)
    assert [t.name for t in g.request.topic_data] == ["ok"]
    assert g.finish is not None
    done = g.finish(m.ProduceResponse(responses=[m.TopicProduceResponse(
        name="ok", partition_responses=[m.PartitionProduceResponse(index=0, base_offset=5)])]))
    assert isinstance(done, m.ProduceResponse)
    by_topic = {t.name: [(p.index, p.error_code) for p in t.partition_responses]
                for t in done.responses}
    assert by_topic == {"ok": [(0, 0)], "no": [(0, 29), (3, 29)]}


def test_produce_with_no_topic_allowed_runs_nothing() -> None:
    req = m.ProduceRequest(topic_data=[m.TopicProduceData(
        name="no", partition_data=[m.PartitionProduceData(index=1, records=b"")])])
    resp = answered(guard(req, allow((Op.READ, Rt.TOPIC, "no"))))
    assert isinstance(resp, m.ProduceResponse)
    assert resp.responses[0].partition_responses[0].error_code == 29


def test_a_transactional_produce_needs_write_on_its_transactional_id() -> None:
    """Kafka refuses the whole request TRANSACTIONAL_ID_AUTHORIZATION_FAILED first."""
    req = m.ProduceRequest(transactional_id="tx", topic_data=[m.TopicProduceData(
        name="t", partition_data=[m.PartitionProduceData(index=0, records=b"x")])])
    refused = answered(guard(req, allow((Op.WRITE, Rt.TOPIC, "t"))))
    assert refused.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    g = guard(req, allow((Op.WRITE, Rt.TOPIC, "t"), (Op.WRITE, Rt.TRANSACTIONAL_ID, "tx")))
    assert isinstance(g.request, m.ProduceRequest) and g.request.topic_data == req.topic_data


def test_internal_produce_and_replica_fetch_need_cluster_action() -> None:
    internal = m.ProduceRequest(topic_data=[], internal=True)
    assert answered(guard(internal, allow((Op.WRITE, Rt.TOPIC, "__group_events")))
                    ).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert guard(internal, allow((Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER_NAME))).request
    follower = m.FetchRequest(replica_id=2, topics=[])
    assert answered(guard(follower, allow())).error_code == 31
    assert guard(follower, allow((Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER_NAME))).request


def test_fetch_needs_read_and_keeps_a_whole_refusal_as_it_is() -> None:
    req = m.FetchRequest(topics=[
        m.FetchTopic(topic="a", partitions=[m.FetchPartition(partition=0, fetch_offset=0)]),
        m.FetchTopic(topic="b", partitions=[m.FetchPartition(partition=2, fetch_offset=0)])])
    g = guard(req, allow((Op.READ, Rt.TOPIC, "a"), (Op.DESCRIBE, Rt.TOPIC, "b")))
    assert g.finish is not None and isinstance(g.request, m.FetchRequest)
    assert [t.topic for t in g.request.topics] == ["a"]
    merged = g.finish(m.FetchResponse(responses=[m.FetchTopicResponse(topic="a")]))
    assert isinstance(merged, m.FetchResponse)
    assert [(t.topic, [p.error_code for p in t.partitions]) for t in merged.responses] == [
        ("a", []), ("b", [29])]
    fenced = m.FetchResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
    assert g.finish(fenced) is fenced


def test_offset_commit_checks_the_group_then_each_topic() -> None:
    req = m.OffsetCommitRequest(group_id="g", topics=[
        m.OffsetCommitRequestTopic(name="a", partitions=[
            m.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)]),
        m.OffsetCommitRequestTopic(name="b", partitions=[
            m.OffsetCommitRequestPartition(partition_index=1, committed_offset=1)])])
    no_group = answered(guard(req, allow((Op.READ, Rt.TOPIC, "a"), (Op.READ, Rt.TOPIC, "b"))))
    assert isinstance(no_group, m.OffsetCommitResponse)
    assert {p.error_code for t in no_group.topics for p in t.partitions} == {30}
    g = guard(req, allow((Op.READ, Rt.GROUP, "g"), (Op.READ, Rt.TOPIC, "a")))
    assert isinstance(g.request, m.OffsetCommitRequest) and g.finish is not None
    assert [t.name for t in g.request.topics] == ["a"]
    merged = g.finish(m.OffsetCommitResponse(topics=[m.OffsetCommitResponseTopic(
        name="a", partitions=[m.OffsetCommitResponsePartition(partition_index=0)])]))
    assert isinstance(merged, m.OffsetCommitResponse)
    assert [(t.name, p.error_code) for t in merged.topics for p in t.partitions] == [
        ("a", 0), ("b", 29)]


def test_offset_delete_needs_delete_on_the_group_then_read_on_each_topic() -> None:
    req = m.OffsetDeleteRequest(group_id="g", topics=[
        m.OffsetDeleteRequestTopic(name="a", partitions=[
            m.OffsetDeleteRequestPartition(partition_index=0)]),
        m.OffsetDeleteRequestTopic(name="b", partitions=[
            m.OffsetDeleteRequestPartition(partition_index=1),
            m.OffsetDeleteRequestPartition(partition_index=2)])])
    topics = [(Op.READ, Rt.TOPIC, "a"), (Op.READ, Rt.TOPIC, "b")]
    no_group = answered(guard(req, allow((Op.READ, Rt.GROUP, "g"), *topics)))
    assert isinstance(no_group, m.OffsetDeleteResponse)
    assert (no_group.error_code, no_group.topics) == (30, [])
    assert "DELETE group 'g'" in (no_group.error_message or "")
    assert guard(req, allow((Op.DELETE, Rt.GROUP, "g"), *topics)).request is req
    acl = allow((Op.DELETE, Rt.GROUP, "g"), (Op.READ, Rt.TOPIC, "a"))
    g = guard(req, acl)
    assert acl.asked == [(Op.DELETE, Rt.GROUP, "g", True), (Op.READ, Rt.TOPIC, "a", True),
                         (Op.READ, Rt.TOPIC, "b", True)]
    assert isinstance(g.request, m.OffsetDeleteRequest) and g.finish is not None
    assert [t.name for t in g.request.topics] == ["a"]
    merged = g.finish(m.OffsetDeleteResponse(topics=[m.OffsetDeleteResponseTopic(
        name="a", partitions=[m.OffsetDeleteResponsePartition(partition_index=0)])]))
    assert isinstance(merged, m.OffsetDeleteResponse)
    assert [(t.name, p.partition_index, p.error_code)
            for t in merged.topics for p in t.partitions] == [
        ("a", 0, 0), ("b", 1, 29), ("b", 2, 29)]
    gone = m.OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND)
    assert g.finish(gone) is gone  # refused as a whole: top-level only, as Kafka answers
    none_readable = answered(guard(req, allow((Op.DELETE, Rt.GROUP, "g"))))
    assert isinstance(none_readable, m.OffsetDeleteResponse)
    assert {p.error_code for t in none_readable.topics for p in t.partitions} == {29}


def test_offset_fetch_of_every_topic_leaves_out_those_not_describable() -> None:
    acl = allow((Op.DESCRIBE, Rt.GROUP, "g"), (Op.DESCRIBE, Rt.TOPIC, "a"))
    g = guard(m.OffsetFetchRequest(group_id="g"), acl)
    assert g.finish is not None
    out = g.finish(m.OffsetFetchResponse(topics=[m.OffsetFetchResponseTopic(name="a"),
                                                 m.OffsetFetchResponseTopic(name="b")]))
    assert isinstance(out, m.OffsetFetchResponse)
    assert [t.name for t in out.topics] == ["a"]
    assert (Op.DESCRIBE, Rt.TOPIC, "b", False) in acl.asked  # a filter, not a logged denial
    assert answered(guard(m.OffsetFetchRequest(group_id="h"), acl)).error_code == 30


def test_list_groups_filters_unless_the_cluster_is_describable() -> None:
    everyone = allow((Op.DESCRIBE, Rt.CLUSTER, CLUSTER_NAME))
    req = m.ListGroupsRequest()
    assert guard(req, everyone).finish is None
    some = allow((Op.DESCRIBE, Rt.GROUP, "mine"))
    g = guard(req, some)
    assert g.request is req and g.finish is not None
    out = g.finish(m.ListGroupsResponse(groups=[m.ListedGroup(group_id="mine"),
                                                m.ListedGroup(group_id="theirs")]))
    assert isinstance(out, m.ListGroupsResponse)
    assert [x.group_id for x in out.groups] == ["mine"]
    assert all(not audit for *_, audit in some.asked)


def test_describe_and_delete_groups_answer_per_group() -> None:
    d = guard(m.DescribeGroupsRequest(groups=["a", "b"]), allow((Op.DESCRIBE, Rt.GROUP, "a")))
    assert isinstance(d.request, m.DescribeGroupsRequest) and d.request.groups == ["a"]
    assert d.finish is not None
    out = d.finish(m.DescribeGroupsResponse(groups=[m.DescribedGroup(group_id="a")]))
    assert isinstance(out, m.DescribeGroupsResponse)
    assert [(x.group_id, x.error_code) for x in out.groups] == [("a", 0), ("b", 30)]
    delete = answered(guard(m.DeleteGroupsRequest(groups_names=["a"]),
                            allow((Op.DESCRIBE, Rt.GROUP, "a"))))
    assert isinstance(delete, m.DeleteGroupsResponse)
    assert [(x.group_id, x.error_code) for x in delete.results] == [("a", 30)]


def test_metadata_named_topics_refused_and_all_topics_filtered() -> None:
    named = guard(m.MetadataRequest(topics=[m.MetadataRequestTopic(name="a"),
                                            m.MetadataRequestTopic(name="b")]),
                  allow((Op.DESCRIBE, Rt.TOPIC, "a")))
    assert isinstance(named.request, m.MetadataRequest) and named.request.topics is not None
    assert [t.name for t in named.request.topics] == ["a"]
    assert not named.request.allow_auto_topic_creation  # no CREATE anywhere
    assert named.finish is not None
    out = named.finish(m.MetadataResponse(topics=[m.MetadataTopic(name="a")]))
    assert isinstance(out, m.MetadataResponse)
    assert [(t.name, t.error_code) for t in out.topics] == [("a", 0), ("b", 29)]
    every = guard(m.MetadataRequest(), allow((Op.DESCRIBE, Rt.TOPIC, "a")))
    assert every.finish is not None
    out = every.finish(m.MetadataResponse(topics=[m.MetadataTopic(name="a"),
                                                  m.MetadataTopic(name="b")]))
    assert isinstance(out, m.MetadataResponse)
    assert [t.name for t in out.topics] == ["a"]


def test_metadata_auto_creation_kept_with_create_on_the_cluster() -> None:
    req = m.MetadataRequest(topics=[m.MetadataRequestTopic(name="a")])
    g = guard(req, allow((Op.DESCRIBE, Rt.TOPIC, "a"), (Op.CREATE, Rt.CLUSTER, CLUSTER_NAME)))
    assert g.request is req


def test_create_topics_needs_create_on_the_cluster_or_the_topic() -> None:
    req = m.CreateTopicsRequest(topics=[m.CreatableTopic(name="a"), m.CreatableTopic(name="b")])
    assert guard(req, allow((Op.CREATE, Rt.CLUSTER, CLUSTER_NAME))).request is req
    g = guard(req, allow((Op.CREATE, Rt.TOPIC, "b")))
    assert isinstance(g.request, m.CreateTopicsRequest)
    assert [t.name for t in g.request.topics] == ["b"]
    assert g.finish is not None
    out = g.finish(m.CreateTopicsResponse(topics=[m.CreatableTopicResult(name="b")]))
    assert isinstance(out, m.CreateTopicsResponse)
    assert sorted((t.name, t.error_code) for t in out.topics) == [("a", 29), ("b", 0)]


def test_create_partitions_needs_alter_and_delete_topics_delete() -> None:
    cp = answered(guard(m.CreatePartitionsRequest(
        topics=[m.CreatePartitionsTopic(name="a", count=3)]), allow((Op.CREATE, Rt.TOPIC, "a"))))
    assert isinstance(cp, m.CreatePartitionsResponse) and cp.results[0].error_code == 29
    dt = answered(guard(m.DeleteTopicsRequest(topic_names=["a"]), allow((Op.ALTER, Rt.TOPIC, "a"))))
    assert isinstance(dt, m.DeleteTopicsResponse) and dt.responses[0].error_code == 29


@pytest.mark.parametrize(("request_", "operation"), [
    (m.DescribeAclsRequest(resource_type_filter=1, operation=1, permission_type=1),
     Op.DESCRIBE),
    (m.CreateAclsRequest(creations=[]), Op.ALTER),
    (m.DeleteAclsRequest(filters=[]), Op.ALTER),
    (m.DescribeUserScramCredentialsRequest(), Op.DESCRIBE),
    (m.AlterUserScramCredentialsRequest(), Op.ALTER),
    (m.ElectLeadersRequest(), Op.ALTER),
], ids=lambda x: type(x).__name__ if isinstance(x, m.Request) else x.name)
def test_cluster_apis(request_: m.Request, operation: Op) -> None:
    assert guard(request_, allow((operation, Rt.CLUSTER, CLUSTER_NAME))).request is request_
    assert answered(guard(request_, allow())).error_code == 31


def test_per_item_cluster_refusals_name_every_item() -> None:
    creations = answered(guard(m.CreateAclsRequest(creations=[m.AclCreation(
        resource_type=2, resource_name="t", principal="User:a", host="*", operation=3,
        permission_type=3)] * 2), allow()))
    assert isinstance(creations, m.CreateAclsResponse)
    assert [r.error_code for r in creations.results] == [31, 31]
    alter = answered(guard(m.AlterUserScramCredentialsRequest(
        deletions=[m.ScramCredentialDeletion(name="u", mechanism=1)]), allow()))
    assert isinstance(alter, m.AlterUserScramCredentialsResponse)
    assert [(r.user, r.error_code) for r in alter.results] == [("u", 31)]


@pytest.mark.parametrize("request_", [
    m.ApiVersionsRequest(), m.SaslHandshakeRequest(mechanism="PLAIN"),
    m.SaslAuthenticateRequest(auth_bytes=b"")], ids=lambda r: type(r).__name__)
def test_unchecked_apis_ask_nothing(request_: m.Request) -> None:
    acl = allow()
    assert guard(request_, acl).request is request_
    assert acl.asked == []


# --- transactions (Kafka 3.x's rules) -------------------------------------------------------

TX = Rt.TRANSACTIONAL_ID
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_transactional_init_producer_id_needs_write_on_its_id() -> None:
    req = m.InitProducerIdRequest(transactional_id="app", transaction_timeout_ms=60_000)
    assert guard(req, allow((Op.WRITE, TX, "app"))).request is req
    for acl in (allow((Op.DESCRIBE, TX, "app")), allow((Op.WRITE, TX, "other")),
                allow((Op.IDEMPOTENT_WRITE, Rt.CLUSTER, CLUSTER_NAME), (Op.WRITE, Rt.TOPIC, "t"))):
        refused = answered(guard(req, acl))
        assert isinstance(refused, m.InitProducerIdResponse)
        assert (refused.error_code, refused.producer_id) == (TXN_DENIED, -1)
        assert "WRITE transactional id 'app'" in (refused.error_message or "")


def test_an_idempotent_init_producer_id_needs_idempotent_write_or_write_on_some_topic() -> None:
    req = m.InitProducerIdRequest()
    cluster = allow((Op.IDEMPOTENT_WRITE, Rt.CLUSTER, CLUSTER_NAME))
    assert guard(req, cluster).request is req
    assert cluster.asked == [(Op.IDEMPOTENT_WRITE, Rt.CLUSTER, CLUSTER_NAME, False)]
    writer = allow((Op.WRITE, Rt.TOPIC, "orders"))
    assert guard(req, writer).request is req
    assert writer.asked[-1] == (Op.WRITE, Rt.TOPIC, "*any", True)
    for acl in (allow(), allow((Op.READ, Rt.TOPIC, "orders")), allow((Op.WRITE, TX, "app")),
                allow((Op.WRITE, Rt.CLUSTER, CLUSTER_NAME))):
        refused = answered(guard(req, acl))
        assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _add_partitions(*topics: tuple[str, list[int]]) -> m.AddPartitionsToTxnRequest:
    return m.AddPartitionsToTxnRequest(
        transactional_id="app", producer_id=7, producer_epoch=0,
        topics=[m.TxnTopic(name=n, partitions=ps) for n, ps in topics])


def test_add_partitions_needs_write_on_the_id_then_on_every_topic() -> None:
    req = _add_partitions(("a", [0, 1]), ("b", [2]))
    both = [(Op.WRITE, Rt.TOPIC, "a"), (Op.WRITE, Rt.TOPIC, "b")]
    assert guard(req, allow((Op.WRITE, TX, "app"), *both)).request is req
    no_id = answered(guard(req, allow(*both)))
    assert isinstance(no_id, m.AddPartitionsToTxnResponse)
    assert (no_id.error_code, no_id.results) == (TXN_DENIED, [])
    # one topic refused fails the whole request, as Kafka answers: nothing is added
    acl = allow((Op.WRITE, TX, "app"), (Op.WRITE, Rt.TOPIC, "a"))
    partial = answered(guard(req, acl))
    assert isinstance(partial, m.AddPartitionsToTxnResponse) and partial.error_code == 0
    assert [(t.name, p.partition_index, p.error_code)
            for t in partial.results for p in t.results] == [
        ("a", 0, ErrorCode.OPERATION_NOT_ATTEMPTED), ("a", 1, ErrorCode.OPERATION_NOT_ATTEMPTED),
        ("b", 2, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]


def test_add_partitions_of_an_internal_topic_is_refused_whatever_the_acls() -> None:
    req = _add_partitions(("__consumer_offsets", [3]))
    acl = allow((Op.WRITE, TX, "app"), (Op.WRITE, Rt.TOPIC, "__consumer_offsets"))
    refused = answered(guard(req, acl))
    assert isinstance(refused, m.AddPartitionsToTxnResponse)
    assert refused.results[0].results[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert acl.asked == [(Op.WRITE, TX, "app", True)]  # not a denial of the ACLs


def test_add_offsets_needs_write_on_the_id_then_read_on_the_group() -> None:
    req = m.AddOffsetsToTxnRequest(transactional_id="app", producer_id=7, producer_epoch=0,
                                   group_id="g")
    assert guard(req, allow((Op.WRITE, TX, "app"), (Op.READ, Rt.GROUP, "g"))).request is req
    assert answered(guard(req, allow((Op.READ, Rt.GROUP, "g")))).error_code == TXN_DENIED
    no_group = answered(guard(req, allow((Op.WRITE, TX, "app"), (Op.DESCRIBE, Rt.GROUP, "g"))))
    assert no_group.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_end_txn_needs_write_on_the_id() -> None:
    req = m.EndTxnRequest(transactional_id="app", producer_id=7, producer_epoch=0,
                          committed=True)
    assert guard(req, allow((Op.WRITE, TX, "app"))).request is req
    refused = answered(guard(req, allow((Op.DESCRIBE, TX, "app"), (Op.WRITE, TX, "apps"))))
    assert isinstance(refused, m.EndTxnResponse) and refused.error_code == TXN_DENIED


def test_txn_offset_commit_checks_the_id_the_group_then_each_topic() -> None:
    req = m.TxnOffsetCommitRequest(
        transactional_id="app", group_id="g", producer_id=7, producer_epoch=0, topics=[
            m.TxnOffsetCommitTopic(name=n, partitions=[
                m.TxnOffsetCommitPartition(partition_index=i, committed_offset=5)])
            for n, i in (("a", 0), ("b", 1))])
    topics = [(Op.READ, Rt.TOPIC, "a"), (Op.READ, Rt.TOPIC, "b")]
    assert guard(req, allow((Op.WRITE, TX, "app"), (Op.READ, Rt.GROUP, "g"), *topics)
                 ).request is req
    no_id = allow((Op.READ, Rt.GROUP, "g"), *topics)
    assert answered(guard(req, no_id)).error_code == TXN_DENIED
    assert no_id.asked == [(Op.WRITE, TX, "app", True)]  # Kafka's order: the id first
    no_group = answered(guard(req, allow((Op.WRITE, TX, "app"), (Op.DESCRIBE, Rt.GROUP, "g"),
                                         *topics)))
    assert isinstance(no_group, m.TxnOffsetCommitResponse)
    assert no_group.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert "READ group 'g'" in (no_group.error_message or "")
    g = guard(req, allow((Op.WRITE, TX, "app"), (Op.READ, Rt.GROUP, "g"), topics[0]))
    assert isinstance(g.request, m.TxnOffsetCommitRequest) and g.finish is not None
    assert [t.name for t in g.request.topics] == ["a"]
    merged = g.finish(m.TxnOffsetCommitResponse(topics=[m.TxnTopicResult(
        name="a", results=[m.TxnPartitionResult(partition_index=0)])]))
    assert isinstance(merged, m.TxnOffsetCommitResponse)
    assert [(t.name, p.partition_index, p.error_code)
            for t in merged.topics for p in t.results] == [("a", 0, 0), ("b", 1, 29)]
    fenced = m.TxnOffsetCommitResponse(error_code=ErrorCode.PRODUCER_FENCED)
    assert g.finish(fenced) is fenced


def test_write_txn_markers_are_the_brokers_or_an_alterers_of_the_cluster() -> None:
    req = m.WriteTxnMarkersRequest(markers=[m.TxnMarker(
        producer_id=7, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[m.TxnTopic(name="t", partitions=[0])])])
    assert guard(req, allow((Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER_NAME))).request is req
    assert guard(req, allow((Op.ALTER, Rt.CLUSTER, CLUSTER_NAME))).request is req
    client = allow((Op.WRITE, Rt.TOPIC, "t"), (Op.WRITE, TX, "app"))
    refused = answered(guard(req, client))
    assert isinstance(refused, m.WriteTxnMarkersResponse)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert client.asked == [(Op.ALTER, Rt.CLUSTER, CLUSTER_NAME, False),
                            (Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER_NAME, True)]


def test_find_coordinator_of_a_transactional_id_needs_describe_on_it() -> None:
    req = m.FindCoordinatorRequest(key="app", key_type=1)
    assert guard(req, allow((Op.DESCRIBE, TX, "app"))).request is req
    refused = answered(guard(req, allow((Op.DESCRIBE, Rt.GROUP, "app"))))
    assert isinstance(refused, m.FindCoordinatorResponse)
    assert (refused.error_code, refused.node_id) == (TXN_DENIED, -1)


def test_describe_transactions_refuses_per_id_and_shows_only_describable_topics() -> None:
    acl = allow((Op.DESCRIBE, TX, "mine"), (Op.DESCRIBE, Rt.TOPIC, "seen"))
    g = guard(m.DescribeTransactionsRequest(transactional_ids=["mine", "theirs"]), acl)
    assert isinstance(g.request, m.DescribeTransactionsRequest) and g.finish is not None
    assert g.request.transactional_ids == ["mine"]
    out = g.finish(m.DescribeTransactionsResponse(transaction_states=[m.TransactionState(
        transactional_id="mine", transaction_state="Ongoing", producer_id=7, topics=[
            m.TransactionTopic(topic="seen", partitions=[0]),
            m.TransactionTopic(topic="hidden", partitions=[1])])]))
    assert isinstance(out, m.DescribeTransactionsResponse)
    assert [(s.transactional_id, s.error_code, [t.topic for t in s.topics])
            for s in out.transaction_states] == [("mine", 0, ["seen"]),
                                                 ("theirs", TXN_DENIED, [])]
    assert (Op.DESCRIBE, Rt.TOPIC, "hidden", False) in acl.asked  # a filter: not logged
    none = answered(guard(m.DescribeTransactionsRequest(transactional_ids=["x"]), allow()))
    assert isinstance(none, m.DescribeTransactionsResponse)
    assert [(s.transactional_id, s.error_code) for s in none.transaction_states] == [
        ("x", TXN_DENIED)]


def test_list_transactions_shows_only_describable_ids() -> None:
    acl = allow((Op.DESCRIBE, TX, "mine"), (Op.DESCRIBE, Rt.CLUSTER, CLUSTER_NAME))
    req = m.ListTransactionsRequest()
    g = guard(req, acl)
    assert g.request is req and g.finish is not None
    out = g.finish(m.ListTransactionsResponse(transaction_states=[
        m.ListedTransaction(transactional_id=t, producer_id=i)
        for i, t in enumerate(["mine", "theirs"])]))
    assert isinstance(out, m.ListTransactionsResponse)
    assert [t.transactional_id for t in out.transaction_states] == ["mine"]
    assert all(not audit for *_, audit in acl.asked)
