"""Kafka's key partitioner: ``toPositive(murmur2(key)) % numPartitions``.

This is the partition the Java client's default partitioner, kafka-python and librdkafka's
``murmur2`` / ``murmur2_random`` partitioners pick for a non-null key, so a key lands on the same
partition whichever client produced it. ``murmur2`` is MurmurHash2 (32-bit) with Kafka's seed,
reading the input as little-endian 32-bit words, and returns the result as a signed 32-bit int
like Java's ``Utils.murmur2``. Pure functions, safe from any thread.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "fnv1a_32",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK32: Final = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as a signed 32-bit integer."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    word_count = length // 4
    for k in struct.unpack_from(f"<{word_count}I", data):
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        # The last one to three bytes, little-endian, then one more mixing multiply.
        rest = word_count * 4
        if tail == 3:
            h ^= data[rest + 2] << 16
        if tail >= 2:
            h ^= data[rest + 1] << 8
        h ^= data[rest]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of a 32-bit int (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner assigns to a non-null ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


def fnv1a_32(data: bytes | bytearray | memoryview) -> int:
    """32-bit FNV-1a: the FLUX V1 service's key partitioner (``fnv1a_32(key) % partitions``;
    docs/v1-protocol.md), kept by Flux's V1 front door and V1 SDKs."""
    value = 0x811C9DC5
    for byte in bytes(data):
        value ^= byte
        value = (value * 0x01000193) & _MASK32
    return value
