"""Produce and consume throughput of a local 3-node cluster over each Kafka security protocol
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), driven by confluent-kafka (librdkafka). Prints one
JSON object on stdout (progress goes to stderr).

One cluster is started once (``flux.cluster.launcher.local_cluster_configs``, 3 combined
controller + broker nodes, data on disk in a temporary directory, ``log_level = "WARNING"``).
Every node has the four listeners ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` and ``SASL_SSL``
on free ports of 127.0.0.1 (``broker.listeners``; each node's ready file reports the bound
addresses), and a ``[security]`` section with a CA generated for the run
(``flux.auth.certificates.CertificateAuthority``, ECDSA P-256) and one node certificate for
127.0.0.1 and localhost, ``ssl_client_auth = "requested"``, every SASL mechanism enabled and
the authorizer off (its default). Node-to-node traffic (replication, the controller) is
unchanged by the listeners: only the clients' connections differ between protocols. A SCRAM
user with a random password is created over PLAINTEXT (AdminClient
``alter_user_scram_credentials``, SCRAM-SHA-256 and SCRAM-SHA-512, 4096 iterations), and the
run waits until every node's metadata image has it. ``__consumer_offsets`` is created before
the first run (a FindCoordinator answered without error), since librdkafka's consumer looks up
its group coordinator and the first timed consume would otherwise pay for that topic's creation.

Each protocol has its own topic (so the runs' logs don't interfere), created up front over
PLAINTEXT with ``--partitions`` (3) partitions, replication factor 3 and
``min.insync.replicas`` 2, and waited for until every partition has a leader and a full ISR.
Clients of a protocol bootstrap from that listener of all three nodes and are told the
brokers' addresses on that listener, so all their traffic uses it:

- ``SSL``: TLS, the server verified against the CA (and its host name), the client presenting
  a certificate of the same CA;
- ``SASL_PLAINTEXT`` / ``SASL_SSL``: ``--mechanism`` (SCRAM-SHA-512; or SCRAM-SHA-256, PLAIN)
  as the SCRAM user, SASL_SSL with the same server verification as SSL and no client
  certificate.

One run of a protocol:

- ``produce``: a fresh confluent-kafka producer (``acks=all``, ``linger.ms=5``,
  ``batch.size=1000000``, ``enable.idempotence=false``, up to 2,000,000 records queued) first
  writes one warm-up record to every partition and waits for it, so connections, TLS and SASL
  handshakes and metadata are in place. Then ``--records`` (1,000,000) records of
  ``--record-bytes`` (100, random bytes, no key) are produced as fast as possible, timed from
  the first ``produce()`` to the end of ``flush()``; every delivery report must be a success;
- ``consume``: a fresh confluent-kafka consumer (``enable.auto.commit=false``, a random
  ``group.id`` that is never joined or committed to, ``fetch.max.bytes`` 50 MiB,
  ``max.partition.fetch.bytes`` 8 MiB, ``queued.min.messages`` 1,000,000) first asks every
  partition's leader for its high watermark (which opens its connections and is reported as
  ``high_watermark_records``: the records after the warm-up, more than ``--records`` only if a
  retried batch was written twice). Then it is assigned every partition from the offset after
  its warm-up record (the start of this run's records; with ``--repeat`` a topic holds the
  earlier runs' records before them) and timed from ``assign()`` until ``--records``
  error-free records have been read with ``consume()`` (at most 100,000 a call, and never more
  than are still missing: the call waits until it has them all or for 1 s).

Both report seconds, records/s and MB/s (10^6 bytes of record values per second). Every
non-PLAINTEXT run also has ``produce_vs_plaintext`` and ``consume_vs_plaintext``: its records/s
over those of the PLAINTEXT run of the same repeat (absent when PLAINTEXT is not measured).

The protocols are run one after the other in ``--order``: ``given`` (the ``--protocols``
order), ``reverse``, ``rotate`` (repeat i starts i places further along the list, so with as
many repeats as protocols each one runs once in each position) or ``shuffle`` (a new order per
repeat, seeded by ``--seed``). ``--repeat N`` runs the whole sequence N times. ``runs`` lists
every run in the order it ran (``repeat`` and ``position`` count from 1). ``protocols`` has,
per protocol, the median of its runs' seconds, records/s and MB/s and the records/s of every
run, and for non-PLAINTEXT protocols the median of its per-repeat ratios to PLAINTEXT (paired
within a repeat, so a machine that gets slower or faster over the whole benchmark moves both
sides of a ratio alike).
``machine`` has the CPU count and the load averages (1, 5, 15 minutes, ``os.getloadavg()``)
at the start and at the end, to tell a quiet run from a noisy one; ``arguments`` has every
argument as used.

    .venv/bin/python benchmarks/security.py [--protocols PLAINTEXT,SSL,SASL_PLAINTEXT,SASL_SSL]
        [--mechanism SCRAM-SHA-512|SCRAM-SHA-256|PLAIN] [--records 1000000]
        [--record-bytes 100] [--partitions 3] [--order given|reverse|rotate|shuffle]
        [--seed 20261215] [--repeat 1] [--quick] [--out FILE]
    .venv/bin/python benchmarks/security.py --quick    # 50,000 records per run

``--quick``: 50,000 records per run (about 5 s, most of it starting the nodes; so few
records take tens of milliseconds per run, which says little about throughput: the smoke test's
size). Explicit options still win. ``--out FILE`` also writes the
JSON there. Every node is stopped and every temporary directory removed at the end, also on
failure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.auth.certificates import CertificateAuthority  # noqa: E402
from flux.cluster.launcher import NodeProcess, local_cluster_configs  # noqa: E402
from flux.protocol.api import ApiKey  # noqa: E402
from flux.protocol.errors import ErrorCode  # noqa: E402
from flux.sdk.wire import KafkaConnection  # noqa: E402

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
ORDERS = ("given", "reverse", "rotate", "shuffle")
NODES = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
LINGER_MS = 5
BATCH_BYTES = 1_000_000
MB = 1_000_000
USER = "benchmark"
SCRAM_ITERATIONS = 4096
SEED = 20261215
DEFAULTS = {"records": 1_000_000}
QUICK = {"records": 50_000}
#: librdkafka's producer queue: the default 1,000,000 records fit without a BufferError.
QUEUE_RECORDS = 2_000_000
QUEUE_KBYTES = 2_000_000
#: Records asked of one consume() call.
CONSUME_BATCH_RECORDS = 100_000
# Upper bounds on waiting (seconds).
NODE_READY_TIMEOUT_S = 60
SETUP_TIMEOUT_S = 60
WARM_UP_TIMEOUT_S = 60
FLUSH_TIMEOUT_S = 600
CONSUME_TIMEOUT_S = 600
WATERMARK_TIMEOUT_S = 30


def _log(message: str) -> None:
    print(f"[security {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _rates(records: int, record_bytes: int, elapsed: float) -> dict[str, Any]:
    return {
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(records * record_bytes / elapsed / MB, 1),
    }


# --- the cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """A started cluster: its nodes, the directory of its PEM files, the SCRAM user's
    password and, per listener name, the bootstrap list of that listener on every node."""

    nodes: list[NodeProcess]
    directory: Path
    password: str
    bootstrap: dict[str, str]

    def file(self, name: str) -> str:
        return str(self.directory / name)


def _write_certificates(directory: Path) -> None:
    ca = CertificateAuthority.create("flux security benchmark CA")
    node = ca.issue_server("node", ["127.0.0.1", "localhost"])
    client = ca.issue_client("benchmark")
    for name, data in (
        ("ca.pem", ca.certificate_pem),
        ("node.pem", node.certificate_pem),
        ("node.key", node.key_pem),
        ("client.pem", client.certificate_pem),
        ("client.key", client.key_pem),
    ):
        (directory / name).write_bytes(data)


def _node_sections(directory: Path) -> dict[str, dict[str, Any]]:
    return {
        "node": {"log_level": "WARNING"},
        "broker": {"listeners": [f"{name}://127.0.0.1:0" for name in PROTOCOLS]},
        "security": {
            "ssl_certfile": str(directory / "node.pem"),
            "ssl_keyfile": str(directory / "node.key"),
            "ssl_cafile": str(directory / "ca.pem"),
            "ssl_client_auth": "requested",
            "authorizer_enable": False,
        },
    }


def _address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def _wait(condition: Any, what: str, timeout_s: float = SETUP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout_s} s")
        time.sleep(0.1)


def _create_user(cluster: Cluster) -> None:
    """The SCRAM user, over PLAINTEXT, then waited for in every node's metadata image (a node
    answers DescribeUserScramCredentials and authenticates from its own image)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap["PLAINTEXT"]})
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(mechanism, SCRAM_ITERATIONS), cluster.password.encode()
            )
            for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
    )
    for future in futures.values():
        future.result(timeout=SETUP_TIMEOUT_S)

    def known_everywhere() -> bool:
        for node in cluster.nodes:
            with KafkaConnection(*_address(node.ready["listeners"]["PLAINTEXT"])) as conn:
                answer = conn.request(
                    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": USER}]}
                )
            (result,) = answer["results"]
            if result["error_code"] != ErrorCode.NONE or len(result["credential_infos"]) != 2:
                return False
        return True

    _wait(known_everywhere, f"user {USER} not in every node's metadata")


def _create_offsets_topic(cluster: Cluster) -> None:
    """Have ``__consumer_offsets`` created now rather than during the first timed consume."""

    def found() -> bool:
        with KafkaConnection(*_address(cluster.nodes[0].ready["listeners"]["PLAINTEXT"])) as conn:
            answer = conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "warm-up", "key_type": 0})
        return answer["error_code"] == ErrorCode.NONE

    _wait(found, "no group coordinator")


def _create_topics(cluster: Cluster, topics: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap["PLAINTEXT"]})
    new = [
        NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=REPLICATION_FACTOR,
            config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
        )
        for name in topics
    ]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(timeout=SETUP_TIMEOUT_S)

    def ready(name: str) -> bool:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        return (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(
                p.leader >= 0 and len(p.isrs) == REPLICATION_FACTOR
                for p in meta.partitions.values()
            )
        )

    for name in topics:
        _wait(lambda name=name: ready(name), f"topic {name} has no leader and full ISR everywhere")


def start_cluster(nodes: list[NodeProcess], directory: Path) -> Cluster:
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait_ready(NODE_READY_TIMEOUT_S)
    bootstrap = {
        name: ",".join(node.ready["listeners"][name] for node in nodes) for name in PROTOCOLS
    }
    cluster = Cluster(nodes, directory, secrets.token_urlsafe(24), bootstrap)
    _create_user(cluster)
    _create_offsets_topic(cluster)
    return cluster


# --- clients -------------------------------------------------------------------------------------


def client_config(cluster: Cluster, protocol: str, mechanism: str) -> dict[str, Any]:
    """What a confluent-kafka client needs to connect over ``protocol``."""
    config: dict[str, Any] = {
        "bootstrap.servers": cluster.bootstrap[protocol],
        "security.protocol": protocol,
    }
    if protocol in TLS_PROTOCOLS:
        config["ssl.ca.location"] = cluster.file("ca.pem")
    if protocol == "SSL":
        config["ssl.certificate.location"] = cluster.file("client.pem")
        config["ssl.key.location"] = cluster.file("client.key")
    if protocol in SASL_PROTOCOLS:
        config["sasl.mechanism"] = mechanism
        config["sasl.username"] = USER
        config["sasl.password"] = cluster.password
    return config


class _Deliveries:
    """Delivery reports: counted, and with ``offsets`` the last offset per partition (kept off
    the timed run, where it would cost a dictionary store per record)."""

    def __init__(self, *, offsets: dict[int, int] | None = None) -> None:
        self.ok = 0
        self.errors = 0
        self.first_error: str | None = None
        self.offsets = offsets

    def __call__(self, error: Any, message: Any) -> None:
        if error is None:
            self.ok += 1
            if self.offsets is not None:
                self.offsets[message.partition()] = message.offset()
        else:
            self.errors += 1
            if self.first_error is None:
                self.first_error = str(error)

    def check(self, remaining: int, expected: int, what: str) -> None:
        if remaining or self.errors or self.ok != expected:
            raise RuntimeError(
                f"{what}: {self.ok} delivered, {self.errors} failed (first: {self.first_error}),"
                f" {remaining} undelivered, of {expected}"
            )


def _close_producer(producer: Any) -> None:
    """Drop what is still queued and release the client (``close()`` is newer than 2.0)."""
    producer.purge()
    close = getattr(producer, "close", None)
    if close is not None:
        close()


def produce(
    config: dict[str, Any], topic: str, partitions: int, records: int, record_bytes: int
) -> tuple[dict[str, Any], dict[int, int]]:
    """The timed produce. Returns its figures and, per partition, the offset of the first
    record after the warm-up."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **config,
            "acks": "all",
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_BYTES,
            "queue.buffering.max.messages": QUEUE_RECORDS,
            "queue.buffering.max.kbytes": QUEUE_KBYTES,
            "enable.idempotence": False,
        }
    )
    try:
        warm_up_offsets: dict[int, int] = {}
        warm_up = _Deliveries(offsets=warm_up_offsets)
        for partition in range(partitions):
            producer.produce(topic, b"warm-up", partition=partition, on_delivery=warm_up)
        warm_up.check(producer.flush(WARM_UP_TIMEOUT_S), partitions, f"warm-up of {topic}")
        start_offsets = {partition: offset + 1 for partition, offset in warm_up_offsets.items()}

        payload = os.urandom(record_bytes)
        deliveries = _Deliveries()
        produce_one = producer.produce
        poll = producer.poll
        clock = time.perf_counter
        started = clock()
        for index in range(records):
            while True:
                try:
                    produce_one(topic, payload, on_delivery=deliveries)
                    break
                except BufferError:
                    poll(0.01)
            if index % 10000 == 0:
                poll(0)
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        elapsed = clock() - started
        deliveries.check(remaining, records, f"producing to {topic}")
    finally:
        _close_producer(producer)
    return {**_rates(records, record_bytes, elapsed), "delivery_errors": 0}, start_offsets


def consume(
    config: dict[str, Any],
    topic: str,
    start_offsets: dict[int, int],
    records: int,
    record_bytes: int,
) -> dict[str, Any]:
    """The timed consume of ``records`` records from ``start_offsets`` on."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **config,
            "group.id": f"security-bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 8_388_608,
            "queued.min.messages": 1_000_000,
        }
    )
    try:
        # Asking every leader opens the connections (TLS, SASL) before the clock starts.
        high_watermark_records = 0
        for partition, start in start_offsets.items():
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=WATERMARK_TIMEOUT_S, cached=False
            )
            high_watermark_records += high - start
        assignment = [TopicPartition(topic, p, offset) for p, offset in start_offsets.items()]
        seen = 0
        errors = 0
        first_error: str | None = None
        clock = time.perf_counter
        started = clock()
        deadline = started + CONSUME_TIMEOUT_S
        consumer.assign(assignment)
        while seen < records and clock() < deadline:
            # consume() returns when it has num_messages or after the timeout: asking for no
            # more than are still missing ends the run as soon as the last record is read.
            wanted = min(CONSUME_BATCH_RECORDS, records - seen)
            for message in consumer.consume(num_messages=wanted, timeout=1.0):
                error = message.error()
                if error is None:
                    seen += 1
                else:
                    errors += 1
                    first_error = first_error or str(error)
        elapsed = clock() - started
    finally:
        consumer.close()
    if seen < records:
        raise RuntimeError(
            f"consumed {seen} of {records} records of {topic} in {CONSUME_TIMEOUT_S} s "
            f"({errors} errors, first: {first_error})"
        )
    return {
        **_rates(records, record_bytes, elapsed),
        "errors": errors,
        "first_error": first_error,
        "high_watermark_records": high_watermark_records,
    }


# --- the runs ------------------------------------------------------------------------------------


def run_order(protocols: list[str], order: str, repeat_index: int, rng: random.Random) -> list[str]:
    """The protocols of repeat ``repeat_index`` (from 0) in the order they run."""
    if order == "reverse":
        return list(reversed(protocols))
    if order == "rotate":
        shift = repeat_index % len(protocols)
        return protocols[shift:] + protocols[:shift]
    if order == "shuffle":
        shuffled = list(protocols)
        rng.shuffle(shuffled)
        return shuffled
    return list(protocols)


def _ratio(value: float, reference: float) -> float:
    return round(value / reference, 3)


def _add_ratios(runs: list[dict[str, Any]]) -> None:
    """Each non-PLAINTEXT run against the PLAINTEXT run of its repeat."""
    plaintext = {run["repeat"]: run for run in runs if run["protocol"] == "PLAINTEXT"}
    for run in runs:
        reference = plaintext.get(run["repeat"])
        if run["protocol"] == "PLAINTEXT" or reference is None:
            continue
        for side in ("produce", "consume"):
            run[f"{side}_vs_plaintext"] = _ratio(
                run[side]["records_per_s"], reference[side]["records_per_s"]
            )


def _median(values: list[float], digits: int) -> float:
    return round(statistics.median(values), digits)


def summarize(runs: list[dict[str, Any]], protocols: list[str]) -> dict[str, Any]:
    """Per protocol, medians over its runs (and of its per-repeat ratios to PLAINTEXT)."""
    table: dict[str, Any] = {}
    for protocol in protocols:
        mine = [run for run in runs if run["protocol"] == protocol]
        entry: dict[str, Any] = {"runs": len(mine)}
        for side in ("produce", "consume"):
            figures = [run[side] for run in mine]
            entry[side] = {
                "seconds": _median([f["seconds"] for f in figures], 3),
                "records_per_s": round(statistics.median([f["records_per_s"] for f in figures])),
                "mb_per_s": _median([f["mb_per_s"] for f in figures], 1),
                "runs_records_per_s": [f["records_per_s"] for f in figures],
            }
            ratios = [run[f"{side}_vs_plaintext"] for run in mine if f"{side}_vs_plaintext" in run]
            if ratios:
                entry[f"{side}_vs_plaintext"] = _median(ratios, 3)
        table[protocol] = entry
    return table


def run_all(cluster: Cluster, topics: dict[str, str], args: argparse.Namespace) -> list[Any]:
    rng = random.Random(args.seed)
    runs: list[dict[str, Any]] = []
    for repeat_index in range(args.repeat):
        sequence = run_order(args.protocol_list, args.order, repeat_index, rng)
        for position, protocol in enumerate(sequence, start=1):
            config = client_config(cluster, protocol, args.mechanism)
            topic = topics[protocol]
            _log(f"repeat {repeat_index + 1}/{args.repeat}, {protocol}: producing")
            produced, start_offsets = produce(
                config, topic, args.partitions, args.records, args.record_bytes
            )
            _log(f"{protocol}: produced {produced['records_per_s']} records/s; consuming")
            consumed = consume(config, topic, start_offsets, args.records, args.record_bytes)
            _log(f"{protocol}: consumed {consumed['records_per_s']} records/s")
            runs.append(
                {
                    "repeat": repeat_index + 1,
                    "position": position,
                    "protocol": protocol,
                    "topic": topic,
                    "produce": produced,
                    "consume": consumed,
                }
            )
    _add_ratios(runs)
    return runs


# --- command line --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--protocols", default=",".join(PROTOCOLS), help="comma separated (all four)"
    )
    parser.add_argument("--mechanism", default="SCRAM-SHA-512", choices=MECHANISMS)
    parser.add_argument("--records", type=int, help="records per run (1,000,000; quick 50,000)")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--order", default="given", choices=ORDERS)
    parser.add_argument("--seed", type=int, default=SEED, help="of --order shuffle")
    parser.add_argument("--repeat", type=int, default=1, help="run the whole sequence N times")
    parser.add_argument("--quick", action="store_true", help="50,000 records per run")
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    for name, default in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.protocol_list = [part.strip() for part in args.protocols.split(",") if part.strip()]
    unknown = [name for name in args.protocol_list if name not in PROTOCOLS]
    if unknown or not args.protocol_list:
        parser.error(f"--protocols: {unknown or 'none'} (known: {', '.join(PROTOCOLS)})")
    if len(set(args.protocol_list)) != len(args.protocol_list):
        parser.error("--protocols: a protocol is named twice")
    for name in ("records", "record_bytes", "partitions", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def _load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    load_at_start = _load_average()
    arguments = {
        name: value for name, value in vars(args).items() if name not in ("protocol_list",)
    }
    arguments["protocols"] = args.protocol_list
    suffix = uuid.uuid4().hex[:6]
    topics = {protocol: f"security-{protocol.lower()}-{suffix}" for protocol in args.protocol_list}
    with tempfile.TemporaryDirectory(prefix="flux-security-") as workdir:
        directory = Path(workdir) / "pem"
        directory.mkdir()
        _write_certificates(directory)
        nodes = local_cluster_configs(
            Path(workdir) / "cluster", NODES, extra=_node_sections(directory)
        )
        try:
            _log(f"starting {NODES} nodes")
            cluster = start_cluster(nodes, directory)
            _create_topics(cluster, list(topics.values()), args.partitions)
            runs = run_all(cluster, topics, args)
        finally:
            for node in nodes:
                node.stop()
    table = {
        "benchmark": "security",
        "client": "confluent-kafka",
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": _load_average(),
        },
        "arguments": arguments,
        "nodes": NODES,
        "replication_factor": REPLICATION_FACTOR,
        "min_insync_replicas": MIN_INSYNC_REPLICAS,
        "acks": "all",
        "linger_ms": LINGER_MS,
        "batch_size": BATCH_BYTES,
        "partitions": args.partitions,
        "records": args.records,
        "record_bytes": args.record_bytes,
        "sasl_mechanism": args.mechanism,
        "storage": "disk",
        "protocols": summarize(runs, args.protocol_list),
        "runs": runs,
        "total_s": round(time.monotonic() - started, 1),
    }
    text = json.dumps(table, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
