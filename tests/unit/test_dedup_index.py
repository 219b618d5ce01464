"""Message-id deduplication: the pure index, and two real ``Partition`` objects (leader and
follower with memory logs) showing that a repeat is answered with its original offset, that a
follower learns the ids it replicates, and that a new leader rebuilds the window from its log."""

from __future__ import annotations

from flux.cluster.config import parse_config
from flux.cluster.http.common import _split_repeats
from flux.cluster.http.dedup import (
    MESSAGE_ID_HEADER,
    MessageIdIndex,
    may_carry_ids,
    message_ids_in,
)
from flux.cluster.replication.partition import Partition
from flux.cluster.topics import TopicConfig
from flux.controller.image import PartitionState
from flux.protocol.records import Compression, build_batch, decode_records, iter_batches
from flux.storage import LogConfig, MemoryLog
from flux.storage.leader_epochs import LeaderEpochCache

from tests.unit.test_config import SECRET

WINDOW_MS = 60_000


def _with_id(value: bytes, message_id: str | None) -> tuple:
    headers = () if message_id is None else ((MESSAGE_ID_HEADER, message_id.encode()),)
    return (None, value, headers)


def _batch(*records: tuple, compression: Compression = Compression.NONE) -> bytes:
    return build_batch(list(records), compression=compression)


def test_index_remembers_within_the_window_only() -> None:
    now = [1_000]
    index = MessageIdIndex(100, clock_ms=lambda: now[0])
    index.remember("a", 5)
    assert index.lookup("a") == 5
    now[0] += 100
    assert index.lookup("a") == 5  # exactly at the window's edge: still remembered
    now[0] += 1
    assert index.lookup("a") is None
    assert len(index) == 0


def test_index_is_bounded_and_forgets_truncated_offsets() -> None:
    index = MessageIdIndex(WINDOW_MS, clock_ms=lambda: 0, max_ids=3)
    for offset, message_id in enumerate("abcd"):
        index.remember(message_id, offset)
    assert [i for i, _ in index.items()] == ["b", "c", "d"]
    index.covered_end = 4
    index.truncate_to(2)
    assert [i for i, _ in index.items()] == ["b"] and index.covered_end == 2


def test_ids_are_found_in_plain_and_compressed_batches() -> None:
    for compression in (Compression.NONE, Compression.GZIP):
        raw = _batch(_with_id(b"x", None), _with_id(b"y", "id-1"), compression=compression)
        [(header, batch)] = list(iter_batches(raw))
        assert message_ids_in(batch, header) == [(1, "id-1")]


def _partition(broker_id: int) -> Partition:
    defaults = parse_config(SECRET, environ={})["topic"]
    return Partition(
        broker_id=broker_id,
        topic="t",
        topic_id="id-t",
        index=0,
        log=MemoryLog.open(LogConfig()),
        config=TopicConfig.from_defaults(defaults, {}, message_max_bytes=1 << 20),
        state=PartitionState((1, 2), (1, 2), -1, -1, -1),
        epochs=LeaderEpochCache(),
        dedup=MessageIdIndex(WINDOW_MS),
    )


def _values(partition: Partition) -> list[bytes]:
    data = partition.log.read(partition.log.log_start_offset, 1 << 30)
    return [r.value for _, raw in iter_batches(data) for r in decode_records(bytes(raw))]


def test_repeat_gets_its_original_offset_and_is_not_appended() -> None:
    leader = _partition(1)
    leader.become_leader(PartitionState((1,), (1,), 1, 0, 0))
    first = leader.append_as_leader(_batch(_with_id(b"one", "m-1")))
    leader.append_as_leader(_batch(_with_id(b"two", "m-2")))
    again = leader.append_as_leader(_batch(_with_id(b"one again", "m-1")))
    assert (again.base_offset, again.batch_count) == (first.base_offset, 0)
    # A batch mixing a repeat and new records keeps only the new ones.
    mixed = leader.append_as_leader(
        _batch(_with_id(b"two again", "m-2"), _with_id(b"three", "m-3"), _with_id(b"four", None))
    )
    assert mixed.record_count == 2
    assert _values(leader) == [b"one", b"two", b"three", b"four"]


def test_known_ids_answer_repeats_as_decoded_ids_do() -> None:
    """The HTTP front door passes the ids of the batches it built (``known_ids``), found and
    looked up by ``_split_repeats``: what ``message_ids_in`` would find, and the same answers
    as decoding them."""
    records = [
        (None, b"a", [(MESSAGE_ID_HEADER, b"m-1")]),
        (None, b"b", []),
        (None, b"c", [("other", b"x"), (MESSAGE_ID_HEADER, b"m-2"), (MESSAGE_ID_HEADER, b"no")]),
        (None, b"d", [(MESSAGE_ID_HEADER, b"")]),
    ]
    [(header, raw)] = list(iter_batches(build_batch(records)))
    leader = _partition(1)
    leader.become_leader(PartitionState((1,), (1,), 1, 0, 0))
    fresh, fresh_ids, answered = _split_repeats(leader, records)
    assert (fresh, answered) == ([0, 1, 2, 3], {})
    assert fresh_ids == message_ids_in(raw, header) == [(0, "m-1"), (2, "m-2")]

    first = leader.append_as_leader(build_batch(records), known_ids=[fresh_ids])
    assert leader.dedup.lookup("m-2") == first.base_offset + 2
    # A repeat (of a stored id, and of one earlier in the same group) is answered, not kept.
    repeat = [
        (None, b"a again", [(MESSAGE_ID_HEADER, b"m-1")]),
        (None, b"f", [(MESSAGE_ID_HEADER, b"m-3")]),
        (None, b"f again", [(MESSAGE_ID_HEADER, b"m-3")]),
    ]
    fresh, fresh_ids, answered = _split_repeats(leader, repeat)
    assert (fresh, fresh_ids, answered) == ([1], [(0, "m-3")], {0: first.base_offset, 2: -1})
    kept = leader.append_as_leader(build_batch([repeat[1]]), known_ids=[fresh_ids])
    assert leader.dedup.lookup("m-3") == kept.base_offset
    # Without ``known_ids`` the append decodes the ids and looks them up itself.
    again = leader.append_as_leader(build_batch(repeat[:1]))
    assert (again.base_offset, again.batch_count) == (first.base_offset, 0)
    plain = [(None, b"e", [])]
    assert leader.append_as_leader(build_batch(plain), known_ids=[[]]).record_count == 1
    assert _values(leader) == [b"a", b"b", b"c", b"d", b"f", b"e"]


def test_new_leader_knows_the_ids_after_failover() -> None:
    old, new = _partition(1), _partition(2)
    old.become_leader(PartitionState((1, 2), (1, 2), 1, 0, 0))
    new.become_follower(PartitionState((1, 2), (1, 2), 1, 0, 0))
    stored = old.append_as_leader(_batch(_with_id(b"pay", "p-1")))
    answer = old.serve_follower_fetch(2, fetch_offset=0, last_fetched_epoch=-1, max_bytes=1 << 20)
    new.apply_fetch_answer(answer)
    new.become_leader(PartitionState((1, 2), (2,), 2, 1, 1))
    repeat = new.append_as_leader(_batch(_with_id(b"pay again", "p-1")))
    assert (repeat.base_offset, repeat.batch_count) == (stored.base_offset, 0)

    # A replica that never saw the appends (say, restarted) rebuilds the window from its log.
    rebuilt = _partition(3)
    rebuilt.log = new.log
    rebuilt.dedup = MessageIdIndex(WINDOW_MS)
    assert rebuilt.rebuild_dedup() == 1
    assert rebuilt.dedup.lookup("p-1") == stored.base_offset


def test_memory_topic_refuses_appends_beyond_its_limit() -> None:
    import pytest
    from flux.cluster.replication.partition import ProducerRejectedError
    from flux.protocol.errors import ErrorCode

    defaults = parse_config(SECRET, environ={})["topic"]
    partition = _partition(1)
    partition.config = TopicConfig.from_defaults(
        defaults, {"memory.bytes.max": "2048"}, message_max_bytes=1 << 20
    )
    partition.become_leader(PartitionState((1,), (1,), 1, 0, 0))
    partition.append_as_leader(_batch((None, b"x" * 1000, ())))
    with pytest.raises(ProducerRejectedError) as raised:
        partition.append_as_leader(_batch((None, b"y" * 1500, ())))
    assert raised.value.error == ErrorCode.POLICY_VIOLATION
    assert partition.log_end_offset == 1


def test_batches_without_the_header_name_are_not_decoded() -> None:
    def carries(records: bytes) -> bool:
        headers = [header for header, _ in iter_batches(records)]
        return may_carry_ids(memoryview(records), headers)

    plain = _batch(_with_id(b"a", None), _with_id(b"b", None))
    assert not carries(plain)
    assert not carries(plain + _batch(_with_id(b"c", None)))
    assert carries(plain + _batch(_with_id(b"c", "id-1")))
    # A compressed batch hides its headers: it is always decoded.
    assert carries(_batch(_with_id(b"d", None), compression=Compression.GZIP))
