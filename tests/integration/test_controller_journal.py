"""A controller whose Raft journal is damaged detects it at start, moves it aside and resyncs
from its peers (the "Hardening" issue; design in ``flux.controller.raft_files``).

A real 3-node cluster (combined controller + broker processes). Topics are created; one node
that is not the active controller is stopped, a topic is created while it is down, and its
journal is damaged in one way: cut inside its last entry, one byte changed inside a topic name
(pysyncobj would load it as another name: only Flux's checksum tells), eight bytes overwritten
in the middle of the records, replaced by garbage, or emptied. Started again, the node must
come up, have the journal moved aside (``raft.journal.corrupt-*``, never deleted), say so in
its log, finish its recovery, and then hold the same metadata as the other controllers, with
every topic created before, during and after its outage visible through its own broker and
with the topic ids they were created with (nothing committed was lost or made again).
"""

from __future__ import annotations

import json
import struct
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flux.cluster.launcher import NodeProcess

from .cluster_helpers import active_controller, controller_status, create_topic, metadata
from .helpers import wait_until

pytestmark = pytest.mark.integration

BEFORE = ["before-a", "before-b", "before-c"]
DURING = "during"
AFTER = "after"


def controller_dir(node: NodeProcess) -> Path:
    return node.data_dir / "controller"


def records_end(journal: Path) -> int:
    """Where the journal's records end (its header's end offset; the rest is the padding of
    pysyncobj's memory map)."""
    return int(struct.unpack_from("<I", journal.read_bytes(), 36)[0])


def truncate_inside_last_entry(journal: Path) -> None:
    journal.write_bytes(journal.read_bytes()[: records_end(journal) - 7])


def change_one_byte_of_a_topic_name(journal: Path) -> None:
    data = bytearray(journal.read_bytes())
    position = data.index(b"before-b") + len("before-")
    data[position] = ord("x")  # "before-x": a valid name of the same length
    journal.write_bytes(bytes(data))


def overwrite_middle_of_records(journal: Path) -> None:
    data = bytearray(journal.read_bytes())
    middle = 40 + (records_end(journal) - 40) // 2
    data[middle : middle + 8] = b"\xa5" * 8
    journal.write_bytes(bytes(data))


DAMAGES: dict[str, Callable[[Path], None]] = {
    "truncated-mid-entry": truncate_inside_last_entry,
    "one-byte-in-a-name": change_one_byte_of_a_topic_name,
    "overwritten-bytes": overwrite_middle_of_records,
    "garbage": lambda journal: journal.write_bytes(b"\x17garbage\x00" * 300),
    "zero-length": lambda journal: journal.write_bytes(b""),
}


def controller_image(node: NodeProcess) -> dict[str, Any] | None:
    address = node.ready["controller_http"]
    try:
        with urllib.request.urlopen(f"http://{address}/controller/metadata", timeout=5) as reply:
            image: dict[str, Any] = json.loads(reply.read())["image"]
            return image
    except OSError:
        return None


def same_image_everywhere(nodes: list[NodeProcess]) -> dict[str, Any] | None:
    """The controllers' common image if all of them hold the same one right now."""
    images = [controller_image(node) for node in nodes]
    if any(image is None for image in images):
        return None
    encoded = {json.dumps(image, sort_keys=True) for image in images}
    return images[0] if len(encoded) == 1 else None


def topic_ids(image: dict[str, Any]) -> dict[str, str]:
    return {topic["name"]: topic["topic_id"] for topic in image["topics"]}


def created(node: NodeProcess, name: str) -> str:
    # Two replicas: one of the three brokers may be down when it is created.
    answer = create_topic(node, name, 1, 2)
    assert answer["error_code"] == 0, answer
    return str(answer.get("topic_id") or "")


def visible_topics(node: NodeProcess) -> set[str]:
    return {topic["name"] for topic in metadata(node)["topics"] if topic["error_code"] == 0}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_controller_with_a_damaged_journal_resyncs_from_its_peers(
    cluster_factory, damage: str
) -> None:
    nodes: list[NodeProcess] = cluster_factory(3)
    for name in BEFORE:
        created(nodes[0], name)
    active = wait_until(lambda: active_controller(nodes), timeout_s=30)
    victim = next(node for node in nodes if node is not active)
    others = [node for node in nodes if node is not victim]
    # The victim's journal holds the topics (the cluster converged on one image).
    before = wait_until(lambda: same_image_everywhere(nodes), timeout_s=30)
    assert set(BEFORE) <= set(topic_ids(before))

    victim.stop()
    created(active, DURING)
    journal = controller_dir(victim) / "raft.journal"
    assert not (controller_dir(victim) / "raft.dump").exists()  # the journal holds everything
    DAMAGES[damage](journal)

    victim.start()
    victim.wait_ready(60)
    moved = sorted(p.name for p in controller_dir(victim).glob("raft.journal.corrupt-*"))
    assert moved, sorted(p.name for p in controller_dir(victim).iterdir())
    log = victim.log_path.read_text(errors="replace")
    assert "raft.journal" in log and "moved aside" in log, victim.log_tail()

    # It finishes its recovery: it holds the log again and votes.
    wait_until(
        lambda: (
            (status := controller_status(victim)) is not None
            and status["raft"].get("journal_recovery") is None
        ),
        timeout_s=30,
    )
    assert not (controller_dir(victim) / "raft.recovery").exists()

    created(victim, AFTER)
    final = wait_until(lambda: same_image_everywhere(nodes), timeout_s=30)
    ids = topic_ids(final)
    assert set(BEFORE) | {DURING, AFTER} <= set(ids), sorted(ids)
    assert "before-x" not in ids
    # Nothing committed was lost or made again: the first topics keep the ids they had.
    assert {name: ids[name] for name in BEFORE} == {
        name: topic_ids(before)[name] for name in BEFORE
    }
    wait_until(lambda: set(BEFORE) | {DURING, AFTER} <= visible_topics(victim), timeout_s=30)
    for node in others:
        assert set(BEFORE) | {DURING, AFTER} <= visible_topics(node)


def test_a_controller_that_lost_its_term_and_vote_refuses_to_start(cluster_factory) -> None:
    """Without ``raft.journal.meta`` a controller does not know whom it voted for: it must not
    start (it could vote twice in a term), must say why, and must leave its files alone. The
    other two keep serving."""
    nodes: list[NodeProcess] = cluster_factory(3)
    created(nodes[0], BEFORE[0])
    active = wait_until(lambda: active_controller(nodes), timeout_s=30)
    victim = next(node for node in nodes if node is not active)
    victim.stop()
    (controller_dir(victim) / "raft.journal.meta").unlink()
    files_before = {p.name: p.read_bytes() for p in controller_dir(victim).iterdir()}

    victim.start()
    assert victim.wait_exit(60), victim.log_tail()
    assert victim.process is not None and victim.process.returncode != 0
    log = victim.log_path.read_text(errors="replace")
    assert "refuses to start" in log and "raft.journal.meta" in log, victim.log_tail()
    assert {p.name: p.read_bytes() for p in controller_dir(victim).iterdir()} == files_before
    created(active, AFTER)
