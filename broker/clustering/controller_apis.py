"""The topic APIs whose answers come from the cluster's metadata, not this broker's disk:
Metadata, FindCoordinator, and the controller's CreateTopics, CreatePartitions and
DeleteTopics (NOT_CONTROLLER from any other broker, as Kafka before KIP-590).

Addresses follow Kafka's rule: a client is told each broker's address for the listener
its request came in on; a broker without that listener is left out of Metadata's
brokers, the partitions it leads answer LEADER_NOT_AVAILABLE, and FindCoordinator for a
group it coordinates answers COORDINATOR_NOT_AVAILABLE.

A topic exists once etcd says so; each broker's replica manager then creates or deletes
its own replicas. Produce, Fetch and the offset APIs stay in ``broker.topic_apis`` and
``broker.fetch``, which ask ``broker.clustering.leadership`` who leads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections.abc import Awaitable, Mapping
from typing import Final, TypeVar

from groupwire.broker.cluster.controller import propose_topic_txn
from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import NO_LEADER, BrokerInfo, TopicAssignment
from groupwire.broker.cluster.placement import InvalidReplicationFactor
from groupwire.broker.clustering.controller_runtime import (
    InvalidPartitionsError,
    NotControllerError,
    TopicExistsError,
    UnknownTopicError,
)
from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.config import BrokerSettings
from groupwire.broker.etcd.store import EtcdError
from groupwire.broker.logs import get_logger
from groupwire.broker.storage.metadata import INTERNAL_TOPICS, OFFSETS_TOPIC
from groupwire.broker.topics.rules import (
    DEFAULT,
    Limits,
    Refusal,
    Topics,
    check_creates,
    check_deletes,
    check_growths,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    PartitionElectionResult,
    ReplicaElectionResult,
)
from groupwire.protocol.steps import Steps, run_steps

log = get_logger("groupwire.cluster")

T = TypeVar("T")

CONTROLLER_WAIT_S: Final = 30.0
"""Longest a CreateTopics, CreatePartitions or DeleteTopics waits for etcd to take the
change and for the watch to bring it back (REQUEST_TIMED_OUT after it)."""

PREFERRED: Final = 0
UNCLEAN: Final = 1
"""ElectLeaders' ``election_type`` values (Kafka's ElectionType)."""

METADATA_STEP: Final = 1000
"""Partitions described in one step of a Metadata answer (~1 ms)."""


class ClusterApis:
    def __init__(self, settings: BrokerSettings, node: ClusterNode) -> None:
        self._settings = settings
        self._node = node

    # --- Metadata -----------------------------------------------------------------------

    def auto_creates(self, request: MetadataRequest) -> bool:
        if (request.topics is None or not request.allow_auto_topic_creation
                or not self._settings.auto_create_topics):
            return False
        image = self._node.image
        return any(t.name not in image.topics for t in request.topics)

    async def metadata_creating(self, request: MetadataRequest, listener: str | None = None,
                                ) -> MetadataResponse:
        """Proposes each unknown topic named (any broker may: the assignment is put if
        absent, and the controller writes its partition states); the answer then says
        LEADER_NOT_AVAILABLE for it until it has leaders, as Kafka's does."""
        failed: dict[str, tuple[ErrorCode, str]] = {}
        image = self._node.image
        s = self._settings
        unknown = [name for name in dict.fromkeys(t.name for t in request.topics or [])
                   if name not in image.topics]
        rf = min(s.default_replication_factor, max(len(image.brokers), 1))
        answers = check_creates([(name, DEFAULT, rf) for name in unknown],
                                self._topics_view(), self._limits())
        for name, answer in zip(unknown, answers, strict=True):
            if isinstance(answer, Refusal):
                failed[name] = (answer.code, answer.message)
                continue
            try:
                txn = propose_topic_txn(image, name, answer.partitions, rf,
                                        random.randrange(max(len(image.brokers), 1)),
                                        str(uuid.uuid4()))
                await self._node.etcd.txn(txn)
                log.info("topic_proposed", topic=name, partitions=answer.partitions,
                         replication_factor=rf)
            except (InvalidReplicationFactor, EtcdError) as exc:
                failed[name] = (ErrorCode.LEADER_NOT_AVAILABLE, str(exc))
        response = run_steps(self.metadata_steps(request, listener))
        topics = []
        for topic in response.topics:
            if topic.name in failed:
                code, message = failed[topic.name]
                topic = dataclasses.replace(topic, error_code=code, error_message=message)
            elif topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                topic = dataclasses.replace(
                    topic, error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                    error_message=f"topic {topic.name!r} is being created")
            topics.append(topic)
        response = dataclasses.replace(response, topics=topics)
        return response

    def metadata_steps(self, request: MetadataRequest, listener: str | None = None,
                       ) -> Steps[MetadataResponse]:
        """``listener``: the one the request came in on (None: the registered,
        inter-broker, addresses)."""
        image = self._node.image
        reachable = {b.node_id: address for b in image.brokers.values()
                     if (address := _address(b, listener)) is not None}
        names = (sorted(image.topics) if request.topics is None
                 else [t.name for t in request.topics])
        topics: list[MetadataTopic] = []
        for name in names:
            assignment = image.topics.get(name)
            if assignment is None:
                topics.append(MetadataTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"unknown topic {name!r}", name=name))
                continue
            partitions: list[MetadataPartition] = []
            count = len(assignment.replicas)
            for start in range(0, count, METADATA_STEP):
                partitions.extend(_partition(image, assignment, p, reachable, listener)
                                  for p in range(start, min(start + METADATA_STEP, count)))
                yield
            topics.append(MetadataTopic(name=name, is_internal=assignment.internal,
                                        partitions=partitions))
        controller = image.controller_id
        return MetadataResponse(
            brokers=[MetadataBroker(node_id=b.node_id, host=reachable[b.node_id][0],
                                    port=reachable[b.node_id][1], rack=b.rack)
                     for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
                     if b.node_id in reachable],
            cluster_id=self._node.cluster,
            controller_id=-1 if controller is None else controller, topics=topics)

    # --- FindCoordinator ----------------------------------------------------------------

    def find_coordinator(self, request: FindCoordinatorRequest, listener: str | None = None,
                         ) -> FindCoordinatorResponse:
        """The leader of the group's ``__consumer_offsets`` partition, from any broker, at
        its address for ``listener`` (None: the registered one)."""
        if request.key_type != 0:
            return FindCoordinatorResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"key_type: 0 (group) or 1 (transactional id), "
                              f"got {request.key_type}")
        image = self._node.image
        offsets = image.topics.get(OFFSETS_TOPIC)
        if offsets is None:
            live = len(image.brokers)
            return FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=f"{OFFSETS_TOPIC} is not created yet: it needs "
                              f"{self._settings.offsets_topic_replication_factor} live "
                              f"brokers (--offsets-topic-replication-factor), {live} are")
        p = coordinator_partition(request.key, len(offsets.replicas))
        state = image.partitions.get((OFFSETS_TOPIC, p))
        broker = None if state is None else image.brokers.get(state.leader)
        if broker is None:
            return FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=f"{OFFSETS_TOPIC}-{p}, the coordinator's partition of group "
                              f"{request.key!r}, has no leader now")
        address = _address(broker, listener)
        if address is None:
            return FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=f"broker {broker.node_id}, the coordinator of group "
                              f"{request.key!r}, has no {listener} listener")
        return FindCoordinatorResponse(node_id=broker.node_id, host=address[0],
                                       port=address[1])

    # --- the controller's APIs ----------------------------------------------------------

    # The rules (broker.topics.rules) see the cluster as the image has it: every
    # broker's store holds the internal topics' partitions, and a broker with a replica
    # of a topic keeps all of its partitions (broker.clustering.replica_manager), so that is
    # what it hosts. A creation may be placed on any live broker: the fullest is checked.

    def _limits(self) -> Limits:
        s = self._settings
        return Limits(max_partitions=s.max_partitions, default_partitions=s.num_partitions,
                      default_replication_factor=s.default_replication_factor)

    def _hosted(self) -> dict[int, int]:
        """Partitions each live broker hosts, by the image."""
        image = self._node.image
        internal = self._node.store.offsets_partitions + 1  # and __group_events' one
        hosted = dict.fromkeys(image.brokers, internal)
        for topic in image.topics.values():
            if topic.internal:
                continue
            for node in {n for replicas in topic.replicas for n in replicas}:
                if node in hosted:
                    hosted[node] += len(topic.replicas)
        return hosted

    def _topics_view(self, hosted: Mapping[int, int] | None = None) -> Topics:
        image = self._node.image
        hosted = self._hosted() if hosted is None else hosted
        return Topics(
            partitions={name: len(t.replicas) for name, t in image.topics.items()},
            internal={*INTERNAL_TOPICS, *(n for n, t in image.topics.items() if t.internal)},
            hosted=max(hosted.values(), default=0), brokers=len(image.brokers))

    def _refuse_all(self, names: list[str]) -> Refusal | None:
        """NOT_CONTROLLER for every entry, off the controller (Kafka before KIP-590)."""
        controller = self._node.controller
        if controller is None or not controller.is_controller:
            return Refusal(ErrorCode.NOT_CONTROLLER, self._not_controller())
        return None

    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        controller = self._node.controller
        names = [t.name for t in request.topics]
        if (refusal := self._refuse_all(names)) is not None:
            return CreateTopicsResponse(topics=[CreatableTopicResult(
                name=name, error_code=refusal.code, error_message=refusal.message)
                for name in names])
        assert controller is not None
        answers = check_creates(
            [(t.name, t.num_partitions, t.replication_factor) for t in request.topics],
            self._topics_view(), self._limits())
        results: list[CreatableTopicResult] = []
        for name, answer in zip(names, answers, strict=True):
            def fail(code: ErrorCode, message: str, name: str = name) -> None:
                results.append(CreatableTopicResult(name=name, error_code=code,
                                                    error_message=message))
            if isinstance(answer, Refusal):
                fail(answer.code, answer.message)
                continue
            partitions, rf = answer.partitions, answer.replication_factor
            try:
                await _bounded(controller.create_topic(name, partitions, rf))
            except InvalidReplicationFactor as exc:
                fail(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc))
                continue
            except TopicExistsError as exc:
                fail(ErrorCode.TOPIC_ALREADY_EXISTS, str(exc))
                continue
            except NotControllerError as exc:
                fail(ErrorCode.NOT_CONTROLLER, str(exc))
                continue
            except EtcdError as exc:
                fail(ErrorCode.REQUEST_TIMED_OUT, f"etcd: {exc}")
                continue
            log.info("topic_created", topic=name, partitions=partitions,
                     replication_factor=rf)
            results.append(CreatableTopicResult(name=name, num_partitions=partitions,
                                                replication_factor=rf))
        return CreateTopicsResponse(topics=results)

    async def create_partitions(self, request: CreatePartitionsRequest,
                                ) -> CreatePartitionsResponse:
        controller = self._node.controller
        names = [t.name for t in request.topics]
        if (refusal := self._refuse_all(names)) is not None:
            return CreatePartitionsResponse(results=[CreatePartitionsTopicResult(
                name=name, error_code=refusal.code, error_message=refusal.message)
                for name in names])
        assert controller is not None
        image = self._node.image
        hosted = self._hosted()
        # a broker given a new partition of a topic it has no replica of takes it whole
        hosted_for = {}
        for name in names:
            topic = image.topics.get(name)
            if topic is not None:
                holders = {n for replicas in topic.replicas for n in replicas}
                hosted_for[name] = max(
                    (h + (0 if node in holders else len(topic.replicas))
                     for node, h in hosted.items()), default=0)
        answers = check_growths([(t.name, t.count) for t in request.topics],
                                self._topics_view(hosted), self._limits(), hosted_for)
        results: list[CreatePartitionsTopicResult] = []
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, Refusal):
                results.append(CreatePartitionsTopicResult(
                    name=name, error_code=answer.code, error_message=answer.message))
                continue
            code, message = ErrorCode.NONE, None
            try:
                await _bounded(controller.create_partitions(name, answer.total))
            except UnknownTopicError as exc:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
            except InvalidPartitionsError as exc:
                code, message = ErrorCode.INVALID_PARTITIONS, str(exc)
            except InvalidReplicationFactor as exc:
                code, message = ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)
            except NotControllerError as exc:
                code, message = ErrorCode.NOT_CONTROLLER, str(exc)
            except EtcdError as exc:
                code, message = ErrorCode.REQUEST_TIMED_OUT, f"etcd: {exc}"
            results.append(CreatePartitionsTopicResult(name=name, error_code=code,
                                                       error_message=message))
        return CreatePartitionsResponse(results=results)

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        controller = self._node.controller
        names = list(request.topic_names)
        if (refusal := self._refuse_all(names)) is not None:
            return DeleteTopicsResponse(responses=[DeletableTopicResult(
                name=name, error_code=refusal.code, error_message=refusal.message)
                for name in names])
        assert controller is not None
        results: list[DeletableTopicResult] = []
        for name, answer in zip(names, check_deletes(names, self._topics_view()),
                                strict=True):
            if isinstance(answer, Refusal):
                results.append(DeletableTopicResult(name=name, error_code=answer.code,
                                                    error_message=answer.message))
                continue
            code, message = ErrorCode.NONE, None
            try:
                await _bounded(controller.delete_topic(name))
                log.info("topic_deleted", topic=name)
            except UnknownTopicError as exc:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
            except NotControllerError as exc:
                code, message = ErrorCode.NOT_CONTROLLER, str(exc)
            except EtcdError as exc:
                code, message = ErrorCode.REQUEST_TIMED_OUT, f"etcd: {exc}"
            results.append(DeletableTopicResult(name=name, error_code=code,
                                                error_message=message))
        return DeleteTopicsResponse(responses=results)

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        """Preferred (``election_type`` 0) or unclean (1: an operator's explicit
        choice of data loss) elections by the controller (NOT_CONTROLLER, for the whole
        request, from any other broker), answered once the image shows each new leader
        or ``timeout_ms`` has passed."""
        if request.election_type not in (PREFERRED, UNCLEAN):
            return ElectLeadersResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"election_type: 0 (preferred) or 1 (unclean), got "
                              f"{request.election_type}")
        unclean = request.election_type == UNCLEAN
        controller = self._node.controller
        if controller is None or not controller.is_controller:
            return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER,
                                        error_message=self._not_controller())
        named = (None if request.topic_partitions is None
                 else {(t.topic, p) for t in request.topic_partitions for p in t.partitions})
        try:
            outcome = await controller.elect_leaders(
                named, unclean=unclean, timeout_s=max(request.timeout_ms, 0) / 1000)
        except NotControllerError as exc:
            return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER,
                                        error_message=str(exc))
        except EtcdError as exc:
            return ElectLeadersResponse(error_code=ErrorCode.REQUEST_TIMED_OUT,
                                        error_message=f"etcd: {exc}")
        image = self._node.image
        order = ([(t.topic, t.partitions) for t in request.topic_partitions]
                 if request.topic_partitions is not None
                 else [(name, sorted(p for t, p in outcome if t == name))
                       for name in sorted({t for t, _ in outcome})])
        elected = sorted(tp for tp, code in outcome.items() if code == ErrorCode.NONE)
        if elected and unclean:
            log.warning("unclean_leaders_elected",
                        partitions=[f"{t}-{p}" for t, p in elected],
                        leaders={f"{t}-{p}": image.partitions[(t, p)].leader
                                 for t, p in elected if (t, p) in image.partitions},
                        detail="acknowledged records the new leaders lack are lost")
        elif elected:
            log.info("preferred_leaders_elected", partitions=len(elected))
        message = _unclean_message if unclean else _election_message
        return ElectLeadersResponse(replica_election_results=[
            ReplicaElectionResult(topic=topic, partition_result=[
                PartitionElectionResult(partition_id=p, error_code=outcome[(topic, p)],
                                        error_message=message(
                                            image, (topic, p), outcome[(topic, p)]))
                for p in partitions])
            for topic, partitions in order])

    def _not_controller(self) -> str:
        node = self._node
        if node.fenced:  # its image may name itself: say why instead
            return (f"broker {node.node_id} is fenced (its etcd lease or metadata is not "
                    f"current) and is not the controller; ask another broker")
        controller = node.image.controller_id
        if controller == node.node_id:
            where = "it has just stepped down"
        else:
            where = "no broker is" if controller is None else f"broker {controller} is"
        return f"broker {node.node_id} is not the controller: {where}"


def _address(broker: BrokerInfo, listener: str | None) -> tuple[str, int] | None:
    return (broker.host, broker.port) if listener is None else broker.address(listener)


def _partition(image: ClusterImage, assignment: TopicAssignment, p: int,
               reachable: Mapping[int, object], listener: str | None) -> MetadataPartition:
    replicas = list(assignment.replicas[p])
    offline = [r for r in replicas if r not in image.brokers]
    state = image.partitions.get((assignment.name, p))
    if (state is not None and state.leader != NO_LEADER and state.leader in image.brokers
            and state.leader not in reachable):
        return MetadataPartition(  # Kafka's answer before LISTENER_NOT_FOUND (Metadata v6)
            error_code=ErrorCode.LEADER_NOT_AVAILABLE,
            error_message=f"{assignment.name}-{p}: its leader, broker {state.leader}, has "
                          f"no {listener} listener", partition_index=p,
            leader_id=NO_LEADER, leader_epoch=state.leader_epoch, replica_nodes=replicas,
            isr_nodes=list(state.isr), offline_replicas=offline)
    if state is None or state.leader == NO_LEADER:
        return MetadataPartition(
            error_code=ErrorCode.LEADER_NOT_AVAILABLE,
            error_message=f"{assignment.name}-{p} has no leader now", partition_index=p,
            leader_id=NO_LEADER, leader_epoch=-1 if state is None else state.leader_epoch,
            replica_nodes=replicas, isr_nodes=[] if state is None else list(state.isr),
            offline_replicas=offline)
    return MetadataPartition(partition_index=p, leader_id=state.leader,
                             leader_epoch=state.leader_epoch, replica_nodes=replicas,
                             isr_nodes=list(state.isr), offline_replicas=offline)


def _election_message(image: ClusterImage, tp: tuple[str, int], code: ErrorCode,
                      ) -> str | None:
    """Why a partition's preferred election came out as it did, read from the image
    the answer is sent with."""
    topic, p = tp
    if code == ErrorCode.NONE:
        return None
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"unknown topic or partition {topic}-{p}"
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return f"{topic}-{p}: the new leader was not in the metadata in time"
    assignment = image.topics.get(topic)
    replicas = assignment.replicas[p] if assignment is not None and p < len(
        assignment.replicas) else ()
    preferred = replicas[0] if replicas else NO_LEADER
    if code == ErrorCode.ELECTION_NOT_NEEDED:
        return f"{topic}-{p} is already led by its preferred replica {preferred}"
    state = image.partitions.get(tp)
    if state is None:
        return f"{topic}-{p} has no state yet"
    if preferred not in image.brokers:
        return f"{topic}-{p}: its preferred replica {preferred} is not live"
    if state.lost_storage(preferred, image.brokers):
        return (f"{topic}-{p}: its preferred replica {preferred} came back without the "
                f"log its ISR entry recorded (a new storage id)")
    return (f"{topic}-{p}: its preferred replica {preferred} is not in the ISR "
            f"{list(state.isr)}")


def _unclean_message(image: ClusterImage, tp: tuple[str, int], code: ErrorCode,
                     ) -> str | None:
    """Why a partition's unclean election came out as it did."""
    topic, p = tp
    state = image.partitions.get(tp)
    if code == ErrorCode.NONE:
        return None
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"unknown topic or partition {topic}-{p}"
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return f"{topic}-{p}: the new leader was not in the metadata in time"
    if state is None:
        return f"{topic}-{p} has no state yet"
    if code == ErrorCode.ELECTION_NOT_NEEDED:
        if state.leader != NO_LEADER:
            return f"{topic}-{p} is led by broker {state.leader}: nothing to lose data for"
        return (f"{topic}-{p} has a live in-sync replica with its log: the controller "
                f"elects it without losing data")
    return f"{topic}-{p}: none of its replicas is live"


async def _bounded(work: Awaitable[T]) -> T:
    """``work`` within ``CONTROLLER_WAIT_S``; past it an EtcdError (REQUEST_TIMED_OUT):
    the change may or may not have been made, as Kafka's timed-out admin calls say."""
    try:
        async with asyncio.timeout(CONTROLLER_WAIT_S):
            return await work
    except TimeoutError:
        raise EtcdError(f"not done within {CONTROLLER_WAIT_S:.0f} s; the change may or "
                        f"may not have been made") from None
