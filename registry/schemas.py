"""Schemas as the registry accepts them: parsed and checked by the format's own library, with
the canonical text that decides whether two registrations are the same schema.

- ``AVRO`` (the default when a request names no ``schemaType``): JSON parsed by ``fastavro``;
  named types of referenced schemas are available to it (Confluent's schema references).
- ``JSON``: a JSON Schema document checked against its meta-schema by ``jsonschema``.
- ``PROTOBUF``: a base64 serialized ``FileDescriptorProto``, what confluent-kafka's
  ``ProtobufSerializer`` registers (and asks back for with ``format=serialized``). ``.proto``
  text needs a ``.proto`` compiler, which no well-kept PyPI package offers as a library, so it
  is refused with a message that says so.

Two registrations are the same schema when their type, canonical text and references are
equal: for Avro and JSON the canonical text is the document with sorted keys and no
insignificant white space, for Protobuf the serialized descriptor. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import InvalidSchemaError

__all__ = [
    "SCHEMA_TYPES",
    "ParsedSchema",
    "Reference",
    "avro_inlined",
    "canonical_text",
    "parse_references",
    "parse_schema",
]

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")

#: Longest schema text accepted (Confluent's default request limit is in the same range).
MAX_SCHEMA_BYTES = 1 << 20

#: Most references one schema may name.
MAX_REFERENCES = 100


@dataclass(frozen=True)
class Reference:
    """A schema's reference to a version of another subject (``name`` is how the schema calls
    it: an Avro full name, a JSON ``$ref`` URL, a ``.proto`` import path)."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class ParsedSchema:
    schema_type: str
    text: str
    canonical: str
    references: tuple[Reference, ...]
    #: Avro: fastavro's parsed schema; JSON: the document; Protobuf: the FileDescriptorProto.
    parsed: Any
    #: Avro only: the named types of the schema and of everything it references.
    named: dict[str, Any]

    @property
    def identity(self) -> tuple[str, str, tuple[Reference, ...]]:
        return self.schema_type, self.canonical, self.references


def parse_references(raw: Any) -> tuple[Reference, ...]:
    """The ``references`` field of a request (absent or a list of objects)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_REFERENCES:
        raise InvalidSchemaError(f"references must be a list of up to {MAX_REFERENCES} objects")
    references = []
    for item in raw:
        if not isinstance(item, dict):
            raise InvalidSchemaError("each reference must be an object")
        name, subject, version = item.get("name"), item.get("subject"), item.get("version")
        if not isinstance(name, str) or not name or not isinstance(subject, str) or not subject:
            raise InvalidSchemaError("a reference needs a non-empty name and subject")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidSchemaError(f"reference {name!r}: version must be a positive integer")
        references.append(Reference(name, subject, version))
    return tuple(references)


def canonical_text(schema_type: str, document: Any) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def parse_schema(
    schema_type: str,
    text: Any,
    references: tuple[Reference, ...],
    resolve: Callable[[Reference], ParsedSchema],
) -> ParsedSchema:
    """Parse ``text`` as ``schema_type``; ``resolve`` gives a reference's parsed schema (it
    raises ``InvalidSchemaError`` for one that does not exist). Raises ``InvalidSchemaError``
    naming what is wrong."""
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchemaError(
            f"unknown schemaType {schema_type!r}: use one of {', '.join(SCHEMA_TYPES)}"
        )
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("field 'schema' must be a non-empty string")
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise InvalidSchemaError(f"the schema is larger than {MAX_SCHEMA_BYTES} bytes")
    resolved = [resolve(reference) for reference in references]
    if schema_type == "PROTOBUF":
        return _parse_protobuf(text, references)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidSchemaError(f"the schema is not JSON: {error}") from None
    if schema_type == "JSON":
        return _parse_json_schema(text, document, references)
    return _parse_avro(text, document, references, resolved)


def _parse_avro(
    text: str, document: Any, references: tuple[Reference, ...], resolved: list[ParsedSchema]
) -> ParsedSchema:
    import fastavro
    from fastavro.schema import SchemaParseException, UnknownType

    named: dict[str, Any] = {}
    for schema in resolved:
        if schema.schema_type != "AVRO":
            raise InvalidSchemaError("an Avro schema may reference Avro schemas only")
        named.update(schema.named)
    own = dict(named)
    try:
        parsed = fastavro.parse_schema(document, named_schemas=own, _write_hint=False)
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError) as error:
        raise InvalidSchemaError(f"invalid Avro schema: {error}") from None
    return ParsedSchema("AVRO", text, canonical_text("AVRO", document), references, parsed, own)


def _parse_json_schema(text: str, document: Any, references: tuple[Reference, ...]) -> ParsedSchema:
    import jsonschema

    if not isinstance(document, (dict, bool)):
        raise InvalidSchemaError("a JSON Schema must be an object or a boolean")
    try:
        jsonschema.validators.validator_for(document).check_schema(document)
    except jsonschema.SchemaError as error:
        raise InvalidSchemaError(f"invalid JSON Schema: {error.message}") from None
    return ParsedSchema("JSON", text, canonical_text("JSON", document), references, document, {})


def _parse_protobuf(text: str, references: tuple[Reference, ...]) -> ParsedSchema:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        serialized = base64.b64decode(text.strip().encode("ascii"), validate=True)
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(serialized)
    except (binascii.Error, UnicodeEncodeError, ValueError, DecodeError):
        raise InvalidSchemaError(
            "a PROTOBUF schema must be a base64 serialized FileDescriptorProto (what "
            "confluent-kafka's ProtobufSerializer registers); .proto text is not supported"
        ) from None
    return ParsedSchema("PROTOBUF", text.strip(), text.strip(), references, descriptor, {})


def avro_inlined(schema: ParsedSchema) -> Any:
    """The Avro schema with each referenced named type written out where it is first used, so
    a checker that knows only this one schema sees every type."""
    referenced = {
        name: definition
        for name, definition in schema.named.items()
        if not _defines(schema.parsed, name)
    }
    seen: set[str] = set()

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            if node in referenced and node not in seen:
                seen.add(node)
                return walk(referenced[node])
            return node
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            if "name" in node and node.get("type") in ("record", "enum", "fixed", "error"):
                seen.add(_full_name(node))
            return {
                key: walk(value) if key in ("type", "fields", "items", "values") else value
                for key, value in node.items()
            }
        return node

    return walk(schema.parsed)


def _full_name(node: dict[str, Any]) -> str:
    name = str(node["name"])
    namespace = node.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _defines(node: Any, name: str) -> bool:
    if isinstance(node, list):
        return any(_defines(item, name) for item in node)
    if isinstance(node, dict):
        if "name" in node and node.get("type") in ("record", "enum", "fixed", "error"):
            if _full_name(node) == name:
                return True
        return any(
            _defines(node[key], name)
            for key in ("type", "fields", "items", "values")
            if key in node
        )
    return False
