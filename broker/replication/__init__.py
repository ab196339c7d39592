"""The cluster shells around the sans-I/O core in broker/cluster: the broker's lease and
registration, its watched copy of the metadata, and the controller task."""

from groupwire.broker.replication.controller_task import (
    ControllerTask,
    NotControllerError,
    TopicExistsError,
)
from groupwire.broker.replication.membership import FenceRule, Membership, RegistrationError
from groupwire.broker.replication.metadata_watch import MetadataWatcher

__all__ = ["ControllerTask", "FenceRule", "Membership", "MetadataWatcher",
           "NotControllerError", "RegistrationError", "TopicExistsError"]
