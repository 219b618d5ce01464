"""Controller quorum membership changes (``fluxctl controller add|remove``) under load.

A 3-voter cluster of combined nodes serves a steady acks=all idempotent producer (confluent-
kafka). A 4th controller-only node, started with the full voter list, is added; then a voter
that is not the active controller is removed (its node keeps serving as a broker); then the
active controller itself is removed (it hands leadership over first). After each step: every
voter reports the new voter set and Raft membership, a topic can be created (the quorum is
available and brokers find the active controller), and the producer lost nothing. Finally a
voter whose config file still lists the original voters restarts and rejoins the changed
quorum.
"""

from __future__ import annotations

import json
import threading
import tomllib
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, Message, Producer
from flux.cli.main import main as fluxctl
from flux.cluster.launcher import NodeProcess, free_port, write_node_config

from .cluster_helpers import create_topic
from .helpers import wait_until

pytestmark = pytest.mark.integration

TOPIC = "load"
#: Messages the producer offers per second (a steady load, not a benchmark).
RATE_PER_S = 200


class ProducerLoad:
    """A confluent-kafka producer (acks=all, idempotent) sending steadily from its own thread;
    counts deliveries and keeps every failed one."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
            }
        )
        self.delivered = 0
        self.unflushed = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer-load", daemon=True)

    def __enter__(self) -> ProducerLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        del self._producer  # closes its connections before the test stops brokers

    def _on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.failures.append(str(error))

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            try:
                for _ in range(RATE_PER_S // 20):
                    self._producer.produce(
                        TOPIC,
                        str(sequence).encode(),
                        key=str(sequence % 16).encode(),
                        on_delivery=self._on_delivery,
                    )
                    sequence += 1
            except BufferError:
                pass  # the local queue is full: brokers are slow, keep polling (not a failure)
            self._producer.poll(0.05)
        self.unflushed = self._producer.flush(30)

    def wait_progress(self) -> None:
        """Wait until more messages were delivered (the load keeps flowing)."""
        before = self.delivered
        wait_until(lambda: self.delivered >= before + RATE_PER_S // 4, timeout_s=20)


def _status(http_address: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{http_address}/controller/status", timeout=2) as reply:
            answer = json.loads(reply.read())
    except OSError:
        return None
    return answer if isinstance(answer, dict) else None


def _voter_entries(node: NodeProcess) -> list[str]:
    config = tomllib.loads(node.config_path.read_text())
    return list(config["controller"]["voters"])


def _start_fourth_controller(first: NodeProcess, node_id: int) -> tuple[NodeProcess, str]:
    """A controller-only node next to the cluster, its voters the current ones plus itself;
    returns it (started) and its voter entry ``id@host:raft:http``."""
    config = tomllib.loads(first.config_path.read_text())
    node_dir = first.config_path.parent.parent / f"node-{node_id}"
    node_dir.mkdir()
    raft_port, http_port = free_port(), free_port()
    entry = f"{node_id}@127.0.0.1:{raft_port}:{http_port}"
    config["node"].update(id=node_id, roles=["controller"], data_dir=str(node_dir / "data"))
    config["broker"].update(kafka_port=free_port(), http_port=free_port())
    config["controller"].update(
        raft_port=raft_port, http_port=http_port, voters=[*config["controller"]["voters"], entry]
    )
    write_node_config(node_dir / "node.toml", config)
    node = NodeProcess(
        node_id=node_id,
        config_path=node_dir / "node.toml",
        data_dir=node_dir / "data",
        log_path=node_dir / "node.log",
    )
    node.start()
    return node, entry


def _invoke(*args: str) -> Any:
    """``fluxctl controller ARGS --json``, run in this process; click's result."""
    return CliRunner().invoke(fluxctl, ["controller", *args, "--json"])


def _fluxctl(*args: str) -> dict[str, Any]:
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def _remove_active(node_id: int, http: str) -> dict[str, Any]:
    """``fluxctl controller remove`` of the active controller. It hands leadership over and
    the new active controller plans the removal; just elected, it may not be connected to
    every other voter yet, and then refuses (a majority must stay reachable) until it is:
    retried, as an operator would, for as long as that is the reason."""
    answers: list[dict[str, Any]] = []

    def removed() -> bool:
        result = _invoke("remove", str(node_id), "--controller", http)
        if result.exit_code == 0:
            answers.append(json.loads(result.stdout))
            return True
        assert "are reachable: a majority needs" in result.output, result.output
        return False

    wait_until(removed, timeout_s=30, interval_s=0.5)
    return answers[-1]


def _addresses(entry: str) -> tuple[int, str, str]:
    node_id, _, rest = entry.partition("@")
    host, raft_port, http_port = rest.split(":")
    return int(node_id), f"{host}:{raft_port}", f"{host}:{http_port}"


def _active_id(voters: dict[int, tuple[str, str]]) -> int:
    def find() -> int | None:
        for node_id, (_raft, http) in voters.items():
            status = _status(http)
            if status and status.get("active"):
                return node_id
        return None

    active: int = wait_until(find, timeout_s=15)
    return active


def _check_step(
    voters: dict[int, tuple[str, str]], load: ProducerLoad, first: NodeProcess, step: str
) -> None:
    """Every voter reports these voters and this Raft membership and knows the active
    controller; a topic can be created; the producer keeps delivering, with no failure."""
    expected_ids = sorted(voters)
    expected_members = sorted(raft for raft, _http in voters.values())

    def agreed() -> bool:
        for _raft, http in voters.values():
            status = _status(http)
            if status is None or status.get("leader_id") not in voters:
                return False
            if sorted(v["node_id"] for v in status["voters"]) != expected_ids:
                return False
            if status["raft"]["members"] != expected_members:
                return False
        return True

    wait_until(agreed, timeout_s=20)
    answer = create_topic(first, f"after-{step}", 1, 3)
    assert answer["error_code"] == 0, answer
    load.wait_progress()
    assert load.failures == [], load.failures


def test_adding_and_removing_a_controller_voter_under_load(cluster_factory: Any) -> None:
    nodes = cluster_factory(3)
    first = nodes[0]
    voters = {
        node_id: (raft, http) for node_id, raft, http in map(_addresses, _voter_entries(first))
    }
    assert create_topic(first, TOPIC, 3, 3)["error_code"] == 0
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    fourth, entry = _start_fourth_controller(first, node_id=4)
    try:
        with ProducerLoad(bootstrap) as load:
            load.wait_progress()
            fourth.wait_started()
            # Not a voter yet: the quorum kept its 3 members and nobody counts on the 4th.
            assert sorted(_status(voters[1][1])["raft"]["members"]) == sorted(
                raft for raft, _http in voters.values()
            )

            # A controller that does not run is refused, and nothing changes.
            nowhere = CliRunner().invoke(
                fluxctl,
                [
                    "controller",
                    "add",
                    "--id",
                    "5",
                    "--raft",
                    f"127.0.0.1:{free_port()}",
                    "--http",
                    f"127.0.0.1:{free_port()}",
                    "--controller",
                    voters[1][1],
                ],
            )
            assert nowhere.exit_code != 0 and "does not answer" in nowhere.output, nowhere.output

            # 1. Add controller 4.
            _node_id, raft, http = _addresses(entry)
            answer = _fluxctl(
                "add", "--id", "4", "--raft", raft, "--http", http, "--controller", voters[1][1]
            )
            assert answer["error_code"] == 0, answer
            voters[4] = (raft, http)
            _check_step(voters, load, first, "add")
            fourth.wait_ready(timeout_s=10)

            # A second add of the same voter changes nothing; a clashing one is refused.
            assert (
                _fluxctl(
                    "add", "--id", "4", "--raft", raft, "--http", http, "--controller", voters[1][1]
                )["error_code"]
                == 0
            )
            clash = CliRunner().invoke(
                fluxctl,
                [
                    "controller",
                    "add",
                    "--id",
                    "5",
                    "--raft",
                    raft,
                    "--http",
                    "127.0.0.1:1",
                    "--controller",
                    voters[1][1],
                ],
            )
            assert clash.exit_code != 0 and "belongs to voter 4" in clash.output, clash.output

            # 2. Remove a voter that is not the active controller (a combined node: it keeps
            # serving as a broker, and finds the controllers through the metadata).
            active = _active_id(voters)
            victim = min(node_id for node_id in (1, 2, 3) if node_id != active)
            answer = _fluxctl("remove", str(victim), "--controller", voters[4][1])
            assert answer["error_code"] == 0, answer
            del voters[victim]
            _check_step(voters, load, first, "remove")

            # 3. Remove the active controller: it hands leadership over, then is removed.
            active = _active_id(voters)
            answer = _remove_active(active, voters[active][1])
            assert answer["error_code"] == 0, answer
            del voters[active]
            assert _active_id(voters) != active
            # Every node still runs its broker: node 1 creates the topic whatever it was.
            _check_step(voters, load, first, "remove-active")
            # fluxctl's view, starting from any one voter, finds all of them.
            status = _fluxctl("status", "--controller", next(iter(voters.values()))[1])
            assert sorted(v["node_id"] for v in status["voters"]) == sorted(voters)
            answered = [
                row["status"]["node_id"] for row in status["controllers"] if "status" in row
            ]
            assert sorted(answered) == sorted(voters)
        assert load.failures == [] and load.unflushed == 0, (load.failures, load.unflushed)
        assert load.delivered > RATE_PER_S

        # 4. The membership survives a restart: a voter whose config still names the original
        # voters rejoins the changed quorum (pysyncobj replays it from its log). The removed
        # controllers are stopped first, as docs/operations.md asks.
        every_node = [*nodes, fourth]
        for node in every_node:
            if node.node_id not in voters:
                node.stop(timeout_s=10)
        restarted = next(
            node
            for node in every_node
            if node.node_id in voters and node.node_id != _active_id(voters)
        )
        restarted.stop()
        restarted.start()
        restarted.wait_ready(timeout_s=30)
        wait_until(
            lambda: (
                (_status(voters[restarted.node_id][1]) or {}).get("raft", {}).get("members")
                == sorted(raft for raft, _http in voters.values())
            ),
            timeout_s=15,
        )
        status = _status(voters[restarted.node_id][1])
        assert status is not None and sorted(v["node_id"] for v in status["voters"]) == sorted(
            voters
        )
    finally:
        fourth.stop(timeout_s=10)
