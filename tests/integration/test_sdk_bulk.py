"""``AsyncProducer.send``'s bulk path and ``produce``'s inlined path against a real broker:
records land where ``produce`` would put them, in order, with the offsets ``send`` reports,
across batch boundaries, under buffer back pressure and with ``acks=0``."""

from __future__ import annotations

import asyncio

import pytest
from flux.protocol.partitioner import partition_for_key
from flux.sdk import Admin, AsyncConsumer, AsyncProducer, Message

pytestmark = pytest.mark.integration


async def _read_all(bootstrap: str, topic: str, partitions: int, count: int) -> dict:
    """(partition, offset) -> record of everything in ``topic`` (``count`` records)."""
    records = {}
    async with AsyncConsumer(bootstrap, read_old=True) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        for _ in range(100):
            for record in await consumer.poll(1.0):
                records[(record.partition, record.offset)] = record
            if len(records) >= count:
                break
    return records


def test_bulk_send_reports_where_each_message_landed(broker) -> None:
    bootstrap = broker.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("bulk", partitions=3)
    messages = []
    for n in range(600):
        if n % 3 == 0:
            messages.append(f"plain-{n}".encode())
        elif n % 3 == 1:
            messages.append(Message(f"keyed-{n}", key=f"key-{n % 7}", headers={"n": str(n)}))
        else:
            messages.append({"value": f"pinned-{n}", "partition": 2, "id": f"id-{n}"})

    async def main() -> list:
        # Small batches and buffer: the messages span many batches and wait for room.
        async with AsyncProducer(
            bootstrap, acks=1, batch_size=2_000, buffer_memory=6_000, linger_ms=1
        ) as producer:
            delivered = await producer.send("bulk", messages)
            single = await producer.send("bulk", b"one more")
            return [*delivered, single]

    delivered = asyncio.run(main())
    assert len(delivered) == len(messages) + 1
    records = asyncio.run(_read_all(bootstrap, "bulk", 3, len(delivered)))
    for n, (message, metadata) in enumerate(zip(messages, delivered, strict=False)):
        record = records[(metadata.partition, metadata.offset)]
        if n % 3 == 0:
            assert record.value == message and record.key is None
        elif n % 3 == 1:
            assert record.value == f"keyed-{n}".encode()
            assert metadata.partition == partition_for_key(f"key-{n % 7}".encode(), 3)
            assert record.headers == (("n", str(n).encode()),)
        else:
            assert metadata.partition == 2 and record.message_id == f"id-{n}".encode()
    assert records[(delivered[-1].partition, delivered[-1].offset)].value == b"one more"
    # Per partition, message order is offset order.
    for partition in range(3):
        offsets = [m.offset for m in delivered if m.partition == partition]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_bulk_send_with_acks_zero_and_produce_interleaved(broker) -> None:
    bootstrap = broker.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("mixed", partitions=1)

    async def main() -> tuple[list, list]:
        async with AsyncProducer(bootstrap, acks=1, batch_size=1_000) as producer:
            unacknowledged = await producer.send("mixed", [b"a", b"b"], acks=0)
            futures = [await producer.produce("mixed", f"p{n}") for n in range(50)]
            sent = await producer.send("mixed", [f"s{n}" for n in range(50)])
            await producer.flush()
            produced = [future.result() for future in futures]
            assert [m.offset for m in unacknowledged] == [-1, -1]
            return produced, sent

    produced, sent = asyncio.run(main())
    offsets = [m.offset for m in produced + sent]
    assert offsets == list(range(offsets[0], offsets[0] + 100))
    records = asyncio.run(_read_all(bootstrap, "mixed", 1, 102))
    assert [records[(0, m.offset)].value for m in produced] == [f"p{n}".encode() for n in range(50)]
    assert [records[(0, m.offset)].value for m in sent] == [f"s{n}".encode() for n in range(50)]


def test_send_records_partitions_like_send_and_checks_first(broker) -> None:
    """``send_records``: keyed records go to their key's partition, keyless ones to sticky
    partitions, in order per partition, across batch boundaries and buffer back pressure; a
    record too large or of the wrong type is refused before anything is queued."""
    from flux.sdk import ConfigurationError, MessageTooLargeError

    bootstrap = broker.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("bulk-records", partitions=3)
    keys = [None if n % 4 == 0 else f"key-{n % 5}".encode() for n in range(900)]
    values = [f"value-{n}".encode() for n in range(900)]

    async def main() -> tuple[int, int]:
        async with AsyncProducer(
            bootstrap, acks="all", batch_size=2_000, buffer_memory=6_000, linger_ms=1
        ) as producer:
            sent = await producer.send_records("bulk-records", values, keys)
            plain = await producer.send_records("bulk-records", [b"plain"] * 100)
            with pytest.raises(MessageTooLargeError):
                await producer.send_records("bulk-records", [b"x", b"y" * 20_000_000])
            with pytest.raises(ConfigurationError):
                await producer.send_records("bulk-records", ["text, not bytes"])  # type: ignore[list-item]
            with pytest.raises(ConfigurationError):
                await producer.send_records("bulk-records", [b"a"], keys=[])
            assert await producer.send_records("bulk-records", []) == 0
            return sent, plain

    assert asyncio.run(main()) == (900, 100)
    records = asyncio.run(_read_all(bootstrap, "bulk-records", 3, 1000))
    assert len(records) == 1000
    by_value = {record.value: record for record in records.values()}
    assert set(by_value) == {*values, b"plain"} and len(records) == 1000
    for n, value in enumerate(values):
        record = by_value[value]
        assert record.key == keys[n]
        if keys[n] is not None:
            assert record.partition == partition_for_key(keys[n], 3)
    # Order within each partition follows the list.
    for partition in range(3):
        mine = [r.value for (p, _), r in sorted(records.items()) if p == partition]
        numbered = [int(v.split(b"-")[1]) for v in mine if v.startswith(b"value-")]
        assert numbered == sorted(numbered)
