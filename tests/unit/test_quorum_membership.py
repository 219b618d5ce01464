"""Raft membership changes of ``MetadataQuorum`` (pysyncobj's dynamic membership), in this
process on free loopback ports: add a voter that waited outside the quorum (no election
follows), remove one, hand leadership over, and the membership survives a restart over a
config that still lists the original voters."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from flux.controller.quorum import MetadataQuorum
from flux.controller.records import ConfigChange

SECRET = "test-secret"
pytestmark = pytest.mark.timeout(90)


def free_addresses(count: int) -> list[str]:
    ports = []
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in sockets:
        sock.close()
    # Sorted: the last address opens the connections to the others (pysyncobj connects from
    # the larger address), the case where a waiting joiner is connected for an instant.
    return sorted(f"127.0.0.1:{port}" for port in ports)


async def wait_until(condition: Callable[[], object], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def quorum(node_id: int, address: str, peers: list[str], data_dir: Path) -> MetadataQuorum:
    return MetadataQuorum(
        node_id=node_id,
        self_address=address,
        peer_addresses=peers,
        data_dir=data_dir / f"node-{node_id}",
        secret=SECRET,
        loop=asyncio.get_running_loop(),
    )


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_add_remove_transfer_and_restart(tmp_path: Path) -> None:
    async def test() -> None:
        addresses = free_addresses(4)
        original = addresses[:3]
        nodes = {i + 1: quorum(i + 1, a, original, tmp_path) for i, a in enumerate(original)}
        # The joiner starts with the full member list and waits, refused by the members.
        nodes[4] = quorum(4, addresses[3], addresses, tmp_path)
        try:
            await wait_until(lambda: any(n.is_leader for n in nodes.values()))
            leader = next(n for n in nodes.values() if n.is_leader)
            await asyncio.sleep(3.0)  # several connection attempts of the joiner
            term = leader.status()["raft_term"]
            assert nodes[4].status()["raft_term"] <= term, "the joiner campaigned"
            assert leader.members == frozenset(original)

            await leader.add_voter(addresses[3], timeout_s=20)
            assert leader.members == frozenset(addresses)
            image = await leader.propose(
                [ConfigChange("topic", "t", "k", "1")], request_id="after-add", timeout_s=5
            )
            await wait_until(lambda: nodes[4].image.version >= image.version)
            await wait_until(lambda: nodes[4].members == frozenset(addresses))
            # No election followed the addition: same leader, same term.
            await asyncio.sleep(1.5)
            assert leader.is_leader and leader.status()["raft_term"] == term

            follower = next(i for i, n in nodes.items() if n is not leader and i != 4)
            await leader.remove_voter(nodes[follower].self_address, timeout_s=10)
            remaining = frozenset(addresses) - {nodes[follower].self_address}
            assert leader.members == remaining
            await wait_until(
                lambda: all(n.members == remaining for i, n in nodes.items() if i != follower)
            )
            with pytest.raises(ValueError):
                await leader.remove_voter(leader.self_address, timeout_s=1)

            # The leader hands over: another voter (not the removed one) leads.
            new_address = await leader.transfer_leadership(timeout_s=10)
            assert new_address in remaining - {leader.self_address}
            new_leader = next(n for n in nodes.values() if n.self_address == new_address)
            await wait_until(lambda: new_leader.is_leader)
            await new_leader.propose(
                [ConfigChange("topic", "t", "k", "2")], request_id="after-transfer", timeout_s=5
            )

            # A voter restarts over the original voters list: it replays the changes.
            await nodes[follower].close()  # removed: stop it, as an operator would
            restarted_id = next(
                i for i, n in nodes.items() if i not in (follower, 4) and n is not new_leader
            )
            await nodes[restarted_id].close()
            nodes[restarted_id] = quorum(
                restarted_id, original[restarted_id - 1], original, tmp_path
            )
            await wait_until(lambda: nodes[restarted_id].members == remaining)
            image = await new_leader.propose(
                [ConfigChange("topic", "t", "k", "3")], request_id="after-restart", timeout_s=5
            )
            await wait_until(lambda: nodes[restarted_id].image.version >= image.version)
        finally:
            for node in nodes.values():
                await node.close()

    run(test)
