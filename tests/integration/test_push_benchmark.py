"""benchmarks/push_http.py still runs end to end and prints its JSON (tiny sizes; the figures
are measured by hand, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_push_http_benchmark_prints_json() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "push_http.py"),
            "--messages",
            "200",
            "--latency-messages",
            "20",
            "--rate",
            "50",
            "--batch",
            "20",
            "--batched-messages",
            "1000",
            "--window",
            "10",
            "--route",
            "leader",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout)
    assert figures["publish"]["single_messages_per_s"] > 0
    assert figures["publish"]["route"] == "leader"  # flux.sdk.http's publisher
    for kind in ("webhook", "websocket"):
        assert figures["push"][kind]["messages"] == 200
        assert figures["push"][kind]["window"] == 10
        assert figures["push"][kind]["latency_ms"]["messages"] == 20
    assert figures["push"]["websocket"]["out_of_order"] == 0
