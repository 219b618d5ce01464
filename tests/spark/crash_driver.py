"""A streaming driver that SIGKILLs itself between a micro-batch's write and its commit.

    python crash_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT CRASH_BATCH JVM_PID_FILE

Run by ``test_streaming.py`` as its own process (with its own JVM). It runs the same query as
the test (``SOURCE`` -> ``out-<value>`` -> ``SINK``) through a data source that is ``flux``
in every respect except one: the sink's driver-side ``commit`` of batch ``CRASH_BATCH`` sends
SIGKILL to this Python process — every task of the batch has written and acknowledged its
records, and neither the sink's commit marker nor Spark's commit log has recorded the batch.
The JVM follows (PySpark's gateway exits when its driver's stdin closes); its pid is written
to ``JVM_PID_FILE`` so the test can wait for it to be gone.

The subclasses live in ``__main__``, so cloudpickle ships them to Spark's Python workers by
value: nothing test-only is added to ``flux.spark``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from flux.spark import flux_session
from flux.spark.datasource import FluxDataSource, FluxStreamWriter


class CrashingWriter(FluxStreamWriter):
    crash_batch = -1
    driver_pid = -1

    def commit(self, messages, batchId):  # type: ignore[no-untyped-def]
        if batchId == self.crash_batch:
            os.kill(self.driver_pid, signal.SIGKILL)
            time.sleep(60)  # the JVM goes down with the driver; never commit this batch
        super().commit(messages, batchId)


class CrashingSource(FluxDataSource):
    @classmethod
    def name(cls) -> str:
        return "flux_crash_test"

    def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
        writer = CrashingWriter(self.options, schema)
        writer.crash_batch = int(self.options["crashBatch"])
        writer.driver_pid = int(self.options["driverPid"])
        return writer


def main() -> None:
    bootstrap, source, sink, checkpoint, crash_batch, pid_file = sys.argv[1:7]
    spark = flux_session(
        "flux-crash-driver",
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        },
    )
    spark.dataSource.register(CrashingSource)
    Path(pid_file).write_text(str(spark.sparkContext._gateway.proc.pid))  # type: ignore[union-attr]
    query = (
        spark.readStream.format("flux")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "150")
        .load()
        .selectExpr("key", "concat('out-', cast(value as string)) as value")
        .writeStream.format("flux_crash_test")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("crashBatch", crash_batch)
        .option("driverPid", str(os.getpid()))
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.awaitTermination(300)
    sys.exit(3)  # only reached if the crash never happened


if __name__ == "__main__":
    main()
