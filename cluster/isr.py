"""ISR expansion proposed by partition leaders (Kafka's AlterPartition, over HTTP).

The leader of a partition proposes every ISR change; the controller validates its leader and
partition epochs and commits a ``PartitionChange``; the leader uses the new ISR only once it
arrives in the metadata image. Shrinking on broker death is the controller's job (fencing).

Criterion for "caught up" at this stage: follower replication does not exist yet, so a leader
treats every live (registered, unfenced) replica as caught up and proposes it back into the
ISR. When leader-to-follower replication lands, this criterion becomes "the follower fetched up
to the high watermark within ``replica.lag.time.max.ms``"; the proposal path stays as it is.
"""

from __future__ import annotations

import asyncio
import logging

from flux.protocol.errors import ErrorCode

from .controller_client import ControllerClient, ControllerUnavailableError
from .replica_manager import Partition, ReplicaManager

__all__ = ["IsrManager"]

log = logging.getLogger("flux.cluster.isr")


class IsrManager:
    """Periodically proposes ISR expansions for the partitions this broker leads."""

    def __init__(
        self,
        replicas: ReplicaManager,
        client: ControllerClient,
        *,
        broker_id: int,
        incarnation_id: str,
        interval_ms: int,
    ) -> None:
        self._replicas = replicas
        self._client = client
        self._broker_id = broker_id
        self._incarnation_id = incarnation_id
        self._interval_s = interval_ms / 1000
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            for partition in list(self._replicas.partitions()):
                wanted = self._wanted_isr(partition)
                if partition.is_leader and wanted != partition.state.isr:
                    await self._propose(partition, wanted)

    def _wanted_isr(self, partition: Partition) -> tuple[int, ...]:
        live = set(self._replicas.image.live_broker_ids())
        state = partition.state
        return tuple(
            replica for replica in state.replicas if replica in state.isr or replica in live
        )

    async def _propose(self, partition: Partition, isr: tuple[int, ...]) -> None:
        state = partition.state
        try:
            answer = await self._client.write(
                "POST",
                "/controller/partitions/alter",
                {
                    "broker_id": self._broker_id,
                    "incarnation_id": self._incarnation_id,
                    "topic_id": partition.topic_id,
                    "partition": partition.index,
                    "leader_epoch": state.leader_epoch,
                    "partition_epoch": state.partition_epoch,
                    "isr": list(isr),
                },
                timeout_s=self._interval_s * 4 + 1.0,
            )
        except ControllerUnavailableError as error:
            log.warning(
                "ISR change of %s-%d not delivered: %s", partition.topic, partition.index, error
            )
            return
        code = answer.get("error_code", 0)
        if code == 0:
            log.info(
                "%s-%d: ISR %s proposed and committed", partition.topic, partition.index, list(isr)
            )
        elif code not in (ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.FENCED_LEADER_EPOCH):
            log.warning(
                "%s-%d: ISR change refused: %s",
                partition.topic,
                partition.index,
                answer.get("error_message"),
            )
