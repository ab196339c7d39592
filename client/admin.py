"""The Admin client: topics, groups, committed offsets, lag and offset resets.

Every method is one or two requests over the shared :class:`~client.cluster.Cluster`:
CreateTopics, CreatePartitions, DeleteTopics and ElectLeaders go to the controller
Metadata names (again, after fresh metadata, when a broker answers NOT_CONTROLLER),
ListOffsets to each partition's leader, the rest to the bootstrap broker (a single broker
is every group's coordinator). Results are plain frozen dataclasses so the CLI can print
them as tables or JSON.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple, TypeVar

from groupwire.client.acls import (
    AclBinding,
    AclBindingFilter,
    ScramMechanism,
    binding_from_match,
    bindings_from_describe,
    creation,
    delete_filter,
    describe_request,
    parse_scram_mechanism,
)
from groupwire.client.cluster import API_VERSION_REQUEST_TIMEOUT_MS, Cluster, backoff_s
from groupwire.client.errors import (
    BrokerResponseError,
    NonEmptyGroupError,
    UnknownTopicOrPartitionError,
    error_for,
)
from groupwire.client.security import DEFAULT_SASL_MECHANISM, SecurityConfig
from groupwire.client.types import OffsetAndMetadata, TopicPartition, choose_bootstrap
from groupwire.protocol.consumer import decode_assignment, decode_subscription
from groupwire.protocol.errors import ErrorCode, ProtocolError, RemoteProtocolError
from groupwire.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreatableTopic,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersTopic,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    Rebalance,
    Request,
    Response,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserName,
)
from groupwire.protocol.sasl import scram_salted_password

R = TypeVar("R", bound=Response)

LATEST = -1
EARLIEST = -2
"""ListOffsets' special timestamps (docs/protocol.md §4)."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic to create; -1 means the broker's default (partitions, replication
    factor)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: int
    internal: bool


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None
    controller: bool


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The live brokers and the controller (-1: none now), from Metadata."""

    cluster_id: str
    controller_id: int
    brokers: list[BrokerDescription]


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """Who holds a partition: ``leader`` -1 when none is elected; ``offline_replicas``
    are replicas whose broker is not live."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def unavailable(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member; ``assignment``/``topics`` are None when not decodable (or not consumer)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[TopicPartition] | None
    topics: list[str] | None
    last_heartbeat_ms: int | None
    poll_age_ms: int | None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: int
    leader_id: str | None
    members: list[MemberDescription] = field(default_factory=list)
    rebalances: list[Rebalance] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """``committed`` is None when the group has no commit for the partition (lag unknown)."""

    committed: int | None
    end: int
    lag: int | None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id as its coordinator knows it: ``partitions`` are those in the
    open transaction (empty outside one); ``start_time_ms`` -1 outside one."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    coordinator_id: int
    partitions: list[TopicPartition] = field(default_factory=list)


ResetTo = Literal["earliest", "latest"] | int

DEFAULT_SCRAM_ITERATIONS: Final = 4096
"""Kafka's default (and minimum) PBKDF2 iteration count for a SCRAM credential."""
SCRAM_SALT_BYTES: Final = 32


class ScramCredentialInfo(NamedTuple):
    """One of a user's SCRAM credentials, as a broker describes it: no salt, no key."""

    mechanism: ScramMechanism
    iterations: int


def scram_upsertion(user: str, password: str, mechanism: ScramMechanism | str,
                    iterations: int, *, salt: bytes | None = None,
                    ) -> ScramCredentialUpsertion:
    """KIP-554's upsertion: a fresh random salt and the salted password, so the password
    itself is never sent. The password is SASLprep-normalised first (RFC 5802), as the
    SDK's SCRAM login normalises it, so what is stored is what a login proves."""
    mech = parse_scram_mechanism(mechanism)
    if not user:
        raise ValueError("the user name is empty")
    if not password:
        raise ValueError("the password is empty")
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, not {iterations}")
    salt = secrets.token_bytes(SCRAM_SALT_BYTES) if salt is None else salt
    salted = scram_salted_password(mech, password, salt, iterations)
    return ScramCredentialUpsertion(name=user, mechanism=int(mech), iterations=iterations,
                                    salt=salt, salted_password=salted)


def _mechanism_from_wire(code: int) -> ScramMechanism:
    try:
        return parse_scram_mechanism(code)
    except ValueError as exc:
        raise RemoteProtocolError(f"the broker described an unknown SCRAM mechanism {code}"
                                  ) from exc


class Admin:
    """Administrative operations; an async context manager with ``start``/``close``."""

    def __init__(self, bootstrap: str | Sequence[str] | None = None, *,
                 bootstrap_servers: str | Sequence[str] | None = None,
                 client_id: str = "groupwire-admin", request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 security_protocol: str = "PLAINTEXT", ssl_context: ssl.SSLContext | None = None,
                 sasl_mechanism: str = DEFAULT_SASL_MECHANISM,
                 sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None,
                 api_version_request_timeout_ms: int = API_VERSION_REQUEST_TIMEOUT_MS,
                 security: SecurityConfig | None = None) -> None:
        """``bootstrap`` or aiokafka's ``bootstrap_servers`` (one of them; default
        ``127.0.0.1:9092``, a host without a port meaning 9092). ``security_protocol`` …
        ``sasl_plain_password`` are aiokafka's names (or pass one ``security``, as the
        CLI does; ``sasl_mechanism`` defaults to SCRAM-SHA-256); refused credentials
        raise :class:`AuthenticationFailedError` from ``start``."""
        self._cluster = Cluster(choose_bootstrap("Admin", bootstrap, bootstrap_servers),
                                client_id=client_id,
                                request_timeout_ms=request_timeout_ms,
                                retry_backoff_ms=retry_backoff_ms,
                                retry_backoff_max_ms=retry_backoff_max_ms,
                                api_version_request_timeout_ms=api_version_request_timeout_ms,
                                security=security or SecurityConfig.from_options(
                                    security_protocol=security_protocol,
                                    ssl_context=ssl_context, sasl_mechanism=sasl_mechanism,
                                    sasl_plain_username=sasl_plain_username,
                                    sasl_plain_password=sasl_plain_password))

    async def start(self) -> None:
        await self._cluster.connection()

    async def close(self) -> None:
        await self._cluster.close()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- topics ---------------------------------------------------------------------------

    async def create_topics(self, topics: str | Sequence[str | TopicSpec],
                            num_partitions: int = -1, replication_factor: int = -1, *,
                            exist_ok: bool = False) -> dict[str, int]:
        """Create topics; returns partitions per created topic.

        Raises the first topic's error (``TopicAlreadyExistsError`` unless ``exist_ok``).
        """
        items = [topics] if isinstance(topics, str) else list(topics)
        specs = [t if isinstance(t, TopicSpec) else TopicSpec(t, num_partitions,
                                                              replication_factor)
                 for t in items]
        resp = await self._send(CreateTopicsRequest(topics=[
            CreatableTopic(name=s.name, num_partitions=s.num_partitions,
                           replication_factor=s.replication_factor) for s in specs]),
            CreateTopicsResponse, controller=True)
        out: dict[str, int] = {}
        for r in resp.topics:
            if r.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and exist_ok:
                continue
            _raise_for(r.error_code, r.error_message, f"topic {r.name!r}", r.name)
            out[r.name] = r.num_partitions
        return out

    async def delete_topics(self, topics: str | Sequence[str], *, timeout_ms: int = 60000,
                            ) -> dict[str, BrokerResponseError | None]:
        """Delete topics, their data and every group's committed offsets for them; per
        topic None (deleted) or the error that prevented it (``UnknownTopicOrPartitionError``
        for an unknown one, ``InvalidTopicError`` for an internal one).

        ``timeout_ms`` is sent as Kafka's field; the broker deletes before it answers.
        """
        names = [topics] if isinstance(topics, str) else list(topics)
        resp = await self._send(DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms),
                                DeleteTopicsResponse, controller=True)
        return {r.name: (None if r.error_code == ErrorCode.NONE
                         else error_for(r.error_code, r.error_message or f"topic {r.name!r}"))
                for r in resp.responses}

    async def create_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions."""
        resp = await self._send(CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=topic, count=total)]), CreatePartitionsResponse,
            controller=True)
        for r in resp.results:
            _raise_for(r.error_code, r.error_message, f"topic {r.name!r}", r.name)

    async def list_topics(self, *, include_internal: bool = False) -> dict[str, int]:
        """Topic name -> partition count (internal topics only when asked)."""
        md = await self._cluster.metadata(None)
        return {name: n for name, n in sorted(md.partitions.items())
                if include_internal or name not in md.internal}

    async def describe_topics(self, topics: Sequence[str] | None = None, *,
                              include_internal: bool = False) -> list[TopicDescription]:
        """Named topics (an unknown one raises), or all of them."""
        md = await self._cluster.metadata(None if topics is None else list(topics))
        for name, code in md.errors.items():
            _raise_for(code, None, f"topic {name!r}")
        names = list(topics) if topics is not None else sorted(
            n for n in md.partitions if include_internal or n not in md.internal)
        return [TopicDescription(n, md.partitions[n], n in md.internal) for n in names]

    async def list_offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Offset per partition for ``LATEST``, ``EARLIEST`` or a timestamp (ms).

        For a timestamp past every record the answer is -1 (no such record).
        """
        return await self._cluster.list_offsets(
            {TopicPartition(*tp): ts for tp, ts in specs.items()})

    # --- cluster --------------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        """The live brokers, by node id, and which one is the controller."""
        md = await self._metadata([])
        return ClusterDescription(md.cluster_id, md.controller_id, [
            BrokerDescription(b.node_id, b.host, b.port, b.rack, b.node_id == md.controller_id)
            for b in sorted(md.brokers, key=lambda b: b.node_id)])

    async def describe_partitions(self, topics: Sequence[str] | None = None,
                                  ) -> list[PartitionDescription]:
        """Leader, epoch, replicas, ISR and offline replicas of every partition of
        ``topics`` (an unknown one raises), or of every topic, internal ones included."""
        md = await self._metadata(None if topics is None else list(topics))
        out: list[PartitionDescription] = []
        for t in md.topics:
            if t.error_code != ErrorCode.NONE:
                _raise_for(t.error_code, t.error_message, f"topic {t.name!r}", t.name)
            out.extend(PartitionDescription(
                t.name, p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes),
                list(p.isr_nodes), list(p.offline_replicas))
                for p in sorted(t.partitions, key=lambda p: p.partition_index))
        return sorted(out, key=lambda d: (d.topic, d.partition))

    async def elect_leaders(self, partitions: Iterable[TopicPartition] | None = None, *,
                            timeout_ms: int | None = None, unclean: bool = False,
                            ) -> dict[TopicPartition, BrokerResponseError | None]:
        """Move leadership back to each partition's preferred (first) replica; None:
        every partition. Per partition None (elected) or the error whose ``code`` says
        why not: ELECTION_NOT_NEEDED (it already leads), PREFERRED_LEADER_NOT_AVAILABLE
        (not live or not in the ISR), UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT.

        Sent to the controller. ``timeout_ms`` is how long it waits for the new leaders
        (default: half the request timeout, so its answer comes within that).

        ``unclean=True`` LOSES DATA: each partition without an eligible leader (no live
        in-sync replica that kept its log) gets any live replica as its leader, and
        acknowledged records that replica lacks are gone. Errors then:
        ELECTION_NOT_NEEDED (it has, or gets by itself, an eligible leader),
        ELIGIBLE_LEADERS_NOT_AVAILABLE (no replica is live)."""
        topics: list[ElectLeadersTopic] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp[0], []).append(tp[1])
            topics = [ElectLeadersTopic(topic=t, partitions=sorted(set(ps)))
                      for t, ps in by_topic.items()]
        wait_ms = self._cluster.request_timeout_ms // 2 if timeout_ms is None else timeout_ms
        resp = await self._send(ElectLeadersRequest(
            election_type=1 if unclean else 0, topic_partitions=topics, timeout_ms=wait_ms),
            ElectLeadersResponse, controller=True)
        return {TopicPartition(r.topic, p.partition_id): (
            None if p.error_code == ErrorCode.NONE
            else error_for(p.error_code, p.error_message or f"{r.topic}[{p.partition_id}]"))
            for r in resp.replica_election_results for p in r.partition_result}

    async def _metadata(self, topics: list[str] | None) -> MetadataResponse:
        """Metadata as the broker sent it (brokers' racks, replicas and ISRs included)."""
        return await self._send(MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False), MetadataResponse)

    # --- groups ---------------------------------------------------------------------------

    async def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Groups, optionally only those in ``states`` (case-insensitive)."""
        request = ListGroupsRequest(states_filter=list(states or []))
        listed: dict[str, GroupListing] = {}
        for resp in await self._on_every_broker(request, ListGroupsResponse):
            for g in resp.groups:
                listed[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state)
        return sorted(listed.values(), key=lambda g: g.group_id)

    async def describe_groups(self, group_ids: str | Sequence[str]) -> list[GroupDescription]:
        """Members (consumer assignments decoded), state and recent rebalances per group.

        A group that does not exist is described as ``Dead`` with no members (Kafka).
        """
        ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)
        described = {}
        for group_id in dict.fromkeys(ids):
            resp = await self._send_to_coordinator(
                group_id, DescribeGroupsRequest(groups=[group_id]), DescribeGroupsResponse)
            described[group_id] = resp.groups[0]
        out: list[GroupDescription] = []
        for g in (described[i] for i in ids):
            _raise_for(g.error_code, g.error_message, f"group {g.group_id!r}")
            consumer = g.protocol_type == "consumer"
            members = [MemberDescription(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host,
                assignment=_assignment(m.member_assignment) if consumer else None,
                topics=_topics(m.member_metadata) if consumer else None,
                last_heartbeat_ms=m.last_heartbeat_ms, poll_age_ms=m.poll_age_ms,
            ) for m in g.members]
            out.append(GroupDescription(
                group_id=g.group_id, state=g.group_state, protocol_type=g.protocol_type,
                protocol=g.protocol_data, generation_id=g.generation_id,
                leader_id=g.leader_id, members=members, rebalances=list(g.rebalances)))
        return out

    async def delete_groups(self, group_ids: str | Sequence[str],
                            ) -> dict[str, BrokerResponseError | None]:
        """Delete empty groups; per group None (deleted) or the error that prevented it."""
        ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)
        out: dict[str, BrokerResponseError | None] = {}
        for group_id in dict.fromkeys(ids):
            resp = await self._send_to_coordinator(
                group_id, DeleteGroupsRequest(groups_names=[group_id]), DeleteGroupsResponse)
            for r in resp.results:
                out[r.group_id] = (None if r.error_code == ErrorCode.NONE
                                   else error_for(r.error_code, r.error_message or r.group_id))
        return out

    async def list_consumer_group_offsets(
            self, group_id: str, partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all, or the given partitions that have one)."""
        topics: list[OffsetFetchRequestTopic] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                      for t, ps in by_topic.items()]
        resp = await self._send_to_coordinator(
            group_id, OffsetFetchRequest(group_id=group_id, topics=topics),
            OffsetFetchResponse)
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in resp.topics:
            for p in t.partitions:
                _raise_for(p.error_code, p.error_message, f"{t.name}[{p.partition_index}]")
                if p.committed_offset >= 0:
                    out[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset, p.metadata)
        return out

    async def group_lag(self, group_id: str) -> dict[TopicPartition, PartitionLag]:
        """Committed offset, log end and lag for every partition the group commits to or
        is assigned (lag None without a commit)."""
        committed = await self.list_consumer_group_offsets(group_id)
        tps = set(committed)
        for g in await self.describe_groups(group_id):
            for m in g.members:
                tps.update(m.assignment or [])
        ends = await self.list_offsets(dict.fromkeys(tps, LATEST))
        out: dict[TopicPartition, PartitionLag] = {}
        for tp in sorted(tps):
            end = ends.get(tp, -1)
            c = committed.get(tp)
            off = c.offset if c is not None else None
            out[tp] = PartitionLag(off, end, None if off is None else max(end - off, 0))
        return out

    async def reset_group_offsets(self, group_id: str, *, to: ResetTo | None = None,
                                  timestamp_ms: int | None = None,
                                  topics: Sequence[str] | None = None,
                                  commit: bool = True) -> dict[TopicPartition, int]:
        """Commit new positions for an inactive (Empty or unknown) group.

        ``to``: ``"earliest"``, ``"latest"`` or an offset (clamped to the log, as Kafka);
        or ``timestamp_ms``: the first offset at or after it (the end if none). Covers
        every partition of ``topics``, or else every partition the group has committed.
        Returns the new offsets; ``commit=False`` only plans them (a dry run).
        """
        if (to is None) == (timestamp_ms is None):
            raise ValueError("give exactly one of to= or timestamp_ms=")
        if isinstance(to, str) and to not in ("earliest", "latest"):
            raise ValueError(f"to must be 'earliest', 'latest' or an offset, got {to!r}")
        (desc,) = await self.describe_groups(group_id)
        if desc.state not in ("Empty", "Dead"):
            raise NonEmptyGroupError(
                f"group {group_id!r} is {desc.state} with {len(desc.members)} member(s): "
                "offsets can only be reset while it is Empty (stop its consumers first)")
        tps = await self._reset_scope(group_id, topics)
        if not tps:
            return {}
        earliest = await self.list_offsets(dict.fromkeys(tps, EARLIEST))
        latest = await self.list_offsets(dict.fromkeys(tps, LATEST))
        if timestamp_ms is not None:
            found = await self.list_offsets(dict.fromkeys(tps, timestamp_ms))
            targets = {tp: (off if off >= 0 else latest[tp]) for tp, off in found.items()}
        elif to == "earliest":
            targets = earliest
        elif to == "latest":
            targets = latest
        else:
            assert isinstance(to, int)
            targets = {tp: min(max(to, earliest[tp]), latest[tp]) for tp in tps}
        if commit:
            await self._commit(group_id, targets)
        return dict(sorted(targets.items()))

    async def _reset_scope(self, group_id: str, topics: Sequence[str] | None,
                           ) -> list[TopicPartition]:
        if topics is None:
            return sorted(await self.list_consumer_group_offsets(group_id))
        md = await self._cluster.metadata(list(topics), allow_auto_topic_creation=False)
        out: list[TopicPartition] = []
        for t in topics:
            n = md.partitions_for(t)
            if n is None:
                raise UnknownTopicOrPartitionError(f"topic {t!r}",
                                                   code=md.errors.get(t, 3))
            out.extend(TopicPartition(t, p) for p in range(n))
        return out

    async def _commit(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, off in offsets.items():
            by_topic.setdefault(tp.topic, []).append(OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=off))
        resp = await self._send_to_coordinator(group_id, OffsetCommitRequest(
            group_id=group_id, generation_id=-1, member_id="",
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()]), OffsetCommitResponse)
        for t in resp.topics:
            for p in t.partitions:
                _raise_for(p.error_code, p.error_message, f"{t.name}[{p.partition_index}]")

    # --- transactions -------------------------------------------------------------------

    async def list_transactions(self, states: Iterable[str] | None = None,
                                producer_ids: Iterable[int] | None = None, *,
                                open_longer_than_ms: int | None = None,
                                ) -> list[TransactionListing]:
        """Transactional ids every broker coordinates, optionally only those in
        ``states`` (Kafka's names: Ongoing, PrepareCommit, CompleteAbort, ...), of
        ``producer_ids``, or with a transaction open longer than ``open_longer_than_ms``
        (Kafka's duration filter: hanging transactions). A state name the broker does
        not know raises ValueError."""
        request = ListTransactionsRequest(
            state_filters=list(states or []), producer_id_filters=list(producer_ids or []),
            duration_filter_ms=-1 if open_longer_than_ms is None else open_longer_than_ms)
        listed: dict[str, TransactionListing] = {}
        for resp in await self._on_every_broker(request, ListTransactionsResponse):
            if resp.unknown_state_filters:
                raise ValueError("unknown transaction states: "
                                 + ", ".join(resp.unknown_state_filters))
            for t in resp.transaction_states:
                listed[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.transaction_state)
        return sorted(listed.values(), key=lambda t: t.transactional_id)

    async def describe_transactions(self, transactional_ids: str | Sequence[str],
                                    ) -> list[TransactionDescription]:
        """State, producer, timeout and partitions of each transactional id, from its
        transaction coordinator; an unknown id raises TransactionalIdNotFoundError."""
        ids = [transactional_ids] if isinstance(transactional_ids, str) else list(
            transactional_ids)
        out = []
        for tid in ids:
            node = await self._transaction_coordinator(tid)
            resp = await self._cluster.send_to(
                node, DescribeTransactionsRequest(transactional_ids=[tid]),
                response_type=DescribeTransactionsResponse)
            _raise_for(resp.error_code, resp.error_message, f"transactional id {tid!r}")
            t = resp.transaction_states[0]
            _raise_for(t.error_code, None, f"transactional id {tid!r}")
            out.append(TransactionDescription(
                transactional_id=t.transactional_id, state=t.transaction_state,
                producer_id=t.producer_id, producer_epoch=t.producer_epoch,
                timeout_ms=t.transaction_timeout_ms,
                start_time_ms=t.transaction_start_time_ms, coordinator_id=node,
                partitions=[TopicPartition(tp.topic, p) for tp in t.topics
                            for p in tp.partitions]))
        return out

    async def _transaction_coordinator(self, transactional_id: str) -> int:
        """FindCoordinator with key type 1; retriable answers are asked again until the
        request timeout."""
        cluster = self._cluster
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cluster.request_timeout_ms / 1000
        attempt = 0
        while True:
            resp = await cluster.send(FindCoordinatorRequest(key=transactional_id, key_type=1),
                                      response_type=FindCoordinatorResponse)
            if resp.error_code == ErrorCode.NONE:
                cluster.add_node(resp.node_id, resp.host, resp.port)
                return resp.node_id
            err = error_for(resp.error_code, resp.error_message
                            or f"transactional id {transactional_id!r}")
            delay = backoff_s(attempt, cluster.retry_backoff_ms, cluster.retry_backoff_max_ms)
            if not err.retriable or loop.time() + delay >= deadline:
                raise err
            attempt += 1
            await asyncio.sleep(delay)

    # --- ACLs and SCRAM credentials ------------------------------------------------------
    # Sent to the controller, as topic changes are: in a cluster the controller writes
    # them to the cluster's metadata, and a read after a write there sees the write.
    # A broker whose authorizer is off answers SecurityDisabledError (ACLs only); one
    # that does not let the caller DESCRIBE (read) or ALTER (write) the cluster,
    # ClusterAuthorizationFailedError.

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None,
                            ) -> list[AclBinding]:
        """The bindings ``acl_filter`` selects (None: every one), sorted by resource."""
        f = acl_filter if acl_filter is not None else AclBindingFilter()
        resp = await self._send(describe_request(f), DescribeAclsResponse, controller=True)
        return sorted(bindings_from_describe(resp))

    async def create_acls(self, bindings: AclBinding | Iterable[AclBinding],
                          ) -> dict[AclBinding, BrokerResponseError | None]:
        """Add bindings; per binding None (it exists now: adding one that exists is no
        error, as in Kafka) or the error that kept it out. A request the broker refuses
        as a whole raises (SecurityDisabledError, ClusterAuthorizationFailedError)."""
        items = list(dict.fromkeys([bindings] if isinstance(bindings, AclBinding)
                                   else bindings))
        if not items:
            return {}
        resp = await self._send(CreateAclsRequest(creations=[creation(b) for b in items]),
                                CreateAclsResponse, controller=True)
        if len(resp.results) != len(items):
            raise RemoteProtocolError(f"CreateAcls: {len(items)} creations, "
                                      f"{len(resp.results)} results")
        return {b: (None if r.error_code == ErrorCode.NONE
                    else error_for(r.error_code, r.error_message or str(b)))
                for b, r in zip(items, resp.results, strict=True)}

    async def delete_acls(self, filters: AclBindingFilter | Iterable[AclBindingFilter],
                          ) -> list[list[AclBinding]]:
        """Remove every binding each filter selects; per filter (in order) the bindings
        it removed. Raises the first error of a filter (or of a binding it matched).
        To see what a filter would remove, ``describe_acls`` it first: both select alike."""
        items = [filters] if isinstance(filters, AclBindingFilter) else list(filters)
        if not items:
            return []
        resp = await self._send(DeleteAclsRequest(filters=[delete_filter(f) for f in items]),
                                DeleteAclsResponse, controller=True)
        if len(resp.filter_results) != len(items):
            raise RemoteProtocolError(f"DeleteAcls: {len(items)} filters, "
                                      f"{len(resp.filter_results)} results")
        out: list[list[AclBinding]] = []
        for f, r in zip(items, resp.filter_results, strict=True):
            _raise_for(r.error_code, r.error_message, f"ACL filter {f}")
            for m in r.matching_acls:
                _raise_for(m.error_code, m.error_message, str(binding_from_match(m)))
            out.append(sorted(binding_from_match(m) for m in r.matching_acls))
        return out

    async def describe_user_scram_credentials(
            self, users: str | Iterable[str] | None = None,
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iteration counts (never a salt or a key);
        None: every user that has one. A named user without any raises
        ResourceNotFoundError."""
        names = None if users is None else (
            [users] if isinstance(users, str) else list(dict.fromkeys(users)))
        resp = await self._send(DescribeUserScramCredentialsRequest(
            users=None if names is None else [UserName(name=n) for n in names]),
            DescribeUserScramCredentialsResponse, controller=True)
        out: dict[str, list[ScramCredentialInfo]] = {}
        for r in resp.results:
            _raise_for(r.error_code, r.error_message, f"user {r.user!r}", r.user)
            out[r.user] = sorted(
                ScramCredentialInfo(_mechanism_from_wire(c.mechanism), c.iterations)
                for c in r.credential_infos)
        return dict(sorted(out.items()))

    async def upsert_user_scram_credential(
            self, user: str, password: str,
            mechanism: ScramMechanism | str = ScramMechanism.SCRAM_SHA_256,
            iterations: int = DEFAULT_SCRAM_ITERATIONS) -> None:
        """Create or replace ``user``'s credential for ``mechanism``.

        The salt and the salted password (PBKDF2 of the password's UTF-8, as Kafka's
        tools make it) are computed here, and only they are sent (KIP-554): the password
        never leaves this process. The broker refuses iteration counts outside
        4096–16384 (UnacceptableCredentialError)."""
        upsertion = scram_upsertion(user, password, mechanism, iterations)
        await self._alter_scram(user, AlterUserScramCredentialsRequest(
            upsertions=[upsertion]))

    async def delete_user_scram_credential(self, user: str,
                                           mechanism: ScramMechanism | str) -> None:
        """Remove ``user``'s credential for ``mechanism`` (ResourceNotFoundError if it
        has none); the user's connections already authenticated stay open."""
        mech = parse_scram_mechanism(mechanism)
        await self._alter_scram(user, AlterUserScramCredentialsRequest(
            deletions=[ScramCredentialDeletion(name=user, mechanism=int(mech))]))

    async def _alter_scram(self, user: str, request: AlterUserScramCredentialsRequest,
                           ) -> None:
        resp = await self._send(request, AlterUserScramCredentialsResponse, controller=True)
        for r in resp.results:
            _raise_for(r.error_code, r.error_message, f"user {r.user or user!r}",
                       r.user or user)

    # --- plumbing -------------------------------------------------------------------------

    async def _send(self, request: Request, rtype: type[R], *, controller: bool = False) -> R:
        resp = await (self._send_to_controller(request, rtype) if controller
                      else self._cluster.send(request, response_type=rtype))
        if resp.error_code != ErrorCode.NONE:
            _raise_for(resp.error_code, resp.error_message, request.API_KEY.name)
        return resp

    async def _send_to_controller(self, request: Request, rtype: type[R]) -> R:
        """To ``controller_id`` from Metadata (the bootstrap broker while it is unknown);
        a NOT_CONTROLLER answer reads metadata again and resends, until the request
        timeout. The non-controller refuses the whole request, so resending it is safe."""
        cluster = self._cluster
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cluster.request_timeout_ms / 1000
        attempt = 0
        if cluster.metadata_cache is None:
            await cluster.refresh_metadata()
        while True:
            node = cluster.controller_id
            timeout_ms = max(int((deadline - loop.time()) * 1000), 1)
            if node < 0:
                resp = await cluster.send(request, response_type=rtype, timeout_ms=timeout_ms)
            else:
                resp = await cluster.send_to(node, request, response_type=rtype,
                                             timeout_ms=timeout_ms)
            if ErrorCode.NOT_CONTROLLER not in _codes(resp):
                return resp
            delay = backoff_s(attempt, cluster.retry_backoff_ms, cluster.retry_backoff_max_ms)
            if loop.time() + delay >= deadline:
                return resp  # raises NOT_CONTROLLER for its topics
            attempt += 1
            cluster.mark_stale()
            await cluster.refresh_metadata()


    async def _send_to_coordinator(self, group_id: str, request: Request,
                                   rtype: type[R]) -> R:
        """To the group's coordinator (FindCoordinator first, as Kafka's admin does); an
        answer saying it moved or is loading finds it again and resends, until the
        request timeout. Such an answer changed nothing, so resending is safe."""
        cluster = self._cluster
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cluster.request_timeout_ms / 1000
        attempt = 0
        while True:
            node = await cluster.coordinator_node(group_id)
            timeout_ms = max(int((deadline - loop.time()) * 1000), 1)
            resp = await cluster.send_to(node, request, response_type=rtype,
                                         timeout_ms=timeout_ms)
            codes = _group_codes(resp)
            if not codes & _COORDINATOR_MOVED:
                if resp.error_code != ErrorCode.NONE:
                    _raise_for(resp.error_code, resp.error_message, request.API_KEY.name)
                return resp
            delay = backoff_s(attempt, cluster.retry_backoff_ms, cluster.retry_backoff_max_ms)
            if loop.time() + delay >= deadline:
                _raise_for(resp.error_code or min(codes & _COORDINATOR_MOVED),
                           resp.error_message, f"group {group_id!r}")
                return resp
            attempt += 1
            await asyncio.sleep(delay)

    async def _on_every_broker(self, request: Request, rtype: type[R]) -> list[R]:
        """The same request to every live broker (ListGroups: each lists the groups it
        coordinates); a single broker is asked once."""
        cluster = self._cluster
        await cluster.refresh_metadata()
        nodes = sorted(cluster.nodes)
        if len(nodes) <= 1:
            return [await self._send(request, rtype)]
        answers = []
        for node in nodes:
            resp = await cluster.send_to(node, request, response_type=rtype)
            if resp.error_code != ErrorCode.NONE:
                _raise_for(resp.error_code, resp.error_message, request.API_KEY.name)
            answers.append(resp)
        return answers


_COORDINATOR_MOVED: Final = frozenset({ErrorCode.NOT_COORDINATOR,
                                       ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


def _group_codes(resp: Response) -> set[int]:
    """A group API's error codes: its own and its groups'."""
    items = getattr(resp, "groups", None) or getattr(resp, "results", None) or []
    return {resp.error_code, *(getattr(g, "error_code", ErrorCode.NONE) for g in items)}


def _codes(resp: Response) -> set[int]:
    """Every error code of a topic API's answer: its own and its topics'."""
    items = (getattr(resp, "topics", None) or getattr(resp, "responses", None)
             or getattr(resp, "results", None) or [])
    return {resp.error_code, *(getattr(r, "error_code", ErrorCode.NONE) for r in items)}


def _raise_for(code: int, message: str | None, what: str, name: str | None = None) -> None:
    """Raise for an error code, naming ``what`` (``topic 'a'``) unless the broker's
    message already names it (``topic 'a' already exists``, ``invalid topic name 'a'``)."""
    if code == ErrorCode.NONE:
        return
    if message and name is not None and repr(name) in message:
        raise error_for(code, message)
    raise error_for(code, f"{what}: {message}" if message else what)


def _assignment(data: bytes) -> list[TopicPartition] | None:
    if not data:
        return []
    try:
        a = decode_assignment(data)
    except ProtocolError:
        return None
    return [TopicPartition(t, p) for t, ps in a.assigned_partitions for p in sorted(ps)]


def _topics(data: bytes) -> list[str] | None:
    if not data:
        return None
    try:
        return list(decode_subscription(data).topics)
    except ProtocolError:
        return None


__all__ = [
    "DEFAULT_SCRAM_ITERATIONS", "EARLIEST", "LATEST", "Admin", "BrokerDescription",
    "ClusterDescription", "GroupDescription", "GroupListing", "MemberDescription",
    "PartitionDescription", "PartitionLag", "ScramCredentialInfo", "TopicDescription",
    "TopicSpec",
]
