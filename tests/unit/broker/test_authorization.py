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
