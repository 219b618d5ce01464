"""A ``TransactionCoordinator`` on its own, for unit tests: no metadata image, no producer ids
and no peers; every transactional id is owned here, in ``partition`` (the test's stand-in for
its ``__transaction_state`` partition)."""

from __future__ import annotations

from typing import Any

from flux.cluster.transactions.coordinator import DEFAULT_EXPIRATION_MS, TransactionCoordinator


class _Replicas:
    def add_image_listener(self, listener: Any) -> None:
        pass


def lone_coordinator(
    partition: Any, *, expiration_ms: int = DEFAULT_EXPIRATION_MS
) -> TransactionCoordinator:
    async def create_topic() -> None:
        pass

    coordinator = TransactionCoordinator(
        _Replicas(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # no InitProducerId here
        peers=lambda: None,  # type: ignore[arg-type,return-value]
        create_topic=create_topic,
        expiration_ms=expiration_ms,
    )
    coordinator._owner = lambda transactional_id: (partition, 1)  # type: ignore[method-assign,assignment,return-value]
    return coordinator
