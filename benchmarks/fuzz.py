"""Structure-aware fuzzing of a live local 3-node cluster (real processes): docs/chaos.md,
"Fuzzing".

Starts a cluster in a temporary directory, runs ``--cases`` cases per target (Kafka protocol,
HTTP API, replication / internal endpoints) from ``--seed``, checks nodes, a well-behaved
client and the canary's data throughout, stops the cluster and prints one JSON object: cases
per target, crashes, hangs, errors answered, connections closed, internal errors, data
changes detected, the slowest case and cases per second. Exit status 1 if anything was found.

    python benchmarks/fuzz.py --cases 10000 --seed 1 [--target kafka|http|replication|all]
        [--first-index 0] [--time-limit 600] [--exclude-open-bugs] [--keep DIR]

A case is reproducible from ``(seed, index)``: ``flux.chaos.fuzz.mutate.kafka_case(seed,
index, context)`` (``http_cases.http_case``, ``replication_cases.replication_case``) rebuilds
its bytes; ``--first-index N --cases 1`` reruns it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.chaos.fuzz.runner import (  # noqa: E402
    CLUSTER_SETTINGS,
    TARGETS,
    FuzzNode,
    FuzzSettings,
    run_fuzz,
)
from flux.cluster.launcher import NodeProcess, running_local_cluster  # noqa: E402


def fuzz_nodes(processes: list[NodeProcess]) -> list[FuzzNode]:
    """The runner's view of started node processes."""
    nodes = []
    for process in processes:
        kafka_host, _, kafka_port = process.bootstrap_servers.rpartition(":")
        http_host, _, http_port = str(process.ready["broker_http"]).rpartition(":")

        def restart(process: NodeProcess = process) -> None:
            process.start()
            process.wait_ready(60.0)

        nodes.append(
            FuzzNode(
                node_id=process.node_id,
                kafka=(kafka_host, int(kafka_port)),
                http=(http_host, int(http_port)),
                is_alive=process.is_running,
                log_path=process.log_path,
                restart=restart,
            )
        )
    return nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases per target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", choices=(*TARGETS, "all"), default="all")
    parser.add_argument("--first-index", type=int, default=0)
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="stop starting cases of a target after this many seconds",
    )
    parser.add_argument("--concurrency", type=int, default=8, help="connections per target")
    parser.add_argument("--case-timeout", type=float, default=10.0)
    parser.add_argument(
        "--exclude-open-bugs",
        action="store_true",
        help="skip Kafka cases that trigger a bug found and still open",
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the cluster's directory (logs) here"
    )
    args = parser.parse_args()

    targets = TARGETS if args.target == "all" else (args.target,)
    settings = FuzzSettings(
        seed=args.seed,
        cases={target: args.cases for target in targets},
        case_timeout_s=args.case_timeout,
        concurrency={target: args.concurrency for target in TARGETS},
        first_index=args.first_index,
        time_limit_s=args.time_limit,
        exclude_open_bugs=args.exclude_open_bugs,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    # SIGTERM stops the nodes too (they run in sessions of their own).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(tempfile.mkdtemp(prefix="flux-fuzz-"))
    started = time.monotonic()
    try:
        with running_local_cluster(
            root, 3, extra=CLUSTER_SETTINGS, ready_timeout_s=60.0, stop_timeout_s=15.0
        ) as processes:
            report = asyncio.run(run_fuzz(fuzz_nodes(processes), settings))
    finally:
        if args.keep is not None:
            shutil.copytree(root, args.keep, dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
    document = report.as_dict()
    document["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(document, indent=2, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
