"""Transactions: Kafka's transaction coordinator, its state in ``__transaction_state``.

``coordinator`` (``TransactionCoordinator``: the transactional ids this broker coordinates,
InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn, the markers it writes and
their completion after a failover, timeouts), ``state`` (``TxnMetadata``, the state machine and
the records of ``__transaction_state``). The log side (open transactions, the last stable
offset, the aborted-transaction index) is in ``storage`` and ``cluster.replication``; the Kafka
handlers in ``cluster.kafka.transactions``.
"""
