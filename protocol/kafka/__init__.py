"""Apache Kafka's own binary protocol, sans I/O: the request and response codec
(``codec``), record batches (``records``) and the consumer protocol's embedded bytes
(``consumer_protocol``), for the listener that unmodified Kafka clients talk to."""
