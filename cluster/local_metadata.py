"""Topic metadata of a single broker that runs without a controller quorum.

Until the controller lands, topics live in ``<data_dir>/local-metadata.json``: name, topic id,
partition count and the explicit config overrides. The file is replaced atomically (write to a
temporary file, fsync, rename, fsync the directory), so a crash leaves the old or the new
version, never a torn one.

Thread-safety: single owner (the broker's event loop).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LocalMetadata", "TopicRecord"]

_FILE_NAME = "local-metadata.json"
_FORMAT_VERSION = 1


@dataclass(frozen=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


class LocalMetadata:
    """The set of topics this broker hosts, persisted on every change."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / _FILE_NAME
        self._topics: dict[str, TopicRecord] = {}
        self._load()

    @property
    def topics(self) -> dict[str, TopicRecord]:
        return dict(self._topics)

    def get(self, name: str) -> TopicRecord | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicRecord | None:
        for record in self._topics.values():
            if record.topic_id == topic_id:
                return record
        return None

    def put(self, record: TopicRecord) -> None:
        self._topics[record.name] = record
        self._save()

    def remove(self, name: str) -> TopicRecord | None:
        record = self._topics.pop(name, None)
        if record is not None:
            self._save()
        return record

    def _load(self) -> None:
        try:
            document = json.loads(self._path.read_text())
        except FileNotFoundError:
            return
        if document.get("version") != _FORMAT_VERSION:
            raise ValueError(f"{self._path}: unsupported format version {document.get('version')}")
        for item in document["topics"]:
            record = TopicRecord(
                name=item["name"],
                topic_id=uuid.UUID(item["topic_id"]),
                partitions=int(item["partitions"]),
                config=dict(item.get("config", {})),
            )
            self._topics[record.name] = record

    def _save(self) -> None:
        document = {
            "version": _FORMAT_VERSION,
            "topics": [
                {
                    "name": record.name,
                    "topic_id": str(record.topic_id),
                    "partitions": record.partitions,
                    "config": record.config,
                }
                for record in self._topics.values()
            ],
        }
        temporary = self._path.with_suffix(".tmp")
        with open(temporary, "w") as file:
            json.dump(document, file, indent=1)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self._path)
        directory = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
