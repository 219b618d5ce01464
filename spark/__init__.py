"""``flux.spark``: the PySpark data source ``flux`` (Spark 4 Python data source API) and the
helpers pipelines use.

    from flux.spark import flux_session
    spark = flux_session("page-views")          # local[*], the source registered
    counts = spark.readStream.format("flux").option("bootstrap.servers", ...)...

* ``FluxDataSource`` — ``format("flux")``: streaming and batch reader and writer
  (``flux.spark.datasource``), options in ``flux.spark.options``.
* ``register(spark)`` — register the source with an existing session.
* ``flux_session(...)`` — build a session set up for Flux (``flux.spark.session``).
* ``flux.spark.errors`` — what the source raises.

The pure parts (options, offsets, columns) import without PySpark; importing the data source
needs the ``spark`` extra (``pip install 'flux-streaming[spark]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    FluxClusterUnreachableError,
    FluxDataLossError,
    FluxMalformedValueError,
    FluxOptionError,
    FluxSaveModeError,
    FluxSchemaError,
    FluxSparkError,
    FluxTopicNotFoundError,
)

if TYPE_CHECKING:
    from .datasource import FluxDataSource
    from .session import flux_session, register

__all__ = [
    "FluxClusterUnreachableError",
    "FluxDataLossError",
    "FluxDataSource",
    "FluxMalformedValueError",
    "FluxOptionError",
    "FluxSaveModeError",
    "FluxSchemaError",
    "FluxSparkError",
    "FluxTopicNotFoundError",
    "flux_session",
    "register",
]

_LAZY = {
    "FluxDataSource": "datasource",
    "flux_session": "session",
    "register": "session",
}


def __getattr__(name: str) -> Any:
    """PySpark-dependent names load on first use, so ``import flux.spark`` (and the CLI)
    works without the extra and fails only where Spark is really needed."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'flux.spark' has no attribute {name!r}")
    import importlib

    try:
        module = importlib.import_module(f"flux.spark.{module_name}")
    except ImportError as error:
        raise ImportError(
            f"flux.spark.{name} needs PySpark and PyArrow: pip install 'flux-streaming[spark]' "
            f"({error})"
        ) from error
    return getattr(module, name)
