"""The topic-admin interface: what the broker's shell asks of topic administration,
served by a single broker's disk (``broker.topic_apis.TopicApis``) or by the cluster's
controller through etcd (``broker.clustering.controller_apis.ClusterApis``). Both check
every request with :mod:`.rules`, so an answer does not depend on the mode."""

from __future__ import annotations

from typing import Protocol

from groupwire.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)


class TopicAdmin(Protocol):
    def auto_creates(self, request: MetadataRequest) -> bool:
        """Whether ``request`` names a topic Metadata would create."""
        ...

    async def metadata_creating(self, request: MetadataRequest,
                                listener: str | None = None) -> MetadataResponse:
        """Metadata that first creates the unknown topics it names."""
        ...

    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        ...

    async def create_partitions(self, request: CreatePartitionsRequest,
                                ) -> CreatePartitionsResponse:
        ...

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        """Answered once the deletion is durable; files go afterwards, off the loop."""
        ...
