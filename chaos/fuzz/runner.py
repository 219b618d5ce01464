"""Run fuzz cases against live nodes and judge them (the I/O half of ``flux.chaos.fuzz``).

``run_fuzz(nodes, settings)`` takes the nodes of a running cluster (``FuzzNode``: addresses,
an ``is_alive`` probe, the log file, optionally a ``restart``), sets up the fuzz topics with a
well-behaved client (``client.WireClient``), runs ``settings.cases[target]`` cases per target
with a few concurrent connections each, and returns a ``FuzzReport``.

How a case is judged:

* Kafka, frame intact: the case's bytes are followed on the same connection by a probe (an
  ApiVersions v0 request). Frames are read until the probe's answer (the case was answered,
  or needed no answer, like a Produce with acks=0) or until the broker closes the connection;
  no verdict within ``case_timeout_s`` is a **hang**. Connections are reused while the broker
  keeps them open, which is what makes hundreds of cases per second possible. A JoinGroup or
  SyncGroup may wait by the protocol for the group's other members (those that have not
  rejoined, until their sessions end, as in Kafka; ``CLUSTER_SETTINGS`` caps sessions at
  ``GROUP_MAX_SESSION_MS``), so those get ``group_wait_s`` more; one still waiting then is a
  **group wait** (counted, not a finding) if DescribeGroups on a fresh connection says its
  group is still rebalancing (other fuzz cases keep joining the few fuzz groups, and a member
  asked for a rebalance timeout of days can hold a round that long, in Kafka too), and a hang
  otherwise.
* Kafka, lying frame or garbage (``KafkaCase.raw``): sent on a fresh connection that is then
  half-closed; the broker must close it (answers before that are fine) within the timeout.
* HTTP: any status below 500 is an answer; 500 is a **server error** (an exception escaped a
  handler); no answer within the timeout is a hang.
* Replication: the WebSocket handshake or request must be answered, a session must answer a
  bogus peer only with errors (never data) or close, within the timeout.

After every case, its node must still be running (else a **crash**, with the cases it was
sent last); every ``check_interval_s`` a fresh connection to every node must pass ApiVersions,
Metadata, a Produce (acks=all) and a Fetch that returns the produced value (else a **health
failure**). Node logs are scanned for tracebacks and "internal error" lines (**internal
errors**; a Kafka one names the case by the client port it closed).

At the end (``data_changes``): every batch in the canary's log is explained by a produce case
that was answered without error (at that base offset) or needed no answer; no record of a case
answered with an error (or whose connection closed without an answer) is in it; every
acknowledged base offset is there; the canary's high watermark reaches its log end and its ISR
is whole again; the canary, health and HTTP-canary topics still exist with the same ids,
partition counts and configs; no record of an HTTP case refused with an error is in the HTTP
canary; deleted topics are only scratch topics.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yarl
from flux.cluster.groups.state import GroupState
from flux.protocol.api import ApiKey, decode_request, decode_response
from flux.protocol.errors import ProtocolError
from flux.protocol.records import iter_batches

from .client import KafkaClientError, WireClient
from .context import FuzzContext, TopicInfo, parse_case_tags
from .http_cases import HttpCase, http_case
from .mutate import KafkaCase, kafka_case
from .replication_cases import ReplicationCase, decode_fetch_answer, replication_case

__all__ = [
    "CLUSTER_SETTINGS",
    "GROUP_MAX_SESSION_MS",
    "FuzzNode",
    "FuzzReport",
    "FuzzSettings",
    "TARGETS",
    "run_fuzz",
]

log = logging.getLogger("flux.chaos.fuzz")

TARGETS = ("kafka", "http", "replication")
CANARY = "fuzz-canary"
HEALTH = "fuzz-health"
HTTP_CANARY = "fuzz-canary-http"
SCRATCH = "fuzz-scratch-0"
_PROBE_CORRELATION_ID = -424242
_PROBE = struct.pack(">ihhih", 10, ApiKey.API_VERSIONS, 0, _PROBE_CORRELATION_ID, -1)
#: Log lines that mean an exception escaped somewhere it should not have.
_INTERNAL_ERROR = re.compile(
    r"Traceback|internal error|Error handling request|Task exception was never retrieved|"
    r"Unhandled exception|Exception in callback"
)
_EXCEPTION_LINE = re.compile(
    r"^[A-Za-z_][\w.]*(Error|Exception|Message|Line|LineTooLong|Header)\w*:"
)
#: Exceptions of aiohttp's HTTP parser: it answers 400 itself (and logs a traceback).
_HTTP_PARSER_ERRORS = ("aiohttp.http_exceptions.",)
_INTERNAL_PEER = re.compile(r"closing connection from [\d.]+:(\d+) after an internal error")
#: Produce errors after which the records may still be committed (Kafka's clients treat the
#: outcome as unknown): REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND.
_UNKNOWN_OUTCOME_ERRORS = frozenset({7, 20})
#: Most examples of each kind of finding a report quotes (the counts are exact).
EXAMPLES_MAX = 20
#: Byte strings of Kafka cases that trigger bugs found and not fixed yet (see
#: tests/integration/test_fuzz_regressions.py), skipped by ``exclude_open_bugs``: none now
#: (the last, a 249-byte topic name whose deletion name was too long, is fixed).
OPEN_BUG_MARKERS: tuple[bytes, ...] = ()
#: Bytes of a failing case quoted in a report (enough for a regression test's literal).
LITERAL_BYTES_MAX = 4096
#: The longest consumer session the fuzzed cluster accepts (Kafka's default is 30 minutes: a
#: fuzzed member that never heartbeats would hold its group's next rebalance that long).
GROUP_MAX_SESSION_MS = 10_000
#: Settings of a fuzzed cluster: delayed requests (fetch long polls, acks=all) end within 3 s,
#: so a case that takes the whole case timeout (10 s) is a real hang; groups do not wait for
#: more members and hold a rebalance for a silent member at most ``GROUP_MAX_SESSION_MS``;
#: broker sessions survive the fuzzer's load on two cores.
CLUSTER_SETTINGS: dict[str, dict[str, Any]] = {
    "broker": {
        "request_timeout_ms": 3000,
        "group_initial_rebalance_delay_ms": 0,
        "group_max_session_timeout_ms": GROUP_MAX_SESSION_MS,
    },
    "controller": {"session_timeout_ms": 6000},
}
#: JoinGroup and SyncGroup: answered when the group's rebalance ends, not at once.
_GROUP_WAIT_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})
#: The states DescribeGroups names while a group rebalances.
_REBALANCING = frozenset(
    {GroupState.PREPARING_REBALANCE.value, GroupState.COMPLETING_REBALANCE.value}
)
#: Cases remembered per node, to name what a crashed node was sent last.
RECENT_CASES = 20


@dataclass
class FuzzNode:
    node_id: int
    kafka: tuple[str, int]
    http: tuple[str, int]
    is_alive: Callable[[], bool]
    log_path: Path | None = None
    restart: Callable[[], None] | None = None


@dataclass
class FuzzSettings:
    seed: int = 1
    cases: dict[str, int] = field(default_factory=lambda: {"kafka": 1000})
    case_timeout_s: float = 10.0
    #: Added to a JoinGroup's or SyncGroup's timeout: the longest the protocol lets it wait
    #: for silent members (the cluster's group max session, ``GROUP_MAX_SESSION_MS``).
    group_wait_s: float = GROUP_MAX_SESSION_MS / 1000
    concurrency: dict[str, int] = field(
        default_factory=lambda: {"kafka": 8, "http": 8, "replication": 4}
    )
    check_interval_s: float = 5.0
    first_index: int = 0
    #: Skip (and count) Kafka cases that would trigger a bug found and still open, so a long
    #: run measures everything else (``OPEN_BUG_MARKERS``).
    exclude_open_bugs: bool = False
    #: Stop starting new cases of a target after this many seconds (None: run every case).
    time_limit_s: float | None = None


@dataclass
class _TargetStats:
    cases: int = 0
    answered: int = 0
    errors_answered: int = 0
    no_response: int = 0
    closed: int = 0
    hangs: int = 0
    group_waits: int = 0
    server_errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    slowest: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "seconds"}
        out["seconds"] = round(self.seconds, 2)
        out["cases_per_s"] = round(self.cases / self.seconds, 1) if self.seconds else 0.0
        return out


@dataclass
class FuzzReport:
    seed: int
    targets: dict[str, _TargetStats] = field(default_factory=dict)
    crashes: list[dict[str, Any]] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)
    internal_errors: list[dict[str, Any]] = field(default_factory=list)
    internal_error_count: int = 0
    http_parse_errors_logged: int = 0
    health_checks: int = 0
    health_failures: list[str] = field(default_factory=list)
    data_changes: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    topics_created: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (
            self.crashes
            or self.hangs
            or self.server_errors
            or self.internal_error_count
            or self.health_failures
            or self.data_changes
            or self.findings
        )

    def as_dict(self) -> dict[str, Any]:
        total_cases = sum(stats.cases for stats in self.targets.values())
        slowest = max(
            (s.slowest for s in self.targets.values() if s.slowest),
            key=lambda s: s["ms"],
            default={},
        )
        return {
            "seed": self.seed,
            "ok": self.ok,
            "cases": {name: stats.cases for name, stats in self.targets.items()},
            "targets": {name: stats.as_dict() for name, stats in self.targets.items()},
            "crashes": len(self.crashes),
            "hangs": sum(stats.hangs for stats in self.targets.values()),
            "group_waits": sum(stats.group_waits for stats in self.targets.values()),
            "server_errors": sum(stats.server_errors for stats in self.targets.values()),
            "internal_errors": self.internal_error_count,
            "http_parse_errors_logged": self.http_parse_errors_logged,
            "errors_answered": sum(s.errors_answered for s in self.targets.values()),
            "connections_closed": sum(s.closed for s in self.targets.values()),
            "health_checks": self.health_checks,
            "health_failures": len(self.health_failures),
            "data_changes_detected": len(self.data_changes),
            "slowest_case": slowest,
            "cases_per_s": round(total_cases / self.seconds, 1) if self.seconds else 0.0,
            "seconds": round(self.seconds, 1),
            "examples": {
                "crashes": self.crashes[:EXAMPLES_MAX],
                "hangs": self.hangs[:EXAMPLES_MAX],
                "server_errors": self.server_errors[:EXAMPLES_MAX],
                "internal_errors": self.internal_errors[:EXAMPLES_MAX],
                "health_failures": self.health_failures[:EXAMPLES_MAX],
                "data_changes": self.data_changes[:EXAMPLES_MAX],
                "findings": self.findings[:EXAMPLES_MAX],
                "topics_created": self.topics_created[:EXAMPLES_MAX],
            },
        }


async def run_fuzz(nodes: list[FuzzNode], settings: FuzzSettings) -> FuzzReport:
    return await _Run(nodes, settings).run()


# ============================================================================== the run


class _Run:
    def __init__(self, nodes: list[FuzzNode], settings: FuzzSettings) -> None:
        self.nodes = nodes
        self.settings = settings
        self.report = FuzzReport(seed=settings.seed)
        self.context: FuzzContext | None = None
        self.recent: dict[int, collections.deque[str]] = {
            node.node_id: collections.deque(maxlen=RECENT_CASES) for node in nodes
        }
        self.port_cases: dict[int, tuple[str, bytes]] = {}
        self.log_offsets: dict[int, int] = {}
        self.crashed: set[int] = set()
        # Canary accounting: partition -> base offsets acknowledged / case indexes refused.
        self.acked: dict[int, dict[int, int]] = collections.defaultdict(dict)
        self.refused: dict[int, set[int]] = collections.defaultdict(set)
        self.unanswered: dict[int, set[int]] = collections.defaultdict(set)
        self.no_answer_needed: set[int] = set()
        # Cases whose error does not say the write failed (acks=all timed out after the append).
        self.unknown_outcome: dict[int, set[int]] = collections.defaultdict(set)
        # The CRCs of the batches of acks=0 and unknown-outcome cases, per partition: a batch
        # whose values lost their case tag to a mutation is still recognised by its CRC (the
        # broker keeps a client's batch CRC; it rewrites only fields outside it).
        self.may_hold: dict[int, set[int]] = collections.defaultdict(set)
        # CRC -> case, for batches of cases whose connection closed without an answer (named
        # in a finding when such a batch turns up without its tags).
        self.sent_by: dict[int, dict[int, int]] = collections.defaultdict(dict)
        self.http_refused: set[int] = set()
        self.before: dict[str, Any] = {}
        self.deadline: float | None = None

    # -- top level --------------------------------------------------------------------------------

    async def run(self) -> FuzzReport:
        started = time.monotonic()
        for node in self.nodes:
            self.log_offsets[node.node_id] = _log_size(node.log_path)
        await self._setup()
        stop_checks = asyncio.Event()
        checker = asyncio.create_task(self._check_loop(stop_checks))
        try:
            for target in TARGETS:
                count = self.settings.cases.get(target, 0)
                if count:
                    await self._run_target(target, count)
        finally:
            stop_checks.set()
            await checker
        await self._health_check()
        self._scan_logs()
        await self._final_checks()
        self._scan_logs()
        self.report.seconds = time.monotonic() - started
        return self.report

    # -- setup ------------------------------------------------------------------------------------

    async def _setup(self) -> None:
        host, port = self.nodes[0].kafka
        async with WireClient(host, port, timeout_s=30.0) as client:
            for name, partitions, replication in (
                (CANARY, 3, min(3, len(self.nodes))),
                (HEALTH, 1, min(3, len(self.nodes))),
                (HTTP_CANARY, 1, min(3, len(self.nodes))),
                (SCRATCH, 2, min(2, len(self.nodes))),
            ):
                for _ in range(100):  # the controller may still be electing
                    error = await client.create_topic(name, partitions, replication)
                    if error in (0, 36):  # created, TOPIC_ALREADY_EXISTS
                        break
                    await asyncio.sleep(0.2)
                else:
                    raise KafkaClientError(f"create {name}: error {error}")
            await _wait(lambda: self._leaders_ready(client), 30.0, "fuzz topics have leaders")
            for partition in range(3):
                await self._produce_retrying(CANARY, partition, b"#s0:0# seed record")
            metadata = await client.metadata(None)
        infos = {
            t["name"]: TopicInfo(t["name"], len(t["partitions"]), t["topic_id"])
            for t in metadata["topics"]
        }
        self.context = FuzzContext(
            canary=infos[CANARY],
            scratch=(infos[SCRATCH],),
            others=(infos[HEALTH],),
            broker_ids=tuple(sorted(node.node_id for node in self.nodes)),
            http_canary=HTTP_CANARY,
        )
        self.before = {
            "topics": {name: (str(info.topic_id), info.partitions) for name, info in infos.items()},
            "configs": await self._topic_configs([CANARY, HEALTH, HTTP_CANARY]),
        }

    async def _leaders_ready(self, client: WireClient) -> bool:
        response = await client.metadata([CANARY, HEALTH, HTTP_CANARY, SCRATCH])
        return all(
            not topic["error_code"]
            and topic["partitions"]
            and all(p["leader_id"] >= 0 and not p["error_code"] for p in topic["partitions"])
            for topic in response["topics"]
        )

    async def _leader_client(self, topic: str, partition: int) -> WireClient:
        host, port = self.nodes[0].kafka
        for node in self.nodes:
            if node.is_alive():
                host, port = node.kafka
                break
        async with WireClient(host, port) as client:
            response = await client.metadata([topic])
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
        leader = response["topics"][0]["partitions"][partition]["leader_id"]
        if leader not in brokers:
            raise KafkaClientError(f"{topic}-{partition} has no leader")
        client = WireClient(*brokers[leader])
        await client.connect()
        return client

    async def _produce_retrying(self, topic: str, partition: int, value: bytes) -> int:
        last = ""
        for _ in range(40):
            try:
                client = await self._leader_client(topic, partition)
                try:
                    error, base_offset = await client.produce(topic, partition, [(None, value)])
                finally:
                    await client.close()
                if error == 0:
                    return base_offset
                last = f"error {error}"
            except (KafkaClientError, ProtocolError, OSError, KeyError, IndexError) as exc:
                last = repr(exc)
            await asyncio.sleep(0.25)
        raise KafkaClientError(f"produce to {topic}-{partition} kept failing: {last}")

    async def _topic_configs(self, names: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with aiohttp.ClientSession() as session:
            host, port = self.nodes[0].http
            async with session.get(f"http://{host}:{port}/topics") as response:
                document = await response.json(content_type=None)
        for topic in document.get("topics", []):
            if topic["name"] in names:
                out[topic["name"]] = topic.get("config")
        return out

    # -- targets ----------------------------------------------------------------------------------

    async def _run_target(self, target: str, count: int) -> None:
        stats = self.report.targets.setdefault(target, _TargetStats())
        indexes = iter(range(self.settings.first_index, self.settings.first_index + count))
        workers = self.settings.concurrency.get(target, 4)
        worker = {
            "kafka": self._kafka_worker,
            "http": self._http_worker,
            "replication": self._replication_worker,
        }[target]
        started = time.monotonic()
        if self.settings.time_limit_s is not None:
            self.deadline = started + self.settings.time_limit_s
        await asyncio.gather(*(worker(indexes, stats) for _ in range(workers)))
        stats.seconds += time.monotonic() - started

    def _out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def _after_case(
        self, stats: _TargetStats, node: FuzzNode, label: str, elapsed: float, info: dict[str, Any]
    ) -> None:
        stats.cases += 1
        self.recent[node.node_id].append(label)
        ms = round(elapsed * 1000, 1)
        if not stats.slowest or ms > stats.slowest["ms"]:
            stats.slowest = {"ms": ms, "case": label, **info}
        if not node.is_alive() and node.node_id not in self.crashed:
            self.crashed.add(node.node_id)
            self.report.crashes.append(
                {"node": node.node_id, "last_cases": list(self.recent[node.node_id])}
            )

    # -- Kafka ------------------------------------------------------------------------------------

    async def _kafka_worker(self, indexes: Any, stats: _TargetStats) -> None:
        assert self.context is not None
        connections: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter, int]] = {}
        try:
            for index in indexes:
                if self._out_of_time():
                    break
                node = self.nodes[index % len(self.nodes)]
                if node.node_id in self.crashed:
                    stats.skipped += 1
                    continue
                case = kafka_case(self.settings.seed, index, self.context)
                if self.settings.exclude_open_bugs and any(
                    m in case.data for m in OPEN_BUG_MARKERS
                ):
                    stats.skipped += 1
                    continue
                started = time.monotonic()
                if case.raw:
                    outcome = await self._kafka_raw(node, case)
                else:
                    outcome = await self._kafka_framed(node, case, connections)
                elapsed = time.monotonic() - started
                self._judge_kafka(case, outcome, stats)
                self._after_case(
                    stats,
                    node,
                    case.label,
                    elapsed,
                    {
                        "target": "kafka",
                        "api": case.api_key,
                        "version": case.api_version,
                        "seed": case.seed,
                        "index": case.index,
                    },
                )
        finally:
            for _, writer, _ in connections.values():
                writer.close()

    async def _kafka_framed(
        self, node: FuzzNode, case: KafkaCase, connections: dict[int, Any]
    ) -> tuple[str, bytes | None]:
        """``(outcome, first answer frame)``: outcome is answered, no_response, closed, hang."""
        timeout = self.settings.case_timeout_s
        if case.api_key in _GROUP_WAIT_APIS:
            timeout += self.settings.group_wait_s
        held = connections.get(node.node_id)
        if held is None:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(*node.kafka, limit=1 << 22), timeout
                )
            except (OSError, TimeoutError):
                return "connect_failed", None
            port = writer.get_extra_info("sockname")[1]
            held = (reader, writer, port)
            connections[node.node_id] = held
        reader, writer, port = held
        self.port_cases[port] = (case.label, case.data)
        answer: bytes | None = None
        try:
            writer.write(case.data + _PROBE)
            await writer.drain()
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                size_bytes = await asyncio.wait_for(reader.readexactly(4), remaining)
                (size,) = struct.unpack(">i", size_bytes)
                frame = await asyncio.wait_for(reader.readexactly(size), max(remaining, 0.1))
                (correlation_id,) = struct.unpack_from(">i", frame, 0)
                if correlation_id == _PROBE_CORRELATION_ID and answer is not None:
                    return "answered", answer
                if correlation_id == _PROBE_CORRELATION_ID:
                    return "no_response", None
                answer = frame
        except TimeoutError:
            del connections[node.node_id]
            writer.close()
            if case.api_key in _GROUP_WAIT_APIS and await self._group_rebalancing(node, case):
                return "group_wait", answer
            return "hang", answer
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            del connections[node.node_id]
            writer.close()
            return "closed", answer

    async def _group_rebalancing(self, node: FuzzNode, case: KafkaCase) -> bool:
        """Whether the group a JoinGroup or SyncGroup case names is rebalancing now, by
        DescribeGroups to the node it waited on (its coordinator: others answer at once)."""
        try:
            _, body = decode_request(case.data[4:])
        except ProtocolError:
            return False
        group = body.get("group_id")
        if not isinstance(group, str):
            return False
        try:
            async with WireClient(*node.kafka, timeout_s=self.settings.case_timeout_s) as client:
                answer = await client.request(ApiKey.DESCRIBE_GROUPS, 0, {"groups": [group]})
        except KafkaClientError:
            return False
        states = {g.get("group_state") for g in answer.get("groups") or []}
        return bool(states & _REBALANCING)

    async def _kafka_raw(self, node: FuzzNode, case: KafkaCase) -> tuple[str, bytes | None]:
        timeout = self.settings.case_timeout_s
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*node.kafka), timeout)
        except (OSError, TimeoutError):
            return "connect_failed", None
        self.port_cases[writer.get_extra_info("sockname")[1]] = (case.label, case.data)
        try:
            writer.write(case.data)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "hang", None
                chunk = await asyncio.wait_for(reader.read(65536), remaining)
                if not chunk:
                    return "closed", None
        except TimeoutError:
            return "hang", None
        except (ConnectionError, OSError):
            return "closed", None
        finally:
            writer.close()

    def _judge_kafka(
        self, case: KafkaCase, outcome: tuple[str, bytes | None], stats: _TargetStats
    ) -> None:
        verdict, answer = outcome
        if verdict == "connect_failed":
            stats.skipped += 1
            return
        if verdict == "hang":
            stats.hangs += 1
            _note(self.report.hangs, f"{case.label} hex={case.data[:LITERAL_BYTES_MAX].hex()}")
        elif verdict == "group_wait":
            stats.group_waits += 1
            return
        elif verdict == "closed":
            stats.closed += 1
        elif verdict == "no_response":
            stats.no_response += 1
        else:
            stats.answered += 1
        try:
            header, body = decode_request(case.data[4:]) if not case.raw else (None, None)
        except ProtocolError:
            header, body = None, None
        if header is None:
            return
        response = None
        if answer is not None:
            try:
                _, response = decode_response(header.api_key, header.api_version, answer)
            except ProtocolError as error:
                _note(self.report.findings, f"undecodable answer to {case.label}: {error}")
        if response is not None and _has_error(response):
            stats.errors_answered += 1
        if header.api_key == ApiKey.PRODUCE and body is not None:
            self._account_produce(case, verdict, body, response)

    def _account_produce(
        self, case: KafkaCase, verdict: str, body: dict[str, Any], response: dict[str, Any] | None
    ) -> None:
        assert self.context is not None
        canary = self.context.canary.name
        sent: dict[int, set[int]] = collections.defaultdict(set)  # partition -> batch CRCs
        for topic in body.get("topic_data") or []:
            if topic.get("name") == canary:
                for data in topic.get("partition_data") or []:
                    sent[int(data["index"])] |= _batch_crcs(data.get("records"))
        named = set(sent)
        if not named:
            return
        if body.get("acks") == 0:
            self.no_answer_needed.add(case.index)
            for partition in named:
                self.may_hold[partition] |= sent[partition]
            return
        if response is None:
            # Closed without an answer: the broker must not have appended. A hang is unknown.
            for partition in named:
                if verdict == "closed":
                    self.unanswered[partition].add(case.index)
                    for crc in sent[partition]:
                        self.sent_by[partition].setdefault(crc, case.index)
                else:
                    self.unknown_outcome[partition].add(case.index)
                    self.may_hold[partition] |= sent[partition]
            return
        for topic in response.get("responses") or []:
            if topic.get("name") != canary:
                continue
            for answer in topic.get("partition_responses") or []:
                partition = int(answer["index"])
                if answer["error_code"] == 0:
                    self.acked[partition][int(answer["base_offset"])] = case.index
                elif answer["error_code"] in _UNKNOWN_OUTCOME_ERRORS:
                    self.unknown_outcome[partition].add(case.index)
                    self.may_hold[partition] |= sent.get(partition, set())
                else:
                    self.refused[partition].add(case.index)

    # -- HTTP -------------------------------------------------------------------------------------

    async def _http_worker(self, indexes: Any, stats: _TargetStats) -> None:
        assert self.context is not None
        timeout = aiohttp.ClientTimeout(total=self.settings.case_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for index in indexes:
                if self._out_of_time():
                    break
                node = self.nodes[index % len(self.nodes)]
                if node.node_id in self.crashed:
                    stats.skipped += 1
                    continue
                case = http_case(self.settings.seed, index, self.context)
                started = time.monotonic()
                if case.raw is not None:
                    verdict, status = await self._http_raw(node, case)
                else:
                    verdict, status = await self._http_request(session, node, case)
                elapsed = time.monotonic() - started
                self._judge_http(case, verdict, status, stats)
                self._after_case(
                    stats,
                    node,
                    case.label,
                    elapsed,
                    {
                        "target": "http",
                        "api": case.endpoint,
                        "version": case.method,
                        "seed": case.seed,
                        "index": case.index,
                    },
                )

    async def _http_request(
        self, session: aiohttp.ClientSession, node: FuzzNode, case: HttpCase
    ) -> tuple[str, int | None]:
        host, port = node.http
        url = yarl.URL(f"http://{host}:{port}{case.path}", encoded=True)
        headers = dict(case.headers)
        skip = () if "Content-Type" in headers else ("Content-Type",)
        try:
            async with session.request(
                case.method, url, data=case.body, headers=headers, skip_auto_headers=skip
            ) as response:
                await response.read()
                return "answered", response.status
        except TimeoutError:
            return "hang", None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            return "closed", None
        except (aiohttp.ClientError, ValueError) as error:
            # The client library refused to send it (a header it will not write, ...).
            return f"skipped:{type(error).__name__}", None

    async def _http_raw(self, node: FuzzNode, case: HttpCase) -> tuple[str, int | None]:
        assert case.raw is not None
        timeout = self.settings.case_timeout_s
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*node.http), timeout)
        except (OSError, TimeoutError):
            return "skipped:connect", None
        status = None
        try:
            writer.write(case.raw)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            data = await asyncio.wait_for(reader.read(4096), timeout)
            match = re.match(rb"HTTP/1\.[01] (\d{3})", data)
            if match:
                status = int(match.group(1))
            return ("answered" if status else "closed"), status
        except TimeoutError:
            return "hang", None
        except (ConnectionError, OSError):
            return "closed", None
        finally:
            writer.close()

    def _judge_http(
        self, case: HttpCase, verdict: str, status: int | None, stats: _TargetStats
    ) -> None:
        if verdict.startswith("skipped"):
            stats.skipped += 1
            return
        if verdict == "hang":
            stats.hangs += 1
            _note(self.report.hangs, case.label)
        elif verdict == "closed":
            stats.closed += 1
        else:
            stats.answered += 1
            assert status is not None
            if status == 500:
                stats.server_errors += 1
                body = case.raw if case.raw is not None else case.body
                _note(
                    self.report.server_errors,
                    f"{status} {case.label} path={case.path[:200]!r} headers={case.headers!r} "
                    f"body={(body or b'')[:300]!r}",
                )
            elif status >= 400:
                stats.errors_answered += 1
        if case.canary and not (status is not None and 200 <= status < 300):
            self.http_refused.add(case.index)

    # -- replication --------------------------------------------------------------------------------

    async def _replication_worker(self, indexes: Any, stats: _TargetStats) -> None:
        assert self.context is not None
        timeout = aiohttp.ClientTimeout(total=self.settings.case_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for index in indexes:
                if self._out_of_time():
                    break
                node = self.nodes[index % len(self.nodes)]
                if node.node_id in self.crashed:
                    stats.skipped += 1
                    continue
                case = replication_case(self.settings.seed, index, self.context)
                started = time.monotonic()
                verdict, status, finding = await self._replication_case(session, node, case)
                elapsed = time.monotonic() - started
                if finding:
                    _note(self.report.findings, f"{finding}: {case.label}")
                self._judge_http(
                    HttpCase(
                        case.seed,
                        case.index,
                        case.door,
                        case.method,
                        case.path,
                        (),
                        case.body,
                        case.mutations,
                    ),
                    verdict,
                    status,
                    stats,
                )
                self._after_case(
                    stats,
                    node,
                    case.label,
                    elapsed,
                    {
                        "target": "replication",
                        "api": case.door,
                        "version": case.method,
                        "seed": case.seed,
                        "index": case.index,
                    },
                )

    async def _replication_case(
        self, session: aiohttp.ClientSession, node: FuzzNode, case: ReplicationCase
    ) -> tuple[str, int | None, str | None]:
        host, port = node.http
        url = yarl.URL(f"http://{host}:{port}{case.path}", encoded=True)
        if case.door == "http":
            try:
                async with session.request(case.method, url, data=case.body) as response:
                    await response.read()
                    return "answered", response.status, None
            except TimeoutError:
                return "hang", None, None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                return "closed", None, None
        try:
            socket = await session.ws_connect(
                url, timeout=aiohttp.ClientWSTimeout(ws_close=2.0), max_msg_size=64 << 20
            )
        except aiohttp.WSServerHandshakeError as error:
            return "answered", error.status, None
        except TimeoutError:
            return "hang", None, None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            return "closed", None, None
        finding = None
        try:
            for binary, payload in case.frames:
                if socket.closed:
                    break
                try:
                    if binary:
                        assert isinstance(payload, bytes)
                        await socket.send_bytes(payload)
                    else:
                        assert isinstance(payload, str)
                        await socket.send_str(payload)
                except (ConnectionError, RuntimeError):
                    break
            # Answers come at once for a bogus peer (errors) or after max_wait_ms (<= 100 ms
            # in valid frames; a lying frame may ask for up to 10 s: then we stop waiting).
            deadline = time.monotonic() + 1.0
            while not socket.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    message = await socket.receive(timeout=remaining)
                except TimeoutError:
                    break
                if message.type == aiohttp.WSMsgType.BINARY and case.door == "session":
                    finding = _bogus_session_finding(message.data) or finding
                elif message.type in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSED,
                    aiohttp.WSMsgType.CLOSING,
                    aiohttp.WSMsgType.ERROR,
                ):
                    break
            return ("closed" if socket.closed else "answered"), 101, finding
        finally:
            await socket.close()

    # -- health -----------------------------------------------------------------------------------

    async def _check_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.settings.check_interval_s)
            except TimeoutError:
                pass
            await self._health_check()
            self._scan_logs()
            report = self.report
            log.info(
                "%s; crashes %d, hangs %d, internal errors %d, health failures %d",
                ", ".join(f"{name} {stats.cases} cases" for name, stats in report.targets.items()),
                len(report.crashes),
                sum(stats.hangs for stats in report.targets.values()),
                report.internal_error_count,
                len(report.health_failures),
            )

    async def _health_check(self) -> None:
        self.report.health_checks += 1
        for node in self.nodes:
            if not node.is_alive():
                if node.node_id not in self.crashed:
                    self.crashed.add(node.node_id)
                    self.report.crashes.append(
                        {"node": node.node_id, "last_cases": list(self.recent[node.node_id])}
                    )
                continue
            problem = await self._check_node(node)
            if problem:
                _note(self.report.health_failures, f"node {node.node_id}: {problem}")

    async def _check_node(self, node: FuzzNode) -> str | None:
        """A fresh, well-behaved connection: ApiVersions, Metadata, Produce and Fetch back.
        Leadership may be moving: a retriable error is retried for up to 15 s."""
        value = f"health {time.time_ns()} node {node.node_id}".encode()
        deadline = time.monotonic() + 15.0
        last = ""
        while time.monotonic() < deadline:
            try:
                async with WireClient(*node.kafka) as client:
                    versions = await client.request(
                        ApiKey.API_VERSIONS,
                        3,
                        {"client_software_name": "fuzz", "client_software_version": "1"},
                    )
                    if versions["error_code"]:
                        return f"ApiVersions error {versions['error_code']}"
                    metadata = await client.metadata([HEALTH])
                    if metadata["topics"][0]["error_code"]:
                        last = f"metadata error {metadata['topics'][0]['error_code']}"
                        await asyncio.sleep(0.2)
                        continue
                leader_client = await self._leader_client(HEALTH, 0)
                try:
                    error, base_offset = await leader_client.produce(HEALTH, 0, [(None, value)])
                    if error:
                        last = f"produce error {error}"
                        await asyncio.sleep(0.2)
                        continue
                    for _ in range(50):
                        error, high_watermark, records = await leader_client.fetch(
                            HEALTH, 0, base_offset
                        )
                        if high_watermark > base_offset:
                            break
                        await asyncio.sleep(0.1)
                    if error:
                        last = f"fetch error {error}"
                        continue
                    found = [
                        header.base_offset
                        for header, batch in iter_batches(records)
                        if header.base_offset <= base_offset < header.next_offset
                    ]
                    if not found or value not in bytes(records):
                        return f"produced {value!r} at {base_offset}, fetch did not return it"
                    return None
                finally:
                    await leader_client.close()
            except (KafkaClientError, ProtocolError, KeyError, IndexError, OSError) as error:
                last = repr(error)
                await asyncio.sleep(0.2)
        return last or "no answer"

    # -- logs -------------------------------------------------------------------------------------

    def _scan_logs(self) -> None:
        for node in self.nodes:
            if node.log_path is None:
                continue
            offset = self.log_offsets.get(node.node_id, 0)
            try:
                with open(node.log_path, "rb") as log:
                    log.seek(offset)
                    text = log.read().decode("utf-8", "replace")
                    self.log_offsets[node.node_id] = log.tell()
            except FileNotFoundError:
                continue
            lines = text.splitlines()
            for number, line in enumerate(lines):
                if not _INTERNAL_ERROR.search(line) or line.startswith("Traceback"):
                    continue
                context = lines[number : number + 40]
                exception = next(
                    (entry for entry in context[1:] if _EXCEPTION_LINE.match(entry)), ""
                )
                if exception.startswith(_HTTP_PARSER_ERRORS):
                    # aiohttp answered the malformed HTTP request with 400 as it should and
                    # logged a traceback for it (noise, counted apart, see the report; the
                    # broker's server logs one line instead: cluster/http/malformed.py).
                    self.report.http_parse_errors_logged += 1
                    continue
                self.report.internal_error_count += 1
                peer = _INTERNAL_PEER.search(line)
                found = self.port_cases.get(int(peer.group(1))) if peer else None
                _note(
                    self.report.internal_errors,
                    {
                        "node": node.node_id,
                        "line": line[:300],
                        "case": found[0] if found else None,
                        "hex": found[1][:LITERAL_BYTES_MAX].hex() if found else None,
                        "traceback": [
                            entry[:200]
                            for entry in context
                            if entry.startswith(("  File", "Traceback"))
                            or re.match(r"^[A-Za-z_.]+(Error|Exception)", entry)
                        ][-12:],
                    },
                )

    # -- final checks -------------------------------------------------------------------------------

    async def _final_checks(self) -> None:
        for node in self.nodes:
            if not node.is_alive() and node.restart is not None:
                node.restart()
        for check in (self._check_canary_log, self._check_http_canary, self._check_topics):
            try:
                await check()
            except (
                KafkaClientError,
                ProtocolError,
                OSError,
                KeyError,
                IndexError,
                ValueError,
                aiohttp.ClientError,
                TimeoutError,
            ) as error:
                # An unavailable cluster (or a check that cannot read what it found) is a
                # finding too, not the end of the report.
                _note(self.report.data_changes, f"{check.__name__} could not run: {error!r}")

    async def _partition_ends(self, topic: str) -> dict[int, tuple[int, int, list[int]]]:
        """partition -> (log end offset, high watermark, ISR), from the leaders' REST view."""
        ends: dict[int, tuple[int, int, list[int]]] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            for node in self.nodes:
                if not node.is_alive():
                    continue
                host, port = node.http
                try:
                    async with session.get(f"http://{host}:{port}/topics/{topic}") as response:
                        document = await response.json(content_type=None)
                except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError):
                    continue
                for entry in document.get("partitions", []):
                    if "log_end_offset" in entry and entry.get("leader") == node.node_id:
                        ends[entry["partition"]] = (
                            entry["log_end_offset"],
                            entry["high_watermark"],
                            entry["isr"],
                        )
        return ends

    async def _check_canary_log(self) -> None:
        assert self.context is not None
        partitions = self.context.canary.partitions
        replicas = min(3, len(self.nodes))
        ends: dict[int, tuple[int, int, list[int]]] = {}

        async def settled() -> bool:
            nonlocal ends
            ends = await self._partition_ends(CANARY)
            return len(ends) == partitions and all(
                end == high and len(isr) == replicas for end, high, isr in ends.values()
            )

        try:
            await _wait(settled, 30.0, "canary settles")
        except TimeoutError:
            _note(
                self.report.data_changes,
                f"canary did not settle (log end = high watermark, whole ISR) in 30 s: {ends}",
            )
        seed = self.settings.seed
        for partition in range(partitions):
            client = await self._leader_client(CANARY, partition)
            try:
                batches = await client.read_batches(CANARY, partition)
            finally:
                await client.close()
            acked = self.acked[partition]
            bases = {base for base, _, _, _ in batches}
            for base, next_offset, values, crc in batches:
                if isinstance(values, str):
                    _note(
                        self.report.data_changes,
                        f"canary-{partition}: batch {base}..{next_offset - 1} cannot be read "
                        f"by consumers: {values[:LITERAL_BYTES_MAX]}",
                    )
                    continue
                tags = [tag for value in values for tag in parse_case_tags(value)]
                kafka_tags = {
                    index for target, tag_seed, index in tags if target == "k" and tag_seed == seed
                }
                if base in acked or any(target == "s" for target, _, _ in tags):
                    continue
                if kafka_tags & (self.no_answer_needed | self.unknown_outcome[partition]):
                    continue
                if not kafka_tags and crc in self.may_hold[partition]:
                    continue  # an acks=0 or unknown-outcome case's batch, its tags mutated
                refused = sorted(kafka_tags & self.refused[partition])[:5]
                unanswered = sorted(kafka_tags & self.unanswered[partition])[:5]
                why = (
                    f"cases answered with an error: {refused}"
                    if refused
                    else f"cases whose connection closed without an answer: {unanswered}"
                    if unanswered
                    else f"tags {sorted(kafka_tags)[:5]}, crc {crc:#010x}"
                    + (
                        f", sent by case {self.sent_by[partition][crc]} (closed, no answer)"
                        if crc in self.sent_by[partition]
                        else ""
                    )
                )
                _note(
                    self.report.data_changes,
                    f"canary-{partition}: batch {base}..{next_offset - 1} was acknowledged to "
                    f"no one ({why})",
                )
            for base, index in acked.items():
                if base not in bases:
                    _note(
                        self.report.data_changes,
                        f"canary-{partition}: acknowledged batch at {base} (case {index}) "
                        "is missing",
                    )

    async def _check_http_canary(self) -> None:
        if not self.http_refused:
            return
        client = await self._leader_client(HTTP_CANARY, 0)
        try:
            batches = await client.read_batches(HTTP_CANARY, 0)
        finally:
            await client.close()
        for base, _, values, _ in batches:
            if isinstance(values, str):
                _note(self.report.data_changes, f"{HTTP_CANARY}: unreadable batch at {base}")
                continue
            for value in values:
                for target, tag_seed, index in parse_case_tags(value):
                    if (
                        target == "h"
                        and tag_seed == self.settings.seed
                        and index in self.http_refused
                    ):
                        _note(
                            self.report.data_changes,
                            f"{HTTP_CANARY}: record at {base}.. from HTTP case {index}, which "
                            "was refused",
                        )

    async def _check_topics(self) -> None:
        assert self.context is not None
        host, port = self._live_node().kafka
        async with WireClient(host, port) as client:
            metadata = await client.metadata(None)
        now = {
            t["name"]: (str(t["topic_id"]), len(t["partitions"]))
            for t in metadata["topics"]
            if not t["error_code"]
        }
        before = self.before["topics"]
        protected = (CANARY, HEALTH, HTTP_CANARY, "__consumer_offsets")
        for name in protected:
            if name in before and now.get(name) != before[name]:
                _note(
                    self.report.data_changes,
                    f"topic {name} changed: {before[name]} -> {now.get(name)}",
                )
        scratch = set(self.context.scratch_names)
        for name in before:
            if name not in now and name not in scratch:
                _note(self.report.data_changes, f"topic {name} was deleted")
        self.report.topics_created = sorted(set(now) - set(before))
        configs = await self._topic_configs([CANARY, HEALTH, HTTP_CANARY])
        if configs != self.before["configs"]:
            _note(
                self.report.data_changes, f"configs changed: {self.before['configs']} -> {configs}"
            )

    def _live_node(self) -> FuzzNode:
        return next((node for node in self.nodes if node.is_alive()), self.nodes[0])


# ============================================================================== helpers


#: Findings of one kind a report keeps (the counters stay exact): a bug that fires on every
#: case must not fill memory with copies of itself.
FINDINGS_KEPT_MAX = 200


def _note(findings: list[Any], finding: Any) -> None:
    if len(findings) < FINDINGS_KEPT_MAX:
        findings.append(finding)


def _has_error(value: Any) -> bool:
    if isinstance(value, dict):
        return any(
            (key == "error_code" and item) or _has_error(item) for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_has_error(item) for item in value)
    return False


def _bogus_session_finding(data: bytes) -> str | None:
    try:
        partitions = decode_fetch_answer(data)
    except (ValueError, struct.error, UnicodeDecodeError) as error:
        return f"undecodable replication answer ({error})"
    served = [p for p in partitions if p[2] == 0]
    if served:
        return f"a bogus replication peer was served {served[:3]}"
    return None


def _log_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except FileNotFoundError:
        return 0


async def _wait(condition: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if await condition():
                return
        except (
            KafkaClientError,
            ProtocolError,
            OSError,
            KeyError,
            IndexError,
            aiohttp.ClientError,
        ):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        await asyncio.sleep(0.1)


def _batch_crcs(records: Any) -> set[int]:
    """The CRC fields of the whole batches in a Produce request's records (none if they do
    not parse)."""
    if not isinstance(records, (bytes, bytearray, memoryview)):
        return set()
    try:
        return {header.crc for header, _ in iter_batches(records)}
    except (ProtocolError, ValueError, struct.error):
        return set()
