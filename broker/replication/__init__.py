"""Replication between brokers: a leader's view of its followers (:mod:`.leader`), the
replica manager that takes on roles from the cluster image (:mod:`.replicas`), the
fetchers that copy a leader's log (:mod:`.fetcher`) over authenticated inter-broker
connections (:mod:`.peer`, :mod:`.peer_auth`)."""
