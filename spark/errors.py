"""Errors raised by ``flux.spark``.

Exception tree (everything the data source raises on purpose derives from ``FluxSparkError``;
Spark wraps it in its own exception, whose message starts with ours)::

    FluxSparkError
    ├── FluxOptionError              a missing, unknown-valued or malformed option (also a
    │   │                            ValueError): names the option and what it expects
    │   └── FluxSaveModeError        a batch write in a save mode other than append (Spark's
    │                                default ``ErrorIfExists`` included): names
    │                                ``.mode("append")``
    ├── FluxTopicNotFoundError       a subscribed / written / offset-named topic does not exist
    ├── FluxClusterUnreachableError  no broker of ``bootstrap.servers`` answered
    ├── FluxDataLossError            records a query was meant to read are gone (retention,
    │                                unclean leader election); ``failOnDataLoss=false`` turns
    │                                it into a warning
    └── FluxSchemaError              ``valueFormat=avro``: the value schema cannot be read from
        │                            the schema registry (unknown subject or version, no
        │                            registry reachable) or has a type no Spark column holds
        └── FluxMalformedValueError  a record's value is not in the registry's wire format,
                                     names a schema id the registry does not know, or does
                                     not decode; names the topic, partition and offset
                                     (``mode=PERMISSIVE`` reads such values as null)

Errors of the SDK met while reading or writing (``flux.sdk.errors``) pass through unchanged
except for the three translated above, whose SDK form does not say which option to fix.
"""

from __future__ import annotations

__all__ = [
    "FluxClusterUnreachableError",
    "FluxDataLossError",
    "FluxMalformedValueError",
    "FluxOptionError",
    "FluxSaveModeError",
    "FluxSchemaError",
    "FluxSparkError",
    "FluxTopicNotFoundError",
]


class FluxSparkError(Exception):
    """Root of the errors the Flux data source raises."""


class FluxOptionError(FluxSparkError, ValueError):
    """An option is missing or malformed; the message names it."""


class FluxTopicNotFoundError(FluxSparkError):
    """A topic the query names does not exist in the cluster."""


class FluxClusterUnreachableError(FluxSparkError):
    """No broker of ``bootstrap.servers`` could be reached."""


class FluxDataLossError(FluxSparkError):
    """Records in the range a query must read are no longer (or never were) in the log."""


class FluxSchemaError(FluxSparkError):
    """The Avro schema of the values cannot be read from the registry or mapped to Spark."""


class FluxMalformedValueError(FluxSchemaError):
    """A value does not decode with the registry's schemas; the message names its topic,
    partition and offset."""


class FluxSaveModeError(FluxOptionError):
    """``df.write.format("flux").save()`` in a mode the sink cannot honour."""
