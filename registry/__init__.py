"""The schema registry: Confluent's Schema Registry REST API, served by every broker's HTTP
server under ``/schemas`` and stored on Flux itself (docs/schema-registry.md).

- ``schemas``: parsing and canonical forms of Avro (fastavro), JSON Schema (jsonschema) and
  Protobuf (serialized descriptors, protobuf) schemas; pure.
- ``compatibility``: whether one schema reads what another wrote, per format; pure.
- ``state``: the view built from the ``_schemas`` topic's records and the planning of every
  change as records; pure.
- ``service``: the broker side: following ``_schemas``, its one writer (the topic's leader),
  and the REST routes mounted on the broker's HTTP server.
- ``validation``: schema-validated topics (a produce whose values do not carry a registered
  schema id is refused).
- ``errors``: the error tree with Confluent's error codes.
"""

from .service import CONTENT_TYPE, PREFIX, SCHEMAS_TOPIC, SchemaRegistry

__all__ = ["CONTENT_TYPE", "PREFIX", "SCHEMAS_TOPIC", "SchemaRegistry"]
