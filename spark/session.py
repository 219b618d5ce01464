"""Building a SparkSession that can run Flux pipelines, and registering the source.

``flux_session`` applies what ``notes/spark-python-data-source.md`` measured to be needed
before the first session of a process: workers run this interpreter (``PYSPARK_PYTHON``, so
they can import ``flux``), a local master binds to loopback, logs stay at WARN, and the
source is registered. Settings already in the environment or given in ``conf`` win.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import FluxSaveModeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["flux_session", "register"]

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = warn
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""


def register(spark: SparkSession) -> None:
    """Make ``format("flux")`` available in ``spark`` (once per session)."""
    from .datasource import FluxDataSource

    spark.dataSource.register(FluxDataSource)
    _explain_default_save_mode()


#: Spark's error for a save mode a Python data source cannot take.
_SAVE_MODE_CONDITION = "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
SAVE_MODE_MESSAGE = (
    'df.write.format("flux") appends to the topic: add .mode("append") before .save(). '
    "Spark's default save mode ErrorIfExists (which Spark's Kafka sink accepts) is refused by "
    "Spark itself for every Python data source, before the flux sink is asked"
)


def _explain_default_save_mode() -> None:
    """Make the default save mode's error name ``.mode("append")``.

    A Kafka user writes ``df.write.format("kafka").option(...).save()``: Spark's Kafka sink
    accepts the default mode, ``ErrorIfExists``. For a Python data source Spark refuses that
    mode in the JVM, before the source's ``writer`` is called (``UNSUPPORTED_DATA_SOURCE_SAVE_
    MODE``, measured with PySpark 4.2), so the source cannot accept it nor word the error.
    ``DataFrameWriter.save`` is wrapped once per process to turn that one error, for the
    ``flux`` format only, into ``FluxSaveModeError``; every other outcome passes unchanged.
    """
    from pyspark.sql.readwriter import DataFrameWriter

    original = DataFrameWriter.save
    if getattr(original, "_flux_explains_save_mode", False):
        return

    @functools.wraps(original)
    def save(self: DataFrameWriter, *args: Any, **kwargs: Any) -> None:
        try:
            return original(self, *args, **kwargs)
        except Exception as error:
            condition = getattr(error, "getCondition", None)
            if (
                callable(condition)
                and condition() == _SAVE_MODE_CONDITION
                and '"flux"' in str(error)
            ):
                raise FluxSaveModeError(SAVE_MODE_MESSAGE) from error
            raise

    save._flux_explains_save_mode = True  # type: ignore[attr-defined]
    DataFrameWriter.save = save  # type: ignore[method-assign]


def flux_session(
    app_name: str = "flux-pipeline",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Flux source registered.

    ``master`` None means ``local[*]`` (or whatever ``spark-submit`` chose); a
    ``spark://host:port`` master runs executors there in client mode, and they must have
    ``flux-streaming[spark]`` installed for the same Python version.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = master is None or master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "SPARK_HOME" not in os.environ:
        builder = builder.master("local[*]")
    settings = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_log4j2_file()}",
    }
    if local:
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _log4j2_file() -> Path:
    path = Path(tempfile.gettempdir()) / "flux-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(_LOG4J2)
        temporary.replace(path)
    return path
