"""``GroupConsumer``: the earlier blocking consumer-group API, now a thin wrapper over
``flux.sdk.Consumer`` (kept for scripts and tools written against it).

    with GroupConsumer("127.0.0.1:9092", "billing", topics=["orders"]) as consumer:
        while True:
            for record in consumer.poll(timeout_s=1.0):
                handle(record)
            consumer.commit()

``auto_offset_reset`` ``"earliest"`` / ``"latest"`` is ``Consumer``'s ``read_old`` True /
False. Everything else — joining, heartbeats, rebalance callbacks, commits of the positions —
is ``Consumer``'s (see ``flux.sdk.consumer``). New code uses ``Consumer`` directly.

Thread-safety: one thread calls ``poll``, ``commit`` and ``close``; callbacks run on worker
threads and may call ``commit``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import limits
from .consumer import Consumer
from .errors import ConfigurationError
from .messages import ConsumedRecord, TopicPartition
from .security import ClientSecurity

__all__ = ["GroupConsumer", "TopicPartition"]

Callback = Callable[[list[TopicPartition]], None]


class GroupConsumer:
    """A consumer-group member: ``poll``, ``commit``, ``close``."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        *,
        topics: Sequence[str],
        client_id: str = "flux-consumer",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int | None = None,
        auto_offset_reset: str = "earliest",
        enable_auto_commit: bool = False,
        auto_commit_interval_ms: int = 5_000,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        fetch_max_bytes: int = 1 << 20,
        security: ClientSecurity | Mapping[str, Any] | None = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise ConfigurationError("auto_offset_reset must be 'earliest' or 'latest'")
        if not group_id:
            raise ConfigurationError("group_id must not be empty")
        self.group_id = group_id
        self.topics = list(dict.fromkeys(topics))
        self._consumer = Consumer(
            bootstrap,
            group_id=group_id,
            topics=topics,
            client_id=client_id,
            read_old=auto_offset_reset == "earliest",
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            fetch_max_bytes=fetch_max_bytes,
            on_assign=on_assign,
            on_revoke=on_revoke,
            timeout_s=timeout_s,
            security=security,
        )

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def client(self) -> Any:
        return self._consumer.client

    @property
    def member_id(self) -> str:
        return self._consumer.member_id

    @property
    def generation_id(self) -> int:
        return self._consumer.generation_id

    def assignment(self) -> list[TopicPartition]:
        return self._consumer.assignment()

    def position(self, topic: str, partition: int) -> int:
        return self._consumer.position((topic, partition))

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[ConsumedRecord]:
        return self._consumer.poll(timeout_s, max_records)

    def commit(self) -> None:
        self._consumer.commit()

    def close(self) -> None:
        self._consumer.close()
