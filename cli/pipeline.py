"""``fluxctl pipeline``: run a Spark pipeline that reads and writes Flux topics.

    fluxctl pipeline run examples/pipelines/page_view_counts.py -- --bootstrap 127.0.0.1:9092
    fluxctl pipeline run job.py --master spark://host:7077 --conf spark.executor.memory=2g -- ARGS

A pipeline is a Python file with ``main(spark, argv)``. ``run`` builds a SparkSession with
the ``flux`` data source registered (``flux.spark.flux_session``: ``local[*]`` unless
``--master`` names another master, whose executors then need ``flux-streaming[spark]``),
calls ``main`` with the arguments after ``--``, and stops the session when ``main`` returns.
The file is loaded as a module registered for pickling *by value*, so functions it defines
(UDFs, ``foreachBatch`` handlers) reach Spark's workers without being installed there.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import click

from .progress import progress

__all__ = ["pipeline"]


@click.group()
def pipeline() -> None:
    """Run Spark pipelines on Flux topics (needs the spark extra)."""


@pipeline.command("run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--master", help="Spark master URL (default: local[*])")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="a Spark setting")
@click.option("--app-name", help="Spark application name (default: the file's name)")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(
    file: Path,
    master: str | None,
    confs: tuple[str, ...],
    app_name: str | None,
    args: tuple[str, ...],
) -> None:
    """Run FILE's main(spark, argv) with the Flux data source registered; the pipeline's own
    arguments go after ``--``."""
    conf: dict[str, str] = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--conf")
        conf[key.strip()] = value
    try:
        from flux.spark import flux_session
        from pyspark import cloudpickle
        from pyspark.sql import SparkSession
    except ImportError as error:
        raise click.ClickException(
            f"pipelines need PySpark: pip install 'flux-streaming[spark]' ({error})"
        ) from error
    module = _load(file)
    entry = getattr(module, "main", None)
    if not callable(entry):
        raise click.ClickException(f"{file} defines no main(spark, argv) function")
    cloudpickle.register_pickle_by_value(module)
    existing = SparkSession.getActiveSession()
    with progress(f"starting Spark for {file.name}"):
        spark = flux_session(app_name or file.stem, master=master, conf=conf)
    try:
        with progress(f"pipeline {file.name} running"):
            entry(spark, list(args))
    finally:
        if existing is None:  # a session this command started (not the caller's)
            spark.stop()


def _load(file: Path) -> ModuleType:
    name = f"flux_pipeline_{file.stem.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise click.ClickException(f"cannot load {file} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
