"""Deterministic divergence: a leader that appended without replicating, then lost its
leadership, ends with its extra tail truncated and a log byte-identical to the new leader's.

Two real ``Partition`` objects with real disk logs talk through ``serve_follower_fetch`` and
``apply_fetch_answer`` (the functions the HTTP fetch path calls), with no network.
"""

from __future__ import annotations

from pathlib import Path

from flux.cluster.config import parse_config
from flux.cluster.http.dedup import MESSAGE_ID_HEADER, MessageIdIndex
from flux.cluster.replication.partition import Partition
from flux.cluster.topics import TopicConfig
from flux.controller.image import PartitionState
from flux.protocol.records import build_batch
from flux.storage import LogConfig, PartitionLog
from flux.storage.leader_epochs import LeaderEpochCache

from tests.unit.test_config import SECRET


def _partition(tmp_path: Path, broker_id: int) -> Partition:
    defaults = parse_config(SECRET, environ={})["topic"]
    return Partition(
        broker_id=broker_id,
        topic="t",
        topic_id="id-t",
        index=0,
        log=PartitionLog.open(tmp_path / f"broker-{broker_id}", LogConfig()),
        config=TopicConfig.from_defaults(defaults, {}, message_max_bytes=1 << 20),
        state=PartitionState((1, 2), (1, 2), -1, -1, -1),
        epochs=LeaderEpochCache(),
    )


def _state(leader: int, epoch: int, isr: tuple[int, ...] = (1, 2)) -> PartitionState:
    return PartitionState((1, 2), isr, leader, epoch, epoch)


def _replicate(leader: Partition, follower: Partition, rounds: int = 10) -> None:
    """Fetch rounds until the follower's log end stops moving and no divergence remains."""
    for _ in range(rounds):
        answer = leader.serve_follower_fetch(
            follower.broker_id,
            fetch_offset=follower.log_end_offset,
            last_fetched_epoch=follower.epochs.latest_epoch,
            max_bytes=1 << 20,
        )
        follower.apply_fetch_answer(answer)
        if answer.error_code == 0 and not answer.records and answer.diverging_epoch < 0:
            return
    raise AssertionError("replication did not settle")


def _values(partition: Partition) -> bytes:
    return partition.log.read(partition.log.log_start_offset, 1 << 30)


def test_unreplicated_tail_of_a_deposed_leader_is_truncated(tmp_path: Path) -> None:
    old, new = _partition(tmp_path, 1), _partition(tmp_path, 2)
    old.become_leader(_state(leader=1, epoch=0))
    new.become_follower(_state(leader=1, epoch=0))
    for batch in range(5):
        old.append_as_leader(build_batch([(None, b"committed-%d" % batch, ())]))
    _replicate(old, new)
    assert new.log_end_offset == 5 and old.high_watermark == 5

    # The old leader appends a tail nobody fetches, then loses leadership.
    for batch in range(3):
        old.append_as_leader(build_batch([(None, b"lost-%d" % batch, ())]))
    assert old.log_end_offset == 8

    new.become_leader(_state(leader=2, epoch=1, isr=(2,)))
    old.become_follower(_state(leader=2, epoch=1, isr=(2,)))
    new.append_as_leader(build_batch([(None, b"new-leader-0", ()), (None, b"new-leader-1", ())]))

    first = new.serve_follower_fetch(1, fetch_offset=8, last_fetched_epoch=0, max_bytes=1 << 20)
    assert (first.diverging_epoch, first.diverging_end_offset) == (0, 5)
    assert first.records == b""

    _replicate(new, old)
    assert old.log_end_offset == new.log_end_offset == 7
    assert _values(old) == _values(new)
    assert b"lost-" not in _values(old)
    assert old.epochs.entries == new.epochs.entries == [(0, 0), (1, 5)]


def test_follower_behind_the_leaders_log_start_restarts_there(tmp_path: Path) -> None:
    leader, follower = _partition(tmp_path, 1), _partition(tmp_path, 2)
    leader.become_leader(_state(leader=1, epoch=0, isr=(1,)))
    follower.become_follower(_state(leader=1, epoch=0, isr=(1,)))
    for batch in range(6):
        leader.append_as_leader(build_batch([(None, b"v%d" % batch, ())]))
    leader.log.delete_records_before(4)
    answer = leader.serve_follower_fetch(
        2, fetch_offset=0, last_fetched_epoch=-1, max_bytes=1 << 20
    )
    assert answer.error_code != 0 and answer.log_start_offset == 4
    _replicate(leader, follower)
    assert follower.log.log_start_offset == 4
    assert _values(follower) == _values(leader)


def test_high_watermark_waits_for_the_isr(tmp_path: Path) -> None:
    leader, follower = _partition(tmp_path, 1), _partition(tmp_path, 2)
    leader.become_leader(_state(leader=1, epoch=0))
    follower.become_follower(_state(leader=1, epoch=0))
    leader.append_as_leader(build_batch([(None, b"a", ()), (None, b"b", ())]))
    assert leader.high_watermark == 0  # the follower in the ISR has not fetched yet
    _replicate(leader, follower)
    assert leader.high_watermark == 2
    assert follower.high_watermark == 2
    leader.update_state(_state(leader=1, epoch=0, isr=(1,)))
    leader.append_as_leader(build_batch([(None, b"c", ())]))
    assert leader.high_watermark == 3  # alone in the ISR, the leader commits by itself


def test_follower_whose_epoch_the_leader_never_saw_still_catches_up(tmp_path: Path) -> None:
    """A follower that led an epoch in which nothing was written asks with that epoch; the new
    leader never saw it. With nothing to compare, the follower is served and counted as caught
    up (before the fix it was told to diverge at -1 forever and fell out of the ISR)."""
    old, new = _partition(tmp_path, 1), _partition(tmp_path, 2)
    old.become_leader(_state(leader=1, epoch=1))  # leads epoch 1, appends nothing
    new.become_leader(_state(leader=2, epoch=2))
    old.become_follower(_state(leader=2, epoch=2))
    answer = new.serve_follower_fetch(1, fetch_offset=0, last_fetched_epoch=1, max_bytes=1 << 20)
    assert answer.error_code == 0 and answer.diverging_epoch < 0 and answer.diverging_end_offset < 0
    assert new.followers[1].log_end_offset == 0  # the fetch was recorded
    new.append_as_leader(build_batch([(None, b"after", ())]))
    _replicate(new, old)
    assert _values(old) == _values(new)
    assert old.epochs.entries == new.epochs.entries == [(2, 0)]


def test_an_answer_repeating_batches_the_follower_holds_appends_only_what_is_new(
    tmp_path: Path,
) -> None:
    """Two fetch requests in flight: the second named a position the first's answer had
    moved past, so the leader sent those batches again. The follower keeps what it has and
    appends the rest (it used to refuse the whole answer and stall the partition)."""
    leader, follower = _partition(tmp_path, 1), _partition(tmp_path, 2)
    leader.become_leader(_state(leader=1, epoch=0))
    follower.become_follower(_state(leader=1, epoch=0))
    for batch in range(3):
        leader.append_as_leader(build_batch([(None, b"first-%d" % batch, ())]))
    first = leader.serve_follower_fetch(2, fetch_offset=0, last_fetched_epoch=-1, max_bytes=1 << 20)
    leader.append_as_leader(build_batch([(None, b"second", ())]))
    # The stale request: still at 0, answered with batches 0..3 again plus the new one.
    again = leader.serve_follower_fetch(2, fetch_offset=0, last_fetched_epoch=-1, max_bytes=1 << 20)
    assert follower.apply_fetch_answer(first) is None
    assert follower.log_end_offset == 3
    assert follower.apply_fetch_answer(again) is None
    assert follower.log_end_offset == 4
    assert follower.apply_fetch_answer(again) is None  # wholly old: nothing to append
    assert _values(follower) == _values(leader)


def test_a_repeating_answer_indexes_the_new_batches_ids_at_their_offsets(tmp_path: Path) -> None:
    """The follower's id index, fed from the same parse as its append, holds every id of a
    repeating answer once, at the offset the leader gave it, and covers the whole log."""
    leader, follower = _partition(tmp_path, 1), _partition(tmp_path, 2)
    leader.dedup = MessageIdIndex(600_000)
    follower.dedup = MessageIdIndex(600_000)
    leader.become_leader(_state(leader=1, epoch=0))
    follower.become_follower(_state(leader=1, epoch=0))

    def publish(*ids: str) -> None:
        leader.append_as_leader(
            build_batch([(None, i.encode(), [(MESSAGE_ID_HEADER, i.encode())]) for i in ids])
        )

    publish("a", "b")
    first = leader.serve_follower_fetch(2, fetch_offset=0, last_fetched_epoch=-1, max_bytes=1 << 20)
    publish("c")
    publish("d", "e")
    again = leader.serve_follower_fetch(2, fetch_offset=0, last_fetched_epoch=-1, max_bytes=1 << 20)
    assert follower.apply_fetch_answer(first) is None
    assert follower.apply_fetch_answer(again) is None
    expected = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}
    assert dict(follower.dedup.items()) == dict(leader.dedup.items()) == expected
    assert follower.dedup.covered_end == follower.log_end_offset == 5
