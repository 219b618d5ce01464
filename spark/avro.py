"""``valueFormat=avro``: the registry's Avro schema as a Spark type, and values in Confluent's
wire format (magic byte 0, a 4-byte big-endian schema id, Avro binary) decoded into it — what
Spark's ``from_avro`` does with Confluent's schema registry.

Where each piece runs:

* on the driver, ``fetch_value_schema`` reads the **reader schema**, version
  ``valueSchemaVersion`` of subject ``valueSubject``, once per query, and ``value_type`` maps it
  to the Spark type of the ``value`` column;
* on executors, an ``AvroValueDecoder`` per task reads each value's schema id, fetches that
  **writer schema** once per id (kept parsed, at most ``AVRO_WRITER_SCHEMAS_MAX``) and
  resolves the value to the reader schema (Avro's schema resolution, fastavro's
  ``schemaless_reader(buffer, writer, reader)``): a field added with a default reads as the
  default in older records, an ``int`` written reads as a ``long``.

Avro types as Spark types (as ``from_avro`` maps them):

=====================================  =================================================
Avro                                   Spark
=====================================  =================================================
boolean, int, long, float, double      BooleanType, IntegerType, LongType, FloatType,
                                       DoubleType
string, enum / bytes, fixed            StringType / BinaryType
record                                 StructType (fields not null unless their type is
                                       a union with null)
array / map                            ArrayType / MapType(StringType, ...)
union with null                        the other type, nullable
union of int and long / float, double  LongType / DoubleType
int date                               DateType
long timestamp-millis / -micros        TimestampType (UTC)
long local-timestamp-millis / -micros  TimestampNTZType
bytes or fixed decimal(p, s)           DecimalType(p, s); BinaryType when p > 38
int time-millis / long time-micros     IntegerType / LongType (milliseconds /
                                       microseconds after midnight)
string uuid                            StringType
other logical types                    the underlying type
=====================================  =================================================

Other unions (several non-null types) and recursive records have no Spark type:
``FluxSchemaError`` when the query is planned.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import time
from decimal import Decimal
from typing import Any

from flux.sdk.schema_registry import MAGIC_BYTE, SchemaRegistryClient, SchemaRegistryError
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from . import limits
from .errors import FluxMalformedValueError, FluxSchemaError
from .options import AvroOptions

__all__ = ["AvroValueDecoder", "ValueSchema", "fetch_value_schema", "value_type"]

#: Spark's ``DecimalType`` holds at most 38 digits.
_DECIMAL_PRECISION_MAX = 38
#: The wire format's header: the magic byte and the schema id.
_HEADER_BYTES = 5
_PRIMITIVES: dict[str, DataType] = {
    "null": NullType(),
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


@dataclass(frozen=True)
class ValueSchema:
    """The reader schema of a query as the driver found it in the registry (picklable: sent
    to every task, so all tasks of a query read with the same version)."""

    registry_url: str
    subject: str
    version: int
    schema_id: int
    #: The schema's JSON text.
    text: str


def fetch_value_schema(options: AvroOptions, *, timeout_s: float) -> ValueSchema:
    """Version ``options.version`` of ``options.subject`` from the registry; its type is
    checked to have a Spark form (``value_type``)."""
    registry = SchemaRegistryClient(options.registry_url, timeout_s=timeout_s)
    where = f"version {options.version} of subject {options.subject!r}"
    try:
        registered = registry.version(options.subject, options.version)
    except SchemaRegistryError as error:
        if error.status == 404:
            raise FluxSchemaError(
                f"{where} is not in the schema registry at {options.registry_url} (options "
                f"'valueSubject' and 'valueSchemaVersion'): {error.message}"
            ) from None
        raise FluxSchemaError(
            f"cannot read {where} from the schema registry at {options.registry_url} "
            f"(option 'schemaRegistryUrl'): {error}"
        ) from error
    if registered.schema_type != "AVRO":
        raise FluxSchemaError(f"{where} is a {registered.schema_type} schema, not Avro")
    if registered.references:
        raise FluxSchemaError(f"{where} has schema references, which are not supported")
    assert registered.version is not None, registered
    value_schema = ValueSchema(
        registry_url=options.registry_url,
        subject=options.subject,
        version=int(registered.version),
        schema_id=registered.schema_id,
        text=registered.schema,
    )
    value_type(value_schema)  # FluxSchemaError now, on the driver, for a type Spark lacks
    return value_schema


def value_type(value_schema: ValueSchema) -> DataType:
    """The Spark type of the ``value`` column (the column itself is always nullable: a
    record without a value, or a malformed one with ``mode=PERMISSIVE``, reads as null)."""
    return _mapped(value_schema).data_type


@dataclass(frozen=True)
class _Mapped:
    """An Avro type's Spark form: the type, whether it may be null, and how a value decoded
    by fastavro becomes what Arrow takes for that type (None: as it is)."""

    data_type: DataType
    nullable: bool
    convert: Callable[[Any], Any] | None = None


def _mapped(value_schema: ValueSchema) -> _Mapped:
    import fastavro

    try:
        # expand=True inlines named types where they are used again, so every type below is
        # a full definition; a name left over is a reference into itself (a recursive type).
        expanded = fastavro.parse_schema(json.loads(value_schema.text), expand=True)
    except Exception as error:  # fastavro raises several types for a schema it refuses
        raise FluxSchemaError(
            f"schema {value_schema.schema_id} of subject {value_schema.subject!r} is not a "
            f"valid Avro schema: {error}"
        ) from error
    return _map(expanded, "value")


def _map(schema: Any, where: str) -> _Mapped:
    """``schema`` (fastavro-parsed, expanded) at ``where`` (a column path, for errors)."""
    if isinstance(schema, list):
        return _map_union(schema, where)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _Mapped(_PRIMITIVES[schema], nullable=schema == "null")
        raise FluxSchemaError(
            f"{where}: the recursive type {schema!r} has no Spark form (a column has a fixed depth)"
        )
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical is not None:
        mapped = _map_logical(schema, kind, logical, where)
        if mapped is not None:
            return mapped
    if kind in ("record", "error"):
        return _map_record(schema, where)
    if kind == "enum":
        return _Mapped(StringType(), nullable=False)
    if kind == "fixed":
        return _Mapped(BinaryType(), nullable=False)
    if kind == "array":
        items = _map(schema["items"], f"{where}[]")
        return _Mapped(
            ArrayType(items.data_type, containsNull=items.nullable),
            nullable=False,
            convert=None if items.convert is None else _list_converter(items.convert),
        )
    if kind == "map":
        values = _map(schema["values"], f"{where}{{}}")
        return _Mapped(
            MapType(StringType(), values.data_type, valueContainsNull=values.nullable),
            nullable=False,
            convert=None if values.convert is None else _dict_converter(values.convert),
        )
    return _map(kind, where)  # {"type": "int"} and the like


def _map_record(schema: dict[str, Any], where: str) -> _Mapped:
    fields = [
        (field["name"], _map(field["type"], f"{where}.{field['name']}"))
        for field in schema["fields"]
    ]
    struct = StructType(
        [StructField(name, mapped.data_type, nullable=mapped.nullable) for name, mapped in fields]
    )
    converters = [(name, mapped.convert) for name, mapped in fields if mapped.convert is not None]
    return _Mapped(
        struct, nullable=False, convert=_record_converter(converters) if converters else None
    )


def _map_union(branches: list[Any], where: str) -> _Mapped:
    others = [branch for branch in branches if branch != "null"]
    nullable = len(others) < len(branches)
    if not others:
        return _Mapped(NullType(), nullable=True)
    mapped = [_map(branch, where) for branch in others]
    if len(mapped) == 1:
        return _Mapped(mapped[0].data_type, nullable or mapped[0].nullable, mapped[0].convert)
    types = {type(branch.data_type) for branch in mapped}
    if all(branch.convert is None for branch in mapped):  # not time-millis, a wide decimal, ...
        if types == {IntegerType, LongType}:
            return _Mapped(LongType(), nullable)
        if types == {FloatType, DoubleType}:
            return _Mapped(DoubleType(), nullable)
    raise FluxSchemaError(
        f"{where}: the union {json.dumps(branches, default=str)} has several types besides "
        "null; a Spark column holds one (supported: one type with null, int with long, float "
        "with double)"
    )


def _map_logical(schema: dict[str, Any], kind: str, logical: str, where: str) -> _Mapped | None:
    """The logical types fastavro decodes into Python objects (``LOGICAL_READERS``); others
    read as their underlying type (None)."""
    if (kind, logical) == ("int", "date"):
        return _Mapped(DateType(), nullable=False)
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return _Mapped(TimestampType(), nullable=False)
    if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return _Mapped(TimestampNTZType(), nullable=False)
    if (kind, logical) == ("int", "time-millis"):
        return _Mapped(IntegerType(), nullable=False, convert=_time_millis)
    if (kind, logical) == ("long", "time-micros"):
        return _Mapped(LongType(), nullable=False, convert=_time_micros)
    if (kind, logical) == ("string", "uuid"):
        return _Mapped(StringType(), nullable=False, convert=str)
    if kind in ("bytes", "fixed") and logical == "decimal":
        if "precision" not in schema:
            raise FluxSchemaError(f"{where}: a decimal without a precision")
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision <= _DECIMAL_PRECISION_MAX:
            return _Mapped(DecimalType(precision, scale), nullable=False)
        size = schema.get("size") if kind == "fixed" else None
        return _Mapped(BinaryType(), nullable=False, convert=_unscaled_bytes(scale, size))
    return None


# -- converters: fastavro's Python values into what Arrow takes for the Spark type ------------


def _record_converter(converters: list[tuple[str, Callable[[Any], Any]]]) -> Callable[[Any], Any]:
    def convert(record: dict[str, Any]) -> dict[str, Any]:
        for name, field_converter in converters:
            value = record[name]
            if value is not None:
                record[name] = field_converter(value)
        return record

    return convert


def _list_converter(item_converter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda items: [None if item is None else item_converter(item) for item in items]


def _dict_converter(value_converter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda entries: {
        key: None if value is None else value_converter(value) for key, value in entries.items()
    }


def _time_micros(value: time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _time_millis(value: time) -> int:
    return _time_micros(value) // 1000


def _unscaled_bytes(scale: int, size: int | None) -> Callable[[Decimal], bytes]:
    """A decimal too wide for Spark back into Avro's form: the unscaled value, two's
    complement, big-endian (``size`` bytes for a fixed)."""

    def convert(value: Decimal) -> bytes:
        unscaled = int(value.scaleb(scale))
        length = size if size is not None else unscaled.bit_length() // 8 + 1
        return unscaled.to_bytes(length, "big", signed=True)

    return convert


# -- executors ----------------------------------------------------------------------------------


class _Malformed(Exception):
    """Why one value does not decode (becomes ``FluxMalformedValueError`` or a null)."""


#: In the writer cache: the writer schema is the reader schema (no resolution needed).
_SAME_AS_READER = object()


class AvroValueDecoder:
    """Decodes the values of one read task into Python objects Arrow takes for
    ``value_type``. Not thread-safe: one per task, used by the thread that builds its Arrow
    batches.

    Writer schemas are cached by id (an id never changes its schema in a registry), and so are
    ids the registry does not know, so a topic full of them costs one registry call each.
    """

    def __init__(self, value_schema: ValueSchema, *, permissive: bool, timeout_s: float) -> None:
        import fastavro

        self._schema = value_schema
        self._permissive = permissive
        self._reader = fastavro.parse_schema(json.loads(value_schema.text))
        self._convert = _mapped(value_schema).convert
        self._registry = SchemaRegistryClient(value_schema.registry_url, timeout_s=timeout_s)
        # schema id -> parsed writer schema, _SAME_AS_READER, or why it cannot be used (str).
        self._writers: dict[int, Any] = {value_schema.schema_id: _SAME_AS_READER}

    def decode(
        self, values: Sequence[bytes | None], offsets: Sequence[int], topic: str, partition: int
    ) -> list[Any]:
        """``values`` (of the records at ``offsets``) decoded; null stays null. A value that
        does not decode fails with ``FluxMalformedValueError``, or is null when permissive."""
        convert = self._convert
        decoded: list[Any] = []
        for value, offset in zip(values, offsets, strict=True):
            if value is None:
                decoded.append(None)
                continue
            try:
                record = self._decode(value)
            except _Malformed as why:
                if self._permissive:
                    decoded.append(None)
                    continue
                raise FluxMalformedValueError(
                    f"{topic}-{partition} offset {offset}: {why}. Set the option "
                    "mode=PERMISSIVE to read such values as null."
                ) from None
            decoded.append(record if convert is None or record is None else convert(record))
        return decoded

    def _decode(self, value: bytes) -> Any:
        import fastavro

        if len(value) < _HEADER_BYTES or value[0] != MAGIC_BYTE:
            raise _Malformed(
                f"the value ({len(value)} bytes starting {bytes(value[:8])!r}) is not in the "
                "schema registry's wire format (magic byte 0, a 4-byte schema id, Avro)"
            )
        schema_id = int.from_bytes(value[1:_HEADER_BYTES], "big")
        writer = self._writer(schema_id)
        buffer = io.BytesIO(value[_HEADER_BYTES:])
        try:
            if writer is _SAME_AS_READER:
                return fastavro.schemaless_reader(buffer, self._reader)
            return fastavro.schemaless_reader(buffer, writer, self._reader)
        # fastavro raises many types for bytes that do not fit a schema (EOFError, ValueError,
        # UnicodeDecodeError, its SchemaResolutionError, ...): all mean "malformed".
        except Exception as error:
            schema = self._schema
            raise _Malformed(
                f"the value does not decode with writer schema {schema_id} read as version "
                f"{schema.version} of {schema.subject!r}: {type(error).__name__}: {error}"
            ) from None

    def _writer(self, schema_id: int) -> Any:
        writer = self._writers.get(schema_id)
        if writer is None:
            if len(self._writers) >= limits.AVRO_WRITER_SCHEMAS_MAX:
                self._writers = {self._schema.schema_id: _SAME_AS_READER}
            writer = self._writers[schema_id] = self._fetch_writer(schema_id)
        if isinstance(writer, str):
            raise _Malformed(writer)
        return writer

    def _fetch_writer(self, schema_id: int) -> Any:
        """The parsed writer schema ``schema_id``, or why there is none (a string). A registry
        that cannot be reached fails the task whatever the mode: the values are not at
        fault."""
        import fastavro

        try:
            registered = self._registry.schema(schema_id)
        except SchemaRegistryError as error:
            if error.status == 404:
                return f"schema id {schema_id} is not in the schema registry ({error.message})"
            raise FluxSchemaError(
                f"cannot read schema id {schema_id} from the schema registry at "
                f"{self._schema.registry_url} (option 'schemaRegistryUrl'): {error}"
            ) from error
        if registered.schema_type != "AVRO":
            return f"schema id {schema_id} is a {registered.schema_type} schema, not Avro"
        try:
            return fastavro.parse_schema(json.loads(registered.schema))
        except Exception as error:  # as in _mapped: a schema fastavro refuses
            return f"schema id {schema_id} is not a schema fastavro reads: {error}"
