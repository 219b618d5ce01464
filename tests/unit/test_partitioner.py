"""Kafka's murmur2 key partitioner in flux.protocol.partitioner."""

from __future__ import annotations

import confluent_kafka
import pytest
from flux.protocol.partitioner import murmur2, partition_for_key, to_positive
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

# Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
# testMurmur2: input -> Utils.murmur2(input).
KAFKA_UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka, src/rdmurmur2.c, unittest_murmur2 ("java_murmur2_results"): the unsigned bit
# patterns of Java's results. The unaligned cases are suffixes of the two strings.
LIBRDKAFKA_TEST_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_UTILS_TEST_VECTORS.items()))
def test_kafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("data", "expected"), sorted(LIBRDKAFKA_TEST_VECTORS.items()))
def test_librdkafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) & 0xFFFFFFFF == expected
    assert -(2**31) <= murmur2(data) < 2**31


def test_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_to_positive_clears_the_sign_bit_like_kafka() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; toPositive gives 0
    assert to_positive(5) == 5


def test_partition_for_key() -> None:
    # Utils.toPositive(-973932308) % 10
    assert partition_for_key(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10
    assert all(0 <= partition_for_key(bytes([i]), 7) < 7 for i in range(256))
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_matches_kafka_python(data: bytes) -> None:
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_matches_kafka_python_default_partitioner(key: bytes, partitions: int) -> None:
    # kafka-python's DefaultPartitioner: murmur2(key) & 0x7fffffff % len(partitions)
    assert (
        partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    )


def test_matches_librdkafka_murmur2_partitioner() -> None:
    """Produce keyed messages through librdkafka's in-process mock cluster and compare."""
    producer = confluent_kafka.Producer(
        {
            "test.mock.num.brokers": 1,
            "partitioner": "murmur2",
            "linger.ms": 0,
            "log_level": 3,
        }
    )
    metadata = producer.list_topics("murmur2-check", timeout=10)
    partitions = len(metadata.topics["murmur2-check"].partitions)
    assert partitions > 1
    delivered: dict[bytes, int] = {}

    def on_delivery(error: object, message: confluent_kafka.Message) -> None:
        assert error is None
        delivered[message.key()] = message.partition()

    keys = [b"key-%d" % i for i in range(200)] + [b"", b"kafka", bytes(range(256))]
    for key in keys:
        producer.produce("murmur2-check", key=key, value=b"v", on_delivery=on_delivery)
    assert producer.flush(10) == 0
    assert delivered == {key: partition_for_key(key, partitions) for key in keys}
