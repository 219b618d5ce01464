"""Schema-validated topics: with ``confluent.value.schema.validation=true`` (and
``confluent.key.schema.validation`` for keys; Confluent Server's names) a produce to the topic
is refused with ``INVALID_RECORD`` unless every record's value (key) is in Confluent's wire
format (magic byte 0, then a 4-byte big-endian schema id) with an id registered, and not
deleted, under the topic's subject ``<topic>-value`` (``<topic>-key``): Confluent's default
``TopicNameStrategy``. Nothing of a refused batch is appended.

The check runs on the partition leader against its registry view; an id the view does not
know yet (registered a moment ago through another broker) makes it catch up first
(``prepare``), so a client that registers and then produces at once is not refused.

Thread-safety: none; the broker's event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import decode_records, iter_batches

from .errors import RegistryError

if TYPE_CHECKING:
    from .service import SchemaRegistry

__all__ = ["KEY_VALIDATION", "VALUE_VALIDATION", "SchemaValidation"]

VALUE_VALIDATION = "confluent.value.schema.validation"
KEY_VALIDATION = "confluent.key.schema.validation"
MAGIC_BYTE = 0


class SchemaValidation:
    """The produce path's check of schema-validated topics (``cluster.kafka.produce``)."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def enabled(self, config: Any) -> bool:
        return bool(config.schema_validated)

    async def prepare(self, topic: str, records: bytes | memoryview, config: Any) -> None:
        """Catch the registry view up when ``records`` name an id it does not hold for the
        topic's subjects."""
        problem = self._problem(topic, records, config)
        if problem is not None and problem[1]:
            try:
                await self._registry.catch_up()
            except RegistryError:
                pass  # the check then refuses what it cannot confirm

    def refusal(self, topic: str, records: bytes | memoryview, config: Any) -> str | None:
        """Why ``records`` may not be appended to ``topic``, or None."""
        problem = self._problem(topic, records, config)
        return None if problem is None else problem[0]

    def _problem(
        self, topic: str, records: bytes | memoryview, config: Any
    ) -> tuple[str, bool] | None:
        """The first record's problem: its description, and whether it is an id the view does
        not hold (which catching up may solve)."""
        try:
            for field, subject, data in _checked_fields(topic, records, config):
                if data is None or len(data) < 5 or data[0] != MAGIC_BYTE:
                    return (
                        f"the record's {field} is not in the schema registry's wire format "
                        f"(magic byte 0 and a schema id), as {topic} requires"
                    ), False
                schema_id = int.from_bytes(data[1:5], "big")
                if schema_id not in self._subject_ids(subject):
                    return f"schema id {schema_id} is not registered under subject {subject}", True
        except CorruptRecordError:
            return None  # the append names the problem
        return None

    def _subject_ids(self, subject: str) -> set[int]:
        try:
            return {entry.schema_id for entry in self._registry.state.versions(subject)}
        except RegistryError:
            return set()


def _checked_fields(topic: str, records: bytes | memoryview, config: Any):  # type: ignore[no-untyped-def]
    values = _on(config, VALUE_VALIDATION)
    keys = _on(config, KEY_VALIDATION)
    for header, batch in iter_batches(records, allow_partial_tail=False):
        if header.is_control:
            continue
        for record in decode_records(bytes(batch), verify_crc=False):
            if values:
                yield "value", f"{topic}-value", record.value
            if keys:
                yield "key", f"{topic}-key", record.key


def _on(config: Any, key: str) -> bool:
    return bool(config.get(key) == "true")
