"""A flood of connections with big requests against one node: is its memory bounded?

One node (controller + broker) in a temporary directory, a topic of ``--partitions``
partitions (replication factor 1), then ``--connections`` raw Kafka connections opened at once,
each sending ``--requests`` Produce requests (acks=1) of one record of ``--request-bytes``
bytes, back to back without waiting for the answers (up to the node's per-connection window),
then reading every answer. The node holds at most ``broker.queued_max_request_bytes`` of
request bytes at once (Kafka's ``queued.max.request.bytes``, ``--budget-mib``; a connection
whose next request does not fit waits with it unread in the kernel's socket buffer), so its
peak resident memory should grow by about that budget, not by what the clients offer.

Prints one JSON object: the settings, ``offered_mb`` (all requests' bytes), ``answered`` and
``errors`` (answers with a non-zero error code, and connections that failed), ``seconds``,
``records_per_s``, the node's ``baseline_rss_mb`` (after the topic exists, before the flood)
and ``peak_rss_mb`` (VmHWM: the most it was ever resident, read after the flood), and
``open_fds_peak``.

    python benchmarks/connection_flood.py [--connections 1000] [--request-bytes 900000]
        [--requests 2] [--budget-mib 100] [--partitions 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import NodeProcess, local_cluster_configs  # noqa: E402
from flux.protocol.api import ApiKey, decode_response, encode_request  # noqa: E402
from flux.protocol.records import build_batch  # noqa: E402

TOPIC = "flood"
PRODUCE_VERSION = 8
#: Seconds any one answer may take before the run counts the connection as failed.
ANSWER_TIMEOUT_S = 300.0


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class _FdPeak:
    """The most file descriptors the node held, sampled every 50 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _open_fds(self.pid))

    def __enter__(self) -> _FdPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


async def _request(host: str, port: int, frame: bytes) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(frame)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, body = decode_response(ApiKey.CREATE_TOPICS, 4, await reader.readexactly(size))
        return body
    finally:
        writer.close()


def _produce_frame(correlation_id: int, partition: int, value: bytes) -> bytes:
    batch = build_batch([(None, value, [], None)])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}],
    }
    return encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, correlation_id, "flood", body)


async def _one_connection(host: str, port: int, frames: list[bytes], tally: dict[str, int]) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        tally["connect_errors"] += 1
        return
    try:
        for frame in frames:
            writer.write(frame)
        await writer.drain()
        for _ in frames:
            header = await asyncio.wait_for(reader.readexactly(4), ANSWER_TIMEOUT_S)
            (size,) = struct.unpack(">i", header)
            payload = await asyncio.wait_for(reader.readexactly(size), ANSWER_TIMEOUT_S)
            _, body = decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, payload)
            answer = body["responses"][0]["partition_responses"][0]
            tally["answered"] += 1
            if answer["error_code"] != 0:
                tally["error_answers"] += 1
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        tally["connection_errors"] += 1
    finally:
        writer.close()


async def _flood(host: str, port: int, args: argparse.Namespace) -> dict[str, Any]:
    created = await _request(
        host,
        port,
        encode_request(
            ApiKey.CREATE_TOPICS,
            4,
            1,
            "flood",
            {
                "topics": [
                    {
                        "name": TOPIC,
                        "num_partitions": args.partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 15000,
                "validate_only": False,
            },
        ),
    )
    assert created["topics"][0]["error_code"] == 0, created
    value = os.urandom(args.request_bytes)
    frames = {
        p: [_produce_frame(n + 1, p, value) for n in range(args.requests)]
        for p in range(args.partitions)
    }
    # A first record per partition, so leaders are settled before the flood.
    warm = {"answered": 0, "error_answers": 0, "connection_errors": 0, "connect_errors": 0}
    deadline = time.monotonic() + 30
    while True:
        warm.update(answered=0, error_answers=0)
        await asyncio.gather(
            *(_one_connection(host, port, frames[p][:1], warm) for p in range(args.partitions))
        )
        if warm["error_answers"] == 0 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    tally = {"answered": 0, "error_answers": 0, "connection_errors": 0, "connect_errors": 0}
    started = time.monotonic()
    await asyncio.gather(
        *(
            _one_connection(host, port, frames[c % args.partitions], tally)
            for c in range(args.connections)
        )
    )
    tally["seconds"] = time.monotonic() - started
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--request-bytes", type=int, default=900_000)
    parser.add_argument("--requests", type=int, default=2, help="requests per connection")
    parser.add_argument("--budget-mib", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, min(hard, 4 * args.connections + 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    with tempfile.TemporaryDirectory(prefix="flux-flood-") as workdir:
        (node,) = local_cluster_configs(
            Path(workdir),
            1,
            extra={
                "node": {"log_level": "WARNING"},
                "broker": {
                    "max_connections": args.connections + 64,
                    "queued_max_request_bytes": args.budget_mib << 20,
                },
                "topic": {"replication_factor": 1, "min_insync_replicas": 1},
            },
        )
        node.start()
        try:
            node.wait_ready(60)
            pid = _pid(node)
            host, _, port = node.bootstrap_servers.partition(",")[0].rpartition(":")
            baseline_kb = _status_kb(pid, "VmRSS")
            with _FdPeak(pid) as fds:
                tally = asyncio.run(_flood(host, int(port), args))
                peak_kb = _status_kb(pid, "VmHWM")
        finally:
            node.stop()
    offered = args.connections * args.requests * args.request_bytes
    print(
        json.dumps(
            {
                "benchmark": "connection_flood",
                "connections": args.connections,
                "requests_per_connection": args.requests,
                "request_bytes": args.request_bytes,
                "budget_mib": args.budget_mib,
                "offered_mb": round(offered / 1e6, 1),
                "answered": tally["answered"],
                "errors": tally["error_answers"]
                + tally["connection_errors"]
                + tally["connect_errors"],
                "seconds": round(tally["seconds"], 2),
                "records_per_s": round(tally["answered"] / tally["seconds"], 1),
                "baseline_rss_mb": round(baseline_kb / 1024, 1),
                "peak_rss_mb": round(peak_kb / 1024, 1),
                "open_fds_peak": fds.peak,
            },
            indent=2,
        )
    )


def _pid(node: NodeProcess) -> int:
    pid = node.pid
    assert pid is not None
    return pid


if __name__ == "__main__":
    main()
