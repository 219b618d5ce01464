"""ISR changes proposed by partition leaders (Kafka's AlterPartition, over HTTP).

The leader of a partition proposes every ISR change; the controller validates its leader and
partition epochs and commits a ``PartitionChange``; the leader uses the new ISR only once it
arrives in the metadata image. A follower that has not caught up with the leader's log end
for ``broker.replica_lag_time_max_ms`` is proposed out of the ISR; a follower outside the ISR
whose log reached the high watermark (and the start of the current leader epoch) is proposed
back in. Fencing a dead broker removes it from every ISR at the controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from flux.protocol.errors import ErrorCode

from ..metadata.controller_client import ControllerClient, ControllerUnavailableError
from .partition import Partition, monotonic_ms
from .replica_manager import ReplicaManager

__all__ = ["IsrManager"]

log = logging.getLogger("flux.cluster.isr")

#: ISR changes sent in one AlterPartition request (the controller takes up to 10,000).
MAX_PROPOSALS_PER_REQUEST = 1000


class IsrManager:
    """Periodically proposes ISR shrinks and expansions for the partitions this broker leads."""

    def __init__(
        self,
        replicas: ReplicaManager,
        client: ControllerClient,
        *,
        broker_id: int,
        incarnation_id: str,
        lag_time_max_ms: int,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._replicas = replicas
        self._client = client
        self._broker_id = broker_id
        self._incarnation_id = incarnation_id
        self._lag_time_max_ms = lag_time_max_ms
        self._clock_ms = clock_ms
        self._interval_s = max(lag_time_max_ms / 4, 50) / 1000
        self._task: asyncio.Task[None] | None = None
        # (topic, partition) -> partition epoch of the proposal in flight, so one stale
        # proposal is not repeated before the image catches up.
        self._proposed: dict[tuple[str, int], int] = {}
        # Led partitions that may need an ISR change (see ``pass_proposals``).
        self._watch: set[Partition] = set()
        self._live: frozenset[int] = frozenset()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            proposals = self.pass_proposals()
            # Every change of a pass in one request and one Raft command (per thousand):
            # after a restart thousands of partitions expand their ISR at once.
            for start in range(0, len(proposals), MAX_PROPOSALS_PER_REQUEST):
                await self._propose(proposals[start : start + MAX_PROPOSALS_PER_REQUEST])

    def pass_proposals(self) -> list[tuple[Partition, tuple[int, ...]]]:
        """One pass: the ISR changes to propose now.

        It visits the watched partitions only: those that changed since the last pass (an
        append, a follower's progress, a role or ISR change), those of a follower session
        that closed or went quiet, those a returning broker may rejoin the ISR of, and those
        still unsettled. A partition leaves the watch
        once its ISR is what it should be and every ISR follower has its whole log through a
        live session; from then on it costs nothing until it changes again. So an idle
        cluster's pass is a few set operations, whatever its number of partitions.
        """
        self._watch |= self._replicas.take_isr_due()
        now_ms = self._clock_ms()
        quiet_ms = self._lag_time_max_ms // 2
        for session in self._replicas.fetch_sessions():
            if now_ms - session.last_fetch_ms > quiet_ms:
                # A follower that stopped fetching (paused, cut off) without closing its
                # connection: its partitions must be checked against the lag bound.
                for key in session.positions:
                    partition = self._replicas.partition(*key)
                    if partition is not None:
                        self._watch.add(partition)
        live = frozenset(self._replicas.image.live_broker_ids())
        returned = live - self._live
        self._live = live
        if returned:
            # Brokers came back (or joined): partitions they may rejoin the ISR of. A broker
            # often fetches before its registration reaches this image; once it does, nothing
            # else about those partitions changes, so they are found here, once.
            for partition in self._replicas.partitions():
                state = partition.state
                if partition.is_leader and any(
                    replica in returned and replica not in state.isr for replica in state.replicas
                ):
                    self._watch.add(partition)
        proposals = []
        for partition in list(self._watch):
            if (
                not partition.is_leader
                or self._replicas.partition(partition.topic, partition.index) is not partition
            ):
                self._watch.discard(partition)
                self._proposed.pop((partition.topic, partition.index), None)
                continue
            wanted = self._wanted_isr(partition, live)
            key = (partition.topic, partition.index)
            if wanted == partition.state.isr:
                self._proposed.pop(key, None)
                if _settled(partition):
                    self._watch.discard(partition)
            elif self._proposed.get(key) != partition.state.partition_epoch:
                self._proposed[key] = partition.state.partition_epoch
                proposals.append((partition, wanted))
        return proposals

    def _wanted_isr(self, partition: Partition, live: frozenset[int]) -> tuple[int, ...]:
        state = partition.state
        lagging = set(partition.lagging_followers(self._lag_time_max_ms))
        joining = {r for r in partition.caught_up_followers() if r in live}
        return tuple(
            replica
            for replica in state.replicas
            if (replica in state.isr and replica not in lagging) or replica in joining
        )

    async def _propose(self, proposals: list[tuple[Partition, tuple[int, ...]]]) -> None:
        states = [(partition, partition.state, isr) for partition, isr in proposals]
        for partition, _, isr in states:
            partition.propose_isr(isr)
        try:
            answer = await self._client.write(
                "POST",
                "/controller/partitions/alter",
                {
                    "broker_id": self._broker_id,
                    "incarnation_id": self._incarnation_id,
                    "partitions": [
                        {
                            "topic_id": partition.topic_id,
                            "partition": partition.index,
                            "leader_epoch": state.leader_epoch,
                            "partition_epoch": state.partition_epoch,
                            "isr": list(isr),
                        }
                        for partition, state, isr in states
                    ],
                },
                timeout_s=max(self._interval_s * 4, 1.0),
            )
        except ControllerUnavailableError as error:
            log.warning("%d ISR change(s) not delivered: %s", len(states), error)
            for partition, state, _ in states:
                self._proposed.pop((partition.topic, partition.index), None)
                partition.proposal_failed(state)
            return
        answers = answer.get("partitions")
        if answer.get("error_code", 0) != 0 or not isinstance(answers, list):
            log.warning("ISR changes refused: %s", answer.get("error_message"))
            for partition, state, _ in states:
                partition.proposal_failed(state)
            return
        for (partition, state, isr), result in zip(states, answers, strict=False):
            name = f"{partition.topic}-{partition.index}"
            code = result.get("error_code", 0)
            if code == 0:
                log.info("%s: ISR %s -> %s committed", name, list(state.isr), list(isr))
                if set(isr) - set(state.isr):
                    self._replicas.isr_expands += 1
                if set(state.isr) - set(isr):
                    self._replicas.isr_shrinks += 1
                continue
            partition.proposal_failed(state)
            if code not in (ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.FENCED_LEADER_EPOCH):
                log.warning("%s: ISR change refused: %s", name, result.get("error_message"))
        for partition, state, _ in states[len(answers) :]:
            partition.proposal_failed(state)  # not answered


def _settled(partition: Partition) -> bool:
    """Nothing can change this partition's ISR until something happens to it: every ISR
    follower has the leader's whole log and a live fetch session (a follower that stops
    fetching is noticed through its session; see ``IsrManager.pass_proposals``)."""
    end = partition.log_end_offset
    for replica in partition.state.isr:
        if replica == partition.broker_id:
            continue
        follower = partition.followers.get(replica)
        if follower is None or not follower.sessions or follower.log_end_offset < end:
            return False
    return True
