"""The Kafka wire protocol, pure and I/O-free: framing, headers, the schema-driven message codec
(`flux.protocol.api`), record batch v2 (`flux.protocol.records`), compression, murmur2
partitioner, error codes.
"""
