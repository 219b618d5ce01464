"""InitProducerId, and the producer ids it gives out, drawn from blocks the controller
allocates to this broker.

The controller hands each broker a disjoint block of ids (``POST /controller/producer-ids``,
committed as an ``AllocateProducerIds`` record), so brokers give out unique ids without asking
the quorum for every producer. One owner: the broker's event loop; a lock serializes the
refill so concurrent InitProducerId requests share one controller round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from ..metadata.controller_client import ControllerClient, ControllerUnavailableError
from .common import KafkaApisBase, log

__all__ = ["ProducerIdApis", "ProducerIdManager", "ProducerIdUnavailableError"]

ALLOCATION_TIMEOUT_S = 10.0
MAX_PRODUCER_EPOCH = 32767


class ProducerIdUnavailableError(RuntimeError):
    """No block could be allocated (the controller quorum is unavailable)."""


class ProducerIdManager:
    def __init__(self, client: ControllerClient, *, broker_id: int) -> None:
        self._client = client
        self._broker_id = broker_id
        self._next = 0
        self._end = 0  # exclusive end of the current block
        self._lock = asyncio.Lock()

    async def next_producer_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                await self._refill()
            producer_id = self._next
            self._next += 1
            return producer_id

    async def _refill(self) -> None:
        try:
            answer = await self._client.write(
                "POST",
                "/controller/producer-ids",
                {"broker_id": self._broker_id},
                timeout_s=ALLOCATION_TIMEOUT_S,
            )
        except ControllerUnavailableError as error:
            raise ProducerIdUnavailableError(str(error)) from None
        if answer.get("error_code", 0) != ErrorCode.NONE:
            raise ProducerIdUnavailableError(str(answer.get("error_message")))
        first = int(answer["first_producer_id"])
        self._next, self._end = first, first + int(answer["count"])


class ProducerIdApis(KafkaApisBase):
    """InitProducerId for idempotent producers."""

    _producer_ids: ProducerIdManager

    #: TransactionApis's (a mixin of the same ``KafkaApis``); annotated only, so not shadowed.
    _init_transactional_producer: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

    # -- InitProducerId -----------------------------------------------------------------------

    async def _init_producer_id(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Idempotent producers get a fresh producer id (epoch 0); a producer that names its
        id and epoch (v3+, KIP-360) gets the next epoch of the same id. A transactional id
        goes to the transaction coordinator (``transactions``)."""
        response: dict[str, Any] = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE}
        if body.get("transactional_id") is not None:
            return await self._init_transactional_producer(body)
        producer_id = body.get("producer_id", -1)
        producer_epoch = body.get("producer_epoch", -1)
        if producer_id >= 0 and 0 <= producer_epoch < MAX_PRODUCER_EPOCH:
            response.update(producer_id=producer_id, producer_epoch=producer_epoch + 1)
            return response
        try:
            response.update(
                producer_id=await self._producer_ids.next_producer_id(), producer_epoch=0
            )
        except ProducerIdUnavailableError as error:
            log.warning("no producer id for a client: %s", error)
            response.update(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1
            )
        return response
