"""Large Raft entries reach every follower.

pysyncobj splits an entry larger than ``appendEntriesBatchSizeBytes`` into parts and marks the
last part by the command's length instead of the pickled entry's, so for some sizes a
follower unpickles an incomplete entry and fails on its tick thread (an error in the log, the
rest of that tick's work dropped) until the next part completes it. A broker's departure at
10,000 partitions is such an entry (3,334 partition changes): both followers failed ticks
for each. Entries of these sizes must commit on every node without a failed tick.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from pathlib import Path

import pytest
from flux.controller.errors import NotControllerError, ProposalTimeoutError
from flux.controller.image import MetadataImage
from flux.controller.quorum import RAFT_MESSAGE_BYTES_MAX, MetadataQuorum
from flux.controller.records import PartitionChange, Record, RegisterBroker, record_to_dict

from tests.unit.test_quorum import quorums, run, wait_leader, wait_until

pytestmark = pytest.mark.timeout(120)

#: The part size pysyncobj would use by default (2**16 bytes).
_DEFAULT_PART_BYTES = 2**16


def _records(count: int, broker_id: int) -> list[Record]:
    # Partition changes of a topic that does not exist (cheap to replay, ignored), then one
    # registration that shows the command applied. The topic id's high bytes (as real records
    # have in their pickled form) make pysyncobj's pickled entry longer than the command,
    # which is what its last-part check gets wrong.
    changes: list[Record] = [
        PartitionChange("topic-é-absent", i, 1, 1, (1, 2), 1) for i in range(count)
    ]
    return [*changes, RegisterBroker(broker_id, "a", "k", 9092, "h", 8080)]


def _split_wrongly(command: bytes) -> bool:
    """Whether pysyncobj 0.3.17's splitting marks a part before the last as the last one."""
    entry = pickle.dumps((command, 1, 1), 2)
    last_start = (len(entry) - 1) // _DEFAULT_PART_BYTES * _DEFAULT_PART_BYTES
    return any(
        0 < pos < last_start and pos + _DEFAULT_PART_BYTES >= len(command)
        for pos in range(0, len(entry), _DEFAULT_PART_BYTES)
    )


def test_the_sizes_below_include_ones_pysyncobj_splits_wrongly() -> None:
    # The test below is only a regression test if some of its commands would be split
    # wrongly with pysyncobj's default part size.
    wrong = 0
    for count in _SIZES:
        dicts = [record_to_dict(r) for r in _records(count, 1)]
        wrong += _split_wrongly(pickle.dumps((0, (dicts, "r"), {}), 2))
    assert wrong >= 3
    assert RAFT_MESSAGE_BYTES_MAX > 10 * 2**20


_SIZES = list(range(1_000, 12_000, 500))


async def _propose(
    nodes: list[MetadataQuorum], records: list[Record], request_id: str
) -> MetadataImage:
    for _ in range(5):
        leader = await wait_leader(nodes, timeout_s=30.0)
        try:
            return await leader.propose(records, request_id=request_id, timeout_s=20.0)
        except (NotControllerError, ProposalTimeoutError):
            continue
    raise AssertionError(f"{request_id} was not committed in five attempts")


def test_large_entries_commit_on_every_node(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def test() -> None:
        # Long election timeouts: on a loaded machine a tick that takes in a large entry can
        # outlast the default ones, and leadership changes are not what this test is about
        # (a proposal is retried, by its request id, on whichever node leads then).
        async with quorums(tmp_path, 3, election_timeout_s=(1.5, 3.0)) as nodes:
            for index, count in enumerate(_SIZES):
                image = await _propose(nodes, _records(count, index + 1), f"big-{index}")
            await wait_until(lambda: all(q.image == image for q in nodes), timeout_s=30.0)
            assert sorted(image.brokers) == list(range(1, len(_SIZES) + 1))

    with caplog.at_level(logging.ERROR, logger="pysyncobj"):
        run(test)
    # A wrongly split entry shows as an unpicklable transmission on the follower's tick
    # thread (which then recovers from the next part: the command still commits).
    failures = [r for r in caplog.records if r.name.startswith("pysyncobj")]
    assert failures == [], [r.getMessage() for r in failures]
    asyncio.set_event_loop_policy(None)
