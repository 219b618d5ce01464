"""Page views -> views per page per one-minute event-time window -> a Flux topic or Parquet.

    fluxctl pipeline run examples/pipelines/page_view_counts.py -- \\
        --bootstrap 127.0.0.1:9092 --source page-views --sink-topic page-view-counts
    fluxctl pipeline run examples/pipelines/page_view_counts.py -- \\
        --bootstrap 127.0.0.1:9092 --source page-views --parquet /tmp/page-view-counts

Input records (``produce_page_views.py`` writes some): JSON values
``{"page": "/home", "user": "u-7", "ts": 1767225600000}`` with ``ts`` the event time in
epoch milliseconds. The job parses them, tolerates events up to ``--watermark`` late, counts
views per page per ``--window``, and emits each window **once, when the watermark has passed
its end** (append mode), so the output is final counts, never corrections:

* to a topic: key = page, value = ``{"page", "window_start", "window_end", "views"}`` JSON;
  the Flux sink writes each micro-batch exactly once;
* to Parquet: columns ``page, window_start, window_end, views`` (Spark's file sink keeps its
  own exactly-once manifest).

``--available-now`` processes what is there and stops (a catch-up or scheduled run);
without it the job runs until stopped. The checkpoint (``--checkpoint``) makes a restart
resume where the last run stopped.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

EVENT_SCHEMA = "page string, user string, ts long"


def page_view_counts(events: DataFrame, *, window: str, watermark: str) -> DataFrame:
    """Raw Flux rows -> (page, window_start, window_end, views), final per window."""
    views = (
        events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("event"))
        .select("event.page", (F.col("event.ts") / 1000).cast("timestamp").alias("event_time"))
        .where(F.col("page").isNotNull() & F.col("event_time").isNotNull())
    )
    return (
        views.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window), "page")
        .count()
        .select(
            "page",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.col("count").alias("views"),
        )
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="page_view_counts")
    parser.add_argument("--bootstrap", default=os.environ.get("FLUX_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--source", default="page-views")
    sink = parser.add_mutually_exclusive_group()
    sink.add_argument("--sink-topic", default="page-view-counts")
    sink.add_argument("--parquet", metavar="DIR", help="write Parquet files here instead")
    parser.add_argument("--checkpoint", help="default: a directory under the temp dir")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="30 seconds")
    parser.add_argument("--available-now", action="store_true")
    return parser.parse_args(argv)


def main(spark: SparkSession, argv: list[str]) -> None:
    args = parse_args(argv)
    target = "parquet" if args.parquet else "topic"
    checkpoint = args.checkpoint or os.path.join(
        tempfile.gettempdir(), f"flux-page-view-counts-{target}"
    )
    events = (
        spark.readStream.format("flux")
        .option("bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .load()
    )
    counts = page_view_counts(events, window=args.window, watermark=args.watermark)
    if args.parquet:
        writer = counts.writeStream.format("parquet").option("path", args.parquet)
    else:
        writer = (
            counts.select(
                F.col("page").alias("key"),
                F.to_json(F.struct("page", "window_start", "window_end", "views")).alias("value"),
            )
            .writeStream.format("flux")
            .option("bootstrap.servers", args.bootstrap)
            .option("topic", args.sink_topic)
        )
    writer = writer.outputMode("append").option("checkpointLocation", checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print(f"page_view_counts: running query {query.id} -> {args.parquet or args.sink_topic}")
    query.awaitTermination()


if __name__ == "__main__":
    import sys

    from flux.spark import flux_session

    main(flux_session("page-view-counts"), sys.argv[1:])
