"""What one replication round costs in Flux's own Python, without sockets or an event loop's
I/O: a leader appends one request's batch, each of two followers' fetch sessions answers
(``FetchSession.serve``), the answer and the next request go through the replication wire
format both ways, each follower applies the answer (``Partition.apply_fetch_answer``), and
the followers' next requests confirm the append, so the high watermark passes it. Real
``Partition`` objects with real disk logs (in a temporary directory) on every side, the
message-id index on, as a node runs them.

Per batch shape: ``http`` (one message with an id, what a single-message ``POST /publish``
appends; the leader is handed the ids as the HTTP front door hands them), ``kafka`` (one
100-byte record without an id, a small Kafka produce) and ``batch`` (100 records of 100
bytes, a client that batches).

    python benchmarks/replication_round.py [--shapes http,kafka,batch] [--rounds 5000]
        [--reps 0]

Prints one JSON object: microseconds per round for each shape (best of three timings, each
over ``--rounds`` rounds on fresh logs). Timings on a shared machine wander; instruction
counts do not. For those, run one shape under callgrind twice and take the difference,
``(I(2000) - I(1000)) / 1000`` instructions per round (building the round's batch included,
the same on both sides of a comparison)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/replication_round.py --shapes http --reps 2000

``--reps N`` runs N rounds of the shape and prints nothing else (no timing). What the
sockets add (two frame pairs per round and follower) is ``benchmarks/http_floor.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.config import parse_config  # noqa: E402
from flux.cluster.http.dedup import MESSAGE_ID_HEADER, MessageIdIndex  # noqa: E402
from flux.cluster.replication.partition import Partition  # noqa: E402
from flux.cluster.replication.session import FetchSession  # noqa: E402
from flux.cluster.replication.wire import (  # noqa: E402
    FetchEntry,
    FetchRequest,
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)
from flux.cluster.topics import TopicConfig  # noqa: E402
from flux.controller.image import (  # noqa: E402
    BrokerRegistration,
    FrozenMap,
    MetadataImage,
    PartitionState,
)
from flux.protocol.records import build_batch  # noqa: E402
from flux.storage import LogConfig, PartitionLog  # noqa: E402
from flux.storage.leader_epochs import LeaderEpochCache  # noqa: E402

LEADER = 1
FOLLOWERS = (2, 3)
STATE = PartitionState((1, 2, 3), (1, 2, 3), LEADER, 0, 0)
DEDUP_WINDOW_MS = 600_000
TIMESTAMP_MS = 1_700_000_000_000


def _requests(shape: str, rounds: int) -> list[tuple[bytes, list[list[tuple[int, str]]] | None]]:
    """Each round's batch and the ids the leader is handed with it (None: it looks itself)."""
    made: list[tuple[bytes, list[list[tuple[int, str]]] | None]] = []
    for i in range(rounds):
        if shape == "http":
            message_id = f"p-{i}"
            record = (None, b'{"message": "m-%d"}' % i, [(MESSAGE_ID_HEADER, message_id.encode())])
            made.append(
                (build_batch([record], base_timestamp_ms=TIMESTAMP_MS), [[(0, message_id)]])
            )
        elif shape == "kafka":
            made.append(
                (build_batch([(None, b"v" * 100, ())], base_timestamp_ms=TIMESTAMP_MS), None)
            )
        else:
            records = [(None, b"v" * 100, ()) for _ in range(100)]
            made.append((build_batch(records, base_timestamp_ms=TIMESTAMP_MS), None))
    return made


class _Cluster:
    """One partition led by broker 1 and followed by 2 and 3, each follower's session on 1."""

    def __init__(self, root: Path) -> None:
        defaults = parse_config({"controller": {"secret": "bench"}}, environ={})["topic"]
        config = TopicConfig.from_defaults(defaults, {}, message_max_bytes=1 << 20)

        def replica(broker_id: int) -> Partition:
            return Partition(
                broker_id=broker_id,
                topic="t",
                topic_id="id-t",
                index=0,
                log=PartitionLog.open(root / f"broker-{broker_id}", LogConfig()),
                config=config,
                state=PartitionState(STATE.replicas, STATE.isr, -1, -1, -1),
                epochs=LeaderEpochCache(),
                dedup=MessageIdIndex(DEDUP_WINDOW_MS),
            )

        self.leader = replica(LEADER)
        self.leader.become_leader(STATE)
        self.followers = {broker: replica(broker) for broker in FOLLOWERS}
        for follower in self.followers.values():
            follower.become_follower(STATE)
        image = MetadataImage(
            1,
            brokers=FrozenMap(
                {
                    broker: BrokerRegistration(
                        broker, f"inc-{broker}", "127.0.0.1", 9092, "127.0.0.1", 8080, None, False
                    )
                    for broker in FOLLOWERS
                }
            ),
        )
        self.sessions = {
            broker: FetchSession(
                replica_id=broker,
                incarnation_id=f"inc-{broker}",
                broker_id=LEADER,
                lookup=lambda topic, index: self.leader if (topic, index) == ("t", 0) else None,
                image=lambda: image,
            )
            for broker in FOLLOWERS
        }

    def entry(self, broker: int) -> FetchEntry:
        follower = self.followers[broker]
        return FetchEntry(
            "t",
            0,
            "id-t",
            follower.log_end_offset,
            follower.epochs.latest_epoch,
            follower.leader_epoch,
            1 << 20,
        )

    async def run(self, requests: list[tuple[bytes, list[list[tuple[int, str]]] | None]]) -> None:
        named = {broker: [self.entry(broker)] for broker in FOLLOWERS}
        for batch, known_ids in requests:
            self.leader.append_as_leader(batch, known_ids=known_ids)
            for broker in FOLLOWERS:
                request = FetchRequest(500, 1 << 20, named[broker], [])
                answers = await self.sessions[broker].serve(
                    decode_fetch_request(encode_fetch_request(request))
                )
                wire = b"".join(bytes(chunk) for chunk in encode_fetch_response(answers))
                named[broker] = []
                for answer in decode_fetch_response(wire):
                    self.followers[broker].apply_fetch_answer(answer)
                    if answer.records:
                        named[broker].append(self.entry(broker))
        # The last round's confirmations: every append is then below the high watermark.
        for broker in FOLLOWERS:
            await self.sessions[broker].serve(FetchRequest(0, 1 << 20, named[broker], []))
        end = self.leader.log_end_offset
        assert self.leader.high_watermark == end, (self.leader.high_watermark, end)
        assert all(f.log_end_offset == end for f in self.followers.values())


def _rounds(shape: str, rounds: int) -> float:
    """Seconds for ``rounds`` rounds of ``shape`` on fresh logs."""
    requests = _requests(shape, rounds)
    with tempfile.TemporaryDirectory(prefix="flux-round-") as directory:
        cluster = _Cluster(Path(directory))
        started = time.perf_counter()
        asyncio.run(cluster.run(requests))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="http,kafka,batch")
    parser.add_argument("--rounds", type=int, default=5000, help="rounds per timing")
    parser.add_argument("--reps", type=int, default=0)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for shape in args.shapes.split(","):
        if shape not in ("http", "kafka", "batch"):
            parser.error(f"unknown shape {shape!r} (known: http, kafka, batch)")
        if args.reps:
            _rounds(shape, args.reps)
            continue
        best = min(_rounds(shape, args.rounds) for _ in range(3))
        figures[shape] = {"us_per_round": round(best / args.rounds * 1e6, 1)}
    if not args.reps:
        print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
