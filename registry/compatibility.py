"""Schema compatibility: can data written with one schema be read with another.

Each checker takes ``(reader, writer)`` and returns the problems it finds, one sentence each
that names where the problem is (``"field 'user.age': reader type 'int' cannot read writer
type 'long'"``); an empty list means compatible. The registry's levels are built from these:
BACKWARD asks whether the new schema reads data of the old one (``reader=new, writer=old``),
FORWARD the other way round, FULL both, and the TRANSITIVE levels ask it of every earlier
version. Pure: no I/O, and the format libraries are not imported (the inputs are plain dicts
and lists, or protobuf messages read through their attributes).

Avro (``avro_problems``)
    The specification's schema resolution rules
    (https://avro.apache.org/docs/1.11.1/specification/#schema-resolution), on schemas as
    ``fastavro.parse_schema(..., _write_hint=False)`` returns them. Primitive promotions
    int -> long/float/double, long -> float/double, float -> double, string <-> bytes.
    Records, enums and fixed match when their unqualified names are equal or a reader alias
    (qualified by the reader's namespace) equals the writer's full name, as in Avro's Java
    ``SchemaCompatibility`` that Confluent uses. A reader field is found in the writer by name
    or by one of its aliases; one the writer lacks needs a default; writer fields the reader
    lacks are skipped. Writer enum symbols the reader lacks are a problem unless the reader
    enum has a ``default``. Fixed types also need the same size. Arrays and maps are checked
    on their items and values. A writer union is readable when each of its branches is; a
    reader union reads a writer type when one of its branches does. Logical types are ignored
    (the underlying type decides). Recursive types are checked once per (reader, writer) pair
    of names. A type name that resolves to no definition on one side (a schema reference not
    inlined, see ``schemas.avro_inlined``) is compared by name only.

JSON Schema (``json_schema_problems``)
    Whether a consumer validating with ``reader`` accepts every document valid under
    ``writer`` (drafts 7 and 2020-12). A practical subset:

    - ``type``: every type the writer allows must be allowed by the reader (``integer`` is a
      kind of ``number``). A writer with no ``type`` allows every type, unless its ``enum`` or
      ``const`` says which.
    - ``enum``/``const``: every writer value must be a reader value; a reader enum against a
      writer with none is a problem.
    - Objects: a property the reader requires and the writer does not; properties present on
      both sides, checked recursively; a writer property the reader does not list is checked
      against the reader's ``additionalProperties`` (``false`` rejects it); a reader property
      the writer does not list is checked against the writer's ``additionalProperties`` (so
      adding a narrowly typed property to an open writer is a problem, as in Confluent's
      PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL); a reader ``additionalProperties: false`` against a
      writer that allows additional properties is a problem. With ``patternProperties`` on
      either side the additional-property rules are skipped.
    - Arrays: ``items`` (when a single schema) recursively, ``minItems``/``maxItems``.
    - Strings: ``maxLength`` reduced or ``minLength`` raised. Numbers: ``maximum``/
      ``exclusiveMaximum`` reduced or ``minimum``/``exclusiveMinimum`` raised.
    - ``$ref`` to a JSON pointer in the same document (``#/definitions/..``, ``#/$defs/..``)
      is followed; the referencing schema's other keywords are then ignored (draft 7's rule).
    - Boolean schemas: a ``true`` reader accepts everything, a ``false`` writer allows nothing.

    Anything else is treated as compatible: ``allOf``/``anyOf``/``oneOf``/``not``/``if``,
    ``pattern``, ``format``, ``multipleOf``, ``prefixItems`` and tuple ``items``,
    ``dependencies``, ``unevaluated*``, ``propertyNames``, ``$ref`` to other documents or to
    anchors.

Protobuf (``protobuf_problems``)
    On two ``FileDescriptorProto``. For each message type of the writer (nested ones
    included) that the reader also has, each field number present in both must:

    - keep a wire-compatible type: int32/uint32/int64/uint64/bool/enum; sint32/sint64;
      fixed32/sfixed32; fixed64/sfixed64; string/bytes; float and double each alone; a
      message (or group) field must keep its message type's name;
    - stay repeated or stay singular (even for scalars, where packed parsing would cope);
    - stay in a oneof or stay out of one (proto3 ``optional`` fields live in synthetic oneofs,
      which do not count).

    A proto2 field the reader requires must be required by the writer too (so a new required
    field, or one made required, is a problem). A message or enum type the writer has and the
    reader does not is a problem only when a reader field still refers to it. A changed
    ``package`` is a problem. Removing or adding (optional) fields is fine. Type names are
    compared relative to each file's own package, so that a package rename is reported once
    and not again at every message field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2

__all__ = [
    "MAX_NESTING_DEPTH",
    "avro_problems",
    "json_schema_problems",
    "protobuf_problems",
]

#: Deepest nesting of schema levels checked (well within Python's recursion limit). A schema
#: nested deeper is reported as a problem rather than assumed compatible.
MAX_NESTING_DEPTH = 100

#: Most ``$ref`` hops followed to reach one schema (a chain longer than this is a loop).
MAX_REF_HOPS = 32


def _where(path: str) -> str:
    return f"field '{path}'" if path else "root"


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _items(path: str) -> str:
    return f"{path or 'root'}[]"


def _too_deep(path: str) -> list[str]:
    return [f"{_where(path)}: nested deeper than {MAX_NESTING_DEPTH} levels, not checked"]


# --- Avro ---------------------------------------------------------------------------------

_AVRO_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
_AVRO_NAMED = frozenset({"record", "error", "enum", "fixed"})

#: Writer type -> reader types that read it by promotion (the specification's list).
_AVRO_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


@dataclass
class _AvroWalk:
    reader_named: dict[str, Any]
    writer_named: dict[str, Any]
    #: (reader name, writer name) of the named types being checked: met again while checking
    #: them (a recursive type), they are assumed compatible, which the outer check decides.
    in_progress: set[tuple[str, str]] = field(default_factory=set)


def avro_problems(reader: Any, writer: Any) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty if it can).

    Both are fastavro parsed schemas (``parse_schema(..., _write_hint=False)``)."""
    walk = _AvroWalk(_avro_named_types(reader), _avro_named_types(writer))
    return _avro_check(reader, writer, "", walk, depth=0)


def _avro_named_types(schema: Any) -> dict[str, Any]:
    """Every named type defined in ``schema``, by full name.

    fastavro writes a named type out where it is first used and refers to it by name after;
    collecting them all first means a reference is resolved whatever order the two schemas'
    fields are walked in."""
    named: dict[str, Any] = {}
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in _AVRO_NAMED and isinstance(node.get("name"), str):
                named.setdefault(node["name"], node)
            if isinstance(kind, (dict, list)):
                pending.append(kind)
            pending.extend(f.get("type") for f in node.get("fields", ()) if isinstance(f, dict))
            pending.extend(node[key] for key in ("items", "values") if key in node)
    return named


def _avro_resolve(schema: Any, named: Mapping[str, Any]) -> Any:
    """The schema itself for records, enums, fixed, arrays, maps and unions; the type name for
    primitives (logical types dropped); the definition for a name; the name if undefined."""
    for _ in range(MAX_REF_HOPS):
        if isinstance(schema, str):
            if schema in _AVRO_PRIMITIVES or schema not in named:
                return schema
            return named[schema]
        if isinstance(schema, dict) and isinstance(schema.get("type"), (str, dict, list)):
            kind = schema["type"]
            if isinstance(kind, str) and (kind in _AVRO_NAMED or kind in ("array", "map")):
                return schema
            schema = kind
            continue
        return schema
    return schema


def _avro_kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = str(schema.get("type"))
        return "record" if kind == "error" else kind
    if schema in _AVRO_PRIMITIVES:
        return str(schema)
    return "name"


def _avro_describe(schema: Any) -> str:
    kind = _avro_kind(schema)
    if kind in ("record", "enum", "fixed"):
        return f"{kind} '{schema['name']}'"
    if kind == "union":
        return "union [" + ", ".join(_avro_short_description(branch) for branch in schema) + "]"
    if kind == "name":
        return f"type '{schema}' (not defined in the schema)"
    return f"type '{kind}'"


def _avro_short_description(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict) and isinstance(schema.get("name"), str):
        return str(schema["name"])
    return _avro_kind(schema)


def _avro_check(reader: Any, writer: Any, path: str, walk: _AvroWalk, depth: int) -> list[str]:
    if depth > MAX_NESTING_DEPTH:
        return _too_deep(path)
    reader = _avro_resolve(reader, walk.reader_named)
    writer = _avro_resolve(writer, walk.writer_named)
    if isinstance(writer, list):
        # Every branch the writer may have written must be readable.
        return [
            problem
            for branch in writer
            for problem in _avro_check(reader, branch, path, walk, depth + 1)
        ]
    if isinstance(reader, list):
        return _avro_reader_union(reader, writer, path, walk, depth)
    reader_kind, writer_kind = _avro_kind(reader), _avro_kind(writer)
    if reader_kind != writer_kind:
        if reader_kind in _AVRO_PROMOTIONS.get(writer_kind, frozenset()):
            return []
        return [
            f"{_where(path)}: reader {_avro_describe(reader)} cannot read writer "
            f"{_avro_describe(writer)}"
        ]
    if reader_kind == "record":
        return _avro_record(reader, writer, path, walk, depth)
    if reader_kind == "enum":
        return _avro_enum(reader, writer, path)
    if reader_kind == "fixed":
        return _avro_fixed(reader, writer, path)
    if reader_kind == "array":
        return _avro_check(reader.get("items"), writer.get("items"), _items(path), walk, depth + 1)
    if reader_kind == "map":
        return _avro_check(
            reader.get("values"), writer.get("values"), f"{path or 'root'}{{}}", walk, depth + 1
        )
    if reader_kind == "name" and reader != writer:
        return [
            f"{_where(path)}: undefined reader type '{reader}' differs from writer's '{writer}'"
        ]
    return []


def _avro_reader_union(
    reader: list[Any], writer: Any, path: str, walk: _AvroWalk, depth: int
) -> list[str]:
    """Some branch of the reader union must read ``writer`` (not a union)."""
    nearest: list[str] | None = None
    for branch in reader:
        problems = _avro_check(branch, writer, path, walk, depth + 1)
        if not problems:
            return []
        # A branch of the writer's own kind and name says best why it does not fit.
        resolved = _avro_resolve(branch, walk.reader_named)
        if nearest is None and _avro_same_kind_and_name(resolved, writer):
            nearest = problems
    if nearest is not None:
        return nearest
    return [
        f"{_where(path)}: no branch of reader {_avro_describe(reader)} can read writer "
        f"{_avro_describe(writer)}"
    ]


def _avro_same_kind_and_name(reader: Any, writer: Any) -> bool:
    kind = _avro_kind(reader)
    if kind != _avro_kind(writer):
        return False
    return kind not in ("record", "enum", "fixed") or _avro_names_match(reader, writer)


def _avro_names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    reader_name, writer_name = str(reader["name"]), str(writer["name"])
    if reader_name.rpartition(".")[2] == writer_name.rpartition(".")[2]:
        return True
    namespace = reader_name.rpartition(".")[0]
    for alias in reader.get("aliases", ()):
        qualified = alias if "." in alias or not namespace else f"{namespace}.{alias}"
        if qualified == writer_name:
            return True
    return False


def _avro_name_mismatch(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    return [
        f"{_where(path)}: reader {_avro_describe(reader)} does not match writer "
        f"{_avro_describe(writer)} (different names and no reader alias for it)"
    ]


def _avro_record(
    reader: dict[str, Any], writer: dict[str, Any], path: str, walk: _AvroWalk, depth: int
) -> list[str]:
    if not _avro_names_match(reader, writer):
        return _avro_name_mismatch(reader, writer, path)
    pair = (str(reader["name"]), str(writer["name"]))
    if pair in walk.in_progress:
        return []
    walk.in_progress.add(pair)
    try:
        writer_fields = {f["name"]: f for f in writer.get("fields", ())}
        problems: list[str] = []
        for reader_field in reader.get("fields", ()):
            field_path = _child(path, reader_field["name"])
            writer_field = _avro_writer_field(reader_field, writer_fields)
            if writer_field is None:
                if "default" not in reader_field:
                    problems.append(
                        f"field '{field_path}': the reader field has no default and writer "
                        f"record '{writer['name']}' has no field of that name or alias"
                    )
                continue
            problems.extend(
                _avro_check(reader_field["type"], writer_field["type"], field_path, walk, depth + 1)
            )
        return problems
    finally:
        walk.in_progress.discard(pair)


def _avro_writer_field(
    reader_field: dict[str, Any], writer_fields: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    for name in (reader_field["name"], *reader_field.get("aliases", ())):
        if name in writer_fields:
            return writer_fields[name]
    return None


def _avro_enum(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    if not _avro_names_match(reader, writer):
        return _avro_name_mismatch(reader, writer, path)
    reader_symbols = set(reader.get("symbols", ()))
    missing = [symbol for symbol in writer.get("symbols", ()) if symbol not in reader_symbols]
    if not missing or "default" in reader:
        return []
    listed = ", ".join(f"'{symbol}'" for symbol in missing)
    return [
        f"{_where(path)}: reader enum '{reader['name']}' lacks writer symbols {listed} "
        f"and has no default symbol"
    ]


def _avro_fixed(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    if not _avro_names_match(reader, writer):
        return _avro_name_mismatch(reader, writer, path)
    if reader.get("size") != writer.get("size"):
        return [
            f"{_where(path)}: reader fixed '{reader['name']}' has size {reader.get('size')}, "
            f"writer fixed '{writer['name']}' size {writer.get('size')}"
        ]
    return []


# --- JSON Schema ---------------------------------------------------------------------------

_JSON_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})


@dataclass
class _JsonWalk:
    reader_root: Any
    writer_root: Any
    #: (id of reader schema, id of writer schema) being checked: only ``$ref`` cycles can meet
    #: a pair again, and a pair met again is assumed compatible (the outer check decides).
    in_progress: set[tuple[int, int]] = field(default_factory=set)


def json_schema_problems(reader: dict[str, Any] | bool, writer: dict[str, Any] | bool) -> list[str]:
    """Why a consumer validating with ``reader`` may reject a document valid under ``writer``
    (empty if it accepts them all, or if the differences are beyond the subset checked).

    Both are JSON Schema documents: objects, or the booleans ``true`` and ``false``."""
    walk = _JsonWalk(reader, writer)
    return _json_check(reader, writer, "", walk, depth=0)


def _json_resolve(schema: Any, root: Any) -> Any:
    """``schema`` with same-document ``$ref`` followed; None for a reference not understood."""
    for _ in range(MAX_REF_HOPS):
        if not isinstance(schema, dict) or "$ref" not in schema:
            return schema
        schema = _json_pointer(schema["$ref"], root)
    return None


def _json_pointer(ref: Any, root: Any) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    pointer = ref[1:]
    if not pointer:
        return root
    if not pointer.startswith("/"):
        return None  # an anchor (#name)
    node = root
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _json_check(reader: Any, writer: Any, path: str, walk: _JsonWalk, depth: int) -> list[str]:
    if depth > MAX_NESTING_DEPTH:
        return _too_deep_json(path)
    reader = _json_resolve(reader, walk.reader_root)
    writer = _json_resolve(writer, walk.writer_root)
    if reader is None or writer is None or reader is True or writer is False:
        return []
    if reader is False:
        return [f"{_json_where(path)}: the reader accepts nothing here, the writer allows values"]
    if writer is True:
        writer = {}
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return []
    pair = (id(reader), id(writer))
    if pair in walk.in_progress:
        return []
    walk.in_progress.add(pair)
    try:
        return _json_check_schemas(reader, writer, path, walk, depth)
    finally:
        walk.in_progress.discard(pair)


def _json_check_schemas(
    reader: dict[str, Any], writer: dict[str, Any], path: str, walk: _JsonWalk, depth: int
) -> list[str]:
    reader_types = _json_declared_types(reader)
    writer_types = _json_writer_types(writer)
    problems = _json_type_problems(reader_types, writer_types, path)
    problems.extend(_json_enum_problems(reader, writer, path))

    def checked(kind: str) -> bool:
        """Whether the writer may produce ``kind`` values and the reader accepts them."""
        return _json_allows(writer_types, kind) and _json_accepts(reader_types, kind)

    if checked("object"):
        problems.extend(_json_object_problems(reader, writer, path, walk, depth))
    if checked("array"):
        problems.extend(_json_array_problems(reader, writer, path, walk, depth))
    if checked("string"):
        problems.extend(_json_length_problems(reader, writer, path, "minLength", "maxLength"))
    if checked("number") or checked("integer"):
        problems.extend(_json_number_problems(reader, writer, path))
    return problems


def _json_where(path: str) -> str:
    return f"property '{path}'" if path else "root"


def _too_deep_json(path: str) -> list[str]:
    return [f"{_json_where(path)}: nested deeper than {MAX_NESTING_DEPTH} levels, not checked"]


def _json_declared_types(schema: dict[str, Any]) -> frozenset[str] | None:
    """The types ``schema``'s ``type`` allows; None when it has no (understood) ``type``."""
    declared = schema.get("type")
    if isinstance(declared, str):
        declared = [declared]
    if not isinstance(declared, list) or not all(t in _JSON_TYPES for t in declared):
        return None
    return frozenset(declared)


def _json_writer_types(schema: dict[str, Any]) -> frozenset[str] | None:
    """The types of values ``schema`` allows: its ``type``, narrowed by ``enum``/``const``."""
    declared = _json_declared_types(schema)
    values = _json_enum_values(schema)
    if values is None:
        return declared
    value_types = frozenset(_json_value_type(value) for value in values)
    if declared is None:
        return value_types
    return frozenset(t for t in value_types if _json_accepts(declared, t))


def _json_value_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _json_accepts(reader_types: frozenset[str] | None, kind: str) -> bool:
    if reader_types is None or kind in reader_types:
        return True
    return kind == "integer" and "number" in reader_types


def _json_allows(writer_types: frozenset[str] | None, kind: str) -> bool:
    if writer_types is None or kind in writer_types:
        return True
    return kind == "number" and "integer" in writer_types


def _json_type_problems(
    reader_types: frozenset[str] | None, writer_types: frozenset[str] | None, path: str
) -> list[str]:
    if reader_types is None:
        return []
    accepted = ", ".join(f"'{t}'" for t in sorted(reader_types))
    if writer_types is None:
        return [f"{_json_where(path)}: the writer allows any type, the reader only {accepted}"]
    return [
        f"{_json_where(path)}: the writer allows type '{kind}', the reader only {accepted}"
        for kind in sorted(writer_types)
        if not _json_accepts(reader_types, kind)
    ]


def _json_enum_values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return values if isinstance(values, list) else None


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: 1 equals 1.0, but true is not 1."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    return type(left) is type(right) and left == right


def _json_enum_problems(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    reader_values = _json_enum_values(reader)
    if reader_values is None:
        return []
    writer_values = _json_enum_values(writer)
    if writer_values is None:
        return [f"{_json_where(path)}: the reader allows only listed values, the writer any"]
    missing = [
        value
        for value in writer_values
        if not any(_json_equal(value, allowed) for allowed in reader_values)
    ]
    if not missing:
        return []
    listed = ", ".join(json.dumps(value) for value in missing)
    return [f"{_json_where(path)}: writer values {listed} are not among the reader's values"]


def _json_additional(schema: dict[str, Any]) -> Any:
    """``additionalProperties`` as True (anything), False or a schema."""
    additional = schema.get("additionalProperties", True)
    return additional if isinstance(additional, (bool, dict)) else True


def _json_object_problems(
    reader: dict[str, Any], writer: dict[str, Any], path: str, walk: _JsonWalk, depth: int
) -> list[str]:
    reader_properties = _json_dict(reader.get("properties"))
    writer_properties = _json_dict(writer.get("properties"))
    writer_required = set(_json_strings(writer.get("required")))
    problems = [
        f"{_json_where(_child(path, name))}: required by the reader, not by the writer"
        for name in _json_strings(reader.get("required"))
        if name not in writer_required
    ]
    for name, writer_property in writer_properties.items():
        if name in reader_properties:
            problems.extend(
                _json_check(
                    reader_properties[name], writer_property, _child(path, name), walk, depth + 1
                )
            )
    if "patternProperties" in reader or "patternProperties" in writer:
        return problems  # which names the additional properties cover is beyond this subset
    reader_additional, writer_additional = _json_additional(reader), _json_additional(writer)
    for name, writer_property in writer_properties.items():
        if name in reader_properties:
            continue
        property_path = _child(path, name)
        if reader_additional is False:
            problems.append(
                f"{_json_where(property_path)}: the writer has it, the reader does not list it "
                f"and its additionalProperties is false"
            )
        else:
            problems.extend(
                _json_check(reader_additional, writer_property, property_path, walk, depth + 1)
            )
    if writer_additional is not False:
        problems.extend(
            _json_open_writer_problems(
                reader_properties, writer_properties, writer_additional, path, walk, depth
            )
        )
        problems.extend(
            _json_additional_problems(reader_additional, writer_additional, path, walk, depth)
        )
    return problems


def _json_open_writer_problems(
    reader_properties: dict[str, Any],
    writer_properties: dict[str, Any],
    writer_additional: Any,
    path: str,
    walk: _JsonWalk,
    depth: int,
) -> list[str]:
    """Reader properties the open writer does not list: its additional properties fill them."""
    problems: list[str] = []
    for name, reader_property in reader_properties.items():
        if name in writer_properties:
            continue
        property_path = _child(path, name)
        found = _json_check(reader_property, writer_additional, property_path, walk, depth + 1)
        if found and writer_additional is True:
            problems.append(
                f"{_json_where(property_path)}: only the reader lists it, and the writer's open "
                f"additionalProperties allow any value there"
            )
        else:
            problems.extend(found)
    return problems


def _json_additional_problems(
    reader_additional: Any, writer_additional: Any, path: str, walk: _JsonWalk, depth: int
) -> list[str]:
    if reader_additional is False:
        return [
            f"{_json_where(path)}: the reader's additionalProperties is false, the writer allows "
            f"properties it does not list"
        ]
    return _json_check(reader_additional, writer_additional, _child(path, "*"), walk, depth + 1)


def _json_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json_strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _json_array_problems(
    reader: dict[str, Any], writer: dict[str, Any], path: str, walk: _JsonWalk, depth: int
) -> list[str]:
    problems = _json_length_problems(reader, writer, path, "minItems", "maxItems")
    reader_items = reader.get("items", True)
    writer_items = writer.get("items", True)
    if isinstance(reader_items, (bool, dict)) and isinstance(writer_items, (bool, dict)):
        problems.extend(_json_check(reader_items, writer_items, _items(path), walk, depth + 1))
    return problems


def _json_is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_length_problems(
    reader: dict[str, Any], writer: dict[str, Any], path: str, low_key: str, high_key: str
) -> list[str]:
    problems: list[str] = []
    reader_low, writer_low = reader.get(low_key, 0), writer.get(low_key, 0)
    if _json_is_number(reader_low) and _json_is_number(writer_low) and writer_low < reader_low:
        problems.append(
            f"{_json_where(path)}: the reader's {low_key} {reader_low} is above the writer's "
            f"{writer_low}"
        )
    reader_high, writer_high = reader.get(high_key), writer.get(high_key)
    if _json_is_number(reader_high) and not (
        _json_is_number(writer_high) and writer_high <= reader_high
    ):
        bound = writer_high if _json_is_number(writer_high) else "(none)"
        problems.append(
            f"{_json_where(path)}: the reader's {high_key} {reader_high} is below the writer's "
            f"{bound}"
        )
    return problems


def _json_bound(
    schema: dict[str, Any], inclusive_key: str, exclusive_key: str, upper: bool
) -> tuple[float, bool] | None:
    """The tightest (value, exclusive) bound of one side, or None."""
    bounds: list[tuple[float, bool]] = []
    inclusive, exclusive = schema.get(inclusive_key), schema.get(exclusive_key)
    if _json_is_number(inclusive):
        bounds.append((inclusive, exclusive is True))  # draft 4's boolean exclusive flag
    if _json_is_number(exclusive):
        bounds.append((exclusive, True))
    if not bounds:
        return None
    # At equal values an exclusive bound is the tighter one.
    if upper:
        return min(bounds, key=lambda bound: (bound[0], not bound[1]))
    return max(bounds, key=lambda bound: (bound[0], bound[1]))


def _json_number_problems(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    for inclusive_key, exclusive_key, upper in (
        ("maximum", "exclusiveMaximum", True),
        ("minimum", "exclusiveMinimum", False),
    ):
        reader_bound = _json_bound(reader, inclusive_key, exclusive_key, upper)
        if reader_bound is None:
            continue
        writer_bound = _json_bound(writer, inclusive_key, exclusive_key, upper)
        if writer_bound is None or not _json_bound_within(writer_bound, reader_bound, upper):
            problems.append(
                f"{_json_where(path)}: the reader's {'upper' if upper else 'lower'} bound "
                f"{_json_describe_bound(reader_bound, upper)} is tighter than the writer's "
                f"{_json_describe_bound(writer_bound, upper)}"
            )
    return problems


def _json_bound_within(
    writer_bound: tuple[float, bool], reader_bound: tuple[float, bool], upper: bool
) -> bool:
    (writer_value, writer_exclusive), (reader_value, reader_exclusive) = writer_bound, reader_bound
    if writer_value == reader_value:
        return writer_exclusive or not reader_exclusive
    return writer_value < reader_value if upper else writer_value > reader_value


def _json_describe_bound(bound: tuple[float, bool] | None, upper: bool) -> str:
    if bound is None:
        return "(none)"
    value, exclusive = bound
    operator = ("<" if exclusive else "<=") if upper else (">" if exclusive else ">=")
    return f"{operator} {value}"


# --- Protobuf ------------------------------------------------------------------------------

#: FieldDescriptorProto.Type numbers (google/protobuf/descriptor.proto) -> names.
_PROTO_TYPE_NAMES = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    6: "fixed64",
    7: "fixed32",
    8: "bool",
    9: "string",
    10: "group",
    11: "message",
    12: "bytes",
    13: "uint32",
    14: "enum",
    15: "sfixed32",
    16: "sfixed64",
    17: "sint32",
    18: "sint64",
}

#: Types a reader may read from one another's encoding, by group.
_PROTO_WIRE_GROUPS = {
    "int32": "varint",
    "uint32": "varint",
    "int64": "varint",
    "uint64": "varint",
    "bool": "varint",
    "enum": "varint",
    "sint32": "zigzag",
    "sint64": "zigzag",
    "fixed32": "fixed32",
    "sfixed32": "fixed32",
    "fixed64": "fixed64",
    "sfixed64": "fixed64",
    "string": "length-delimited",
    "bytes": "length-delimited",
    "float": "float",
    "double": "double",
    "message": "message",
    "group": "group",
}

_PROTO_LABEL_REQUIRED = 2
_PROTO_LABEL_REPEATED = 3


@dataclass
class _ProtoFile:
    """One file's types by name relative to its package (``Outer.Inner``)."""

    package: str
    messages: dict[str, descriptor_pb2.DescriptorProto]
    enums: set[str]

    def type_name(self, reference: str, scope: str) -> str:
        """A field's ``type_name`` relative to this file's package, resolved from the message
        ``scope`` the way protoc resolves a name that is not fully qualified."""
        if reference.startswith("."):
            return self.strip_package(reference[1:])
        known = self.messages.keys() | self.enums
        parts = scope.split(".") if scope else []
        for length in range(len(parts), -1, -1):
            candidate = ".".join([*parts[:length], reference])
            if candidate in known:
                return candidate
        return self.strip_package(reference)

    def strip_package(self, name: str) -> str:
        prefix = f"{self.package}." if self.package else ""
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name


def protobuf_problems(
    reader: descriptor_pb2.FileDescriptorProto, writer: descriptor_pb2.FileDescriptorProto
) -> list[str]:
    """Why messages written with the ``writer`` file cannot be read with the ``reader`` file
    (empty if they can)."""
    reader_file, writer_file = _proto_index(reader), _proto_index(writer)
    problems: list[str] = []
    if reader_file.package != writer_file.package:
        problems.append(
            f"package: the reader's package '{reader_file.package}' differs from the writer's "
            f"'{writer_file.package}'"
        )
    for name, writer_message in writer_file.messages.items():
        reader_message = reader_file.messages.get(name)
        if reader_message is not None:
            problems.extend(
                _proto_message_problems(
                    name, reader_message, writer_message, reader_file, writer_file
                )
            )
    problems.extend(_proto_removed_type_problems(reader_file, writer_file))
    return problems


def _proto_index(file: descriptor_pb2.FileDescriptorProto) -> _ProtoFile:
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    enums = {enum.name for enum in file.enum_type}
    pending = [(message.name, message) for message in file.message_type]
    while pending:
        name, message = pending.pop(0)
        messages[name] = message
        enums.update(f"{name}.{enum.name}" for enum in message.enum_type)
        pending.extend((f"{name}.{nested.name}", nested) for nested in message.nested_type)
    return _ProtoFile(file.package, messages, enums)


def _proto_type(field_descriptor: descriptor_pb2.FieldDescriptorProto) -> str:
    return _PROTO_TYPE_NAMES.get(field_descriptor.type, f"type {field_descriptor.type}")


def _proto_oneof(
    message: descriptor_pb2.DescriptorProto, field_descriptor: descriptor_pb2.FieldDescriptorProto
) -> str | None:
    """The name of the real oneof holding the field (proto3 ``optional`` ones are synthetic)."""
    if not field_descriptor.HasField("oneof_index") or field_descriptor.proto3_optional:
        return None
    index = field_descriptor.oneof_index
    return message.oneof_decl[index].name if index < len(message.oneof_decl) else str(index)


def _proto_message_problems(
    name: str,
    reader: descriptor_pb2.DescriptorProto,
    writer: descriptor_pb2.DescriptorProto,
    reader_file: _ProtoFile,
    writer_file: _ProtoFile,
) -> list[str]:
    writer_fields = {f.number: f for f in writer.field}
    problems: list[str] = []
    for reader_field in reader.field:
        where = f"field '{name}.{reader_field.name}' (number {reader_field.number})"
        writer_field = writer_fields.get(reader_field.number)
        if writer_field is None:
            if reader_field.label == _PROTO_LABEL_REQUIRED:
                problems.append(f"{where}: required by the reader, absent from the writer")
            continue
        problems.extend(
            _proto_field_problems(
                where,
                (reader, reader_field, reader_file),
                (writer, writer_field, writer_file),
                scope=name,
            )
        )
    return problems


def _proto_field_problems(
    where: str,
    reader: tuple[descriptor_pb2.DescriptorProto, descriptor_pb2.FieldDescriptorProto, _ProtoFile],
    writer: tuple[descriptor_pb2.DescriptorProto, descriptor_pb2.FieldDescriptorProto, _ProtoFile],
    scope: str,
) -> list[str]:
    reader_message, reader_field, reader_file = reader
    writer_message, writer_field, writer_file = writer
    problems: list[str] = []
    reader_type, writer_type = _proto_type(reader_field), _proto_type(writer_field)
    if _PROTO_WIRE_GROUPS.get(reader_type) != _PROTO_WIRE_GROUPS.get(writer_type):
        problems.append(
            f"{where}: reader type '{reader_type}' cannot read writer type '{writer_type}'"
        )
    elif reader_type in ("message", "group"):
        reader_name = reader_file.type_name(reader_field.type_name, scope)
        writer_name = writer_file.type_name(writer_field.type_name, scope)
        if reader_name != writer_name:
            problems.append(
                f"{where}: reader message type '{reader_name}' differs from the writer's "
                f"'{writer_name}'"
            )
    reader_repeated = reader_field.label == _PROTO_LABEL_REPEATED
    if reader_repeated != (writer_field.label == _PROTO_LABEL_REPEATED):
        problems.append(
            f"{where}: the reader's field is {'repeated' if reader_repeated else 'singular'}, "
            f"the writer's {'singular' if reader_repeated else 'repeated'}"
        )
    if reader_field.label == _PROTO_LABEL_REQUIRED and writer_field.label != _PROTO_LABEL_REQUIRED:
        problems.append(f"{where}: required by the reader, not by the writer")
    reader_oneof = _proto_oneof(reader_message, reader_field)
    writer_oneof = _proto_oneof(writer_message, writer_field)
    if reader_oneof is not None and writer_oneof is None:
        problems.append(f"{where}: moved into oneof '{reader_oneof}'")
    elif reader_oneof is None and writer_oneof is not None:
        problems.append(f"{where}: moved out of oneof '{writer_oneof}'")
    return problems


def _proto_references(file: _ProtoFile) -> Iterable[tuple[str, str]]:
    """(field path, referenced type name) for every message and enum field of the file."""
    for name, message in file.messages.items():
        for field_descriptor in message.field:
            if field_descriptor.type_name:
                yield (
                    f"{name}.{field_descriptor.name}",
                    file.type_name(field_descriptor.type_name, name),
                )


def _proto_removed_type_problems(reader_file: _ProtoFile, writer_file: _ProtoFile) -> list[str]:
    removed = (writer_file.messages.keys() - reader_file.messages.keys()) | (
        writer_file.enums - reader_file.enums
    )
    return [
        f"field '{field_path}': refers to '{type_name}', which the writer defines and the "
        f"reader no longer does"
        for field_path, type_name in _proto_references(reader_file)
        if type_name in removed
    ]
