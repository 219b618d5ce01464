"""The FLUX runtime on the V1 protocol: a KafkaJS-like producer and consumer that find the
leaders and coordinators themselves and move on when the cluster changes.

    runtime = FLUXRuntime(brokers=["127.0.0.1:9300", "127.0.0.1:9301"])
    producer = runtime.producer(max_retries=5, retry_backoff_ms=200)
    producer.send(topic="orders", messages=[{"key": "user1", "value": "created"}], acks="all")

    consumer = runtime.consumer(group_id="billing", consumer_id="billing-1")
    consumer.subscribe("orders")
    consumer.run(each_message=lambda message: print(message), max_messages=100)
    consumer.disconnect()

Every method has an ``async`` twin on ``AsyncFLUXRuntime`` (``await producer.send(...)``); the
blocking classes run those on an event loop of their own.

Routing: partition ``fnv1a_32(key) % partitions`` (as the broker computes it), sent to its
leader from ``ADMIN_GET_METADATA``. On ``NOT_LEADER`` the runtime goes to the broker the answer
names (else the next one) after refreshing the metadata; on ``UNAVAILABLE``,
``REPLICATION_TIMEOUT`` or a broken connection it backs off ``retry_backoff_ms`` and retries,
``max_retries`` times, then raises. A retried produce may be written twice (V1 has no
idempotence): consumers see it at two offsets.

The consumer joins its group at the coordinator, heartbeats, and on ``GENERATION_MISMATCH``
calls ``on_revoke``, joins again (``auto_rejoin``) and calls ``on_assign``; it reads each
assigned partition from its committed offset (0 when none) and, with ``auto_commit``, commits
after each message handed to ``each_message``. An exception in ``each_message`` goes to
``on_crash`` (when given) and stops ``run``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from flux.protocol.partitioner import fnv1a_32

from .client import AsyncFLUXClient, FLUXProtocolError

__all__ = ["AsyncFLUXRuntime", "FLUXRuntime", "fnv1a_32"]

_RETRIABLE = {"NOT_LEADER", "UNAVAILABLE", "REPLICATION_TIMEOUT"}


class AsyncFLUXRuntime:
    def __init__(self, brokers: list[str]) -> None:
        if not brokers:
            raise ValueError("name at least one broker (host:port of its V1 listener)")
        self.brokers = list(brokers)
        self._connections: dict[str, AsyncFLUXClient] = {}
        self._metadata: dict[str, Any] | None = None
        self._next = 0

    def producer(
        self, *, max_retries: int = 5, retry_backoff_ms: int = 200, batch_size: int = 100
    ) -> AsyncProducer:
        return AsyncProducer(self, max_retries, retry_backoff_ms, batch_size)

    def consumer(self, **settings: Any) -> AsyncConsumer:
        return AsyncConsumer(self, **settings)

    async def connection(self, address: str) -> AsyncFLUXClient:
        client = self._connections.get(address)
        if client is None:
            client = await AsyncFLUXClient(address).connect()
            existing = self._connections.get(address)
            if existing is not None:
                # Another call connected while this one did: keep one client (the other
                # would never be closed, its reader task left pending).
                await client.close()
                return existing
            self._connections[address] = client
        return client

    def forget(self, address: str) -> None:
        client = self._connections.pop(address, None)
        if client is not None:
            asyncio.ensure_future(client.close())

    async def metadata(self, *, refresh: bool = False) -> dict[str, Any]:
        if self._metadata is not None and not refresh:
            return self._metadata
        last: Exception | None = None
        for _ in range(len(self.brokers)):
            address = self.brokers[self._next % len(self.brokers)]
            try:
                client = await self.connection(address)
                self._metadata = await client.admin_get_metadata()
                return self._metadata
            except (ConnectionError, OSError, FLUXProtocolError) as error:
                last = error
                self.forget(address)
                self._next += 1
        raise ConnectionError(f"no broker of {self.brokers} answers: {last}")

    async def call(
        self,
        address: str | None,
        command: Callable[[AsyncFLUXClient], Awaitable[Any]],
        *,
        max_retries: int,
        retry_backoff_ms: int,
        route: Callable[[], Awaitable[str]] | None = None,
    ) -> Any:
        """``command`` on the broker at ``address`` (or ``route()``'s), moving and retrying
        as the module docstring says."""
        attempt = 0
        while True:
            if address is None:
                address = await route() if route is not None else self.brokers[0]
            try:
                client = await self.connection(address)
                return await command(client)
            except FLUXProtocolError as error:
                if error.code not in _RETRIABLE or attempt >= max_retries:
                    raise
                named = error.leader_address
                await self.metadata(refresh=True)
                address = named if named else None
            except (ConnectionError, OSError):
                if attempt >= max_retries:
                    raise
                self.forget(address)
                self._next += 1
                await self._refresh_quietly()
                address = None
            attempt += 1
            await asyncio.sleep(retry_backoff_ms / 1000 * min(attempt, 10))

    async def _refresh_quietly(self) -> None:
        try:
            await self.metadata(refresh=True)
        except ConnectionError:
            pass

    async def close(self) -> None:
        for client in list(self._connections.values()):
            await client.close()
        self._connections.clear()


class AsyncProducer:
    def __init__(
        self, runtime: AsyncFLUXRuntime, max_retries: int, retry_backoff_ms: int, batch_size: int
    ) -> None:
        self._runtime = runtime
        self._max_retries = max_retries
        self._retry_backoff_ms = retry_backoff_ms
        self._batch_size = max(1, batch_size)

    async def send(
        self, *, topic: str, messages: list[dict[str, str]], acks: str = "all"
    ) -> list[dict[str, int]]:
        """Produce each ``{"key", "value"}``; their ``{"partition", "offset", "hw"}`` in order.
        Up to ``batch_size`` are in flight at once (pipelined on the leaders' connections)."""
        results: list[dict[str, int]] = []
        for start in range(0, len(messages), self._batch_size):
            chunk = messages[start : start + self._batch_size]
            results += await asyncio.gather(*(self._one(topic, m, acks) for m in chunk))
        return results

    async def _one(self, topic: str, message: dict[str, str], acks: str) -> dict[str, int]:
        key, value = str(message.get("key", "")), str(message["value"])

        async def route() -> str:
            metadata = await self._runtime.metadata()
            count = metadata["topics"].get(topic)
            if not count:
                return self._runtime.brokers[self._runtime._next % len(self._runtime.brokers)]
            leader = metadata["leaders"].get((topic, fnv1a_32(key.encode()) % count), -1)
            return metadata["brokers"].get(leader) or self._runtime.brokers[0]

        return await self._runtime.call(
            None,
            lambda client: client.produce(topic, key, value, acks=acks),
            max_retries=self._max_retries,
            retry_backoff_ms=self._retry_backoff_ms,
            route=route,
        )


class AsyncConsumer:
    def __init__(
        self,
        runtime: AsyncFLUXRuntime,
        *,
        group_id: str,
        consumer_id: str,
        assignor: str = "range",
        auto_commit: bool = True,
        auto_rejoin: bool = True,
        on_assign: Callable[[list[int]], Any] | None = None,
        on_revoke: Callable[[list[int]], Any] | None = None,
        on_crash: Callable[[BaseException], Any] | None = None,
        max_retries: int = 10,
        retry_backoff_ms: int = 200,
        heartbeat_interval_ms: int = 1000,
    ) -> None:
        self._runtime = runtime
        self.group_id, self.consumer_id, self.assignor = group_id, consumer_id, assignor
        self.auto_commit, self.auto_rejoin = auto_commit, auto_rejoin
        self._on_assign, self._on_revoke, self._on_crash = on_assign, on_revoke, on_crash
        self._max_retries, self._retry_backoff_ms = max_retries, retry_backoff_ms
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self.topic: str | None = None
        self.generation = -1
        self.assigned: list[int] = []
        self._positions: dict[int, int] = {}
        self._coordinator: str | None = None
        self._stopped = asyncio.Event()

    def subscribe(self, topic: str) -> None:
        self.topic = topic

    async def _at_coordinator(self, command: Callable[[AsyncFLUXClient], Awaitable[Any]]) -> Any:
        async def route() -> str:
            return self._runtime.brokers[self._runtime._next % len(self._runtime.brokers)]

        attempt = 0
        while True:
            address = self._coordinator or await route()
            try:
                client = await self._runtime.connection(address)
                result = await command(client)
                self._coordinator = address
                return result
            except FLUXProtocolError as error:
                if error.code not in ("NOT_LEADER", "UNAVAILABLE") or attempt >= self._max_retries:
                    raise
                if error.code == "NOT_LEADER":
                    # Go where the answer points (it may name a broker that just died: the
                    # connection error then moves on), else to the next broker.
                    self._coordinator = error.leader_address
                    if self._coordinator is None:
                        self._runtime._next += 1
                if attempt:  # the first redirect goes at once; a second one waits
                    await asyncio.sleep(self._retry_backoff_ms / 1000)
            except (ConnectionError, OSError):
                if attempt >= self._max_retries:
                    raise
                self._runtime.forget(address)
                self._coordinator = None
                self._runtime._next += 1
                await asyncio.sleep(self._retry_backoff_ms / 1000)
            attempt += 1

    async def join(self) -> list[int]:
        assert self.topic is not None, "subscribe to a topic first"
        topic = self.topic
        answer = await self._at_coordinator(
            lambda c: c.join(self.group_id, topic, self.consumer_id, self.assignor)
        )
        self.generation, self.assigned = answer["generation"], answer["assigned"]
        self._positions = {}
        for partition in self.assigned:
            committed = await self._at_coordinator(
                lambda c, p=partition: c.offset(self.group_id, topic, p)
            )
            self._positions[partition] = max(committed, 0)
        if self._on_assign is not None:
            self._on_assign(list(self.assigned))
        return self.assigned

    async def run(
        self,
        each_message: Callable[[dict[str, Any]], Any],
        *,
        max_messages: int | None = None,
        poll_interval_ms: int = 100,
    ) -> int:
        """Hand every message of the assigned partitions to ``each_message`` until
        ``disconnect`` (or ``max_messages``); the number handed."""
        assert self.topic is not None, "subscribe to a topic first"
        topic = self.topic
        if self.generation < 0:
            await self.join()
        handed = 0
        next_heartbeat = asyncio.get_running_loop().time() + self._heartbeat_s
        while not self._stopped.is_set() and (max_messages is None or handed < max_messages):
            now = asyncio.get_running_loop().time()
            if now >= next_heartbeat:
                next_heartbeat = now + self._heartbeat_s
                if not await self._heartbeat():
                    continue
            got = 0
            for partition in list(self.assigned):
                try:
                    records, _hw = await self._runtime.call(
                        None,
                        lambda c, p=partition: c.consume(topic, p, self._positions[p]),
                        max_retries=self._max_retries,
                        retry_backoff_ms=self._retry_backoff_ms,
                        route=lambda p=partition: self._leader_of(topic, p),
                    )
                except FLUXProtocolError:
                    continue  # the leader moves: read it again next round
                for offset, value in records:
                    if max_messages is not None and handed >= max_messages:
                        break
                    message = {"topic": topic, "partition": partition, "offset": offset,
                               "value": value}  # fmt: skip
                    try:
                        result = each_message(message)
                        if asyncio.iscoroutine(result):
                            await result
                    except Exception as error:
                        if self._on_crash is not None:
                            self._on_crash(error)
                        raise
                    handed += 1
                    got += 1
                    self._positions[partition] = offset + 1
                    if self.auto_commit:
                        await self._commit(partition, offset + 1)
            if not got:
                try:
                    await asyncio.wait_for(self._stopped.wait(), poll_interval_ms / 1000)
                except TimeoutError:
                    pass
        return handed

    async def _leader_of(self, topic: str, partition: int) -> str:
        metadata = await self._runtime.metadata()
        leader = metadata["leaders"].get((topic, partition), -1)
        return metadata["brokers"].get(leader) or self._runtime.brokers[0]

    async def _heartbeat(self) -> bool:
        """True if the member is still in its generation; else it rejoined (or stopped)."""
        assert self.topic is not None
        topic = self.topic
        try:
            await self._at_coordinator(
                lambda c: c.heartbeat(self.group_id, topic, self.consumer_id, self.generation)
            )
            return True
        except FLUXProtocolError as error:
            if error.code != "GENERATION_MISMATCH":
                raise
        if self._on_revoke is not None:
            self._on_revoke(list(self.assigned))
        self.assigned = []
        if self.auto_rejoin:
            await self.join()
        else:
            self._stopped.set()
        return False

    async def _commit(self, partition: int, offset: int) -> None:
        assert self.topic is not None
        topic = self.topic
        try:
            await self._at_coordinator(
                lambda c: c.commit(
                    self.group_id, topic, self.consumer_id, self.generation, partition, offset
                )
            )
        except FLUXProtocolError as error:
            if error.code != "GENERATION_MISMATCH":
                raise  # a rebalance: the next heartbeat rejoins; the offset is read again

    async def disconnect(self) -> None:
        self._stopped.set()
        if self.topic is not None and self.generation >= 0:
            topic = self.topic
            try:
                await self._at_coordinator(
                    lambda c: c.leave(self.group_id, topic, self.consumer_id, self.generation)
                )
            except (FLUXProtocolError, ConnectionError, OSError):
                pass
        self.generation = -1


class _Loop:
    """An event loop on a thread of its own, for the blocking classes."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


class FLUXRuntime:
    """The blocking runtime (see the module docstring); ``close()`` when done."""

    def __init__(self, brokers: list[str]) -> None:
        self._loop = _Loop()
        self._runtime = self._loop.run(_make(brokers))

    def producer(self, **settings: Any) -> _Blocking:
        return _Blocking(self._loop, self._runtime.producer(**settings))

    def consumer(self, **settings: Any) -> _Blocking:
        return _Blocking(self._loop, self._loop.run(_consumer(self._runtime, settings)))

    def close(self) -> None:
        self._loop.run(self._runtime.close())
        self._loop.close()

    def __enter__(self) -> FLUXRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make(brokers: list[str]) -> AsyncFLUXRuntime:
    return AsyncFLUXRuntime(brokers)


async def _consumer(runtime: AsyncFLUXRuntime, settings: dict[str, Any]) -> AsyncConsumer:
    return runtime.consumer(**settings)  # created on the loop: its Event belongs there


class _Blocking:
    """Calls the async object's coroutine methods on the runtime's loop and waits."""

    def __init__(self, loop: _Loop, target: Any) -> None:
        self._loop = loop
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            return self._loop.run(result) if asyncio.iscoroutine(result) else result

        return call
