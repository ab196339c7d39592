"""This broker's part in a cluster, the asyncio shells around the sans-I/O core in
``broker.cluster``: its registration and lease (:mod:`.registration`), its watched copy
of the metadata (:mod:`.image_watch`), the controller when it is elected
(:mod:`.controller_runtime`, :mod:`.controller_apis`), which partitions it may serve
(:mod:`.leadership`), the forwarding of group events (:mod:`.event_forwarding`), all
started and stopped together by :class:`~.node.ClusterNode`. Replication itself is
``broker.replication``."""

from groupwire.broker.clustering.controller_runtime import (
    ControllerTask,
    NotControllerError,
    TopicExistsError,
)
from groupwire.broker.clustering.image_watch import ImageWatcher
from groupwire.broker.clustering.registration import FenceRule, Registration, RegistrationError

__all__ = ["ControllerTask", "FenceRule", "ImageWatcher", "NotControllerError",
           "Registration", "RegistrationError", "TopicExistsError"]
