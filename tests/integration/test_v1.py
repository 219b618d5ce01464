"""The V1 line protocol on a real 3-node cluster (``[v1] port = 0``), spoken over raw sockets
as the FLUX SDKs speak it, next to confluent-kafka on the same topics.

Covers each served command with a good and a bad request, V1 <-> Kafka interoperability both
ways, NOT_LEADER naming the leader's V1 address, pipelining (many requests on one connection,
answered in order), and bad input (garbage, overlong lines, half lines) while another client
keeps working.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from flux.cli.main import main as fluxctl
from flux.cluster.launcher import NodeProcess
from flux.cluster.v1.protocol import fnv1a_32

from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

TOPIC = "v1-orders"


class V1:
    """One V1 connection: ``call`` sends a line and reads its answer."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.file = self.sock.makefile("rb")
        self.next_id = 1

    def send(self, line: bytes) -> None:
        self.sock.sendall(line)

    def read(self) -> str:
        return self.file.readline().decode().rstrip("\n")

    def call(self, command: str, args: str = "") -> tuple[str, str, str]:
        """(status, code or fields, message) of ``V1|n|COMMAND|args``."""
        cid = str(self.next_id)
        self.next_id += 1
        self.send(f"V1|{cid}|{command}|{args}\n".encode())
        answer = self.read()
        parts = answer.split("|", 4)
        assert parts[:2] == ["V1", cid], answer
        if parts[2] == "OK":
            return "OK", parts[3] if len(parts) > 3 else "", ""
        return parts[2], parts[3], parts[4]

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def fields(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(" ") if item)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    from flux.cluster.launcher import local_cluster_configs

    from tests.conftest import FAST_FAILURE_DETECTION

    processes = local_cluster_configs(
        tmp_path_factory.mktemp("v1"),
        3,
        extra={
            **FAST_FAILURE_DETECTION,
            "broker": {**FAST_FAILURE_DETECTION["broker"], "group_initial_rebalance_delay_ms": 0},
            "v1": {"port": 0, "max_line_bytes": 4096},
        },
    )
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.wait_ready()
        yield processes
    finally:
        for process in processes:
            process.stop(timeout_s=10.0)


@pytest.fixture(scope="module")
def leaders(nodes: list[NodeProcess]) -> dict[int, str]:
    """The topic (3 partitions, rf 3) made over V1; partition -> its leader's V1 address."""
    client = V1(nodes[0].ready["v1"])
    try:
        status, answer, _ = client.call("ADMIN_CREATE_TOPIC", f"{TOPIC} 3 3")
        assert status == "OK", answer
        assert fields(answer) == {"topic": TOPIC, "partitions": "3", "replication_factor": "3"}

        def known() -> dict[int, str] | None:
            _, answer, _ = client.call("ADMIN_GET_METADATA")
            found = fields(answer)
            if f"{TOPIC}:3" not in found.get("topics", "").split(","):
                return None
            brokers = dict(b.split("@") for b in found["brokers"].split(","))
            owners = {
                int(entry.split("=")[0].split("/")[1]): entry.split("=")[1]
                for entry in found["leaders"].split(",")
                if entry.startswith(f"{TOPIC}/")
            }
            if any(leader not in brokers for leader in owners.values()):
                return None
            return {index: brokers[leader] for index, leader in owners.items()}

        return wait_until(known)
    finally:
        client.close()


def _key_for(partition: int, partitions: int = 3) -> str:
    return next(
        f"user{i}" for i in range(1000) if fnv1a_32(f"user{i}".encode()) % partitions == partition
    )


def test_produce_over_v1_is_read_by_kafka_and_kafka_records_over_v1(
    nodes: list[NodeProcess], leaders: dict[int, str]
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    key = _key_for(1)
    client = V1(leaders[1])
    try:
        status, answer, _ = client.call("PRODUCE", f"{TOPIC} {key}:created acks=all")
        assert status == "OK", answer
        produced = fields(answer)
        assert produced["partition"] == "1" and int(produced["hw"]) > int(produced["offset"])
        for acks in ("0", "1"):
            status, answer, _ = client.call("PRODUCE", f"{TOPIC} {key}:acks-{acks} acks={acks}")
            assert status == "OK" and fields(answer)["partition"] == "1", answer
    finally:
        client.close()
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "v1-reader"})
    try:
        consumer.assign([TopicPartition(TOPIC, 1, int(produced["offset"]))])
        message = None
        while message is None or message.error():
            message = consumer.poll(10)
        assert (message.key(), message.value()) == (key.encode(), b"created")
    finally:
        consumer.close()

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(TOPIC, key=b"k", value=b"from kafka, with spaces|and bars", partition=2)
    assert producer.flush(30) == 0
    client = V1(leaders[2])
    try:
        status, answer, _ = client.call("CONSUME", f"{TOPIC} 2 0")
        assert status == "OK", answer
        consumed = fields(answer)
        values = [item.split(":", 1)[1] for item in consumed["messages"].split(",") if item]
        assert "from%20kafka%2C%20with%20spaces%7Cand%20bars" in values
        assert int(consumed["hw"]) == len(values)
        status, answer, _ = client.call("CONSUME", f"{TOPIC} 2 {consumed['hw']}")
        assert status == "OK" and fields(answer)["messages"] == ""  # nothing past the hw
        assert client.call("CONSUME", f"{TOPIC} 2 999999")[1] == "BAD_REQUEST"
        assert client.call("CONSUME", f"{TOPIC} 2")[1] == "BAD_REQUEST"
        assert client.call("CONSUME", f"{TOPIC} 7 0")[1] == "BAD_REQUEST"
        assert client.call("CONSUME", "no-such-topic 0 0")[1] == "UNKNOWN_TOPIC"
    finally:
        client.close()


def test_a_follower_names_the_leaders_v1_address(
    nodes: list[NodeProcess], leaders: dict[int, str]
) -> None:
    elsewhere = next(n.ready["v1"] for n in nodes if n.ready["v1"] != leaders[0])
    client = V1(elsewhere)
    try:
        status, code, message = client.call("PRODUCE", f"{TOPIC} {_key_for(0)}:x")
        assert (status, code) == ("ERR", "NOT_LEADER")
        assert message.endswith(f"at {leaders[0]}"), message
        # A replica read works on a follower (below its high watermark).
        status, answer, _ = client.call("BROKER_FETCH", f"{TOPIC} 1 2 0 5")
        assert status == "OK" and "hw" in fields(answer), answer
        status, answer, _ = client.call("REPLICA_FETCH", f"{TOPIC} 1 2 0")
        assert status == "OK", answer
    finally:
        client.close()


def test_pipelined_requests_are_answered_in_order(leaders: dict[int, str]) -> None:
    key = _key_for(0)
    client = V1(leaders[0])
    try:
        count = 300
        client.send(
            b"".join(
                f"V1|p{i}|PRODUCE|{TOPIC} {key}:v{i} acks=all\n".encode() for i in range(count)
            )
        )
        answers = [client.read() for _ in range(count)]
        assert [a.split("|")[1] for a in answers] == [f"p{i}" for i in range(count)]
        offsets = [int(fields(a.split("|")[3])["offset"]) for a in answers]
        assert offsets == sorted(offsets) and len(set(offsets)) == count  # appended in order
    finally:
        client.close()


def test_offsets_and_commits(nodes: list[NodeProcess], leaders: dict[int, str]) -> None:
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    group = f"v1-group-{uuid.uuid4().hex[:8]}"
    client = V1(_coordinator_address(nodes, group))
    try:
        assert client.call("OFFSET", f"{group} {TOPIC} 0")[1] == "offset=-1"
        status, answer, _ = client.call("COMMIT", f"{group} {TOPIC} c-1 -1 0 5")
        assert (status, answer) == ("OK", "committed=true")
        assert client.call("OFFSET", f"{group} {TOPIC} 0")[1] == "offset=5"
        assert client.call("COMMIT", f"{group} {TOPIC} c-1 3 0 6")[1] == "GENERATION_MISMATCH"
        assert client.call("COMMIT", f"{group} {TOPIC} c-1 -1 0")[1] == "BAD_REQUEST"
        assert client.call("COMMIT", f"{group} {TOPIC} c-1 -1 0 x")[1] == "BAD_REQUEST"
    finally:
        client.close()
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [committed] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
        assert committed.offset == 5  # the same group, seen by a Kafka client
    finally:
        consumer.close()


def test_admin_commands_and_the_ones_flux_does_itself(
    nodes: list[NodeProcess], leaders: dict[int, str]
) -> None:
    # ``leaders``: TOPIC exists on this worker's cluster (xdist may run this test on a worker
    # where no earlier test of this module made it).
    client = V1(nodes[2].ready["v1"])
    try:
        assert client.call("ADMIN_CREATE_TOPIC", f"{TOPIC} 3 3")[1] == "BAD_REQUEST"  # exists
        assert client.call("ADMIN_CREATE_TOPIC", "bad/name 1 1")[1] == "BAD_REQUEST"
        assert client.call("ADMIN_CREATE_TOPIC", "t 0 1")[1] == "BAD_REQUEST"
        status, answer, _ = client.call("ADMIN_GET_METADATA")
        brokers = fields(answer)["brokers"].split(",")
        assert sorted(brokers) == sorted(f"{n.node_id}@{n.ready['v1']}" for n in nodes)
        for command, args in (
            ("ADMIN_REGISTER_BROKER", "9 127.0.0.1 9999"),
            ("ADMIN_BROKER_HEARTBEAT", "1"),
            ("ADMIN_SET_PARTITION_LEADER", f"{TOPIC} 0 1 1,2,3"),
            ("SET_PARTITION_ROLE", f"{TOPIC} 0 leader"),
        ):
            status, code, message = client.call(command, args)
            assert (status, code) == ("ERR", "NOT_SUPPORTED") and message, (command, message)
        assert client.call("FROBNICATE", "x")[1] == "UNKNOWN_COMMAND"
        assert client.call("PRODUCE", f"{TOPIC} no-colon")[1] == "BAD_REQUEST"
        assert client.call("PRODUCE", f"{TOPIC} k:v acks=2")[1] == "BAD_REQUEST"
    finally:
        client.close()


def test_bad_input_never_stops_other_clients(
    nodes: list[NodeProcess], leaders: dict[int, str]
) -> None:
    address = leaders[0]
    good = V1(address)
    key = _key_for(0)
    try:
        garbage = V1(address)
        garbage.send(b"\x00\xff\xfe binary\n")
        assert garbage.read().startswith("V1|0|ERR|BAD_REQUEST|")
        garbage.send(b"V1|7|PRODUCE\n")
        assert garbage.read().startswith("V1|0|ERR|BAD_REQUEST|")
        assert garbage.call("PRODUCE", f"{TOPIC} {key}:still-served")[0] == "OK"
        garbage.close()

        overlong = V1(address)
        overlong.send(b"V1|1|PRODUCE|" + b"x" * 10_000 + b"\n")
        assert overlong.read().startswith("V1|0|ERR|BAD_REQUEST|a request line is at most")
        assert overlong.file.read() == b""  # and the connection is closed
        overlong.close()

        half = V1(address)
        half.send(b"V1|1|PRODUCE|" + TOPIC.encode() + b" k:never-fin")
        half.close()  # a half line, then gone

        status, answer, _ = good.call("PRODUCE", f"{TOPIC} {key}:after-the-noise")
        assert status == "OK", answer
        # The records from the garbage connection's produce on: the half line left none.
        start = int(fields(answer)["offset"]) - 1
        status, answer, _ = good.call("CONSUME", f"{TOPIC} 0 {start} 1000")
        values = [item.split(":", 1)[1] for item in fields(answer)["messages"].split(",")]
        assert values == ["still-served", "after-the-noise"], values
    finally:
        good.close()


def test_ten_thousand_random_and_mutated_lines(cluster_factory) -> None:
    """Seeded fuzzing of the V1 port: every line gets one answer (or, overlong, a closed
    connection), nothing fails inside the broker, and a well-behaved client is served
    throughout. (Topics are not created by the fuzz: auto-creation is off and
    ADMIN_CREATE_TOPIC is not among the templates.)"""
    import random

    [node] = cluster_factory(
        1, v1={"port": 0, "max_line_bytes": 2048}, broker={"auto_create_topics": False}
    )
    setup = V1(node.ready["v1"])
    assert setup.call("ADMIN_CREATE_TOPIC", "fuzzed 2 1")[0] == "OK"
    wait_until(lambda: setup.call("CONSUME", "fuzzed 0 0")[0] == "OK")
    templates = [
        "V1|1|PRODUCE|fuzzed user1:created acks=all",
        "V1|2|PRODUCE|fuzzed k:v acks=1",
        "V1|3|CONSUME|fuzzed 0 0",
        "V1|4|CONSUME|fuzzed 1 0 10",
        "V1|5|OFFSET|g fuzzed 0",
        "V1|6|COMMIT|g fuzzed c-1 -1 0 1",
        "V1|7|ADMIN_GET_METADATA|",
        "V1|8|BROKER_FETCH|fuzzed 0 2 0 5",
        "V1|9|REPLICA_FETCH|fuzzed 1 2 0",
        # (No JOIN: it waits by design for the group's rebalance, up to 30 s.)
        "V1|10|HEARTBEAT|g fuzzed c-1 3",
        "V1|11|LEAVE|g fuzzed c-1 3",
        "V1|12|ADMIN_SET_PARTITION_LEADER|fuzzed 0 1 1",
    ]
    alphabet = "|:= ,-0123456789aAzZ\t\x00\x7f\u00e9\u2603%"
    rng = random.Random(20261127)

    def mutate(line: str) -> str:
        chars = list(line)
        for _ in range(rng.randint(1, 4)):
            kind = rng.random()
            position = rng.randrange(len(chars) + 1)
            if kind < 0.3 and chars:
                del chars[min(position, len(chars) - 1)]
            elif kind < 0.6:
                chars.insert(position, rng.choice(alphabet))
            elif kind < 0.8:
                chars[position:position] = list(str(rng.choice([-1, 0, 2**31, 2**63, -(2**40)])))
            else:
                chars = chars[:position]
        return "".join(chars)

    def line() -> bytes:
        roll = rng.random()
        if roll < 0.1:  # random bytes
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        elif roll < 0.15:  # long
            raw = b"V1|1|PRODUCE|fuzzed k:" + b"x" * rng.randint(100, 1800)
        else:
            raw = mutate(rng.choice(templates)).encode("utf-8", "surrogatepass")
        raw = raw.replace(b"\n", b" ").replace(b"\r", b" ")
        return raw if raw.strip() else b"?"

    good = V1(node.ready["v1"])
    sent = 0
    outcomes: dict[str, int] = {}
    for _connection in range(40):
        lines = [line() for _ in range(250)]
        fuzz = V1(node.ready["v1"])
        fuzz.send(b"".join(item + b"\n" for item in lines))
        answers = [fuzz.read() for _ in lines]
        fuzz.close()
        assert all(answer.startswith("V1|") for answer in answers), answers[:5]
        assert not any("failed on the broker" in answer for answer in answers)
        for answer in answers:
            parts = answer.split("|")
            outcome = parts[2] if parts[2] == "OK" else parts[3]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        sent += len(lines)
        status, answer, _ = good.call("PRODUCE", "fuzzed user1:still-here acks=all")
        assert status == "OK", answer
    good.close()
    setup.close()
    assert sent >= 10_000
    # The mutations reach the commands, not only the parser.
    assert outcomes.get("OK", 0) > 500, outcomes
    assert {"BAD_REQUEST", "UNKNOWN_COMMAND", "UNKNOWN_TOPIC", "NOT_SUPPORTED"} <= set(outcomes)
    assert node.is_running()
    assert "failed" not in "".join(
        line for line in node.log_path.read_text().splitlines() if "flux.cluster.v1" in line
    )


class Member(threading.Thread):
    """A V1 group member as the FLUX runtime runs one: JOIN, HEARTBEAT every 100 ms, JOIN
    again on GENERATION_MISMATCH; LEAVE when told to stop."""

    def __init__(self, address: str, group: str, consumer_id: str) -> None:
        super().__init__(daemon=True)
        self.address, self.group, self.consumer_id = address, group, consumer_id
        self.generation = -1
        self.assigned: list[int] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def _join(self, client: V1) -> None:
        status, answer, message = client.call("JOIN", f"{self.group} {TOPIC} {self.consumer_id}")
        if status != "OK":
            self.errors.append(f"join: {answer} {message}")
            return
        found = fields(answer)
        with self.lock:
            self.generation = int(found["generation"])
            self.assigned = [int(p) for p in found["assigned"].strip("[]").split(",") if p]

    def run(self) -> None:
        client = V1(self.address)
        try:
            self._join(client)
            while not self.stopping.wait(0.1):
                status, code, _ = client.call(
                    "HEARTBEAT", f"{self.group} {TOPIC} {self.consumer_id} {self.generation}"
                )
                if status != "OK":
                    if code != "GENERATION_MISMATCH":
                        self.errors.append(f"heartbeat: {code}")
                    self._join(client)
            client.call("LEAVE", f"{self.group} {TOPIC} {self.consumer_id} {self.generation}")
        finally:
            client.close()

    def state(self) -> tuple[int, list[int]]:
        with self.lock:
            return self.generation, list(self.assigned)


def _coordinator_address(nodes: list[NodeProcess], group: str) -> str:
    """The V1 address of the group's coordinator (the first ask creates the offsets topic:
    UNAVAILABLE until its leaders are elected)."""
    client = V1(nodes[0].ready["v1"])
    try:
        status, code, message = wait_until(
            lambda: (
                answer
                if (answer := client.call("HEARTBEAT", f"{group} {TOPIC} nobody 0"))[1]
                != "UNAVAILABLE"
                else None
            )
        )
    finally:
        client.close()
    if code == "NOT_LEADER":
        return message.rsplit(" at ", 1)[1]
    assert code == "GENERATION_MISMATCH", (status, code, message)  # node 1 coordinates it
    return nodes[0].ready["v1"]


def test_a_v1_group_of_three_rebalances_when_one_leaves(
    nodes: list[NodeProcess], leaders: dict[int, str]
) -> None:
    group = f"v1-members-{threading.get_ident()}-{time.monotonic_ns()}"
    address = _coordinator_address(nodes, group)
    members = [Member(address, group, f"consumer-{i}") for i in range(3)]
    try:
        for member in members:
            member.start()

        def settled(group_members: list[Member]) -> int | None:
            states = [m.state() for m in group_members]
            generations = {generation for generation, _ in states}
            owned = sorted(p for _, assigned in states for p in assigned)
            if len(generations) == 1 and owned == [0, 1, 2] and -1 not in generations:
                return generations.pop()
            return None

        first = wait_until(lambda: settled(members), timeout_s=60)
        assert all(len(m.state()[1]) == 1 for m in members)
        status, described = _describe(nodes[0], group)
        assert status == 200 and described["state"] == "Stable", described
        assert sorted(m["group_instance_id"] for m in described["members"]) == [
            "consumer-0", "consumer-1", "consumer-2"
        ]  # fmt: skip

        # A commit is checked against the member's generation.
        client = V1(address)
        try:
            status, answer, _ = client.call("COMMIT", f"{group} {TOPIC} consumer-0 {first} 0 3")
            assert (status, answer) == ("OK", "committed=true")
            assert client.call("COMMIT", f"{group} {TOPIC} consumer-0 {first + 7} 0 4")[1] == (
                "GENERATION_MISMATCH"
            )
            assert client.call("COMMIT", f"{group} {TOPIC} stranger {first} 0 4")[1] == (
                "GENERATION_MISMATCH"
            )
            assert client.call("OFFSET", f"{group} {TOPIC} 0")[1] == "offset=3"
        finally:
            client.close()

        # The V1 group is a Flux consumer group: fluxctl describes it like any other.
        bootstrap = ",".join(node.bootstrap_servers for node in nodes)
        result = CliRunner().invoke(
            fluxctl, ["group", "describe", group, "--json", "--bootstrap", bootstrap]
        )
        assert result.exit_code == 0, (result.output, result.exception)
        described = json.loads(result.stdout)
        assert described["state"] == "Stable" and described["protocol_type"] == "consumer"
        assert sorted(m["client_id"] for m in described["members"]) == [
            "v1-consumer-0", "v1-consumer-1", "v1-consumer-2"
        ]  # fmt: skip
        owned = sorted(p for m in described["members"] for p in m["assignment"].get(TOPIC, []))
        assert owned == [0, 1, 2]
        rows = {row["partition"]: row for row in described["partitions"] if row["topic"] == TOPIC}
        assert rows[0]["committed_offset"] == 3
        assert rows[0]["client_id"].startswith("v1-consumer-")

        members[2].stopping.set()
        members[2].join(30)
        second = wait_until(lambda: settled(members[:2]), timeout_s=60)
        assert second > first
        assert sorted(len(m.state()[1]) for m in members[:2]) == [1, 2]
        assert not any(m.errors for m in members), [m.errors for m in members]
    finally:
        for member in members:
            member.stopping.set()
        for member in members:
            member.join(30)


def _describe(node: NodeProcess, group: str) -> tuple[int, dict]:
    import urllib.request

    with urllib.request.urlopen(
        f"http://{node.ready['broker_http']}/groups/{group}", timeout=10
    ) as reply:
        return reply.status, json.loads(reply.read())
