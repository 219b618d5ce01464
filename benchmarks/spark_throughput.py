"""Rows per second through the ``flux`` Spark data source, with 100-byte values. Prints one
JSON object.

    python benchmarks/spark_throughput.py [--records 1000000] [--partitions 4]
                                          [--master local[2]] [--bootstrap HOST:PORT]
                                          [--nodes 1|3]

``--master standalone`` starts a Spark standalone master and two workers of one core each
from the installed PySpark (``flux.spark.standalone.StandaloneCluster``) and runs the same
job there: the rows are pickled to executor processes, as on a real cluster.

Without ``--bootstrap`` it starts ``--nodes`` node processes (data on disk in a temporary
directory; with 3 nodes the topics are replicated on all three, ``min.insync.replicas`` 2) and
stops them afterwards. Steps, each timed from the action's start to its end:

1. **write** (Spark -> Flux): ``spark.range(N)`` turned into 100-byte values, written with
   ``df.write.format("flux")`` into a fresh topic of ``--partitions`` partitions
   (idempotent producers, ``acks=all``);
2. **batch read** (Flux -> Spark): ``spark.read.format("flux")`` of that topic into the
   ``noop`` sink, twice (the first run includes Python worker start-up; the second is the
   steady state);
3. **stream read**: ``spark.readStream.format("flux")`` from earliest with
   ``trigger(availableNow=True)`` into the ``noop`` sink (adds Spark's micro-batch
   bookkeeping: offset log, commit log).

Spark's session start-up and a warm-up write of 20,000 rows are excluded; ``rows_per_s`` divides N by the step's wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from produce_consume import _start_broker  # noqa: E402

_WARM_UP_ROWS = 20_000


def _timed(action) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _rates(records: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 3),
        "rows_per_s": round(records / seconds),
        "mb_per_s": round(records * 100 / seconds / 1e6, 1),
    }


def run(
    bootstrap: str, records: int, partitions: int, master: str, replication: int = 1
) -> dict[str, object]:
    if master == "standalone":
        from flux.spark.standalone import StandaloneCluster

        with tempfile.TemporaryDirectory() as workdir:
            with StandaloneCluster(Path(workdir), workers=2) as cluster:
                figures = _run(
                    bootstrap,
                    records,
                    partitions,
                    cluster.master_url,
                    replication,
                    cluster.driver_conf(),
                )
                figures["master"] = "standalone (2 workers x 1 core)"
                return figures
    return _run(bootstrap, records, partitions, master, replication, {})


def _run(
    bootstrap: str,
    records: int,
    partitions: int,
    master: str,
    replication: int,
    conf: dict[str, str],
) -> dict[str, object]:
    from flux.sdk import Admin
    from flux.spark import flux_session

    topic = f"spark-bench-{uuid.uuid4().hex[:8]}"
    warm_up_topic = f"{topic}-warm-up"
    with Admin(bootstrap) as admin:
        for name in (topic, warm_up_topic):
            admin.create_topic(
                name,
                partitions=partitions,
                replication_factor=replication,
                configs={"min.insync.replicas": "2"} if replication > 1 else None,
            )
    spark = flux_session(
        "flux-spark-benchmark",
        master=master,
        conf={
            "spark.sql.shuffle.partitions": str(partitions),
            "spark.ui.enabled": "false",
            **conf,
        },
    )
    try:

        def rows(count: int):  # type: ignore[no-untyped-def]
            return spark.range(0, count, numPartitions=partitions).selectExpr(
                "cast(concat(lpad(cast(id as string), 10, '0'), repeat('x', 90)) as binary) "
                "as value"
            )

        # Warm-up: start the Python workers and load the code paths once, untimed.
        rows(_WARM_UP_ROWS).write.format("flux").option("bootstrap.servers", bootstrap).option(
            "topic", warm_up_topic
        ).mode("append").save()
        source = rows(records)
        write_s = _timed(
            lambda: (
                source.write.format("flux")
                .option("bootstrap.servers", bootstrap)
                .option("topic", topic)
                .mode("append")
                .save()
            )
        )

        def batch_read() -> None:
            (
                spark.read.format("flux")
                .option("bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )

        count = (
            spark.read.format("flux")
            .option("bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
            .count()
        )
        if count != records:
            raise RuntimeError(f"wrote {records} rows, read back {count}")
        first_read_s = _timed(batch_read)
        read_s = _timed(batch_read)
        with tempfile.TemporaryDirectory() as checkpoint:

            def stream_read() -> None:
                query = (
                    spark.readStream.format("flux")
                    .option("bootstrap.servers", bootstrap)
                    .option("subscribe", topic)
                    .option("startingOffsets", "earliest")
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", checkpoint)
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()

            stream_s = _timed(stream_read)
    finally:
        spark.stop()
    return {
        "records": records,
        "value_bytes": 100,
        "partitions": partitions,
        "master": master,
        "replication_factor": replication,
        "write": _rates(records, write_s),
        "batch_read_first": _rates(records, first_read_s),
        "batch_read": _rates(records, read_s),
        "stream_read_available_now": _rates(records, stream_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap", help="an existing cluster (default: start one broker)")
    parser.add_argument(
        "--nodes", type=int, choices=(1, 3), default=1, help="nodes to start (RF = nodes)"
    )
    args = parser.parse_args()
    if args.bootstrap:
        figures = run(args.bootstrap, args.records, args.partitions, args.master)
    elif args.nodes == 1:
        with tempfile.TemporaryDirectory() as workdir:
            node = _start_broker(Path(workdir))
            try:
                figures = run(node.bootstrap_servers, args.records, args.partitions, args.master)
            finally:
                node.stop()
    else:
        from flux.cluster.launcher import local_cluster_configs

        with tempfile.TemporaryDirectory() as workdir:
            nodes = local_cluster_configs(
                Path(workdir), 3, extra={"node": {"log_level": "WARNING"}}
            )
            try:
                for node in nodes:
                    node.start()
                for node in nodes:
                    node.wait_ready()
                bootstrap = ",".join(node.bootstrap_servers for node in nodes)
                figures = run(bootstrap, args.records, args.partitions, args.master, replication=3)
            finally:
                for node in nodes:
                    node.stop()
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
