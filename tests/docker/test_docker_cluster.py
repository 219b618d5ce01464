"""The cluster in Docker, driven through ``fluxctl cluster ... --docker`` like an operator would.

One compose project serves the module (the tests run in order in one xdist group and leave the
cluster whole for the next one); ``down --volumes`` at the end removes it. On a machine whose
engine has no images (CI), the first ``up`` builds the base image with debootstrap and the node
image from host-built wheels, which the first test checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flux.chaos.docker_cluster import free_base_port

docker = pytest.importorskip("docker")
confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker")]

FLUXCTL = [sys.executable, "-m", "flux.cli.main"]
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "flux:latest"
TOPIC = "orders"


def _engine() -> Any:
    try:
        client = docker.from_env()
        client.ping()
        return client
    except Exception as error:  # noqa: BLE001 - any failure means no engine here
        if os.environ.get("CI"):
            raise  # CI machines have the engine: its absence is a failure, not a skip
        pytest.skip(f"no Docker engine: {error}")


def fluxctl(*args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*FLUXCTL, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=900,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"fluxctl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


class Cluster:
    def __init__(self, data_dir: Path, project: str, base_port: int) -> None:
        self.data_dir = data_dir
        self.project = project
        self.base_port = base_port
        self.up_output = ""

    def args(self) -> list[str]:
        return ["--docker", "--project", self.project, "--data-dir", str(self.data_dir)]

    def ctl(self, command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return fluxctl("cluster", command, *args, *self.args(), check=check)

    def status(self) -> dict[str, Any]:
        return json.loads(self.ctl("status", "--json").stdout)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + n}" for n in range(3))

    def container(self, node_id: int) -> Any:
        client = docker.from_env()
        (found,) = client.containers.list(
            all=True,
            filters={
                "label": [
                    f"com.docker.compose.project={self.project}",
                    f"com.docker.compose.service=flux{node_id}",
                ]
            },
        )
        return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    engine = _engine()
    try:
        engine.images.get(IMAGE)
        had_image = True
    except docker.errors.ImageNotFound:
        had_image = False
    data_dir = tmp_path_factory.mktemp("docker-cluster")
    cluster = Cluster(data_dir, f"fluxtest{uuid.uuid4().hex[:8]}", free_base_port())
    try:
        done = fluxctl(
            "cluster", "up", "--json", "--base-port", str(cluster.base_port), *cluster.args(),
            "--env", "FLUX_SESSION_TIMEOUT_MS=2000",
            "--env", "FLUX_PREFERRED_LEADER_DELAY_MS=1000",
            "--env", "FLUX_HEARTBEAT_INTERVAL_MS=200",
        )  # fmt: skip
        cluster.up_output = done.stdout
        if not had_image:
            assert "building" in done.stderr, done.stderr
        yield cluster
    finally:
        fluxctl("cluster", "down", "--volumes", *cluster.args(), check=False)


# -- helpers ---------------------------------------------------------------------------------


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    """Poll ``condition`` (errors count as "not yet": a cluster in failover may refuse) until
    it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception as error:  # noqa: BLE001 - retried until the deadline
            last_error = error
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} ({last_error})")


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # referenced until the futures resolve (else it is destroyed)
    futures = admin.create_topics(
        [NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})]
    )
    for future in futures.values():
        future.result(30)


def _partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, isr) as the brokers answering ``bootstrap`` see it."""
    metadata = _admin(bootstrap).list_topics(topic, timeout=10)
    return {p: (m.leader, list(m.isrs)) for p, m in metadata.topics[topic].partitions.items()}


class AckedProducer:
    """confluent-kafka with acks=all and idempotence; remembers what the cluster acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 120000,
                "linger.ms": 5,
            }
        )
        self.acked: set[bytes] = set()
        self.failed: list[str] = []

    def send(self, topic: str, value: bytes, partition: int) -> None:
        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self.acked.add(message.value())
            else:
                self.failed.append(str(error))

        self._producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
        self._producer.poll(0)

    def flush(self, timeout_s: float = 120.0) -> None:
        assert self._producer.flush(timeout_s) == 0, "messages still in flight"


def _high_watermark(consumer: confluent_kafka.Consumer, partition: Any) -> int:
    """The partition's high watermark, asked again on a transient client error (librdkafka
    replaces a broker handle when a metadata refresh renames it: _DESTROY_BROKER; a leadership
    that just moved answers NOT_LEADER_FOR_PARTITION until the client's metadata follows; a
    new client whose first metadata answer came from a node that just healed may not know the
    partition yet: _UNKNOWN_PARTITION, until its next refresh)."""
    deadline = time.monotonic() + 30
    moving = (
        confluent_kafka.KafkaError._DESTROY_BROKER,
        confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION,
        confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
        confluent_kafka.KafkaError._UNKNOWN_PARTITION,
    )
    while True:
        try:
            return int(consumer.get_watermark_offsets(partition, timeout=10)[1])
        except confluent_kafka.KafkaException as exception:
            error = exception.args[0]
            transient = error.retriable() or error.code() in moving
            if not transient or time.monotonic() > deadline:
                raise
            if error.code() == confluent_kafka.KafkaError._UNKNOWN_PARTITION:
                # librdkafka keeps a topic it was told is unknown for a while: ask for the
                # topic's metadata now (a CI run kept the stale answer past the whole deadline).
                with contextlib.suppress(confluent_kafka.KafkaException):
                    consumer.list_topics(partition.topic, timeout=5)
            time.sleep(0.1)  # the client refreshes its metadata meanwhile


def _end_offset(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's high watermark, as its leader answers now."""
    from confluent_kafka import TopicPartition

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"watermark-{uuid.uuid4().hex}"}
    )
    try:
        return _high_watermark(consumer, TopicPartition(topic, partition))
    finally:
        consumer.close()


def _read_partition(bootstrap: str, topic: str, partition: int, at_least: int = 0) -> list[bytes]:
    """Every value of ``topic``/``partition`` up to its high watermark, once this consumer
    sees it at ``at_least`` or more (a leader just elected may still answer with the high
    watermark it knew as a follower, and another client may have asked the old leader)."""
    from confluent_kafka import TopicPartition

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
         "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )  # fmt: skip
    try:
        high = _high_watermark(consumer, TopicPartition(topic, partition))
        deadline = time.monotonic() + 60
        while high < at_least and time.monotonic() < deadline:
            time.sleep(0.25)
            high = _high_watermark(consumer, TopicPartition(topic, partition))
        consumer.assign([TopicPartition(topic, partition, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        position = 0
        while position < high and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            values.append(message.value())
            position = message.offset() + 1
        assert position >= high, f"read {position} of {high} records of {topic}-{partition}"
        return values
    finally:
        consumer.close()


# -- tests -----------------------------------------------------------------------------------


def test_up_starts_three_healthy_nodes_with_the_local_status_shape(cluster: Cluster) -> None:
    status = json.loads(cluster.up_output)
    assert [node["id"] for node in status["nodes"]] == [1, 2, 3]
    assert all(node["healthy"] and node["running"] for node in status["nodes"])
    assert sum(node["active_controller"] for node in status["nodes"]) == 1
    assert status["bootstrap_servers"] == cluster.bootstrap
    # The same keys as the local mode's status, so scripts work with both.
    for key in ("id", "pid", "kafka", "http", "roles", "running", "healthy", "active_controller"):
        assert all(key in node for node in status["nodes"]), key
    labels = docker.from_env().images.get(IMAGE).labels
    assert labels.get("io.flux.source-hash"), labels
    # A second `up` reuses the running cluster and the image (nothing is rebuilt).
    again = cluster.ctl("up", "--json", "--base-port", str(cluster.base_port))
    assert "building" not in again.stderr and "already running" in again.stderr
    assert cluster.container(1).attrs["Config"]["User"] == "flux"  # not root


def test_host_clients_produce_and_consume(cluster: Cluster) -> None:
    _create_topic(cluster.bootstrap, TOPIC)
    # Clients on the host are told the EXTERNAL addresses of every broker.
    brokers = _admin(cluster.bootstrap).list_topics(timeout=10).brokers
    assert sorted((b.host, b.port) for b in brokers.values()) == [
        ("127.0.0.1", cluster.base_port + n) for n in range(3)
    ]
    producer = AckedProducer(cluster.bootstrap)
    values = [b"host-%d" % i for i in range(300)]
    for i, value in enumerate(values):
        producer.send(TOPIC, value, i % 3)
    producer.flush()
    assert producer.acked == set(values) and not producer.failed
    read = [value for p in range(3) for value in _read_partition(cluster.bootstrap, TOPIC, p)]
    assert sorted(read) == sorted(values)


def test_client_container_on_the_compose_network(cluster: Cluster) -> None:
    """A client inside the compose network uses the INTERNAL listener (fluxN:9092)."""
    network = f"{cluster.project}_flux"
    # Only the internal names resolve in there (127.0.0.1 is the client container itself), so
    # producing to and fetching from each partition leader works only if the brokers answer
    # with their INTERNAL addresses on that listener.
    script = (
        "printf 'inside-1\\ninside-2\\ninside-3\\n' | "
        "fluxctl produce in-net -b flux1:9092 --acks all && "
        "fluxctl consume in-net -b flux2:9092,flux3:9092 --from-beginning --max-messages 3"
    )
    output = (
        docker.from_env()
        .containers.run(IMAGE, ["sh", "-c", script], network=network, entrypoint=[], remove=True)
        .decode()
    )
    for value in ("inside-1", "inside-2", "inside-3"):
        assert value in output
    # And what it wrote is readable from the host.
    read = [value for p in range(3) for value in _read_partition(cluster.bootstrap, "in-net", p)]
    assert sorted(read) == [b"inside-1", b"inside-2", b"inside-3"]


def test_kill_partition_leader_elects_a_new_one_and_loses_no_acked_write(cluster: Cluster) -> None:
    topic, partition = "kill-test", 0
    _create_topic(cluster.bootstrap, topic)
    leader = _partitions(cluster.bootstrap, topic)[partition][0]
    producer = AckedProducer(cluster.bootstrap)
    stop = threading.Event()
    sent: list[bytes] = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            value = b"k-%d" % i
            sent.append(value)
            producer.send(topic, value, partition)
            i += 1
            time.sleep(0.005)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        _wait(lambda: len(producer.acked) > 100, 60, "writes acknowledged before the kill")
        assert json.loads(cluster.ctl("kill", str(leader)).stdout) == {"killed": leader}
        acked_at_kill = len(producer.acked)
        survivors = ",".join(
            f"127.0.0.1:{cluster.base_port + n - 1}" for n in (1, 2, 3) if n != leader
        )
        _wait(
            lambda: _partitions(survivors, topic)[partition][0] not in (leader, -1),
            60,
            "a new leader",
        )
        _wait(lambda: len(producer.acked) > acked_at_kill + 200, 60, "acks=all writes resuming")
    finally:
        stop.set()
        writer.join()
    producer.flush()
    assert not producer.failed
    cluster.ctl("restart", str(leader))
    read = _read_partition(cluster.bootstrap, topic, partition)
    lost = producer.acked - set(read)
    assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {sorted(lost)[:5]}"
    assert len(read) == len(set(read)), "a value was written twice (idempotent producer)"


DIVERGENT_WRITE = """
import sys
from flux.protocol.api import ApiKey
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection
with KafkaConnection("127.0.0.1", 9092) as conn:
    answer = conn.request(ApiKey.PRODUCE, 7, {"transactional_id": None, "acks": 1,
        "timeout_ms": 5000, "topic_data": [{"name": sys.argv[1], "partition_data": [
        {"index": int(sys.argv[2]), "records": build_batch(
            [(None, b"divergent-%d" % i, ()) for i in range(5)])}]}]})
print(answer["responses"][0]["partition_responses"][0]["error_code"])
"""


def test_partitioned_leader_loses_leadership_and_rejoins_truncated(cluster: Cluster) -> None:
    topic = "split-test"
    _create_topic(cluster.bootstrap, topic)
    leaders = _partitions(cluster.bootstrap, topic)
    partition = 0
    isolated = leaders[partition][0]
    producer = AckedProducer(cluster.bootstrap)
    for i in range(50):
        producer.send(topic, b"before-%d" % i, partition)
    producer.flush()

    assert json.loads(cluster.ctl("partition", str(isolated)).stdout) == {"partitioned": [isolated]}
    majority = ",".join(
        f"127.0.0.1:{cluster.base_port + n - 1}" for n in (1, 2, 3) if n != isolated
    )
    # Its partitions move to the majority side.
    _wait(
        lambda: _partitions(majority, topic)[partition][0] not in (isolated, -1),
        60,
        "leadership to leave the isolated node",
    )
    status = cluster.status()
    node = next(n for n in status["nodes"] if n["id"] == isolated)
    assert node["running"] and not node["connected"]
    # The isolated node still believes it leads: it takes an acks=1 write nobody replicates.
    answer = cluster.container(isolated).exec_run(
        ["python3", "-c", DIVERGENT_WRITE, topic, str(partition)]
    )
    assert answer.exit_code == 0 and answer.output.decode().strip() == "0", answer.output
    # Clients on the majority side keep producing with acks=all.
    majority_producer = AckedProducer(majority)
    after = [b"after-%d" % i for i in range(50)]
    for value in after:
        majority_producer.send(topic, value, partition)
    majority_producer.flush()
    assert majority_producer.acked == set(after)

    assert json.loads(cluster.ctl("heal").stdout) == {"healed": [isolated]}
    # It rejoins as a follower (back in the ISR), then takes its preferred leadership back.
    _wait(
        lambda: isolated in _partitions(cluster.bootstrap, topic)[partition][1],
        90,
        "the healed node back in the ISR",
    )
    _wait(
        lambda: _partitions(cluster.bootstrap, topic)[partition][0] == isolated,
        60,
        "the healed node to lead its preferred partition again",
    )
    # A leader just elected may answer with the high watermark it knew as a follower until its
    # followers fetch in its epoch (as in Kafka): read once it covers every acked write.
    _wait(
        lambda: _end_offset(cluster.bootstrap, topic, partition) >= 100,
        60,
        "the new leader's high watermark to cover the acked writes",
    )
    # Served by the healed node itself: its divergent tail is gone, every acked write is there.
    values = _read_partition(cluster.bootstrap, topic, partition, at_least=100)
    assert not [v for v in values if v.startswith(b"divergent-")], values[-10:]
    assert values == [b"before-%d" % i for i in range(50)] + after


def _replicas_on(bootstrap: str, broker_id: int) -> int:
    """How many partition replicas of every topic ``broker_id`` holds, as the metadata says."""
    topics = _admin(bootstrap).list_topics(timeout=10).topics.values()
    return sum(broker_id in p.replicas for t in topics for p in t.partitions.values())


def test_add_node_gets_replicas_on_rebalance_and_remove_node_takes_it_out(
    cluster: Cluster,
) -> None:
    """Issue 19: a broker-only container joins, a rebalance gives it replicas, remove-node
    drains it, removes its container and volume and unregisters it (the cluster is left with
    its 3 nodes for the tests after this one)."""
    client = docker.from_env()
    label = f"com.docker.compose.project={cluster.project}"
    added = json.loads(cluster.ctl("add-node", "--json").stdout)
    assert added["added"] == 4 and added["roles"] == ["broker"] and added["healthy"], added
    assert added["kafka"] == f"127.0.0.1:{cluster.base_port + 3}"
    assert [node["id"] for node in cluster.status()["nodes"]] == [1, 2, 3, 4]
    assert cluster.container(4).labels["io.flux.added-node"] == "4"
    try:
        _create_topic(cluster.bootstrap, "grow-test", partitions=6)
        fluxctl("cluster", "rebalance", "--wait", "--bootstrap", cluster.bootstrap)
        _wait(lambda: _replicas_on(cluster.bootstrap, 4) > 0, 30, "replicas on broker 4")
        # Host clients reach it through its published EXTERNAL listener.
        producer = AckedProducer(cluster.bootstrap)
        values = [b"grow-%d" % i for i in range(60)]
        for i, value in enumerate(values):
            producer.send("grow-test", value, i % 6)
        producer.flush()
        assert producer.acked == set(values) and not producer.failed
        voter = cluster.ctl("remove-node", "1", check=False)
        assert voter.returncode != 0 and "controller voter" in voter.stderr, voter.stderr
    finally:
        removed = json.loads(cluster.ctl("remove-node", "4", "--json").stdout)
    assert removed["drained"] and removed["stopped"] and removed["unregistered"], removed
    assert removed["moves"], "broker 4 held replicas, so the drain moved some"
    service = "com.docker.compose.service=flux4"
    assert client.containers.list(all=True, filters={"label": [label, service]}) == []
    assert len(client.volumes.list(filters={"label": label})) == 3
    _wait(
        lambda: sorted(_admin(cluster.bootstrap).list_topics(timeout=10).brokers) == [1, 2, 3],
        30,
        "broker 4 gone from the metadata",
    )
    assert _replicas_on(cluster.bootstrap, 4) == 0
    read = [v for p in range(6) for v in _read_partition(cluster.bootstrap, "grow-test", p)]
    assert sorted(read) == sorted(values)


def test_fluxctl_build_image_reuses_an_up_to_date_image(cluster: Cluster) -> None:
    done = fluxctl("cluster", "build-image")
    assert json.loads(done.stdout) == {"image": IMAGE}
    assert "building" not in done.stderr
    base = subprocess.run(
        ["bash", str(ROOT / "docker" / "build-base")], capture_output=True, text=True, check=False
    )
    if docker.from_env().images.list(name="flux-base"):
        assert base.returncode == 0 and "already exists" in base.stdout, base.stdout + base.stderr


def test_down_removes_containers_then_is_a_no_op(cluster: Cluster) -> None:
    client = docker.from_env()
    label = f"com.docker.compose.project={cluster.project}"
    assert len(client.volumes.list(filters={"label": label})) == 3
    done = cluster.ctl("down", "--volumes")
    assert json.loads(done.stdout) == {"removed": cluster.project, "volumes": True}
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert client.volumes.list(filters={"label": label}) == []
    again = cluster.ctl("down")
    assert again.returncode == 0 and "no docker cluster" in again.stderr


# -- errors (no cluster needed) --------------------------------------------------------------


def test_docker_daemon_down_is_one_line_and_non_zero(tmp_path: Path) -> None:
    done = fluxctl(
        "cluster", "up", "--docker", "--data-dir", str(tmp_path), check=False,
        DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Docker daemon is not reachable" in lines[0], done.stderr


def test_port_in_use_is_named(tmp_path: Path) -> None:
    _engine()
    base = free_base_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        done = fluxctl(
            "cluster", "up", "--docker", "--project", f"fluxport{uuid.uuid4().hex[:6]}",
            "--data-dir", str(tmp_path), "--base-port", str(base), check=False,
        )  # fmt: skip
    assert done.returncode != 0
    assert f"port {base + 1} (node 2 Kafka) is already in use" in done.stderr, done.stderr


def test_partition_without_docker_says_why(tmp_path: Path) -> None:
    done = fluxctl("cluster", "partition", "1", "--data-dir", str(tmp_path), check=False)
    assert done.returncode != 0 and "partition needs --docker" in done.stderr
