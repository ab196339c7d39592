"""Cluster mode's sans-I/O core (docs/design/cluster.md): what etcd holds, as values;
the decisions of the controller and of partition leaders, as guarded writes.

Like the coordinator, nothing here imports asyncio or reads the clock: time is an
argument, and the shells in ``broker/etcd`` and ``broker/replication`` do the I/O.
"""
