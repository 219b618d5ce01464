"""``fluxctl pipeline run``'s options reach ``flux_session`` (no Spark started: the session
is a stand-in). ``test_standalone.py`` runs real pipelines with ``--master spark://...``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import flux.spark
import pytest
from click.testing import CliRunner

from .spark_support import require_spark

require_spark()

from flux.cli.pipeline import pipeline  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

JOB = """\
def main(spark, argv):
    spark.argv = argv
"""


class _Session:
    argv: list[str] | None = None
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_master_conf_and_app_name_reach_flux_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    job = tmp_path / "my-job.py"
    job.write_text(JOB)
    session = _Session()
    calls: list[dict[str, Any]] = []

    def flux_session(app_name: str, *, master: str | None, conf: dict[str, str]) -> _Session:
        calls.append({"app_name": app_name, "master": master, "conf": conf})
        return session

    monkeypatch.setattr(flux.spark, "flux_session", flux_session, raising=False)
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    module_name = "flux_pipeline_my_job"  # what ``run`` loads the file as
    try:
        result = CliRunner().invoke(
            pipeline,
            [
                "run",
                str(job),
                "--master",
                "spark://10.0.0.5:7077",
                "--conf",
                "spark.executor.memory=2g",
                "--conf",
                "spark.driver.host=10.0.0.9",
                "--",
                "--bootstrap",
                "b:9092",
            ],
        )
    finally:
        module = sys.modules.pop(module_name, None)
        if module is not None:
            cloudpickle.unregister_pickle_by_value(module)
    assert result.exit_code == 0, (result.output, result.exception)
    assert calls == [
        {
            "app_name": "my-job",
            "master": "spark://10.0.0.5:7077",
            "conf": {"spark.executor.memory": "2g", "spark.driver.host": "10.0.0.9"},
        }
    ]
    assert session.argv == ["--bootstrap", "b:9092"] and session.stopped
