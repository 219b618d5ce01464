"""The schema registry through unmodified confluent-kafka: ``SchemaRegistryClient`` and the
Avro, JSON Schema and Protobuf serializers against a real 3-node cluster (docs/schema-registry.md)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from flux.cluster.launcher import NodeProcess
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.integration.http_helpers import call, http_address, running_cluster

pytestmark = pytest.mark.integration

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
#: Backward compatible with v1: the new field has a default, and int reads as long.
USER_V2 = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "long"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
#: Not backward compatible with v2: a new field without a default.
USER_BAD = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "long"},
        {"name": "country", "type": "string"},
    ],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    with running_cluster(tmp_path_factory.mktemp("registry")) as nodes:
        yield nodes


def registry_url(*nodes: NodeProcess) -> str:
    return ",".join(f"{http_address(node)}/schemas" for node in nodes)


def client(*nodes: NodeProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_url(*nodes)})


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_avro_register_lookup_and_evolve(cluster: list[NodeProcess]) -> None:
    registry = client(cluster[0])
    subject = unique("users") + "-value"
    first = registry.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    # Another broker finds it at once, by id, by lookup and as the latest version.
    other = client(cluster[1])
    assert json.loads(other.get_schema(first).schema_str) == USER_V1
    found = other.lookup_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    assert (found.schema_id, found.version) == (first, 1)
    # Registering the same schema again changes nothing.
    assert other.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO")) == first
    assert other.get_versions(subject) == [1]

    assert other.test_compatibility(subject, Schema(json.dumps(USER_V2), "AVRO"))
    second = client(cluster[2]).register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))
    assert second != first
    latest = registry.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)

    assert not registry.test_compatibility(subject, Schema(json.dumps(USER_BAD), "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, Schema(json.dumps(USER_BAD), "AVRO"))
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    assert registry.get_versions(subject) == [1, 2]

    # With the subject's level at NONE the same schema goes in.
    assert registry.set_compatibility(subject, "NONE") == {"compatibility": "NONE"}
    assert registry.get_compatibility(subject) == "NONE"
    third = registry.register_schema(subject, Schema(json.dumps(USER_BAD), "AVRO"))
    assert third not in (first, second)
    assert registry.get_versions(subject) == [1, 2, 3]
    assert subject in registry.get_subjects()


def test_the_same_schema_keeps_its_id_across_subjects(cluster: list[NodeProcess]) -> None:
    registry = client(cluster[1])
    schema = Schema(json.dumps({**USER_V1, "name": unique("Shared").replace("-", "_")}), "AVRO")
    first = registry.register_schema(unique("a"), schema)
    assert registry.register_schema(unique("b"), schema) == first


def test_deletes_soft_then_permanent(cluster: list[NodeProcess]) -> None:
    registry = client(cluster[2])
    subject = unique("doomed")
    schema_id = registry.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    assert registry.delete_subject(subject) == [1]
    assert subject not in registry.get_subjects()
    with pytest.raises(SchemaRegistryError) as missing:
        registry.get_latest_version(subject)
    assert missing.value.error_code == 40401
    # Soft-deleted schemas are still found by id.
    assert json.loads(registry.get_schema(schema_id).schema_str) == USER_V1
    assert registry.delete_subject(subject, permanent=True) == [1]
    status, body = call(cluster[0], "GET", "/schemas/subjects?deleted=true")
    assert status == 200 and subject not in body


def test_errors_are_confluents(cluster: list[NodeProcess]) -> None:
    node = cluster[0]
    status, body = call(node, "GET", "/schemas/subjects/no-such-subject/versions")
    assert (status, body["error_code"]) == (404, 40401)
    status, body = call(node, "GET", "/schemas/schemas/ids/987654")
    assert (status, body["error_code"]) == (404, 40403)
    status, body = call(
        node, "POST", f"/schemas/subjects/{unique('bad')}/versions", {"schema": "{not json"}
    )
    assert (status, body["error_code"]) == (422, 42201)
    status, body = call(
        node,
        "POST",
        f"/schemas/subjects/{unique('bad')}/versions",
        {"schema": json.dumps({"type": "record", "name": "X", "fields": [{"name": "a"}]})},
    )
    assert (status, body["error_code"]) == (422, 42201)
    status, body = call(node, "PUT", "/schemas/config/x", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    status, body = call(node, "POST", "/schemas/subjects/x/versions", raw=b"\xff{")
    assert (status, body["error_code"]) == (400, 400)
    status, body = call(node, "GET", "/schemas/schemas/types")
    assert status == 200 and set(body) == {"AVRO", "JSON", "PROTOBUF"}
    # The broker keeps serving.
    assert call(node, "GET", "/schemas/subjects")[0] == 200


def test_readonly_mode_refuses_writes(cluster: list[NodeProcess]) -> None:
    subject = unique("frozen")
    assert call(cluster[0], "PUT", f"/schemas/mode/{subject}", {"mode": "READONLY"})[0] == 200
    status, body = call(
        cluster[1], "POST", f"/schemas/subjects/{subject}/versions", {"schema": json.dumps(USER_V1)}
    )
    assert (status, body["error_code"]) == (422, 42205)
    assert call(cluster[2], "DELETE", f"/schemas/mode/{subject}")[0] == 200
    status, body = call(
        cluster[1], "POST", f"/schemas/subjects/{subject}/versions", {"schema": json.dumps(USER_V1)}
    )
    assert status == 200 and body["id"] > 0


def test_avro_serializer_round_trip(cluster: list[NodeProcess]) -> None:
    topic = unique("avro-users")
    registry = client(*cluster)
    serializer = AvroSerializer(registry, json.dumps(USER_V2))
    deserializer = AvroDeserializer(registry)
    producer = Producer({"bootstrap.servers": cluster[0].bootstrap_servers, "acks": "all"})
    users = [
        {"name": f"user-{i}", "age": 20 + i, "email": None if i % 2 else f"u{i}@x"}
        for i in range(20)
    ]
    context = SerializationContext(topic, MessageField.VALUE)
    for user in users:
        producer.produce(topic, value=serializer(user, context))
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster[1].bootstrap_servers,
            "group.id": unique("g"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    received: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    try:
        while len(received) < len(users) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            assert message.value()[0] == 0  # Confluent's wire format: magic byte, id, Avro
            received.append(deserializer(message.value(), context))
    finally:
        consumer.close()
    assert sorted(received, key=lambda u: u["name"]) == sorted(users, key=lambda u: u["name"])
    assert registry.get_latest_version(f"{topic}-value").version == 1


def test_json_schema_register_evolve_and_serialize(cluster: list[NodeProcess]) -> None:
    registry = client(cluster[1])
    subject = unique("orders") + "-value"
    # A closed content model: adding an optional property is backward compatible (in an open
    # one it is not: old data may hold anything under the new name; Confluent's rule too).
    v1 = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["id"],
        "additionalProperties": False,
    }
    first = registry.register_schema(subject, Schema(json.dumps(v1), "JSON"))
    v2 = {**v1, "properties": {**v1["properties"], "qty": {"type": "integer"}}}
    assert registry.register_schema(subject, Schema(json.dumps(v2), "JSON")) != first
    v3 = {**v2, "required": ["id", "customer"]}
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, Schema(json.dumps(v3), "JSON"))
    assert refused.value.error_code == 409
    latest = registry.get_latest_version(subject)
    assert latest.schema.schema_type == "JSON" and latest.version == 2

    serializer = JSONSerializer(
        json.dumps(v2), registry, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    context = SerializationContext(subject.removesuffix("-value"), MessageField.VALUE)
    data = serializer({"id": 7, "qty": 3}, context)
    assert int.from_bytes(data[1:5], "big") == latest.schema_id
    assert JSONDeserializer(json.dumps(v2), schema_registry_client=registry)(data, context) == {
        "id": 7,
        "qty": 3,
    }


def _protobuf_class(package: str, fields: list[tuple[str, int, int]]) -> Any:
    """A message class ``<package>.Order`` built from a descriptor (no ``protoc`` needed)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/order.proto", package=package, syntax="proto3"
    )
    message = proto.message_type.add(name="Order")
    for name, number, kind in fields:
        message.field.add(
            name=name,
            number=number,
            type=kind,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


def test_protobuf_register_evolve_and_round_trip(cluster: list[NodeProcess]) -> None:
    field = descriptor_pb2.FieldDescriptorProto
    package = unique("shop").replace("-", "_")
    order_v1 = _protobuf_class(
        package, [("id", 1, field.TYPE_INT64), ("note", 2, field.TYPE_STRING)]
    )
    registry = client(cluster[2])
    topic = unique("orders-pb")
    context = SerializationContext(topic, MessageField.VALUE)
    serializer = ProtobufSerializer(order_v1, registry, {"use.deprecated.format": False})
    data = serializer(order_v1(id=42, note="hello"), context)
    decoded = ProtobufDeserializer(order_v1, {"use.deprecated.format": False})(data, context)
    assert (decoded.id, decoded.note) == (42, "hello")
    subject = f"{topic}-value"
    assert registry.get_latest_version(subject).schema.schema_type == "PROTOBUF"
    # Adding a field is compatible; changing field 2 from string to int64 is not.
    order_v2 = _protobuf_class(
        package,
        [("id", 1, field.TYPE_INT64), ("note", 2, field.TYPE_STRING), ("qty", 3, field.TYPE_INT32)],
    )
    ProtobufSerializer(order_v2, registry, {"use.deprecated.format": False})(
        order_v2(id=1, qty=2), context
    )
    assert registry.get_versions(subject) == [1, 2]
    order_bad = _protobuf_class(
        package, [("id", 1, field.TYPE_INT64), ("note", 2, field.TYPE_INT64)]
    )
    with pytest.raises(SchemaRegistryError) as refused:
        ProtobufSerializer(order_bad, registry, {"use.deprecated.format": False})(
            order_bad(id=1), context
        )
    assert refused.value.error_code == 409


def test_concurrent_registrations_never_share_an_id(cluster: list[NodeProcess]) -> None:
    """Every broker registers different schemas at once: every id is different, and the same
    schema registered through every broker at once gets one id."""
    results: dict[str, int] = {}
    errors: list[BaseException] = []
    shared = Schema(json.dumps({**USER_V1, "name": unique("Same").replace("-", "_")}), "AVRO")
    shared_ids: list[int] = []

    def work(node: NodeProcess, index: int) -> None:
        registry = client(node)
        try:
            for n in range(5):
                name = f"T{index}_{n}_{uuid.uuid4().hex[:6]}"
                schema = Schema(json.dumps({**USER_V1, "name": name}), "AVRO")
                results[name] = registry.register_schema(unique("c"), schema)
            shared_ids.append(registry.register_schema(unique("shared"), shared))
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(node, i)) for i, node in enumerate(cluster * 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert len(results) == 30
    assert len(set(results.values())) == 30
    assert len(set(shared_ids)) == 1 and len(shared_ids) == 6
    assert not set(shared_ids) & set(results.values())


def _schemas_leader(nodes: list[NodeProcess]) -> int:
    for node in nodes:
        if node.is_running():
            status, body = call(node, "GET", "/topics/_schemas")
            if status == 200 and body["partitions"][0]["leader"] >= 0:
                return int(body["partitions"][0]["leader"])
    raise AssertionError("_schemas has no leader")


def _wait_ids(registry: SchemaRegistryClient, expected: dict[int, str], timeout_s: float) -> None:
    """Every id answers its schema (retrying while leadership settles after a failure)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            for schema_id, text in expected.items():
                assert json.loads(registry.get_schema(schema_id).schema_str) == json.loads(text)
            return
        except (SchemaRegistryError, OSError, Exception):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_ids_survive_a_sigkill_of_the_writer_and_a_full_restart(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as nodes:
        registry = client(*nodes)
        expected: dict[int, str] = {}
        for n in range(5):
            text = json.dumps({**USER_V1, "name": f"Kept{n}"})
            expected[registry.register_schema(f"kept-{n}", Schema(text, "AVRO"))] = text
        writer = next(node for node in nodes if node.node_id == _schemas_leader(nodes))
        writer.kill()
        survivors = [node for node in nodes if node is not writer]
        registry = client(*survivors)
        _wait_ids(registry, expected, 30)
        # The new writer hands out an id nobody had.
        deadline = time.monotonic() + 30
        while True:
            try:
                text = json.dumps({**USER_V1, "name": "AfterKill"})
                new_id = registry.register_schema("after-kill", Schema(text, "AVRO"))
                break
            except SchemaRegistryError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert new_id not in expected
        expected[new_id] = text
        # Every node crashes at once, then all come back.
        for node in survivors:
            node.kill()
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_ready()
        registry = client(*nodes)
        _wait_ids(registry, expected, 60)
        assert registry.get_versions("kept-0") == [1]
        again = registry.register_schema(
            "after-restart", Schema(json.dumps({**USER_V1, "name": "New"}), "AVRO")
        )
        assert again not in expected
        # The records are in the compacted internal topic.
        status, body = call(nodes[0], "GET", "/topics/_schemas")
        assert status == 200 and len(body["partitions"][0]["replicas"]) == 3


def test_a_schema_validated_topic_refuses_raw_records(cluster: list[NodeProcess]) -> None:
    topic = unique("validated")
    status, body = call(
        cluster[0],
        "POST",
        "/topics",
        {
            "name": topic,
            "partitions": 1,
            "replication_factor": 3,
            "configs": {"confluent.value.schema.validation": "true"},
        },
    )
    assert status == 201, body
    # Registered through another broker a moment before the produce: not refused.
    registry = client(cluster[2])
    serializer = AvroSerializer(registry, json.dumps(USER_V1))
    context = SerializationContext(topic, MessageField.VALUE)
    good = serializer({"name": "ann", "age": 3}, context)
    unknown_id = b"\x00" + (987_654).to_bytes(4, "big") + good[5:]
    producer = Producer(
        {"bootstrap.servers": cluster[1].bootstrap_servers, "acks": "all", "retries": 0}
    )
    outcomes: list[Any] = []
    for value in (b"raw bytes, no schema", good, unknown_id, good):
        producer.produce(topic, value=value, on_delivery=lambda e, m: outcomes.append(e))
        producer.flush(30)
    assert [None if e is None else e.name() for e in outcomes] == [
        "INVALID_RECORD",
        None,
        "INVALID_RECORD",
        None,
    ]
    # Nothing of the refused records was appended.
    status, body = call(cluster[0], "GET", f"/topics/{topic}/partitions/0/messages")
    assert status == 200
    assert body["high_watermark"] == 2
    # The HTTP API refuses them too, naming the problem.
    status, body = call(
        cluster[0], "POST", f"/topics/{topic}/messages", {"messages": [{"value": "x"}]}
    )
    assert status == 422 and "wire format" in body["error"]


def test_the_flux_sdk_speaks_the_same_wire_format(cluster: list[NodeProcess]) -> None:
    from flux.sdk.schema_registry import AvroDeserializer as FluxAvroDeserializer
    from flux.sdk.schema_registry import AvroSerializer as FluxAvroSerializer
    from flux.sdk.schema_registry import SchemaRegistryClient as FluxRegistry
    from flux.sdk.schema_registry import SchemaRegistryError as FluxRegistryError

    topic = unique("sdk")
    ours = FluxRegistry(registry_url(*cluster))
    theirs = client(*cluster)
    context = SerializationContext(topic, MessageField.VALUE)
    user = {"name": "ann", "age": 7}
    data = FluxAvroSerializer(ours, f"{topic}-value", json.dumps(USER_V1))(user)
    assert AvroDeserializer(theirs)(data, context) == user
    data = AvroSerializer(theirs, json.dumps(USER_V2))(user | {"email": None}, context)
    assert FluxAvroDeserializer(ours)(data) == user | {"email": None}
    # With a reader's schema, Avro's resolution drops the field the reader does not know.
    reader = {**USER_V2, "fields": USER_V2["fields"][:2]}
    assert FluxAvroDeserializer(ours, json.dumps(reader))(data) == user
    assert ours.versions(f"{topic}-value") == [1, 2]
    compatible, problems = ours.check(f"{topic}-value", json.dumps(USER_BAD))
    assert not compatible and any("country" in p for p in problems)
    with pytest.raises(FluxRegistryError) as missing:
        ours.version(unique("nothing"))
    assert missing.value.error_code == 40401
