"""flux.registry.compatibility: each rule with a compatible and an incompatible example.

Avro schemas go through fastavro's parser as the registry's are; Protobuf files are built
with ``descriptor_pb2`` directly. ``reader`` is the schema that reads, ``writer`` the one that
wrote (a BACKWARD check has the new schema as reader).
"""

from __future__ import annotations

from typing import Any

import fastavro
import pytest
from flux.registry.compatibility import (
    MAX_NESTING_DEPTH,
    avro_problems,
    json_schema_problems,
    protobuf_problems,
)
from google.protobuf import descriptor_pb2

FieldProto = descriptor_pb2.FieldDescriptorProto


def avro(schema: Any) -> Any:
    return fastavro.parse_schema(schema, _write_hint=False)


def record(name: str, *fields: dict[str, Any], **extra: Any) -> Any:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def avro_pair(reader: Any, writer: Any) -> list[str]:
    return avro_problems(avro(reader), avro(writer))


# --- Avro: fields ---------------------------------------------------------------------------


def test_avro_identical_schemas_are_compatible() -> None:
    schema = record("User", {"name": "name", "type": "string"}, {"name": "age", "type": "int"})
    assert avro_pair(schema, schema) == []


def test_avro_reader_field_with_default_is_backward_compatible() -> None:
    old = record("User", {"name": "name", "type": "string"})
    new = record(
        "User",
        {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None},
    )
    assert avro_pair(new, old) == []


def test_avro_reader_field_without_default_is_a_problem() -> None:
    old = record("User", {"name": "name", "type": "string"})
    new = record("User", {"name": "name", "type": "string"}, {"name": "email", "type": "string"})
    problems = avro_pair(new, old)
    assert len(problems) == 1
    assert problems[0].startswith("field 'email': ")
    assert "no default" in problems[0]


def test_avro_writer_field_missing_in_reader_is_skipped() -> None:
    old = record("User", {"name": "name", "type": "string"}, {"name": "age", "type": "int"})
    new = record("User", {"name": "name", "type": "string"})
    assert avro_pair(new, old) == []


@pytest.mark.parametrize(
    ("writer_type", "reader_type"),
    [
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    ],
)
def test_avro_promotions_are_compatible(writer_type: str, reader_type: str) -> None:
    assert avro_pair(reader_type, writer_type) == []


@pytest.mark.parametrize(
    ("writer_type", "reader_type"),
    [("long", "int"), ("double", "float"), ("float", "long"), ("string", "int"), ("null", "int")],
)
def test_avro_narrowing_is_a_problem(writer_type: str, reader_type: str) -> None:
    assert avro_pair(reader_type, writer_type) == [
        f"root: reader type '{reader_type}' cannot read writer type '{writer_type}'"
    ]


def test_avro_problem_names_the_nested_field_path() -> None:
    def schema(age_type: str) -> Any:
        user = record("User", {"name": "age", "type": age_type})
        return record("Event", {"name": "user", "type": user})

    assert avro_pair(schema("long"), schema("int")) == []
    assert avro_pair(schema("int"), schema("long")) == [
        "field 'user.age': reader type 'int' cannot read writer type 'long'"
    ]


def test_avro_logical_types_resolve_by_their_underlying_type() -> None:
    date = {"type": "int", "logicalType": "date"}
    millis = {"type": "long", "logicalType": "timestamp-millis"}
    assert (
        avro_pair(
            record("R", {"name": "at", "type": millis}), record("R", {"name": "at", "type": date})
        )
        == []
    )
    assert avro_pair(
        record("R", {"name": "at", "type": date}), record("R", {"name": "at", "type": millis})
    ) == ["field 'at': reader type 'int' cannot read writer type 'long'"]


# --- Avro: names and aliases -----------------------------------------------------------------


def test_avro_record_renamed_without_alias_is_a_problem() -> None:
    problems = avro_pair(
        record("Person", {"name": "id", "type": "long"}),
        record("User", {"name": "id", "type": "long"}),
    )
    assert problems == [
        "root: reader record 'Person' does not match writer record 'User' "
        "(different names and no reader alias for it)"
    ]


def test_avro_record_renamed_with_alias_is_compatible() -> None:
    writer = record("User", {"name": "id", "type": "long"}, namespace="com.example")
    reader = record(
        "Person", {"name": "id", "type": "long"}, namespace="com.example", aliases=["User"]
    )
    assert avro_pair(reader, writer) == []


def test_avro_records_match_by_unqualified_name() -> None:
    writer = record("User", {"name": "id", "type": "long"}, namespace="old.ns")
    reader = record("User", {"name": "id", "type": "long"}, namespace="new.ns")
    assert avro_pair(reader, writer) == []


def test_avro_field_renamed_with_alias_is_compatible_without_is_not() -> None:
    writer = record("User", {"name": "fullname", "type": "string"})
    aliased = record("User", {"name": "name", "type": "string", "aliases": ["fullname"]})
    plain = record("User", {"name": "name", "type": "string"})
    assert avro_pair(aliased, writer) == []
    assert len(avro_pair(plain, writer)) == 1


# --- Avro: enums and fixed -------------------------------------------------------------------


def enum(symbols: list[str], **extra: Any) -> Any:
    return {"type": "enum", "name": "Color", "symbols": symbols, **extra}


def test_avro_enum_symbol_added_in_reader_is_compatible() -> None:
    assert avro_pair(enum(["RED", "GREEN", "BLUE"]), enum(["RED", "GREEN"])) == []


def test_avro_enum_symbol_removed_in_reader_is_a_problem() -> None:
    assert avro_pair(enum(["RED"]), enum(["RED", "GREEN", "BLUE"])) == [
        "root: reader enum 'Color' lacks writer symbols 'GREEN', 'BLUE' and has no default symbol"
    ]


def test_avro_enum_symbol_removed_with_reader_default_is_compatible() -> None:
    assert avro_pair(enum(["UNKNOWN", "RED"], default="UNKNOWN"), enum(["RED", "GREEN"])) == []


def test_avro_fixed_needs_the_same_size() -> None:
    def fixed(size: int) -> Any:
        return {"type": "fixed", "name": "Hash", "size": size}

    assert avro_pair(fixed(16), fixed(16)) == []
    assert avro_pair(fixed(32), fixed(16)) == [
        "root: reader fixed 'Hash' has size 32, writer fixed 'Hash' size 16"
    ]


# --- Avro: arrays, maps, unions --------------------------------------------------------------


def test_avro_array_items_and_map_values_are_checked() -> None:
    def schema(item_type: str) -> Any:
        return record(
            "R",
            {"name": "tags", "type": {"type": "array", "items": item_type}},
            {"name": "counts", "type": {"type": "map", "values": item_type}},
        )

    assert avro_pair(schema("long"), schema("int")) == []
    assert avro_pair(schema("int"), schema("long")) == [
        "field 'tags[]': reader type 'int' cannot read writer type 'long'",
        "field 'counts{}': reader type 'int' cannot read writer type 'long'",
    ]


def test_avro_union_widened_in_reader_is_compatible() -> None:
    assert avro_pair(["null", "string", "long"], ["null", "string"]) == []
    assert avro_pair(["null", "string"], "string") == []


def test_avro_union_narrowed_in_reader_is_a_problem() -> None:
    assert avro_pair(["null", "string"], ["null", "string", "long"]) == [
        "root: no branch of reader union [null, string] can read writer type 'long'"
    ]


def test_avro_writer_union_needs_every_branch_readable_by_a_plain_reader() -> None:
    assert avro_pair("string", ["null", "string"]) == [
        "root: reader type 'string' cannot read writer type 'null'"
    ]


def test_avro_reader_union_branch_of_the_same_record_explains_the_problem() -> None:
    old = record("User", {"name": "id", "type": "long"})
    new = record("User", {"name": "id", "type": "long"}, {"name": "email", "type": "string"})
    problems = avro_pair(["null", new], old)
    assert len(problems) == 1 and problems[0].startswith("field 'email': ")


def test_avro_union_branch_promotion_is_compatible() -> None:
    assert avro_pair(["null", "double"], ["null", "int"]) == []


# --- Avro: recursion and named-type references -----------------------------------------------


def linked_list(value_type: str, **extra_field: Any) -> Any:
    fields = [
        {"name": "value", "type": value_type},
        {"name": "next", "type": ["null", "Node"], "default": None},
    ]
    if extra_field:
        fields.append(extra_field)
    return {"type": "record", "name": "Node", "fields": fields}


def test_avro_recursive_linked_list_is_compatible_with_itself() -> None:
    assert avro_pair(linked_list("long"), linked_list("int")) == []


def test_avro_recursive_linked_list_reports_its_problem_once() -> None:
    assert avro_pair(linked_list("int"), linked_list("long")) == [
        "field 'value': reader type 'int' cannot read writer type 'long'"
    ]
    problems = avro_pair(linked_list("long", name="label", type="string"), linked_list("long"))
    assert problems == [
        "field 'label': the reader field has no default and writer record 'Node' has no "
        "field of that name or alias"
    ]


def test_avro_named_type_referenced_before_in_field_order_is_resolved() -> None:
    # The reader reads the fields in another order than the writer defined its types.
    color = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
    writer = record("R", {"name": "first", "type": color}, {"name": "second", "type": "Color"})
    reader = record(
        "R",
        {"name": "second", "type": {"type": "enum", "name": "Color", "symbols": ["RED"]}},
        {"name": "first", "type": "Color"},
    )
    assert avro_pair(reader, writer) == [
        "field 'second': reader enum 'Color' lacks writer symbols 'GREEN' and has no default symbol",
        "field 'first': reader enum 'Color' lacks writer symbols 'GREEN' and has no default symbol",
    ]


def test_avro_nesting_beyond_the_limit_is_reported() -> None:
    schema: Any = "int"
    for _ in range(MAX_NESTING_DEPTH + 1):
        schema = {"type": "array", "items": schema}
    problems = avro_pair(schema, schema)
    assert len(problems) == 1 and "nested deeper than" in problems[0]


# --- JSON Schema -----------------------------------------------------------------------------


def obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


def test_json_identical_schemas_are_compatible() -> None:
    schema = obj({"name": {"type": "string"}}, required=["name"])
    assert json_schema_problems(schema, schema) == []


def test_json_reader_requiring_a_new_property_is_a_problem() -> None:
    old = obj({"name": {"type": "string"}}, additionalProperties=False)
    optional = obj(
        {"name": {"type": "string"}, "age": {"type": "integer"}}, additionalProperties=False
    )
    required = dict(optional, required=["age"])
    assert json_schema_problems(optional, old) == []
    assert json_schema_problems(required, old) == [
        "property 'age': required by the reader, not by the writer"
    ]


def test_json_dropping_a_requirement_is_compatible() -> None:
    old = obj({"name": {"type": "string"}}, required=["name"])
    new = obj({"name": {"type": "string"}})
    assert json_schema_problems(new, old) == []
    assert json_schema_problems(old, new) == [
        "property 'name': required by the reader, not by the writer"
    ]


def test_json_type_widening_is_compatible_and_narrowing_is_not() -> None:
    def schema(kind: Any) -> dict[str, Any]:
        return obj({"size": {"type": kind}})

    assert json_schema_problems(schema("number"), schema("integer")) == []
    assert json_schema_problems(schema(["string", "null"]), schema("string")) == []
    assert json_schema_problems(schema("integer"), schema("number")) == [
        "property 'size': the writer allows type 'number', the reader only 'integer'"
    ]
    assert json_schema_problems(schema("string"), schema(["string", "null"])) == [
        "property 'size': the writer allows type 'null', the reader only 'string'"
    ]


def test_json_writer_without_type_against_typed_reader_is_a_problem() -> None:
    assert json_schema_problems({"type": "string"}, {}) == [
        "root: the writer allows any type, the reader only 'string'"
    ]
    # The writer's values say which types it allows.
    assert json_schema_problems({"type": "string"}, {"enum": ["a", "b"]}) == []


def test_json_closing_additional_properties_is_a_problem() -> None:
    old = obj({"name": {"type": "string"}})
    closed = obj({"name": {"type": "string"}}, additionalProperties=False)
    assert json_schema_problems(old, closed) == []
    assert json_schema_problems(closed, old) == [
        "root: the reader's additionalProperties is false, the writer allows properties it "
        "does not list"
    ]


def test_json_closed_reader_without_a_writer_property_is_a_problem() -> None:
    writer = obj(
        {"name": {"type": "string"}, "age": {"type": "integer"}}, additionalProperties=False
    )
    reader = obj({"name": {"type": "string"}}, additionalProperties=False)
    assert json_schema_problems(reader, writer) == [
        "property 'age': the writer has it, the reader does not list it and its "
        "additionalProperties is false"
    ]


def test_json_property_added_to_an_open_writer_is_a_problem() -> None:
    # The open writer allows any "age" value: a string age is valid for it, not for the reader.
    writer = obj({"name": {"type": "string"}})
    reader = obj({"name": {"type": "string"}, "age": {"type": "integer"}})
    assert json_schema_problems(reader, writer) == [
        "property 'age': only the reader lists it, and the writer's open additionalProperties "
        "allow any value there"
    ]
    assert json_schema_problems(reader, dict(writer, additionalProperties=False)) == []
    assert (
        json_schema_problems(reader, dict(writer, additionalProperties={"type": "integer"})) == []
    )


def test_json_enum_values_removed_are_a_problem() -> None:
    assert json_schema_problems({"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]}) == []
    assert json_schema_problems({"enum": ["a"]}, {"enum": ["a", "b", 1]}) == [
        'root: writer values "b", 1 are not among the reader\'s values'
    ]
    assert json_schema_problems({"enum": [1]}, {"const": True}) == [
        "root: writer values true are not among the reader's values"
    ]
    assert json_schema_problems({"enum": [1]}, {"type": "integer"}) == [
        "root: the reader allows only listed values, the writer any"
    ]


def test_json_array_items_are_checked() -> None:
    def schema(item_type: str) -> dict[str, Any]:
        return obj({"tags": {"type": "array", "items": {"type": item_type}}})

    assert json_schema_problems(schema("number"), schema("integer")) == []
    assert json_schema_problems(schema("string"), schema("number")) == [
        "property 'tags[]': the writer allows type 'number', the reader only 'string'"
    ]


@pytest.mark.parametrize(
    ("reader", "writer", "compatible"),
    [
        ({"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5}, True),
        ({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10}, False),
        ({"type": "string", "maxLength": 5}, {"type": "string"}, False),
        ({"type": "string", "minLength": 1}, {"type": "string", "minLength": 2}, True),
        ({"type": "string", "minLength": 3}, {"type": "string", "minLength": 2}, False),
        ({"type": "number", "maximum": 100}, {"type": "integer", "maximum": 10}, True),
        ({"type": "number", "maximum": 10}, {"type": "number", "maximum": 100}, False),
        ({"type": "number", "maximum": 10}, {"type": "number", "exclusiveMaximum": 10}, True),
        ({"type": "number", "exclusiveMaximum": 10}, {"type": "number", "maximum": 10}, False),
        ({"type": "number", "minimum": 0}, {"type": "number", "minimum": 1}, True),
        ({"type": "number", "minimum": 1}, {"type": "number"}, False),
        ({"type": "array", "maxItems": 3}, {"type": "array", "maxItems": 4}, False),
        # Bounds of a type the writer never produces do not matter.
        ({"type": ["string", "null"], "maxLength": 3}, {"type": "null"}, True),
    ],
)
def test_json_bounds(reader: dict[str, Any], writer: dict[str, Any], compatible: bool) -> None:
    problems = json_schema_problems(reader, writer)
    assert (problems == []) is compatible, problems
    assert all(problem.startswith("root: ") for problem in problems)


def test_json_refs_within_the_document_are_followed() -> None:
    def schema(age_type: str, defs_key: str) -> dict[str, Any]:
        return {
            defs_key: {"person": obj({"age": {"type": age_type}})},
            **obj({"owner": {"$ref": f"#/{defs_key}/person"}}),
        }

    assert json_schema_problems(schema("number", "$defs"), schema("integer", "definitions")) == []
    assert json_schema_problems(schema("integer", "$defs"), schema("number", "definitions")) == [
        "property 'owner.age': the writer allows type 'number', the reader only 'integer'"
    ]


def test_json_recursive_refs_terminate() -> None:
    def tree(value_type: str) -> dict[str, Any]:
        return obj(
            {"value": {"type": value_type}, "children": {"type": "array", "items": {"$ref": "#"}}}
        )

    assert json_schema_problems(tree("number"), tree("integer")) == []
    assert json_schema_problems(tree("integer"), tree("number")) == [
        "property 'value': the writer allows type 'number', the reader only 'integer'"
    ]


def test_json_what_is_not_understood_is_compatible() -> None:
    external = {"$ref": "https://example.com/other.json"}
    assert json_schema_problems(obj({"a": external}), obj({"a": {"type": "string"}})) == []
    any_of = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert (
        json_schema_problems(
            obj({"a": {"type": "string", "pattern": "^x"}}), obj({"a": {"type": "string"}})
        )
        == []
    )
    assert json_schema_problems(obj({"a": any_of}), obj({"a": {"type": "integer"}})) == []


def test_json_boolean_schemas() -> None:
    assert json_schema_problems(True, {"type": "string"}) == []
    assert json_schema_problems({"type": "string"}, False) == []
    assert json_schema_problems(obj({"a": False}), obj({"a": {"type": "string"}})) == [
        "property 'a': the reader accepts nothing here, the writer allows values"
    ]


# --- Protobuf --------------------------------------------------------------------------------


def proto_field(
    name: str,
    number: int,
    kind: int,
    *,
    label: int = FieldProto.LABEL_OPTIONAL,
    type_name: str = "",
    oneof_index: int | None = None,
) -> descriptor_pb2.FieldDescriptorProto:
    field = FieldProto(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    if oneof_index is not None:
        field.oneof_index = oneof_index
    return field


def proto_file(
    *fields: descriptor_pb2.FieldDescriptorProto,
    package: str = "shop",
    oneofs: tuple[str, ...] = (),
    extra_messages: tuple[descriptor_pb2.DescriptorProto, ...] = (),
) -> descriptor_pb2.FileDescriptorProto:
    order = descriptor_pb2.DescriptorProto(name="Order", field=list(fields))
    order.oneof_decl.extend(descriptor_pb2.OneofDescriptorProto(name=name) for name in oneofs)
    order.nested_type.append(
        descriptor_pb2.DescriptorProto(
            name="Line", field=[proto_field("sku", 1, FieldProto.TYPE_STRING)]
        )
    )
    return descriptor_pb2.FileDescriptorProto(
        name="shop.proto",
        package=package,
        syntax="proto3",
        message_type=[order, *extra_messages],
    )


ID = proto_field("id", 1, FieldProto.TYPE_INT64)


def test_protobuf_identical_files_are_compatible() -> None:
    file = proto_file(ID, proto_field("note", 2, FieldProto.TYPE_STRING))
    assert protobuf_problems(file, file) == []


def test_protobuf_adding_and_removing_fields_is_compatible() -> None:
    old = proto_file(ID, proto_field("note", 2, FieldProto.TYPE_STRING))
    new = proto_file(ID, proto_field("total", 3, FieldProto.TYPE_DOUBLE))
    assert protobuf_problems(new, old) == []
    assert protobuf_problems(old, new) == []


@pytest.mark.parametrize(
    ("writer_type", "reader_type"),
    [
        (FieldProto.TYPE_INT32, FieldProto.TYPE_INT64),
        (FieldProto.TYPE_UINT64, FieldProto.TYPE_BOOL),
        (FieldProto.TYPE_INT32, FieldProto.TYPE_ENUM),
        (FieldProto.TYPE_SINT32, FieldProto.TYPE_SINT64),
        (FieldProto.TYPE_FIXED32, FieldProto.TYPE_SFIXED32),
        (FieldProto.TYPE_SFIXED64, FieldProto.TYPE_FIXED64),
        (FieldProto.TYPE_STRING, FieldProto.TYPE_BYTES),
    ],
)
def test_protobuf_wire_compatible_type_changes(writer_type: int, reader_type: int) -> None:
    writer = proto_file(proto_field("amount", 1, writer_type))
    reader = proto_file(proto_field("amount", 1, reader_type))
    assert protobuf_problems(reader, writer) == []


@pytest.mark.parametrize(
    ("writer_type", "reader_type", "message"),
    [
        (
            FieldProto.TYPE_INT32,
            FieldProto.TYPE_STRING,
            "reader type 'string' cannot read writer type 'int32'",
        ),
        (
            FieldProto.TYPE_INT32,
            FieldProto.TYPE_SINT32,
            "reader type 'sint32' cannot read writer type 'int32'",
        ),
        (
            FieldProto.TYPE_FIXED32,
            FieldProto.TYPE_FIXED64,
            "reader type 'fixed64' cannot read writer type 'fixed32'",
        ),
        (
            FieldProto.TYPE_FLOAT,
            FieldProto.TYPE_DOUBLE,
            "reader type 'double' cannot read writer type 'float'",
        ),
    ],
)
def test_protobuf_wire_incompatible_type_changes(
    writer_type: int, reader_type: int, message: str
) -> None:
    writer = proto_file(proto_field("amount", 1, writer_type))
    reader = proto_file(proto_field("amount", 1, reader_type))
    assert protobuf_problems(reader, writer) == [f"field 'Order.amount' (number 1): {message}"]


def test_protobuf_message_field_must_keep_its_type_name() -> None:
    customer = descriptor_pb2.DescriptorProto(name="Customer")
    line = proto_field("item", 2, FieldProto.TYPE_MESSAGE, type_name=".shop.Order.Line")
    relative = proto_field("item", 2, FieldProto.TYPE_MESSAGE, type_name="Line")
    other = proto_field("item", 2, FieldProto.TYPE_MESSAGE, type_name=".shop.Customer")
    writer = proto_file(ID, line, extra_messages=(customer,))
    assert protobuf_problems(proto_file(ID, relative, extra_messages=(customer,)), writer) == []
    assert protobuf_problems(proto_file(ID, other, extra_messages=(customer,)), writer) == [
        "field 'Order.item' (number 2): reader message type 'Customer' differs from the "
        "writer's 'Order.Line'"
    ]


def test_protobuf_repeated_to_singular_is_a_problem() -> None:
    single = proto_file(proto_field("tags", 1, FieldProto.TYPE_STRING))
    repeated = proto_file(
        proto_field("tags", 1, FieldProto.TYPE_STRING, label=FieldProto.LABEL_REPEATED)
    )
    assert protobuf_problems(repeated, single) == [
        "field 'Order.tags' (number 1): the reader's field is repeated, the writer's singular"
    ]
    assert protobuf_problems(single, repeated) == [
        "field 'Order.tags' (number 1): the reader's field is singular, the writer's repeated"
    ]


def test_protobuf_moving_a_field_into_or_out_of_a_oneof_is_a_problem() -> None:
    plain = proto_file(ID, proto_field("email", 2, FieldProto.TYPE_STRING), oneofs=("contact",))
    in_oneof = proto_file(
        ID, proto_field("email", 2, FieldProto.TYPE_STRING, oneof_index=0), oneofs=("contact",)
    )
    assert protobuf_problems(in_oneof, in_oneof) == []
    assert protobuf_problems(in_oneof, plain) == [
        "field 'Order.email' (number 2): moved into oneof 'contact'"
    ]
    assert protobuf_problems(plain, in_oneof) == [
        "field 'Order.email' (number 2): moved out of oneof 'contact'"
    ]


def test_protobuf_proto3_optional_is_not_a_oneof() -> None:
    optional = proto_field("email", 2, FieldProto.TYPE_STRING, oneof_index=0)
    optional.proto3_optional = True
    plain = proto_file(ID, proto_field("email", 2, FieldProto.TYPE_STRING))
    assert protobuf_problems(proto_file(ID, optional, oneofs=("_email",)), plain) == []


def test_protobuf_new_required_field_is_a_problem() -> None:
    old = proto_file(ID)
    new = proto_file(
        ID, proto_field("code", 2, FieldProto.TYPE_STRING, label=FieldProto.LABEL_REQUIRED)
    )
    assert protobuf_problems(old, new) == []
    assert protobuf_problems(new, old) == [
        "field 'Order.code' (number 2): required by the reader, absent from the writer"
    ]


def test_protobuf_package_rename_is_reported_once() -> None:
    line = proto_field("item", 2, FieldProto.TYPE_MESSAGE, type_name=".shop.Order.Line")
    moved = proto_field("item", 2, FieldProto.TYPE_MESSAGE, type_name=".store.Order.Line")
    assert protobuf_problems(proto_file(ID, moved, package="store"), proto_file(ID, line)) == [
        "package: the reader's package 'store' differs from the writer's 'shop'"
    ]


def test_protobuf_nested_message_fields_are_checked() -> None:
    writer = proto_file(ID)
    reader = proto_file(ID)
    reader.message_type[0].nested_type[0].field[0].type = FieldProto.TYPE_INT32
    assert protobuf_problems(reader, writer) == [
        "field 'Order.Line.sku' (number 1): reader type 'int32' cannot read writer type 'string'"
    ]


def test_protobuf_removed_type_is_a_problem_only_while_referenced() -> None:
    customer = descriptor_pb2.DescriptorProto(name="Customer", field=[ID])
    buyer = proto_field("buyer", 2, FieldProto.TYPE_MESSAGE, type_name=".shop.Customer")
    writer = proto_file(ID, buyer, extra_messages=(customer,))
    assert protobuf_problems(proto_file(ID), writer) == []
    assert protobuf_problems(proto_file(ID, buyer), writer) == [
        "field 'Order.buyer': refers to 'Customer', which the writer defines and the reader no "
        "longer does"
    ]
