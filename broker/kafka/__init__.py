"""The Kafka door: a listener speaking Apache Kafka's binary protocol in front of the broker.

Requests are decoded by ``groupwire.protocol.kafka.codec``, translated into the msgpack
door's request messages (``broker.kafka.apis``), dispatched exactly as the msgpack
listener dispatches them, and their answers translated back: one coordinator, one log,
one set of users and ACLs behind both doors (docs/protocol.md §13).
"""
