"""The Raft metadata quorum on pysyncobj: commit, replication, leader failover, idempotent
proposals, persistence across restarts and SIGKILL, and recovery from unreadable files.

Quorums run in this process on free loopback ports (subprocesses only for SIGKILL); every
test closes what it started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from flux.controller.errors import (
    NotControllerError,
    QuorumClosedError,
    RaftRecoveryRefusedError,
)
from flux.controller.image import MetadataImage
from flux.controller.quorum import MetadataQuorum
from flux.controller.records import RegisterBroker, record_from_dict

SECRET = "test-secret"
pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def register(broker_id: int, incarnation: str = "a") -> RegisterBroker:
    return RegisterBroker(broker_id, incarnation, "k", 9092, "h", 8080)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def quorums(data_dir: Path, count: int, **kwargs: Any) -> AsyncIterator[list[MetadataQuorum]]:
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(count)]
    started: list[MetadataQuorum] = []
    try:
        for node_id, address in enumerate(addresses, start=1):
            started.append(
                MetadataQuorum(
                    node_id=node_id,
                    self_address=address,
                    peer_addresses=addresses,
                    data_dir=data_dir / f"node-{node_id}",
                    secret=SECRET,
                    loop=asyncio.get_running_loop(),
                    **kwargs,
                )
            )
        yield started
    finally:
        for quorum in started:
            await quorum.close()


async def wait_leader(candidates: list[MetadataQuorum], timeout_s: float = 10.0) -> MetadataQuorum:
    await wait_until(lambda: any(q.is_leader for q in candidates), timeout_s)
    return next(q for q in candidates if q.is_leader)


def test_secret_is_required(tmp_path: Path) -> None:
    async def test() -> None:
        with pytest.raises(ValueError, match="secret"):
            MetadataQuorum(
                node_id=1,
                self_address=f"127.0.0.1:{free_port()}",
                peer_addresses=[],
                data_dir=tmp_path,
                secret="",
                loop=asyncio.get_running_loop(),
            )

    run(test)


def test_single_node_commits_and_calls_back_on_the_loop(tmp_path: Path) -> None:
    async def test() -> None:
        images: list[MetadataImage] = []
        leadership: list[bool] = []
        loop_thread = threading.get_ident()
        threads: set[int] = set()

        def on_image(image: MetadataImage) -> None:
            threads.add(threading.get_ident())
            images.append(image)

        def on_leadership(is_leader: bool) -> None:
            threads.add(threading.get_ident())
            leadership.append(is_leader)

        async with quorums(tmp_path, 1, on_image=on_image, on_leadership=on_leadership) as (
            quorum,
        ):
            await wait_leader([quorum])
            assert leadership == [True]
            start = quorum.image.version
            image = await quorum.propose([register(1)], request_id="r1")
            assert image.version == start + 1 and 1 in image.brokers
            assert quorum.image == image
            # An empty proposal is a replicated no-op: a read barrier.
            assert (await quorum.propose([], request_id="barrier")).version == start + 2
            # A retried request id is applied once.
            again = await quorum.propose([register(1, "b")], request_id="r1")
            assert again.version == start + 2 and again.brokers[1].incarnation_id == "a"
            status = quorum.status()
            assert status["is_leader"] and status["version"] == start + 2
            assert status["leader_address"] == quorum.self_address
            assert images[-1] == again
        assert threads == {loop_thread}
        with pytest.raises(QuorumClosedError):
            await quorum.propose([], request_id="late")

    run(test)


def test_three_nodes_replicate_redirect_and_fail_over(tmp_path: Path) -> None:
    async def test() -> None:
        async with quorums(tmp_path, 3) as nodes:
            leader = await wait_leader(nodes)
            followers = [q for q in nodes if q is not leader]
            await wait_until(
                lambda: all(f.leader_address == leader.self_address for f in followers)
            )
            with pytest.raises(NotControllerError) as error:
                await followers[0].propose([register(1)], request_id="f1")
            assert error.value.leader_address == leader.self_address

            image = await leader.propose([register(1)], request_id="r1")
            await leader.propose([register(1, "b")], request_id="r1")  # duplicate: skipped
            image = await leader.propose([register(2)], request_id="r2")
            await wait_until(lambda: all(q.image.version == image.version for q in nodes))
            assert all(q.image == image for q in nodes)
            assert image.brokers[1].incarnation_id == "a"

            # The leader goes away: another is elected and commits.
            started = time.monotonic()
            await leader.close()
            new_leader = await wait_leader(followers, timeout_s=10.0)
            after = await new_leader.propose([register(3)], request_id="r3")
            failover_s = time.monotonic() - started
            logging.getLogger(__name__).warning("failover took %.2f s", failover_s)
            assert failover_s < 5.0
            assert after.version > image.version and set(after.brokers) == {1, 2, 3}
            other = next(f for f in followers if f is not new_leader)
            await wait_until(lambda: other.image == after)

    run(test)


def test_restart_restores_the_image_from_journal_and_snapshot(tmp_path: Path) -> None:
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
                log_compaction_min_entries=20,
            )

        quorum = start()
        try:
            await wait_leader([quorum])
            for i in range(60):  # enough to compact the log into a snapshot at least once
                image = await quorum.propose([register(i)], request_id=f"r{i}")
        finally:
            await quorum.close()
        assert (tmp_path / "raft.dump").exists()
        quorum = start()
        try:
            await wait_leader([quorum])
            assert set(quorum.image.brokers) == set(range(60))
            assert quorum.image.version > image.version  # plus the new leader's barrier
            # Request ids survive the restart too.
            again = await quorum.propose([register(99)], request_id="r59")
            assert 99 not in again.brokers
        finally:
            await quorum.close()

    run(test)


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from flux.controller.quorum import MetadataQuorum
    from flux.controller.records import RegisterBroker

    async def main():
        quorum = MetadataQuorum(
            node_id=1, self_address=sys.argv[1], peer_addresses=[], data_dir=Path(sys.argv[2]),
            secret="test-secret", loop=asyncio.get_running_loop(),
        )
        while not quorum.is_leader:
            await asyncio.sleep(0.02)
        for i in range(int(sys.argv[3])):
            image = await quorum.propose(
                [RegisterBroker(i, "a", "k", 9092, "h", 8080)], request_id=f"r{i}"
            )
        print("committed", image.version, flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


def test_sigkilled_controller_restarts_with_every_committed_record(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, address, str(tmp_path), "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("committed"), line
        committed_version = int(line.split()[1])
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()

    async def test() -> None:
        quorum = MetadataQuorum(
            node_id=1,
            self_address=address,
            peer_addresses=[],
            data_dir=tmp_path,
            secret=SECRET,
            loop=asyncio.get_running_loop(),
        )
        try:
            await wait_leader([quorum])
            assert set(quorum.image.brokers) == set(range(30))
            assert quorum.image.version >= committed_version
        finally:
            await quorum.close()

    run(test)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_unreadable_journal_of_a_lone_controller_refuses_to_start(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With no peers to resync from, starting empty would lose every record: the controller
    refuses and leaves the files as they are (flux.controller.raft_files). Members of a larger
    quorum move such files aside and resync: tests/unit/test_controller_raft_files.py."""

    async def test() -> None:
        async with quorums(tmp_path, 1) as (quorum,):
            await wait_leader([quorum])
            for i in range(5):
                await quorum.propose([register(i)], request_id=f"r{i}")
        data_dir = tmp_path / "node-1"
        journal = data_dir / "raft.journal"
        content = journal.read_bytes()
        if damage == "truncate":
            # Cut inside the records: the header still claims the full length.
            journal.write_bytes(content[:60])
        else:
            journal.write_bytes(content[:40] + os.urandom(len(content) - 40))
        before = {p.name: p.read_bytes() for p in data_dir.iterdir()}

        with caplog.at_level(logging.ERROR, logger="flux.controller.quorum"):
            with pytest.raises(RaftRecoveryRefusedError, match="raft.journal"):
                MetadataQuorum(
                    node_id=1,
                    self_address=f"127.0.0.1:{free_port()}",
                    peer_addresses=[],
                    data_dir=data_dir,
                    secret=SECRET,
                    loop=asyncio.get_running_loop(),
                )
        assert {p.name: p.read_bytes() for p in data_dir.iterdir()} == before
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any("refuses to start" in e and "no peers" in e for e in errors), errors

    run(test)


def test_empty_member_resyncs_from_peers(tmp_path: Path) -> None:
    async def test() -> None:
        async with quorums(tmp_path, 3) as nodes:
            leader = await wait_leader(nodes)
            for i in range(10):
                image = await leader.propose([register(i)], request_id=f"r{i}")
            follower = next(q for q in nodes if q is not leader)
            await wait_until(lambda: follower.image.version == image.version)
            await follower.close()
            data_dir = tmp_path / f"node-{follower.node_id}"
            (data_dir / "raft.journal").write_bytes(b"\x00garbage" * 3)
            replacement = MetadataQuorum(
                node_id=follower.node_id,
                self_address=follower.self_address,
                peer_addresses=[q.self_address for q in nodes],
                data_dir=data_dir,
                secret=SECRET,
                loop=asyncio.get_running_loop(),
            )
            try:
                await wait_until(lambda: replacement.image.version >= image.version)
                assert set(replacement.image.brokers) == set(range(10))
            finally:
                await replacement.close()

    run(test)


def test_state_machine_image_pickles() -> None:
    image = MetadataImage.EMPTY.replay_all([register(1)], 3)
    assert pickle.loads(pickle.dumps(image)) == image


def test_records_since_a_version_replay_to_the_same_image(tmp_path: Path) -> None:
    """Metadata followers get the records since the version they hold; replaying them onto
    their image gives exactly the leader's image. Too old a version gets None (the caller
    then sends the whole image)."""

    async def test() -> None:
        async with quorums(tmp_path, 1) as (quorum,):
            await wait_leader([quorum])
            follower = quorum.image
            await quorum.propose([register(1)], request_id="r1")
            await quorum.propose([register(2), register(3)], request_id="r2")
            await quorum.propose([register(1, "b")], request_id="r3")
            deltas = quorum.records_since(follower.version)
            assert deltas is not None
            assert [v for v, _ in deltas] == list(
                range(follower.version + 1, quorum.image.version + 1)
            )
            for version, records in deltas:
                follower = follower.replay_all([record_from_dict(r) for r in records], version)
            assert follower == quorum.image
            assert quorum.records_since(quorum.image.version) == []
            assert quorum.records_since(quorum.image.version + 1) is None
            assert quorum.records_since(-1) is None

    run(test)


def test_records_since_are_bounded(tmp_path: Path) -> None:
    async def test() -> None:
        async with quorums(tmp_path, 1, max_delta_versions=3) as (quorum,):
            await wait_leader([quorum])
            first = quorum.image.version
            for index in range(5):
                await quorum.propose([register(index)], request_id=f"r{index}")
            assert quorum.records_since(first) is None  # too far behind: the whole image
            kept = quorum.records_since(quorum.image.version - 3)
            assert kept is not None and len(kept) == 3

    run(test)
