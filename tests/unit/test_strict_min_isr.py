"""Kafka's "strict min ISR" (KIP-966): a leader whose ISR is smaller than
``min.insync.replicas`` does not move its high watermark, and answers the ``acks=all``
produces waiting on it NOT_ENOUGH_REPLICAS_AFTER_APPEND. Without the rule a partitioned
leader whose ISR shrank to itself let consumers read records that the ELR member elected next
did not have (``fluxctl chaos run mixed --seed 2 --duration 20 --netns --disks``: offsets read,
then reused for other records)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from flux.cluster.config import parse_config
from flux.cluster.topics import TopicConfig
from flux.controller.image import PartitionState
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch

from tests.unit.test_fetch_session import SECRET, _partition

WHOLE = PartitionState((1, 2, 3), (1, 2, 3), 1, 0, 0)


def _leader(tmp_path: Path, min_isr: int = 2):
    partition = _partition(tmp_path, 1, 0)
    defaults = parse_config(SECRET, environ={})["topic"]
    partition.config = TopicConfig.from_defaults(
        defaults, {"min.insync.replicas": str(min_isr)}, message_max_bytes=1 << 20
    )
    partition.become_leader(WHOLE)
    partition.append_as_leader(build_batch([(None, b"a", ())]))
    partition.record_follower_fetch(2, 1)
    partition.record_follower_fetch(3, 1)
    assert partition.high_watermark == 1
    return partition


def test_the_high_watermark_stands_still_under_the_min_isr(tmp_path: Path) -> None:
    partition = _leader(tmp_path)
    shrunk = dataclasses.replace(WHOLE, isr=(1,), partition_epoch=1)
    partition.update_state(shrunk)
    assert partition.under_min_isr()
    partition.append_as_leader(build_batch([(None, b"b", ())]))
    assert partition.high_watermark == 1  # alone, the leader's own append is not enough
    # A follower back in the ISR (committed by the controller) lets it move again.
    partition.record_follower_fetch(2, 2)
    assert partition.high_watermark == 1
    partition.update_state(dataclasses.replace(shrunk, isr=(1, 2), partition_epoch=2))
    assert not partition.under_min_isr() and partition.high_watermark == 2


def test_a_proposed_member_counts_toward_the_min_isr(tmp_path: Path) -> None:
    """The maximal ISR (KIP-497) counts: a shrink in flight keeps the leaving replica
    counted, and waited for."""
    partition = _leader(tmp_path)
    partition.update_state(dataclasses.replace(WHOLE, isr=(1,), partition_epoch=1))
    partition.propose_isr((1, 2))
    assert not partition.under_min_isr()
    partition.append_as_leader(build_batch([(None, b"b", ())]))
    partition.record_follower_fetch(2, 2)
    assert partition.high_watermark == 2


def test_waiting_produces_fail_when_the_isr_falls_under_the_min(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _leader(tmp_path)
        partition.append_as_leader(build_batch([(None, b"b", ())]))
        waiting = partition.add_delayed_produce(2)
        assert not waiting.done()
        partition.update_state(dataclasses.replace(WHOLE, isr=(1, 2), partition_epoch=1))
        assert not waiting.done()  # two of min 2: still waiting for replica 2
        partition.update_state(dataclasses.replace(WHOLE, isr=(1,), partition_epoch=2))
        assert waiting.result() == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        # And one arriving while under the min ISR is answered at once.
        partition.append_as_leader(build_batch([(None, b"c", ())]))
        late = partition.add_delayed_produce(3)
        assert late.result() == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert partition.high_watermark == 1

    asyncio.run(scenario())


def test_fewer_replicas_than_the_min_isr_use_the_replica_count(tmp_path: Path) -> None:
    """Kafka's effective min ISR: min(min.insync.replicas, replicas)."""
    partition = _leader(tmp_path, min_isr=5)
    assert not partition.under_min_isr()
    partition.append_as_leader(build_batch([(None, b"b", ())]))
    partition.record_follower_fetch(2, 2)
    partition.record_follower_fetch(3, 2)
    assert partition.high_watermark == 2
