"""Push delivery and HTTP publish figures of a local 3-node cluster (real processes).

- ``publish``: HTTP publish throughput, ``POST /publish`` one message per request from
  ``--concurrency`` clients, and ``POST /topics/<t>/messages`` with ``--batch`` messages per
  request (acks=all, replication factor 3). The single-message clients are aiohttp sessions
  in this process (``--publish-client aiohttp``, the default: ``--messages`` requests), or
  wrk (``--publish-client wrk``: Debian's ``wrk``, a C load generator, for
  ``--publish-seconds``, its ``--concurrency`` connections spread over the three brokers; the
  Python client then no longer shares the two cores with the brokers at a third of a core).
  With wrk the figure is 2xx answers per second; ``stored`` (the topic's high watermarks
  summed) must be at least that, and every non-2xx answer or socket error is counted.
  ``--route any`` (the default) sends each message to a broker in turn, which forwards it to
  its partition's leader unless it leads it (two messages in three); ``--route leader`` sends
  each to its partition's leader as ``flux.sdk.http`` routes it (the aiohttp client is then
  that SDK's ``AsyncHttpPublisher``; wrk is given ids that hash to partitions its broker
  leads). The batched figure publishes ``--batched-messages`` (20,000 by default, whatever
  ``--messages`` is: fewer requests take a few milliseconds in all and measure noise).
- ``push.webhook`` / ``push.websocket``: a subscriber served by this process subscribes with
  ``readOld=true`` and ``maxInFlight=--window`` to ``--messages`` stored messages and
  acknowledges each one; throughput is messages delivered per second until the last one
  (3 partitions: one in-order stream each, up to ``--window`` unacknowledged messages each).
  Then ``--latency-messages`` are published at ``--rate`` per second while subscribed; latency
  is from the publish request's start to the delivery reaching the subscriber (p50/p99/max).
  A message that arrives again (a redelivery) or below an offset of its partition that already
  arrived is counted in ``redelivered`` / ``out_of_order``: both 0 for WebSocket on a healthy
  run; with a window above 1 a webhook's concurrent requests (issued in offset order on
  separate connections) may arrive out of order.

Prints one JSON object.

    python benchmarks/push_http.py [--messages 3000] [--latency-messages 200] [--rate 100]
        [--window 1] [--publish-client aiohttp|wrk] [--route any|leader]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import NodeProcess, free_port, running_local_cluster  # noqa: E402
from flux.sdk.http import AsyncHttpPublisher, ClusterView, partition_of  # noqa: E402

PARTITIONS = 3


class _Subscriber:
    """Webhook (``POST /poll``) and WebSocket (``/ws``) endpoints that acknowledge at once and
    record when each message arrived, and whether it came again or out of order."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        self.done = asyncio.Event()
        self.expected = 0
        self.port = free_port()
        self.redelivered = 0
        self.out_of_order = 0
        self._last_offsets: dict[int, int] = {}
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    def _arrived(self, message: dict[str, Any]) -> None:
        if message["payload"] in self.arrivals:
            self.redelivered += 1
        elif message["offset"] <= self._last_offsets.get(message["partition"], -1):
            self.out_of_order += 1
        else:
            self._last_offsets[message["partition"]] = message["offset"]
        self.arrivals.setdefault(message["payload"], time.perf_counter())
        if self.expected and len(self.arrivals) >= self.expected:
            self.done.set()

    async def _poll(self, request: web.Request) -> web.Response:
        self._arrived(await request.json())
        return web.Response(text="ok")

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.add(socket)
        try:
            async for frame in socket:
                message = json.loads(frame.data)
                self._arrived(message)
                await socket.send_json({"ack": message["id"]})
        finally:
            self._sockets.discard(socket)
        return socket

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.post("/poll", self._poll), web.get("/ws", self._ws)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        # Open WebSockets (the brokers') would hold the runner's cleanup for its whole
        # shutdown timeout: close them first.
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def reset(self, expected: int) -> None:
        self.arrivals = {}
        self.expected = expected
        self.done = asyncio.Event()

    def new_topic(self) -> None:
        """Order and redelivery counts start again (a new topic's partitions)."""
        self.redelivered = self.out_of_order = 0
        self._last_offsets = {}


def _phase(name: str) -> None:
    """Progress on stderr (stdout carries only the JSON)."""
    print(f"{time.strftime('%H:%M:%S')} {name}", file=sys.stderr, flush=True)


def _base(node: NodeProcess) -> str:
    return f"http://{node.ready['broker_http']}"


async def _post(session: aiohttp.ClientSession, url: str, body: Any) -> Any:
    async with session.post(url, json=body) as response:
        answer = await response.json(content_type=None)
        if response.status not in (200, 201):
            raise RuntimeError(f"{url}: {response.status} {answer}")
        return answer


async def _create_topic(session: aiohttp.ClientSession, node: NodeProcess, name: str) -> None:
    await _post(
        session,
        _base(node) + "/topics",
        {"name": name, "partitions": PARTITIONS, "replication_factor": 3},
    )


async def _publish_throughput(
    session: aiohttp.ClientSession,
    nodes: list[NodeProcess],
    count: int,
    concurrency: int,
    route: str,
) -> float:
    await _create_topic(session, nodes[0], "bench-publish")
    queue = list(range(count))

    async def worker(worker_id: int) -> None:
        base = _base(nodes[worker_id % len(nodes)])
        while queue:
            index = queue.pop()
            await _post(
                session,
                base + "/publish",
                {"id": f"p-{index}", "message": f"m-{index}", "topic": "bench-publish"},
            )

    async def routed_worker(publisher: AsyncHttpPublisher) -> None:
        while queue:
            index = queue.pop()
            await publisher.publish("bench-publish", f"m-{index}", id=f"p-{index}")

    started = time.perf_counter()
    if route == "leader":
        async with AsyncHttpPublisher([_base(n) for n in nodes]) as publisher:
            await asyncio.gather(*(routed_worker(publisher) for _ in range(concurrency)))
    else:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return count / (time.perf_counter() - started)


def _wrk_publish(
    nodes: list[NodeProcess],
    seconds: float,
    connections: int,
    *,
    topic: str = "bench-wrk",
    tag: str = "",
    route: str = "any",
) -> dict[str, Any]:
    """``wrk`` POSTing single messages to ``topic`` at every broker at once (connections
    spread evenly); ids start with ``tag`` (another run on the same topic needs another tag:
    repeated ids are answered as duplicates, without an append). ``route="leader"``: each
    broker is sent only ids whose partition it leads (as a client that reads ``GET /cluster``
    and hashes each id would send them), so no message is forwarded."""
    with tempfile.TemporaryDirectory(prefix="flux-wrk-ids-") as directory:
        id_files = (
            _leader_id_files(nodes, topic, tag, seconds, Path(directory))
            if route == "leader"
            else {}
        )
        return _run_wrk(nodes, seconds, connections, topic, tag, id_files)


def _run_wrk(
    nodes: list[NodeProcess],
    seconds: float,
    connections: int,
    topic: str,
    tag: str,
    id_files: dict[int, Path],
) -> dict[str, Any]:
    """One wrk per target broker (every broker, or with ``id_files`` the leaders, each sending
    the ids of its file), their figures summed."""
    script = ROOT / "benchmarks" / "push_http_publish.lua"
    targets = [n for n in nodes if n.node_id in id_files] if id_files else nodes
    processes = []
    for index, node in enumerate(targets):
        share = connections // len(targets) + (1 if index < connections % len(targets) else 0)
        if share == 0:
            continue
        processes.append(
            subprocess.Popen(
                [
                    "wrk",
                    "-t1",
                    f"-c{share}",
                    f"-d{max(1, round(seconds))}s",
                    "--latency",
                    "-s",
                    str(script),
                    _base(node),
                    "--",
                    topic,
                    f"{tag}n{node.node_id}",
                    *([str(id_files[node.node_id])] if id_files else []),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    runs = []
    for process in processes:
        out, _ = process.communicate(timeout=seconds + 60)
        last = [line for line in out.splitlines() if line.startswith('{"requests"')]
        if not last:
            raise RuntimeError(f"wrk printed no figures:\n{out}")
        runs.append(json.loads(last[-1]))
    ok = sum(run["requests"] - run["status_errors"] for run in runs)
    duration_s = max(run["duration_us"] for run in runs) / 1e6
    return {
        "client": "wrk",
        "single_messages_per_s": round(ok / duration_s, 1),
        "answered_2xx": ok,
        "status_errors": sum(run["status_errors"] for run in runs),
        "socket_errors": sum(
            run[k] for run in runs for k in ("connect_errors", "read_errors", "write_errors")
        )
        + sum(run["timeouts"] for run in runs),
        "latency_p50_ms_per_broker": [round(run["latency_p50_us"] / 1000, 2) for run in runs],
        "latency_p99_ms_per_broker": [round(run["latency_p99_us"] / 1000, 2) for run in runs],
    }


def _leader_id_files(
    nodes: list[NodeProcess], topic: str, tag: str, seconds: float, directory: Path
) -> dict[int, Path]:
    """Per broker, a file of unique ids (more than ``seconds`` of the fastest run needs) that
    ``flux.sdk.http`` would send to that broker: ids whose partitions it leads."""
    with urllib.request.urlopen(_base(nodes[0]) + "/cluster", timeout=10) as answer:
        view = ClusterView.from_answer(json.load(answer))
    count = view.partition_count(topic)
    assert count is not None, f"{topic} is not in GET /cluster"
    wanted = int(seconds * 8000) + 10_000
    leaders = {view.leader_address(topic, p) for p in range(count)}
    files = {}
    for node in nodes:
        address = node.ready["broker_http"]
        if address not in leaders:
            continue
        ids: list[str] = []
        candidate = 0
        while len(ids) < wanted:
            candidate += 1
            value = f"{tag}r{node.node_id}-{candidate}"
            partition = partition_of(count, key=None, message_id=value)
            assert partition is not None
            if view.leader_address(topic, partition) == address:
                ids.append(value)
        files[node.node_id] = directory / f"ids-{node.node_id}"
        files[node.node_id].write_text("\n".join(ids) + "\n")
    return files


async def _stored(session: aiohttp.ClientSession, node: NodeProcess, topic: str) -> int:
    """Messages stored in ``topic``: its partitions' high watermarks, summed."""
    total = 0
    for index in range(PARTITIONS):
        answer = await _get(
            session, _base(node) + f"/topics/{topic}/partitions/{index}/messages?limit=0"
        )
        total += int(answer["high_watermark"])
    return total


async def _get(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        answer = await response.json(content_type=None)
        if response.status != 200:
            raise RuntimeError(f"{url}: {response.status} {answer}")
        return answer


async def _batch_throughput(
    session: aiohttp.ClientSession, nodes: list[NodeProcess], count: int, batch: int
) -> float:
    await _create_topic(session, nodes[0], "bench-batch")
    requests = [
        {"messages": [{"value": f"m-{i}-{j}"} for j in range(batch)]} for i in range(count // batch)
    ]
    started = time.perf_counter()
    await asyncio.gather(
        *(
            _post(session, _base(nodes[i % len(nodes)]) + "/topics/bench-batch/messages", body)
            for i, body in enumerate(requests)
        )
    )
    return len(requests) * batch / (time.perf_counter() - started)


async def _push(
    session: aiohttp.ClientSession,
    nodes: list[NodeProcess],
    subscriber: _Subscriber,
    kind: str,
    messages: int,
    latency_messages: int,
    rate: float,
    window: int,
) -> dict[str, Any]:
    topic = f"bench-push-{kind}"
    await _create_topic(session, nodes[0], topic)
    stored = [f"{kind}-{i}" for i in range(messages)]
    for start in range(0, messages, 500):
        await _post(
            session,
            _base(nodes[0]) + f"/topics/{topic}/messages",
            {"messages": [{"value": value} for value in stored[start : start + 500]]},
        )
    address = (
        f"ws://127.0.0.1:{subscriber.port}/ws"
        if kind == "websocket"
        else f"http://127.0.0.1:{subscriber.port}"
    )
    subscriber.new_topic()
    subscriber.reset(messages)
    started = time.perf_counter()
    await _post(
        session,
        _base(nodes[1]) + "/subscribe",
        {"address": address, "topics": [topic], "readOld": True, "maxInFlight": window},
    )
    await asyncio.wait_for(subscriber.done.wait(), 600)
    _phase(f"push {kind}: latency")
    throughput = messages / (max(subscriber.arrivals.values()) - started)

    subscriber.reset(messages + latency_messages)
    subscriber.arrivals = dict.fromkeys(stored, 0.0)
    sent: dict[str, float] = {}
    for index in range(latency_messages):
        value = f"{kind}-late-{index}"
        sent[value] = time.perf_counter()
        await _post(
            session,
            _base(nodes[index % len(nodes)]) + "/publish",
            {"message": value, "topic": topic},
        )
        await asyncio.sleep(max(0.0, sent[value] + 1 / rate - time.perf_counter()))
    await asyncio.wait_for(subscriber.done.wait(), 600)
    latencies = sorted((subscriber.arrivals[v] - sent[v]) * 1000 for v in sent)
    return {
        "messages": messages,
        "window": window,
        "messages_per_s": round(throughput, 1),
        "redelivered": subscriber.redelivered,
        "out_of_order": subscriber.out_of_order,
        "latency_ms": {
            "p50": round(statistics.median(latencies), 2),
            "p99": round(latencies[int(len(latencies) * 0.99) - 1], 2),
            "max": round(latencies[-1], 2),
            "messages": latency_messages,
            "rate_per_s": rate,
        },
    }


async def _run(nodes: list[NodeProcess], args: argparse.Namespace) -> dict[str, Any]:
    subscriber = _Subscriber()
    await subscriber.start()
    try:
        async with aiohttp.ClientSession() as session:
            _phase("publish")
            if args.publish_client == "wrk":
                await _create_topic(session, nodes[0], "bench-wrk")
                wrk = await asyncio.to_thread(
                    _wrk_publish,
                    nodes,
                    args.publish_seconds,
                    args.concurrency,
                    route=args.route,
                )
                wrk["stored"] = await _stored(session, nodes[0], "bench-wrk")
                publish = wrk["single_messages_per_s"]
            else:
                wrk = None
                publish = await _publish_throughput(
                    session, nodes, args.messages, args.concurrency, args.route
                )
            _phase("batched publish")
            batch = await _batch_throughput(session, nodes, args.batched_messages, args.batch)
            push = {}
            for kind in ("webhook", "websocket"):
                _phase(f"push {kind}")
                push[kind] = await _push(
                    session,
                    nodes,
                    subscriber,
                    kind,
                    args.messages,
                    args.latency_messages,
                    args.rate,
                    args.window,
                )
    finally:
        await subscriber.stop()
    return {
        "cluster": {"nodes": len(nodes), "replication_factor": 3, "partitions": PARTITIONS},
        "publish": {
            "single_messages_per_s": round(publish, 1),
            "concurrency": args.concurrency,
            "client": args.publish_client,
            "route": args.route,
            **({"wrk": wrk} if wrk is not None else {}),
            "batched_messages_per_s": round(batch, 1),
            "batch": args.batch,
        },
        "push": push,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batched-messages", type=int, default=20_000)
    parser.add_argument("--publish-client", choices=("aiohttp", "wrk"), default="aiohttp")
    parser.add_argument("--publish-seconds", type=float, default=10.0)
    parser.add_argument(
        "--route",
        choices=("any", "leader"),
        default="any",
        help="wrk: send each message to any broker (default) or to its partition's leader",
    )
    parser.add_argument("--latency-messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument(
        "--window", type=int, default=1, help="maxInFlight of the push subscriptions (1..1000)"
    )
    args = parser.parse_args()
    _phase("starting the cluster")
    with tempfile.TemporaryDirectory(prefix="flux-push-bench-") as directory:
        with running_local_cluster(
            Path(directory),
            3,
            extra={"node": {"log_level": "WARNING"}, "topic": {"partitions": PARTITIONS}},
        ) as nodes:
            figures = asyncio.run(_run(nodes, args))
            _phase("stopping the cluster")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
