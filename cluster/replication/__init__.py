"""Partition replicas and their replication between brokers.

``replica_manager`` (``ReplicaManager``: every partition this broker hosts, driven by the
metadata image), ``partition`` (``Partition``: one replica, leader or follower), ``fetcher``
(``ReplicaFetcherManager``: the follower side), ``isr`` (``IsrManager``: ISR changes proposed
to the controller), ``wire`` (the binary replication fetch answer), ``peers`` (``BrokerPeers``:
HTTP calls to the other brokers).
"""
