"""The controller's Raft files: detection of damage on literal bytes (journal, snapshot, meta),
the start-up decision, and, with real pysyncobj quorums in this process, that a controller
with a damaged journal or snapshot resyncs from its peers and, while it does, abstains from
votes so that no committed metadata is lost.

Each quorum runs on free loopback ports in ``tmp_path``; every test closes what it started.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import pickle
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from flux.controller import raft_files
from flux.controller.errors import RaftRecoveryRefusedError
from flux.controller.image import MetadataImage
from flux.controller.quorum import MetadataQuorum
from flux.controller.raft_files import (
    DumpSummary,
    FileDamage,
    JournalSummary,
    RaftMeta,
    check_dump,
    check_journal,
    command_checksum,
    plan_recovery,
    read_meta,
)
from flux.controller.records import CreateTopic, PartitionSpec, RegisterBroker, record_to_dict
from pysyncobj.node import TCPNode

SECRET = "test-secret"
pytestmark = pytest.mark.timeout(120)

# -- literal journals in pysyncobj 0.3.17's format ---------------------------------------------

REGULAR, NO_OP, MEMBERSHIP = 0, 1, 2


def header(end: int) -> bytes:
    return b"PYSYNCOBJ".ljust(24, b"\0") + b"0.3.17".ljust(8, b"\0") + struct.pack("<II", 1, end)


def record(index: int, term: int, command: bytes) -> bytes:
    body = struct.pack("<QQ", index, term) + command
    return struct.pack("<I", len(body)) + body + struct.pack("<I", len(body))


def metadata_command(
    record_dicts: list[dict[str, Any]], request_id: str, *, checksum: bool = True
) -> bytes:
    args: tuple[Any, ...] = (record_dicts, request_id)
    if checksum:
        args += (command_checksum(record_dicts, request_id),)
    return bytes([REGULAR]) + pickle.dumps((0, args), 2)


def journal(entries: list[tuple[int, int, bytes]], padding: int = 64) -> bytes:
    """A journal as pysyncobj writes it: header, records, then zero padding of its mmap."""
    records = b"".join(record(i, t, c) for i, t, c in entries)
    end = 40 + len(records)
    return header(end) + records + b"\0" * padding


def topic(name: str) -> dict[str, Any]:
    spec = PartitionSpec(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1)
    return record_to_dict(CreateTopic(name, f"id-{name}", (spec,), ()))


ENTRIES = [
    (1, 0, bytes([NO_OP])),
    (2, 1, bytes([NO_OP])),
    (3, 1, metadata_command([topic("orders")], "r1")),
    (4, 1, bytes([MEMBERSHIP]) + pickle.dumps(["add", "h:1", TCPNode("h:1")], 2)),
    (5, 2, metadata_command([topic("payments"), topic("audit")], "r2")),
]
GOOD = journal(ENTRIES)


def problem(data: bytes, current_term: int | None = 2) -> str:
    with pytest.raises(ValueError) as caught:
        check_journal(data, current_term=current_term)
    return str(caught.value)


def test_a_good_journal_passes() -> None:
    summary = check_journal(GOOD, current_term=2)
    assert (summary.entries, summary.first_index, summary.last_index) == (5, 1, 5)
    assert (summary.checksummed, summary.unchecked, summary.highest_term) == (2, 0, 2)
    assert summary.head == ((bytes([NO_OP]), 1, 0), (bytes([NO_OP]), 2, 1))


def test_an_empty_journal_of_a_new_controller_passes() -> None:
    assert check_journal(header(40), current_term=None).entries == 0


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "zero length"),
        (GOOD[:30], "header is cut short"),
        (b"\x8f\x02garbage" * 40, "not a pysyncobj journal"),
        (GOOD[: len(GOOD) - 64 - 7], "truncated"),  # cut inside the last entry
        (header(40 + 30) + b"\x05" * 40, "claims"),
    ],
    ids=["zero-length", "short-header", "garbage", "truncated-mid-entry", "bad-size"],
)
def test_unreadable_journals_are_named(data: bytes, expected: str) -> None:
    assert expected in problem(data)


def test_a_changed_byte_in_a_value_fails_its_checksum() -> None:
    # pysyncobj would load this as a topic called "ordfrs".
    position = GOOD.index(b"orders") + 3
    damaged = GOOD[:position] + b"f" + GOOD[position + 1 :]
    assert "checksum" in problem(damaged)


def test_every_single_bit_flip_in_a_metadata_command_is_caught_or_harmless() -> None:
    """Exhaustive over the bytes of entry 5: a flip either fails a check or decodes to the
    very same command (a pickle memo slot nobody reads again)."""
    start = GOOD.index(ENTRIES[4][2])
    original = pickle.loads(ENTRIES[4][2][1:])
    for position in range(start, start + len(ENTRIES[4][2])):
        for bit in range(8):
            damaged = bytearray(GOOD)
            damaged[position] ^= 1 << bit
            try:
                check_journal(bytes(damaged), current_term=2)
            except ValueError:
                continue
            command = bytes(damaged[start : start + len(ENTRIES[4][2])])
            assert pickle.loads(command[1:]) == original, (position, bit)


def test_framing_index_and_term_checks() -> None:
    assert "follows entry" in problem(journal([ENTRIES[0], (3, 1, bytes([NO_OP]))]))
    assert "below the term" in problem(journal([(1, 2, bytes([NO_OP])), (2, 1, bytes([NO_OP]))]))
    assert "above the current term" in problem(GOOD, current_term=1)
    damaged = bytearray(GOOD)
    end_of_first = 40 + len(record(*ENTRIES[0]))
    damaged[end_of_first - 4] ^= 0x01  # the size after the first record
    assert "ends with size" in problem(bytes(damaged))


def test_a_command_that_would_build_other_objects_is_refused_without_running_it() -> None:
    class Boom:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("must not run",))

    evil = bytes([REGULAR]) + pickle.dumps((0, ([], "r", Boom())), 2)
    assert ".print, which no command holds" in problem(journal([(1, 1, evil)]))


def test_commands_without_a_checksum_are_legacy_but_not_after_checksummed_ones() -> None:
    legacy = metadata_command([topic("old")], "r0", checksum=False)
    summary = check_journal(journal([(1, 1, legacy), (2, 1, ENTRIES[2][2])]), current_term=2)
    assert (summary.unchecked, summary.checksummed) == (1, 1)
    assert "no checksum" in problem(journal([ENTRIES[2], (4, 1, legacy)]))


# -- literal snapshots ------------------------------------------------------------------------


def dump_bytes(version: int = 7) -> bytes:
    image = MetadataImage.EMPTY.replay_all([RegisterBroker(1, "i", "k", 1, "h", 2)], version)
    state = [{}, {"image": image, "applied": {"r": version}}]
    last, previous = (bytes([NO_OP]), 11, 3), (bytes([NO_OP]), 10, 3)
    return gzip.compress(pickle.dumps((state, last, previous, {TCPNode("h:1")}), 2))


def test_a_good_snapshot_passes() -> None:
    summary = check_dump(dump_bytes())
    assert (summary.last_index, summary.last_term, summary.metadata_version) == (11, 3, 7)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda data: b"", "zero length"),
        (lambda data: data[: len(data) // 2], "gzip stream is damaged"),
        (lambda data: data[:-6] + bytes([data[-6] ^ 1]) + data[-5:], "gzip stream is damaged"),
        (lambda data: b"\x1f\x8b" + bytes(range(200)), "gzip stream is damaged"),
        (lambda data: gzip.compress(pickle.dumps(("not", "a", "dump"))), "4 parts"),
    ],
    ids=["zero-length", "truncated", "crc-flipped", "garbage", "wrong-shape"],
)
def test_unreadable_snapshots_are_named(damage: Callable[[bytes], bytes], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        check_dump(damage(dump_bytes()))


def test_a_flipped_bit_anywhere_in_the_snapshot_is_caught_or_harmless() -> None:
    """Exhaustive: a flip fails the check or leaves the content the same (gzip's header
    fields mtime, XFL and OS, and padding bits after the last deflate block, are not covered
    by its CRC and mean nothing)."""
    data = dump_bytes()
    content = gzip.decompress(data)
    for position in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[position] ^= 1 << bit
            try:
                check_dump(bytes(damaged))
            except ValueError:
                continue
            assert gzip.decompress(bytes(damaged)) == content, (position, bit)


def test_meta_files() -> None:
    meta = read_meta(
        pickle.dumps({"currentTerm": 4, "votedForNodeId": "h:1", "raftCommitIndex": 9})
    )
    assert meta == RaftMeta(current_term=4, voted_for="h:1", commit_index=9)
    for data in (b"", b"garbage", pickle.dumps({"raftCommitIndex": 3})):
        with pytest.raises(ValueError):
            read_meta(data)


# -- the decision -----------------------------------------------------------------------------

META = RaftMeta(current_term=5, voted_for="h:1", commit_index=5)
INTACT = JournalSummary(
    entries=5, first_index=1, last_index=5, highest_term=2, checksummed=2, unchecked=0, head=()
)


def test_intact_files_start_normally() -> None:
    plan = plan_recovery(journal=INTACT, dump=None, meta=META, resync_pending=False, has_peers=True)
    assert plan.refusal is None and not plan.resync and plan.set_aside == ()


def test_a_damaged_journal_is_set_aside_with_the_meta_file_and_the_node_resyncs() -> None:
    damage = FileDamage("raft.journal", "truncated")
    plan = plan_recovery(journal=damage, dump=None, meta=META, resync_pending=False, has_peers=True)
    assert plan.resync and plan.set_aside == ("raft.journal", "raft.journal.meta")
    assert plan.damage == (damage,)


def test_a_damaged_snapshot_takes_the_journal_with_it() -> None:
    damage = FileDamage("raft.dump", "crc")
    plan = plan_recovery(
        journal=INTACT, dump=damage, meta=META, resync_pending=False, has_peers=True
    )
    assert plan.set_aside == ("raft.journal", "raft.dump", "raft.journal.meta")


def test_lost_term_and_vote_refuse_the_start() -> None:
    for meta in (None, FileDamage("raft.journal.meta", "garbage")):
        plan = plan_recovery(
            journal=INTACT, dump=None, meta=meta, resync_pending=False, has_peers=True
        )
        assert plan.refusal is not None and "vote" in plan.refusal
    # A new controller (only pysyncobj's first no-op, of term 0) has no meta file yet.
    new = JournalSummary(1, 1, 1, 0, 0, 0, ())
    plan = plan_recovery(journal=new, dump=None, meta=None, resync_pending=False, has_peers=True)
    assert plan.refusal is None and not plan.resync


def test_damage_without_peers_refuses_the_start() -> None:
    damage = FileDamage("raft.journal", "truncated")
    plan = plan_recovery(
        journal=damage, dump=None, meta=META, resync_pending=False, has_peers=False
    )
    assert plan.refusal is not None and "no peers" in plan.refusal


def test_a_log_that_ends_before_the_stored_commit_index_lost_entries() -> None:
    meta = RaftMeta(current_term=5, voted_for=None, commit_index=9)
    plan = plan_recovery(journal=INTACT, dump=None, meta=meta, resync_pending=False, has_peers=True)
    assert plan.resync and "commit index 9" in plan.damage[0].problem


def test_a_journal_pysyncobj_would_drop_for_the_snapshot_means_resync() -> None:
    dump = DumpSummary(
        last_entry=(b"\x01", 4, 2), previous_entry=(b"\x01", 3, 2), metadata_version=3
    )
    plan = plan_recovery(journal=INTACT, dump=dump, meta=META, resync_pending=False, has_peers=True)
    assert plan.resync and plan.set_aside == () and "drop entries 5 to 5" in plan.notes[0]


def test_an_unfinished_recovery_resumes() -> None:
    plan = plan_recovery(journal=INTACT, dump=None, meta=META, resync_pending=True, has_peers=True)
    assert plan.resync and plan.set_aside == ()


# -- real quorums in this process ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def register(broker_id: int) -> RegisterBroker:
    return RegisterBroker(broker_id, "a", "k", 9092, "h", 8080)


class Cluster:
    """Three ``MetadataQuorum`` nodes in this process that can be stopped and started."""

    def __init__(self, root: Path, **kwargs: Any) -> None:
        self.root = root
        self.addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        self.nodes: dict[int, MetadataQuorum] = {}
        self.kwargs = kwargs

    def data_dir(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}"

    def start(self, node_id: int) -> MetadataQuorum:
        quorum = MetadataQuorum(
            node_id=node_id,
            self_address=self.addresses[node_id - 1],
            peer_addresses=self.addresses,
            data_dir=self.data_dir(node_id),
            secret=SECRET,
            loop=asyncio.get_running_loop(),
            **self.kwargs,
        )
        self.nodes[node_id] = quorum
        return quorum

    async def stop(self, node_id: int) -> None:
        await self.nodes.pop(node_id).close()

    async def leader(self) -> MetadataQuorum:
        await wait_until(lambda: any(q.is_leader for q in self.nodes.values()))
        return next(q for q in self.nodes.values() if q.is_leader)

    async def propose(self, broker_id: int) -> MetadataImage:
        """Commit a record through whichever node leads (retrying over a failover)."""
        deadline = time.monotonic() + 20
        while True:
            try:
                leader = await self.leader()
                return await leader.propose([register(broker_id)], request_id=f"b{broker_id}")
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)


@asynccontextmanager
async def cluster(root: Path, **kwargs: Any) -> AsyncIterator[Cluster]:
    nodes = Cluster(root, **kwargs)
    try:
        yield nodes
    finally:
        for node_id in list(nodes.nodes):
            await nodes.stop(node_id)


def corrupted_names(data_dir: Path) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if raft_files.CORRUPT_SUFFIX in p.name)


def content_end(path: Path) -> int:
    """Where a file's content ends: a journal's records end at the offset in its header (the
    rest is padding of pysyncobj's memory map)."""
    data = path.read_bytes()
    return struct.unpack_from("<I", data, 36)[0] if path.name == "raft.journal" else len(data)


def truncate_inside_the_last_entry(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: content_end(path) - 7])


def flip_in_the_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    start = 40 if path.name == "raft.journal" else 10
    middle = start + (content_end(path) - start) // 2
    for position in range(middle, middle + 8):
        data[position] ^= 0x5A
    path.write_bytes(bytes(data))


DAMAGES: dict[str, Callable[[Path], None]] = {
    "truncated": truncate_inside_the_last_entry,
    "flipped": flip_in_the_middle,
    "garbage": lambda path: path.write_bytes(b"\x13\x37garbage" * 200),
    "zero-length": lambda path: path.write_bytes(b""),
}


@pytest.mark.parametrize("file_name", ["raft.journal", "raft.dump"])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_member_resyncs_from_its_peers(
    tmp_path: Path, file_name: str, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def test() -> None:
        async with cluster(tmp_path, log_compaction_min_entries=20) as nodes:
            for node_id in (1, 2, 3):
                nodes.start(node_id)
            for broker_id in range(40):  # compacted into a snapshot at least once
                image = await nodes.propose(broker_id)
            victim = next(i for i, q in nodes.nodes.items() if not q.is_leader)
            await wait_until(lambda: nodes.nodes[victim].image.version >= image.version)
            await nodes.stop(victim)
            path = nodes.data_dir(victim) / file_name
            assert path.exists(), sorted(p.name for p in nodes.data_dir(victim).iterdir())
            DAMAGES[damage](path)

            with caplog.at_level(logging.ERROR, logger="flux.controller.quorum"):
                replacement = nodes.start(victim)
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert any(file_name in e and "moved aside" in e for e in errors), errors
            moved = corrupted_names(nodes.data_dir(victim))
            assert any(name.startswith(f"{file_name}.corrupt-") for name in moved), moved
            assert replacement.status()["journal_recovery"] is not None

            await wait_until(lambda: replacement.status()["journal_recovery"] is None)
            assert not (nodes.data_dir(victim) / raft_files.RECOVERY_NAME).exists()
            after = await nodes.propose(99)
            await wait_until(
                lambda: all(q.image == after for q in nodes.nodes.values()), timeout_s=10
            )
            assert set(replacement.image.brokers) == set(range(40)) | {99}

    asyncio.run(test())


def test_an_abstaining_member_lets_no_leader_overwrite_committed_records(tmp_path: Path) -> None:
    """Brokers 0-9 are committed on nodes 1 and 2 while node 3 is down. Node 2 loses its
    journal; nodes 2 and 3 come back, node 1 does not. Node 3 lacks the records: were node 2
    to vote for it (its empty log is "as up to date"), it would lead and overwrite them. Node 2
    abstains, so no leader is elected until node 1 is back, and nothing is lost."""

    async def test() -> None:
        async with cluster(tmp_path) as nodes:
            for node_id in (1, 2, 3):
                nodes.start(node_id)
            await nodes.leader()
            await nodes.stop(3)
            for broker_id in range(10):
                image = await nodes.propose(broker_id)
            await wait_until(lambda: nodes.nodes[2].image.version >= image.version)
            await nodes.stop(1)
            await nodes.stop(2)
            (nodes.data_dir(2) / "raft.journal").write_bytes(b"")

            nodes.start(3)
            nodes.start(2)
            # Several election timeouts (0.4-1 s): node 3 campaigns and must not win. A
            # non-event cannot be waited on, so this one waits a fixed time.
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                assert not any(q._sync._isLeader() for q in nodes.nodes.values())
                await asyncio.sleep(0.05)

            nodes.start(1)
            await wait_until(lambda: nodes.nodes[2].status()["journal_recovery"] is None)
            final = await nodes.propose(10)
            assert set(final.brokers) == set(range(11))
            await wait_until(lambda: all(q.image == final for q in nodes.nodes.values()))

    asyncio.run(test())


def test_a_crash_during_recovery_resumes_it(tmp_path: Path) -> None:
    async def test() -> None:
        async with cluster(tmp_path) as nodes:
            for node_id in (1, 2, 3):
                nodes.start(node_id)
            for broker_id in range(5):
                await nodes.propose(broker_id)
            await nodes.stop(2)
            # As if node 2 had set its journal aside and stopped before it caught up.
            state = raft_files.RecoveryState("then", ("test",), (), "raft-recovery:2:0")
            recovery = nodes.data_dir(2) / raft_files.RECOVERY_NAME
            recovery.write_text(json.dumps(state.to_dict()))
            replacement = nodes.start(2)
            assert replacement.status()["journal_recovery"] is not None
            assert replacement._sync.abstaining
            await wait_until(lambda: replacement.status()["journal_recovery"] is None)
            assert not recovery.exists() and not replacement._sync.abstaining

    asyncio.run(test())


def test_a_lone_controller_with_a_damaged_journal_refuses_to_start(tmp_path: Path) -> None:
    async def test() -> None:
        address = f"127.0.0.1:{free_port()}"

        def start() -> MetadataQuorum:
            return MetadataQuorum(
                node_id=1,
                self_address=address,
                peer_addresses=[],
                data_dir=tmp_path,
                secret=SECRET,
                loop=asyncio.get_running_loop(),
            )

        quorum = start()
        try:
            await wait_until(lambda: quorum.is_leader)
            await quorum.propose([register(1)], request_id="r1")
        finally:
            await quorum.close()
        journal_path = tmp_path / "raft.journal"
        DAMAGES["truncated"](journal_path)
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        with pytest.raises(RaftRecoveryRefusedError, match="no peers"):
            start()
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before

    asyncio.run(test())


def test_a_lost_meta_file_refuses_to_start(tmp_path: Path) -> None:
    async def test() -> None:
        async with cluster(tmp_path) as nodes:
            for node_id in (1, 2, 3):
                nodes.start(node_id)
            await nodes.propose(1)
            victim = next(i for i, q in nodes.nodes.items() if not q.is_leader)
            await nodes.stop(victim)
            (nodes.data_dir(victim) / "raft.journal.meta").write_bytes(b"\x00" * 10)
            with pytest.raises(RaftRecoveryRefusedError, match="vote"):
                nodes.start(victim)

    asyncio.run(test())
