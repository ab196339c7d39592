"""ElectLeaders through the Kafka door: preferred (and, in cluster mode, unclean) leader
elections, as Kafka's admin clients ask for them (KIP-183, KIP-460)."""

from __future__ import annotations

from typing import Final

from groupwire.broker.kafka.translate import (
    Body,
    Dispatch,
    KafkaContext,
    Simple,
    Step,
    Translator,
    kafka_code,
)
from groupwire.protocol.messages import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersTopic,
    Response,
)

ELECT_LEADERS: Final = 43


def _request(ctx: KafkaContext, body: Body) -> Step:
    topics = body["topic_partitions"]
    return Dispatch(ElectLeadersRequest(
        election_type=body.get("election_type", 0) if ctx.api_version >= 1 else 0,
        topic_partitions=None if topics is None else [
            ElectLeadersTopic(topic=t["topic"], partitions=list(t["partitions"]))
            for t in topics],
        timeout_ms=body["timeout_ms"]))


def _response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, ElectLeadersResponse)
    if response.error_code and ctx.api_version == 0:
        # v0 has no top-level code: the refusal goes on every partition named
        code = kafka_code(response.error_code)
        return {"throttle_time_ms": 0, "replica_election_results": [
            {"topic": t["topic"], "partition_result": [
                {"partition_id": p, "error_code": code,
                 "error_message": response.error_message} for p in t["partitions"]]}
            for t in body["topic_partitions"] or []]}
    return {"throttle_time_ms": 0, "error_code": kafka_code(response.error_code),
            "replica_election_results": [
                {"topic": r.topic, "partition_result": [
                    {"partition_id": p.partition_id, "error_code": kafka_code(p.error_code),
                     "error_message": p.error_message} for p in r.partition_result]}
                for r in response.replica_election_results]}


ELECTION_TRANSLATORS: dict[int, Translator] = {
    ELECT_LEADERS: Simple(_request, _response),
}
