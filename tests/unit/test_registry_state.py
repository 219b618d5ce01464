"""The registry's state machine and change planning (flux.registry.state), with literal
schemas and no I/O."""

from __future__ import annotations

import json

import pytest
from flux.registry.errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    OperationNotPermittedError,
    ReferenceExistsError,
    SchemaNotFoundError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    VersionNotFoundError,
)
from flux.registry.schemas import Reference, parse_schema
from flux.registry.state import RegistryState, compatibility_problems, encode_key


def avro(name: str, *fields: tuple[str, object], **defaults: object) -> str:
    document = {
        "type": "record",
        "name": name,
        "fields": [
            {
                "name": field,
                "type": kind,
                **({"default": defaults[field]} if field in defaults else {}),
            }
            for field, kind in fields
        ],
    }
    return json.dumps(document)


def parsed(state: RegistryState, text: str, kind: str = "AVRO", refs: tuple[Reference, ...] = ()):
    return parse_schema(kind, text, refs, state.resolve)


def register(state: RegistryState, subject: str, text: str, kind: str = "AVRO", **extra):
    records, entry = state.plan_register(subject, parsed(state, text, kind), **extra)
    for offset, (key, value) in enumerate(records, start=state.applied_offset):
        # Through the encoded form, as the topic stores them.
        state.apply(offset, encode_key(key), None if value is None else json.dumps(value).encode())
    return entry


def apply_all(state: RegistryState, records) -> None:
    for key, value in records:
        state.apply(
            state.applied_offset,
            encode_key(key),
            None if value is None else json.dumps(value).encode(),
        )


def test_ids_are_allocated_once_and_shared_by_identical_schemas() -> None:
    state = RegistryState()
    first = register(state, "a-value", avro("A", ("x", "int")))
    assert (first.schema_id, first.version) == (1, 1)
    # Key order and white space do not make another schema.
    same = json.dumps(json.loads(avro("A", ("x", "int"))), indent=4, sort_keys=True)
    again = register(state, "a-value", same)
    assert (again.schema_id, again.version) == (1, 1)
    other_subject = register(state, "b-value", avro("A", ("x", "int")))
    assert (other_subject.schema_id, other_subject.version) == (1, 1)
    second = register(state, "a-value", avro("A", ("x", "int"), ("y", "int"), y=0))
    assert (second.schema_id, second.version) == (2, 2)
    assert state.subjects() == ["a-value", "b-value"]
    assert [e.version for e in state.versions("a-value")] == [1, 2]
    assert state.version("a-value", "latest").schema_id == 2
    assert sorted((u.subject, u.version) for u in state.schema_users(1)) == [
        ("a-value", 1),
        ("b-value", 1),
    ]


def test_backward_compatibility_refuses_a_field_without_default() -> None:
    state = RegistryState()
    register(state, "s", avro("R", ("x", "int")))
    with pytest.raises(IncompatibleSchemaError) as refused:
        register(state, "s", avro("R", ("x", "int"), ("y", "string")))
    assert "'y'" in refused.value.message
    assert [e.version for e in state.versions("s")] == [1]
    # NONE for the subject lets it in; the global level stays BACKWARD.
    apply_all(state, state.plan_config("s", "none"))
    assert state.compatibility("s") == "NONE" and state.compatibility(None) == "BACKWARD"
    assert register(state, "s", avro("R", ("x", "int"), ("y", "string"))).version == 2


def test_transitive_levels_check_every_version() -> None:
    v1 = parse_schema("AVRO", avro("R", ("x", "int")), (), lambda r: None)  # type: ignore[arg-type,return-value]
    v2 = parse_schema("AVRO", avro("R", ("y", "int"), y=1), (), lambda r: None)  # type: ignore[arg-type,return-value]
    v3 = parse_schema("AVRO", avro("R", ("x", "int"), ("y", "int"), y=1), (), lambda r: None)  # type: ignore[arg-type,return-value]
    # v3 reads v2's data? v2 has no x and v3's x has no default: not against v2.
    assert compatibility_problems("BACKWARD", v3, [v1, v2])
    v4 = parse_schema("AVRO", avro("R", ("y", "int"), ("z", "int"), y=1, z=2), (), lambda r: None)  # type: ignore[arg-type,return-value]
    assert not compatibility_problems("BACKWARD", v4, [v1, v2])
    assert compatibility_problems("FORWARD_TRANSITIVE", v4, [v1, v2])  # v1 cannot read v4 (no x)
    assert not compatibility_problems("NONE", v4, [v1, v2])


def test_soft_then_permanent_delete_and_the_id_high_water_mark() -> None:
    state = RegistryState()
    register(state, "s", avro("A", ("x", "int")))
    top = register(state, "t", avro("B", ("x", "int")))
    with pytest.raises(SubjectNotSoftDeletedError):
        state.plan_delete_subject("t", permanent=True)
    records, versions = state.plan_delete_subject("t", permanent=False)
    apply_all(state, records)
    assert (
        versions == [1] and state.subjects() == ["s"] and state.subjects(deleted=True) == ["s", "t"]
    )
    with pytest.raises(SubjectSoftDeletedError):
        state.plan_delete_subject("t", permanent=False)
    assert state.schema(top.schema_id).schema_id == top.schema_id  # found by id while soft-deleted
    records, _ = state.plan_delete_subject("t", permanent=True)
    apply_all(state, records)
    with pytest.raises(SchemaNotFoundError):
        state.schema(top.schema_id)
    with pytest.raises(SubjectNotFoundError):
        state.versions("t", deleted=True)
    # A compacted topic drops the tombstoned versions; the ID record keeps the high mark.
    fresh = RegistryState()
    fresh.apply_record(({"keytype": "ID"}, {"id": top.schema_id}))
    fresh.apply_record(state.version("s", 1).record())
    assert register(fresh, "u", avro("C", ("x", "int"))).schema_id == top.schema_id + 1


def test_a_soft_deleted_subject_continues_its_version_numbers() -> None:
    state = RegistryState()
    register(state, "s", avro("A", ("x", "int")))
    apply_all(state, state.plan_delete_subject("s", permanent=False)[0])
    entry = register(state, "s", avro("A", ("x", "int"), ("y", "int"), y=0))
    assert entry.version == 2
    with pytest.raises(VersionNotFoundError):
        state.version("s", 1)
    assert state.version("s", 1, deleted=True).deleted


def test_readonly_and_import_modes() -> None:
    state = RegistryState()
    apply_all(state, state.plan_mode("s", "READONLY"))
    with pytest.raises(OperationNotPermittedError):
        register(state, "s", avro("A", ("x", "int")))
    apply_all(state, state.plan_mode("s", None))
    apply_all(state, state.plan_mode(None, "IMPORT"))
    entry = register(state, "s", avro("A", ("x", "int")), schema_id=77)
    assert entry.schema_id == 77 and state.max_id == 77
    with pytest.raises(OperationNotPermittedError):
        register(state, "t", avro("B", ("y", "int")), schema_id=77)
    apply_all(state, state.plan_mode(None, "READWRITE"))
    assert register(state, "u", avro("C", ("z", "int"))).schema_id == 78


def test_references_resolve_and_protect_what_they_reference() -> None:
    state = RegistryState()
    address = json.dumps(
        {
            "type": "record",
            "name": "Address",
            "namespace": "ex",
            "fields": [{"name": "city", "type": "string"}],
        }
    )
    register(state, "address", address)
    person = json.dumps(
        {"type": "record", "name": "Person", "fields": [{"name": "home", "type": "ex.Address"}]}
    )
    reference = (Reference("ex.Address", "address", 1),)
    records, entry = state.plan_register("person", parsed(state, person, refs=reference))
    apply_all(state, records)
    assert state.version("person", 1).references == reference
    assert state.referenced_by("address", 1) == [entry.schema_id]
    with pytest.raises(ReferenceExistsError):
        state.plan_delete_subject("address", permanent=False)
    with pytest.raises(InvalidSchemaError):
        parsed(state, person)  # without the reference, ex.Address is unknown
    with pytest.raises(InvalidSchemaError):
        parsed(state, person, refs=(Reference("ex.Address", "address", 9),))


def test_bad_schemas_and_unknown_records() -> None:
    state = RegistryState()
    for kind, text in (
        ("AVRO", "{"),
        ("AVRO", json.dumps({"type": "record", "name": "X", "fields": [{"name": "a"}]})),
        ("JSON", json.dumps({"type": "objekt"})),
        ("PROTOBUF", "syntax = 'proto3'; message M {}"),
        ("XML", "<a/>"),
        ("AVRO", ""),
    ):
        with pytest.raises(InvalidSchemaError):
            parsed(state, text, kind)
    # Records a newer broker might write, or garbage, are skipped.
    state.apply(0, b'{"keytype": "SOMETHING_NEW"}', b"{}")
    state.apply(1, b"not json", b"{}")
    state.apply(2, None, b"{}")
    assert state.applied_offset == 3 and state.subjects() == []
    # Records below the applied offset are skipped (catching up twice is harmless).
    state.apply(1, encode_key({"keytype": "ID"}), b'{"id": 5}')
    assert state.max_id == 0
