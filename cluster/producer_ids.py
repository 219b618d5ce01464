"""Producer ids for InitProducerId, drawn from blocks the controller allocates to this broker.

The controller hands each broker a disjoint block of ids (``POST /controller/producer-ids``,
committed as an ``AllocateProducerIds`` record), so brokers give out unique ids without asking
the quorum for every producer. One owner: the broker's event loop; a lock serializes the
refill so concurrent InitProducerId requests share one controller round trip.
"""

from __future__ import annotations

import asyncio

from flux.protocol.errors import ErrorCode

from .controller_client import ControllerClient, ControllerUnavailableError

__all__ = ["ProducerIdManager", "ProducerIdUnavailableError"]

ALLOCATION_TIMEOUT_S = 10.0


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
