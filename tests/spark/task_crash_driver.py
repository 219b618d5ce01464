"""A streaming driver whose sink task kills its own Python worker in the middle of a write.

    python task_crash_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT FLAG_FILE

Run by ``test_streaming.py`` as its own process, with ``local[2,4]`` (Spark retries a failed
task up to 4 times; the test session's ``local[2]`` would fail the query instead). The query is
the test's (``SOURCE`` -> ``out-<value>`` -> ``SINK``) through a data source that is ``flux``
in every respect except one: the first task that finds no ``FLAG_FILE`` creates it, hands all
its rows to the real writer, waits until some of them are in the sink's log (its transaction
open), and SIGKILLs its own Python worker before the transaction commits. Spark retries the
task; the retry's transactional producer fences the dead attempt and aborts its transaction.
Exits 0 once the query drained the source (``availableNow``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flux.sdk import SimpleConsumer
from flux.spark import flux_session
from flux.spark.datasource import FluxDataSource, FluxStreamWriter


class KillingWriter(FluxStreamWriter):
    flag = ""
    sink = ""
    bootstrap = ""

    def write(self, iterator):  # type: ignore[no-untyped-def]
        flag = Path(self.flag)
        if flag.exists():
            return super().write(iterator)
        flag.write_text(str(os.getpid()))
        return super().write(self._then_die(iterator))

    def _then_die(self, iterator: Iterator[Any]) -> Iterator[Any]:
        mine: set[bytes] = set()
        for row in iterator:
            mine.add(str(row["value"]).encode())
            yield row
        # Every row was handed to the producer: wait until one of THIS task's rows is in the
        # log (the other task's commits move the high watermarks too), then die before the
        # writer commits the transaction.
        deadline = time.monotonic() + 60
        with SimpleConsumer(self.bootstrap) as consumer:
            while time.monotonic() < deadline and not self._any_in_log(consumer, mine):
                time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)

    def _any_in_log(self, consumer: SimpleConsumer, values: set[bytes]) -> bool:
        """Whether the sink holds one of ``values`` (read_uncommitted: open transactions
        included)."""
        for partition in consumer.partitions(self.sink):
            offset = 0
            while True:
                records = consumer.fetch(self.sink, partition, offset, max_wait_ms=0)
                if not records:
                    break
                if any(record.value in values for record in records):
                    return True
                offset = records[-1].offset + 1
        return False


class KillingSource(FluxDataSource):
    @classmethod
    def name(cls) -> str:
        return "flux_task_crash_test"

    def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
        writer = KillingWriter(self.options, schema)
        writer.flag = self.options["flagFile"]
        writer.sink = self.options["topic"]
        writer.bootstrap = self.options["bootstrap.servers"]
        return writer


def main() -> None:
    bootstrap, source, sink, checkpoint, flag_file = sys.argv[1:6]
    spark = flux_session(
        "flux-task-crash-driver",
        master="local[2,4]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        },
    )
    spark.dataSource.register(KillingSource)
    query = (
        spark.readStream.format("flux")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "300")
        .load()
        .selectExpr("key", "concat('out-', cast(value as string)) as value")
        .writeStream.format("flux_task_crash_test")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("flagFile", flag_file)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    error = query.exception()
    spark.stop()
    if error is not None:
        print(error, file=sys.stderr)
        sys.exit(2)
    sys.exit(0 if Path(flag_file).exists() else 3)


if __name__ == "__main__":
    main()
