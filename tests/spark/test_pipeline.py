"""The example pipeline (page views -> windowed counts with a watermark) run through
``fluxctl pipeline run``, into a Flux topic and into Parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flux.sdk import Message, Producer

from .spark_support import FluxCluster, require_spark

require_spark()

from flux.cli.pipeline import pipeline  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("spark")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "page_view_counts.py"
MINUTE_MS = 60_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window boundary


def _views(page: str, minute: int, count: int) -> list[dict[str, Any]]:
    return [
        {"page": page, "user": f"u-{i}", "ts": BASE_MS + minute * MINUTE_MS + i * 1000}
        for i in range(count)
    ]


EVENTS = [
    *_views("/home", 0, 3),
    *_views("/docs", 0, 2),
    *_views("/home", 1, 1),
    *_views("/late", 0, 0),
    *_views("/pricing", 10, 1),  # moves the watermark past minutes 0 and 1
]
#: Closed windows only: the one at minute 10 is still open when the input ends.
EXPECTED = {("/home", 0, 3), ("/docs", 0, 2), ("/home", 1, 1)}


def _run_pipeline(spark: Any, *args: str) -> None:
    # The test session skips no-data micro-batches (faster tests); append mode needs one to
    # emit the windows the watermark closed, as it would in production.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    try:
        result = CliRunner().invoke(pipeline, ["run", str(EXAMPLE), "--", *args])
    finally:
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    assert result.exit_code == 0, (result.output, result.exception)


def _minute(timestamp_text: str) -> int:
    from datetime import datetime

    parsed = datetime.fromisoformat(timestamp_text.replace("Z", "+00:00"))
    return int((parsed.timestamp() * 1000 - BASE_MS) // MINUTE_MS)


def test_page_view_counts_into_a_topic_and_into_parquet(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any, tmp_path: Path
) -> None:
    source, sink = topic_name("page-views"), topic_name("page-view-counts")
    flux_cluster.create_topic(source, partitions=3)
    flux_cluster.create_topic(sink, partitions=3)
    bootstrap = flux_cluster.bootstrap
    with Producer(bootstrap) as producer:
        producer.send(source, [Message(json.dumps(e), key=e["user"]) for e in EVENTS])
    common = ["--bootstrap", bootstrap, "--source", source, "--available-now"]
    _run_pipeline(
        spark, *common, "--sink-topic", sink, "--checkpoint", str(tmp_path / "topic-checkpoint")
    )
    records = flux_cluster.read_all(sink, expected=len(EXPECTED))
    counts = [json.loads(record.value) for record in records]
    assert {(c["page"], _minute(c["window_start"]), c["views"]) for c in counts} == EXPECTED
    assert len(counts) == len(EXPECTED)
    assert {record.key.decode() for record in records} == {page for page, _, _ in EXPECTED}

    parquet = tmp_path / "counts.parquet"
    _run_pipeline(
        spark, *common, "--parquet", str(parquet), "--checkpoint", str(tmp_path / "pq-checkpoint")
    )
    rows = spark.read.parquet(str(parquet)).collect()
    got = {
        (row.page, int((row.window_start.timestamp() * 1000 - BASE_MS) // MINUTE_MS), row.views)
        for row in rows
    }
    assert got == EXPECTED and len(rows) == len(EXPECTED)
