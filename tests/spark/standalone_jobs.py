"""The pipelines ``test_standalone.py`` runs on a Spark standalone cluster, as a user would:

    fluxctl pipeline run tests/spark/standalone_jobs.py --master spark://HOST:PORT -- \\
        count-by-key BOOTSTRAP SOURCE SINK
    fluxctl pipeline run tests/spark/standalone_jobs.py --master spark://HOST:PORT -- \\
        copy BOOTSTRAP SOURCE SINK CHECKPOINT

* ``count-by-key`` (batch): read SOURCE, count the records per key, write one record per key
  (key, value = the count in decimal) to SINK with the batch sink.
* ``copy`` (streaming, ``availableNow``, 300 rows per micro-batch): SOURCE -> ``out-<value>``
  -> SINK through the exactly-once streaming sink.

Both pass the values they read through ``_trace``, which leaves a trace of every task in its
executor's working directory (``<worker work dir>/<app id>/<executor id>/``, the current
directory of Spark's Python workers): ``started-<stage>-<partition>-<attempt>`` on the task's
first row. The test reads those to learn which worker ran which task. A task that starts
while the file ``HOLD`` exists in its worker's work dir also marks itself ``held-...`` and
waits (at most ``HOLD_MAX_S``) for the file to go: the test creates it on the worker it is
about to kill, so that a task is certainly running there when the worker dies.

``fluxctl`` registers this file for pickling by value, so the functions here reach the
executors without being installed there.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

HOLD = "hold-tasks"
HOLD_MAX_S = 120.0
ROWS_PER_MICRO_BATCH = 300

#: The task this Python worker is in (workers are reused across tasks).
_task: dict[str, Any] = {"name": None}


def _trace(value: bytes | None) -> bytes | None:
    """Identity on ``value``; leaves the task's ``started`` trace on its first row and holds
    a task that starts while ``HOLD`` exists. A plain Python UDF, called row by row: Spark's
    Arrow-optimized UDFs (and ``mapInArrow``) need pandas."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    name = f"{context.stageId()}-{context.partitionId()}-{context.attemptNumber()}"
    if _task["name"] == name:
        return value
    _task["name"] = name
    executor_dir = Path.cwd()
    (executor_dir / f"started-{name}").touch()
    hold = executor_dir.parent.parent / HOLD
    if hold.exists():
        (executor_dir / f"held-{name}").touch()
        deadline = time.monotonic() + HOLD_MAX_S
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return value


def _read(spark: Any, bootstrap: str, source: str, *, streaming: bool) -> Any:
    from pyspark.sql import functions as F

    reader = (
        (spark.readStream if streaming else spark.read)
        .format("flux")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
    )
    if streaming:
        reader = reader.option("maxOffsetsPerTrigger", str(ROWS_PER_MICRO_BATCH))
    else:  # several read tasks per partition, so that both executors read
        reader = reader.option("maxRecordsPerPartition", "2500")
    trace = F.udf(_trace, "binary", useArrow=False)
    return reader.load().withColumn("value", trace("value"))


def count_by_key(spark: Any, bootstrap: str, source: str, sink: str) -> None:
    from pyspark.sql import functions as F

    counts = (
        _read(spark, bootstrap, source, streaming=False)
        .groupBy("key")
        # count(value), not count(): the traced column must be used, or the optimizer prunes
        # the UDF out of the plan (every value is non-null, so the counts are the same).
        .agg(F.count("value").cast("string").alias("value"))
    )
    (
        counts.write.format("flux")
        .mode("append")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .save()
    )


def copy(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str) -> None:
    query = (
        _read(spark, bootstrap, source, streaming=True)
        .selectExpr("key", "concat('out-', cast(value as string)) as value")
        .writeStream.format("flux")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"the copy query failed: {error}")


def main(spark: Any, argv: list[str]) -> None:
    job, *args = argv
    if job == "count-by-key":
        count_by_key(spark, *args)
    elif job == "copy":
        copy(spark, *args)
    else:
        raise SystemExit(f"unknown job {job!r}")
