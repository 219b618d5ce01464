"""What one single-message ``POST /publish`` costs, by cluster shape and client count.

For each shape (``NODESxRF``: a local cluster of that many nodes, a 3-partition topic of that
replication factor) and each connection count, wrk POSTs one message per request (each with
its own id, as ``benchmarks/push_http.py --publish-client wrk`` does: connections spread over
the brokers, so with 3 nodes two messages in three land on a broker that does not lead their
partition and are forwarded) for ``--seconds``, after a 2 s warm-up. Per point it prints the
rate (2xx answers per second), wrk's latency per broker, and the nodes' CPU (user + system,
read from ``/proc``) per message: on a saturated machine, the figure that bounds the rate.
Every point uses a topic of its own, so no id repeats one already stored (a repeat would be
answered from the id index without an append).

    python benchmarks/publish_cost.py [--shapes 1x1,3x1,3x3] [--connections 16,64,256]
        [--seconds 10]

With ``--connections 1`` every publish is its own round (one message per append, per follower
fetch and per acknowledgement): ``--shapes 3x1,3x3 --connections 1`` measures the CPU of one
replication round with two followers as the difference between its two points.

Prints one JSON object: ``{"points": [{"shape", "connections", "messages_per_s", "answered",
"stored" (the topic's high watermarks summed: the warm-up's messages and the measured ones),
"cpu_us_per_message" (= "user_us_per_message" + "system_us_per_message", to rounding),
"cpu_cores", "reads_per_message", "writes_per_message" (all nodes together), "latency_p50_ms",
"latency_p99_ms", "errors"}, ...]}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import push_http  # noqa: E402
from flux.cluster.launcher import NodeProcess, running_local_cluster  # noqa: E402
from scaling import _cpu_times  # noqa: E402

PARTITIONS = 3
WARM_UP_S = 2


def _call(node: NodeProcess, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        push_http._base(node) + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _stored(node: NodeProcess, topic: str) -> int:
    return sum(
        int(
            _call(node, "GET", f"/topics/{topic}/partitions/{i}/messages?limit=0")["high_watermark"]
        )
        for i in range(PARTITIONS)
    )


def _usage(node: NodeProcess) -> tuple[float, float, int, int]:
    """The node's user and system CPU seconds and its ``read``/``write`` system calls so far."""
    io = dict(line.split(":", 1) for line in Path(f"/proc/{node.pid}/io").read_text().splitlines())
    return (*_cpu_times(node.pid), int(io["syscr"]), int(io["syscw"]))


def _point(
    nodes: list[NodeProcess], shape: str, rf: int, connections: int, seconds: float, index: int
) -> dict[str, Any]:
    topic = f"cost-{index}"
    _call(
        nodes[0],
        "POST",
        "/topics",
        {"name": topic, "partitions": PARTITIONS, "replication_factor": rf},
    )
    push_http._wrk_publish(nodes, WARM_UP_S, connections, topic=topic, tag="w")
    before = [_usage(node) for node in nodes]
    run = push_http._wrk_publish(nodes, seconds, connections, topic=topic, tag="m")
    after = [_usage(node) for node in nodes]
    user, system, reads, writes = (
        sum(a[i] - b[i] for a, b in zip(after, before, strict=True)) for i in range(4)
    )
    cpu = user + system
    answered = run["answered_2xx"]
    per_message = max(answered, 1)
    return {
        "shape": shape,
        "connections": connections,
        "messages_per_s": run["single_messages_per_s"],
        "answered": answered,
        "stored": _stored(nodes[0], topic),
        "cpu_us_per_message": round(cpu / per_message * 1e6),
        "user_us_per_message": round(user / per_message * 1e6),
        "system_us_per_message": round(system / per_message * 1e6),
        "cpu_cores": round(cpu / seconds, 2),
        "reads_per_message": round(reads / per_message, 2),
        "writes_per_message": round(writes / per_message, 2),
        "latency_p50_ms": statistics.median(run["latency_p50_ms_per_broker"]),
        "latency_p99_ms": max(run["latency_p99_ms_per_broker"]),
        "errors": run["status_errors"] + run["socket_errors"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1x1,3x1,3x3", help="NODESxRF, comma-separated")
    parser.add_argument("--connections", default="16,64,256")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    points = []
    for shape in args.shapes.split(","):
        count, rf = (int(part) for part in shape.split("x"))
        with (
            tempfile.TemporaryDirectory() as root,
            running_local_cluster(Path(root), count) as nodes,
        ):
            for connections in (int(c) for c in args.connections.split(",")):
                point = _point(nodes, shape, rf, connections, args.seconds, len(points))
                print(json.dumps(point), file=sys.stderr, flush=True)
                points.append(point)
    print(json.dumps({"seconds": args.seconds, "points": points}, indent=1))


if __name__ == "__main__":
    main()
