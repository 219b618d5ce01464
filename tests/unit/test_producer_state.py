"""Idempotent-producer state: literal cases after Kafka's ProducerStateManagerTest, and a
model producer under Hypothesis."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from flux.storage.producer_state import (
    MAX_SEQUENCE,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    Check,
    ProducerSnapshotError,
    ProducerStateError,
    ProducerStateManager,
    Verdict,
    increment_sequence,
)
from hypothesis import given, settings
from hypothesis import strategies as st

PID = 1000
DAY_MS = 24 * 60 * 60 * 1000


def send(
    state: ProducerStateManager,
    base_sequence: int,
    count: int = 1,
    *,
    producer_id: int = PID,
    epoch: int = 0,
    timestamp_ms: int = 0,
) -> BatchMetadata:
    """Check a batch, require APPEND, and record it at the log end (like the leader)."""
    last_sequence = increment_sequence(base_sequence, count - 1)
    assert state.check(producer_id, epoch, base_sequence, last_sequence) == Check(Verdict.APPEND)
    first_offset = state.last_offset
    state.record(
        producer_id,
        epoch,
        base_sequence,
        last_sequence,
        first_offset,
        first_offset + count - 1,
        timestamp_ms,
    )
    return BatchMetadata(
        base_sequence, last_sequence, first_offset, first_offset + count - 1, timestamp_ms
    )


def verdict(
    state: ProducerStateManager, base_sequence: int, count: int = 1, *, epoch: int = 0
) -> Verdict:
    last_sequence = increment_sequence(base_sequence, count - 1)
    return state.check(PID, epoch, base_sequence, last_sequence).verdict


# -- literal cases -----------------------------------------------------------------------------


def test_first_batch_with_sequence_zero_is_appended() -> None:
    state = ProducerStateManager()
    assert verdict(state, 0, 3) is Verdict.APPEND
    send(state, 0, 3)
    assert state.last_offset == 3
    entry = state.producers()[PID]
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (0, 2, 2)


def test_retry_of_the_same_batch_is_a_duplicate_with_the_original_offsets() -> None:
    state = ProducerStateManager(last_offset=100)
    original = send(state, 0, 4, timestamp_ms=7)
    assert state.check(PID, 0, 0, 3) == Check(Verdict.DUPLICATE, original)
    assert original.first_offset == 100 and original.last_offset == 103


def test_retry_of_any_of_the_last_five_batches_is_a_duplicate() -> None:
    state = ProducerStateManager()
    batches = [send(state, seq * 2, 2) for seq in range(8)]
    for batch in batches[-NUM_BATCHES_TO_RETAIN:]:
        check = state.check(PID, 0, batch.first_seq, batch.last_seq)
        assert check == Check(Verdict.DUPLICATE, batch)


def test_retry_older_than_the_last_five_is_out_of_order() -> None:
    state = ProducerStateManager()
    batches = [send(state, seq, 1) for seq in range(NUM_BATCHES_TO_RETAIN + 1)]
    oldest = batches[0]
    assert state.check(PID, 0, oldest.first_seq, oldest.last_seq).verdict is Verdict.OUT_OF_ORDER


def test_partial_overlap_with_a_retained_batch_is_out_of_order() -> None:
    state = ProducerStateManager()
    send(state, 0, 4)
    assert verdict(state, 0, 2) is Verdict.OUT_OF_ORDER
    assert verdict(state, 2, 4) is Verdict.OUT_OF_ORDER


def test_gap_is_out_of_order() -> None:
    state = ProducerStateManager()
    send(state, 0, 3)
    assert verdict(state, 4) is Verdict.OUT_OF_ORDER
    assert verdict(state, 3) is Verdict.APPEND


def test_epoch_bump_restarts_the_sequence() -> None:
    state = ProducerStateManager()
    send(state, 0, 10)
    assert verdict(state, 0, epoch=1) is Verdict.APPEND
    assert verdict(state, 5, epoch=1) is Verdict.OUT_OF_ORDER
    assert verdict(state, 10, epoch=1) is Verdict.OUT_OF_ORDER
    send(state, 0, 2, epoch=1)
    entry = state.producers()[PID]
    assert entry.producer_epoch == 1 and len(entry.batches) == 1  # old epoch's batches dropped
    assert verdict(state, 0, 10, epoch=0) is Verdict.INVALID_EPOCH  # no longer a duplicate


def test_lower_epoch_is_fenced() -> None:
    state = ProducerStateManager()
    send(state, 0, epoch=3)
    assert verdict(state, 1, epoch=2) is Verdict.INVALID_EPOCH
    assert verdict(state, 0, epoch=2) is Verdict.INVALID_EPOCH


def test_sequence_wraps_from_max_to_zero() -> None:
    assert increment_sequence(MAX_SEQUENCE, 1) == 0
    assert increment_sequence(MAX_SEQUENCE - 1, 3) == 1
    state = ProducerStateManager()
    send(state, MAX_SEQUENCE - 1, 2)  # an unknown producer may start anywhere (Kafka 3.x)
    assert verdict(state, 0) is Verdict.APPEND
    wrapped = send(state, 0, 3)
    assert verdict(state, 3) is Verdict.APPEND
    state2 = ProducerStateManager()
    send(state2, MAX_SEQUENCE - 1, 4)  # one batch spanning the wrap: MAX-1, MAX, 0, 1
    assert state2.producers()[PID].last_seq == 1
    assert verdict(state2, 2) is Verdict.APPEND
    assert verdict(state2, MAX_SEQUENCE - 1, 4) is Verdict.DUPLICATE
    assert state.check(PID, 0, 0, 2).duplicate_of == wrapped


def test_non_idempotent_batches_are_always_appended() -> None:
    state = ProducerStateManager()
    assert state.check(-1, -1, -1, -1) == Check(Verdict.APPEND)
    state.record_batch_header(-1, -1, -1, 5, 0, 4, 0)
    assert state.last_offset == 5 and state.producers() == {}


def test_unknown_producer_policy() -> None:
    assert verdict(ProducerStateManager(), 17) is Verdict.APPEND
    strict = ProducerStateManager(strict_new_producers=True)
    assert verdict(strict, 17) is Verdict.UNKNOWN_PRODUCER
    assert verdict(strict, 0) is Verdict.APPEND


def test_idempotent_batch_without_sequence_is_out_of_order() -> None:
    state = ProducerStateManager()
    assert state.check(PID, 0, -1, -1).verdict is Verdict.OUT_OF_ORDER


def test_truncate_to_forgets_the_tail_so_a_resent_batch_is_appended() -> None:
    state = ProducerStateManager()
    send(state, 0, 2)  # offsets 0-1
    send(state, 2, 2)  # offsets 2-3
    lost = send(state, 4, 2)  # offsets 4-5
    assert verdict(state, 4, 2) is Verdict.DUPLICATE
    state.truncate_to(4)
    assert state.last_offset == 4
    assert state.producers()[PID].last_seq == 3
    assert verdict(state, 4, 2) is Verdict.APPEND
    resent = send(state, 4, 2)
    assert resent.first_offset == lost.first_offset


def test_truncate_to_drops_producers_left_without_batches() -> None:
    state = ProducerStateManager()
    send(state, 0, producer_id=1)
    send(state, 0, producer_id=2)
    state.truncate_to(1)
    assert list(state.producers()) == [1]
    state.truncate_to(5)  # beyond the end: nothing to do
    assert state.last_offset == 1


def test_truncate_before_keeps_each_producers_newest_batch() -> None:
    state = ProducerStateManager()
    batches = [send(state, seq) for seq in range(3)]  # offsets 0, 1, 2
    state.truncate_before(10)
    entry = state.producers()[PID]
    assert list(entry.batches) == [batches[-1]]
    assert verdict(state, 3) is Verdict.APPEND
    assert verdict(state, 2) is Verdict.DUPLICATE
    assert verdict(state, 0) is Verdict.OUT_OF_ORDER
    assert state.last_offset == 10  # nothing below the log start is replayed
    with pytest.raises(ProducerStateError):
        state.record(PID, 0, 3, 3, 5, 5, 0)


def test_record_refuses_batches_before_the_end_offset() -> None:
    state = ProducerStateManager()
    send(state, 0, 3)
    with pytest.raises(ProducerStateError):
        state.record(PID, 0, 3, 3, 2, 2, 0)
    with pytest.raises(ProducerStateError):
        state.record(PID, 0, 3, 3, 5, 4, 0)
    with pytest.raises(ProducerStateError):
        state.record(-1, 0, 3, 3, 5, 5, 0)


def test_replicated_batch_that_does_not_continue_our_state_restarts_the_entry() -> None:
    state = ProducerStateManager()
    send(state, 0, 2)
    state.record(PID, 0, 40, 41, 2, 3, 0)  # the leader had lost this producer's state
    entry = state.producers()[PID]
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(40, 41)]
    assert verdict(state, 42) is Verdict.APPEND


def test_control_batches_only_advance_the_end_offset() -> None:
    state = ProducerStateManager()
    state.record_batch_header(PID, 0, -1, 1, 0, 0, 0, is_control=True)
    assert state.last_offset == 1 and state.producers() == {}


def test_snapshot_round_trip() -> None:
    state = ProducerStateManager()
    for seq in range(7):
        send(state, seq * 3, 3, producer_id=1, timestamp_ms=seq)
    send(state, 0, producer_id=2, epoch=4, timestamp_ms=100)
    send(state, MAX_SEQUENCE, 2, producer_id=3, timestamp_ms=200)
    data = json.loads(json.dumps(state.snapshot()))
    assert data["last_offset"] == state.last_offset == 24
    loaded = ProducerStateManager.from_snapshot(data)
    assert loaded.producers() == state.producers()
    assert list(loaded.producers()) == [1, 2, 3]  # recency order survives
    assert loaded.last_offset == state.last_offset
    assert loaded.snapshot() == state.snapshot()
    assert loaded.check(1, 0, 18, 20).duplicate_of == state.check(1, 0, 18, 20).duplicate_of
    # A snapshot larger than the limit keeps the most recently recorded producers.
    assert list(ProducerStateManager.from_snapshot(data, max_producers=2).producers()) == [2, 3]


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: d.update(version=99),
        lambda d: d.pop("last_offset"),
        lambda d: d.update(last_offset="12"),
        lambda d: d["producers"][0].update(batches=[]),
        lambda d: d["producers"][0]["batches"].append([99, 99, 30, 30, 0]),  # gap
        lambda d: d["producers"][0]["batches"][0].__setitem__(2, 50),  # beyond last_offset
        lambda d: d["producers"].append(dict(d["producers"][0])),
    ],
)
def test_from_snapshot_rejects_invalid_data(corrupt: object) -> None:
    state = ProducerStateManager()
    send(state, 0, 2)
    send(state, 2, 2)
    data = json.loads(json.dumps(state.snapshot()))
    corrupt(data)  # type: ignore[operator]
    with pytest.raises(ProducerSnapshotError):
        ProducerStateManager.from_snapshot(data)


def _headers() -> list[tuple[int, int, int, int, int, int, int, bool]]:
    """A log of batch headers: three producers, an epoch bump, a control batch and a
    non-idempotent batch. (producer_id, epoch, base_sequence, records_count, base_offset,
    last_offset_delta, max_timestamp, is_control)."""
    return [
        (1, 0, 0, 3, 0, 2, 10, False),
        (2, 0, 0, 1, 3, 0, 11, False),
        (-1, -1, -1, 4, 4, 3, 12, False),
        (1, 0, 3, 2, 8, 1, 13, False),
        (1, 0, 5, 1, 10, 0, 14, False),
        (2, 1, 0, 2, 11, 1, 15, False),
        (1, 0, -1, 1, 13, 0, 16, True),
        (3, 0, 0, 5, 14, 4, 17, False),
        (1, 0, 6, 1, 19, 0, 18, False),
        (1, 0, 7, 1, 20, 0, 19, False),
        (1, 0, 8, 2, 21, 1, 20, False),
    ]


def test_rebuild_from_reproduces_live_recording() -> None:
    live = ProducerStateManager()
    for pid, epoch, base_seq, count, base_offset, delta, max_ts, is_control in _headers():
        assert live.last_offset == base_offset
        if pid >= 0 and not is_control:
            last_seq = increment_sequence(base_seq, count - 1)
            assert live.check(pid, epoch, base_seq, last_seq).verdict is Verdict.APPEND
            live.record(pid, epoch, base_seq, last_seq, base_offset, base_offset + delta, max_ts)
        else:
            live.record_batch_header(
                pid, epoch, base_seq, count, base_offset, delta, max_ts, is_control=is_control
            )
    rebuilt = ProducerStateManager()
    assert rebuilt.rebuild_from(_headers()) == len(_headers())
    assert rebuilt.snapshot() == live.snapshot()

    # From a mid-log snapshot: the scan may start before the snapshot point.
    partial = ProducerStateManager()
    partial.rebuild_from(_headers()[:5])
    resumed = ProducerStateManager.from_snapshot(json.loads(json.dumps(partial.snapshot())))
    assert resumed.rebuild_from(_headers()[2:]) == len(_headers()) - 5
    assert resumed.snapshot() == live.snapshot()


def test_expire_drops_idle_producers() -> None:
    state = ProducerStateManager(expiration_ms=DAY_MS)
    send(state, 0, producer_id=1, timestamp_ms=1_000)
    send(state, 0, producer_id=2, timestamp_ms=5_000)
    assert state.expire(1_000 + DAY_MS - 1) == 0
    assert state.expire(1_000 + DAY_MS) == 1
    assert list(state.producers()) == [2]
    assert verdict(state, 1) is Verdict.APPEND  # unknown again: any sequence is accepted


def test_default_limits() -> None:
    state = ProducerStateManager()
    send(state, 0, timestamp_ms=0)
    assert state.expire(DAY_MS - 1) == 0
    assert state.expire(DAY_MS) == 1


def test_max_producers_evicts_the_least_recently_recorded() -> None:
    state = ProducerStateManager(max_producers=3)
    for pid in (1, 2, 3):
        send(state, 0, producer_id=pid)
    send(state, 1, producer_id=1)  # 1 is now the most recent
    send(state, 0, producer_id=4)
    assert list(state.producers()) == [3, 1, 4]
    with pytest.raises(ValueError):
        ProducerStateManager(max_producers=0)


# -- a model producer under Hypothesis ---------------------------------------------------------


@dataclass
class ModelProducer:
    producer_id: int
    epoch: int = 0
    next_seq: int = 0
    acked: list[BatchMetadata] = field(default_factory=list)  # this epoch, oldest first
    pending: tuple[int, int] | None = None  # (base_sequence, count) sent but never appended


# Weighted so that producers often keep more than NUM_BATCHES_TO_RETAIN batches in one epoch.
action = st.tuples(
    st.sampled_from(["send"] * 6 + ["retry"] * 3 + ["bump", "other", "restart"]),
    st.integers(0, 1),  # which producer
    st.integers(0, 7),  # batch size - 1, or how far back a retry goes
    st.sampled_from([True] * 3 + [False]),  # send: reached the log; bump: zombie check
)


@settings(max_examples=200, deadline=None)
@given(
    actions=st.lists(action, min_size=10, max_size=80),
    start_sequences=st.lists(st.sampled_from([0, MAX_SEQUENCE - 5]), min_size=2, max_size=2),
)
def test_model_producer_never_sees_duplicate_for_new_or_append_for_retry(
    actions: list[tuple[str, int, int, bool]], start_sequences: list[int]
) -> None:
    state = ProducerStateManager()
    producers = [
        ModelProducer(producer_id=10 + i, next_seq=seq) for i, seq in enumerate(start_sequences)
    ]
    for kind, index, number, flag in actions:
        producer = producers[index]
        if kind == "send":
            # A new batch (or the retry of one that never reached the log) must be appended;
            # a new batch behind a lost one is a gap.
            if producer.pending is not None:
                base, count = producer.pending
                known = producer.producer_id in state.producers()
                gap_base = increment_sequence(base, count)
                gap_last = increment_sequence(gap_base, number % 4)
                check = state.check(producer.producer_id, producer.epoch, gap_base, gap_last)
                # (A producer we hold no state for may start at any sequence.)
                assert check.verdict is (Verdict.OUT_OF_ORDER if known else Verdict.APPEND)
            else:
                base, count = producer.next_seq, number % 4 + 1
                producer.next_seq = increment_sequence(base, count)
            last = increment_sequence(base, count - 1)
            assert state.check(producer.producer_id, producer.epoch, base, last) == Check(
                Verdict.APPEND
            )
            if flag:  # reached the log
                first_offset = state.last_offset
                state.record_batch_header(
                    producer.producer_id, producer.epoch, base, count, first_offset, count - 1, 0
                )
                batch = BatchMetadata(base, last, first_offset, first_offset + count - 1, 0)
                producer.acked.append(batch)
                producer.pending = None
                # The response was lost and the producer resends at once: a duplicate.
                check = state.check(producer.producer_id, producer.epoch, base, last)
                assert check == Check(Verdict.DUPLICATE, batch)
            else:
                producer.pending = (base, count)
        elif kind == "retry" and producer.acked:
            # A retry of a batch already in the log is never appended again.
            batch = producer.acked[-1 - number % len(producer.acked)]
            check = state.check(
                producer.producer_id, producer.epoch, batch.first_seq, batch.last_seq
            )
            if batch in producer.acked[-NUM_BATCHES_TO_RETAIN:]:
                assert check == Check(Verdict.DUPLICATE, batch)
            else:
                assert check.verdict is Verdict.OUT_OF_ORDER
        elif kind == "bump" and producer.pending is None:
            old = producer.acked[-1] if producer.acked else None
            producer.epoch += 1
            producer.next_seq = 0
            producer.acked = []
            if flag and old is not None:
                # Once the new epoch wrote, a zombie of the old one is fenced.
                first_offset = state.last_offset
                state.record(
                    producer.producer_id, producer.epoch, 0, 0, first_offset, first_offset, 0
                )
                producer.acked.append(BatchMetadata(0, 0, first_offset, first_offset, 0))
                producer.next_seq = 1
                zombie = state.check(
                    producer.producer_id, producer.epoch - 1, old.first_seq, old.last_seq
                )
                assert zombie.verdict is Verdict.INVALID_EPOCH
        elif kind == "other":
            state.record_batch_header(-1, -1, -1, number + 1, state.last_offset, number, 0)
        elif kind == "restart":
            state = ProducerStateManager.from_snapshot(json.loads(json.dumps(state.snapshot())))
